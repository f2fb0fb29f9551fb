"""Live SSE readers through ``server.streams.fanout``: each append's data
encoded once whatever the readers' cursors (its control event once per
cursor) and written raw to readers that take data, queued in order
for one that does not, and a reader too far behind cut (it reads again from
its offset); end to end, many SSE readers of a real server get every append
in order and the stream's closing."""

from __future__ import annotations

import asyncio
import functools
import json

import httpx

import client_py
from server.streams.fanout import Fanout, Follower
from server.streams.model import Stream, StreamMessage
from tests.support.servers import running_server
from tests.support.waiting import until


class FakeRaw:
    def __init__(self, ready: bool = True) -> None:
        self.ready = ready
        self.written: list[bytes] = []

    def raw_ready(self) -> bool:
        return self.ready

    def raw_write(self, data: bytes) -> None:
        self.written.append(data)


class Encoder:
    """A data event ``offset|``; its control event ``cursor;``."""

    def __init__(self) -> None:
        self.calls = 0
        self.controls = 0

    def __call__(self, stream: Stream, message: StreamMessage) -> bytes:
        self.calls += 1
        return f"{message.offset}|".encode()

    def control(self, stream: Stream, offset: str, cursor: str | None) -> bytes:
        self.controls += 1
        return f"{cursor};".encode()


def follower(raw: FakeRaw | None, cursor: str | None, encode: Encoder, offset: str) -> Follower:
    return Follower(raw, cursor, encode, encode.control, offset)


def stream(path: str = "/v1/stream/s") -> Stream:
    return Stream(path=path, content_type="text/plain", created_at=0.0, last_access=0.0)


def test_an_append_is_encoded_once_and_written_raw() -> None:
    fanout, encode, s = Fanout(), Encoder(), stream()
    fast = [FakeRaw(), FakeRaw()]
    other, paused = FakeRaw(), FakeRaw(ready=False)
    followers = [follower(raw, None, encode, "0") for raw in fast]
    followers += [follower(other, "7", encode, "0"), follower(paused, None, encode, "0")]
    for each in followers:
        fanout.follow(s.path, each)
    fanout.deliver(s, StreamMessage(b"x", "1"), "0")
    # The data once, whatever the number of readers and of cursors; the
    # control event once per cursor.
    assert (encode.calls, encode.controls, fanout.encoded_count) == (1, 2, 1)
    assert fast[0].written == fast[1].written == [b"7\r\n1|None;\r\n"]
    assert other.written == [b"4\r\n1|7;\r\n"]
    # The paused reader's event waits, unframed, and its task is woken.
    assert paused.written == [] and followers[3].pending == [b"1|", b"None;"]
    assert followers[3].wake.is_set() and not followers[0].wake.is_set()
    assert all(f.offset == "1" for f in followers)
    # Once something is queued, later events queue behind it, even if the
    # transport takes data again: never written raw ahead of the queue.
    paused.ready = True
    fanout.deliver(s, StreamMessage(b"y", "2"), "1")
    assert paused.written == [] and followers[3].pending == [b"1|", b"None;", b"2|", b"None;"]
    # Another stream's readers hear nothing.
    fanout.deliver(stream("/v1/stream/other"), StreamMessage(b"z", "3"), "2")
    assert fast[0].written == [b"7\r\n1|None;\r\n", b"7\r\n2|None;\r\n"]


def test_a_reader_before_the_append_is_woken_to_read_what_it_missed() -> None:
    """A shared store's copy may learn of another replica's appends with no
    delivery: a follower still before the new message's predecessor gets
    nothing written (it would skip those), only its task woken."""
    fanout, encode, s = Fanout(), Encoder(), stream()
    raw = FakeRaw()
    behind = follower(raw, None, encode, "1")
    fanout.follow(s.path, behind)
    fanout.deliver(s, StreamMessage(b"x", "3"), "2")
    assert raw.written == [] and behind.pending == [] and behind.offset == "1"
    assert behind.wake.is_set() and encode.calls == 0


def test_a_reader_too_far_behind_is_cut_and_nobody_else_waits() -> None:
    fanout, encode, s = Fanout(max_queued_bytes=10), Encoder(), stream()
    slow = follower(FakeRaw(ready=False), None, encode, "0")
    fast_raw = FakeRaw()
    fast = follower(fast_raw, None, encode, "0")
    fanout.follow(s.path, slow)
    fanout.follow(s.path, fast)
    for n in range(1, 5):
        fanout.deliver(s, StreamMessage(b"x", str(n)), str(n - 1))
    assert slow.cut and slow.over() and slow.wake.is_set()
    assert fanout.cut_count == 1 and len(fanout) == 1
    assert (fanout.raw_count, fanout.queued_count) == (4, 2)  # cut at the second
    assert len(fast_raw.written) == 4 and not fast.cut


def test_closing_and_shutdown_wake_the_readers() -> None:
    fanout, encode, s = Fanout(), Encoder(), stream()
    reader = follower(FakeRaw(), None, encode, "0")
    fanout.follow(s.path, reader)
    s.closed = True
    fanout.deliver(s, StreamMessage(b"x", "1"), "0")  # an append that closes the stream
    assert reader.closed_sent and reader.wake.is_set()
    reader.wake.clear()
    fanout.end_all()
    assert reader.cut and reader.wake.is_set() and len(fanout) == 0


def test_readers_with_distinct_cursors_share_each_data_event() -> None:
    """300 readers that do not read, each with its own cursor, and 20
    appends of 64 KiB: each append's data event is encoded once and every
    queue holds that one object (it was one encoding per cursor: 300 copies
    of each event, 4 MiB queued per reader)."""
    from server.streams.sse import _sse_control_event, _sse_data_event

    s = Stream(path="/v1/stream/b", content_type="application/octet-stream", created_at=0.0,
               last_access=0.0)  # fmt: skip
    fanout = Fanout(max_total_queued_bytes=1 << 40)
    readers = [
        Follower(FakeRaw(ready=False), str(10**9 + n), _sse_data_event, _sse_control_event, s.tail)
        for n in range(300)
    ]
    for reader in readers:
        fanout.follow(s.path, reader)
    for _ in range(20):
        after = s.tail
        fanout.deliver(s, s.add_raw(b"\x00" * 65536), after)
    assert fanout.encoded_count == 20
    held = {id(event): len(event) for reader in readers for event in reader.pending}
    data = 20 * (65536 * 4 // 3 + 64)
    assert sum(held.values()) <= data + 300 * 20 * 200
    assert fanout.queued_bytes == sum(r.pending_bytes for r in readers)


def test_what_all_readers_queue_together_is_bounded() -> None:
    """Readers that do not read share ``max_total_queued_bytes``: one past
    its share is cut (it resumes from its offset), whatever the number of
    readers; the total queued never passes the bound."""
    fanout, encode, s = Fanout(max_total_queued_bytes=1000), Encoder(), stream()
    slow = [follower(FakeRaw(ready=False), str(n), encode, "0") for n in range(20)]
    fast_raw = FakeRaw()
    fast = follower(fast_raw, None, encode, "0")
    for reader in [*slow, fast]:
        fanout.follow(s.path, reader)
    assert fanout.share() == 1000 // 21
    for n in range(1, 40):
        fanout.deliver(s, StreamMessage(b"x" * 20, str(n)), str(n - 1))
        assert fanout.queued_bytes <= 1000
    assert all(reader.cut for reader in slow) and not fast.cut
    assert len(fanout) == 1 and fanout.queued_bytes == 0 and len(fast_raw.written) == 39
    # What a reader's task sends leaves the count.
    late = follower(FakeRaw(ready=False), None, encode, "39")
    fanout.follow(s.path, late)
    fanout.deliver(s, StreamMessage(b"y", "40"), "39")
    assert fanout.queued_bytes == late.pending_bytes > 0
    fanout.sent(s.path, late, len(late.pending))
    assert fanout.queued_bytes == late.pending_bytes == 0 and late.pending == []


async def read_sse(http: httpx.AsyncClient, url: str, ready: asyncio.Event) -> list[object]:
    """Every data event's values until the stream's closing control event."""
    values: list[object] = []
    async with http.stream("GET", url, params={"offset": "-1", "live": "sse"}) as response:
        assert response.status_code == 200
        assert "content-length" not in response.headers
        buffer = ""
        async for text in response.aiter_text():
            buffer += text
            while "\n\n" in buffer:
                event, buffer = buffer.split("\n\n", 1)
                kind, _, data = event.partition("\n")
                payload = json.loads(data.removeprefix("data:"))
                if kind == "event: data":
                    values += payload
                elif payload.get("streamClosed"):
                    return values
                ready.set()
    raise AssertionError("the response ended before the stream's closing")


async def test_many_sse_readers_get_every_append_in_order_then_the_close() -> None:
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
    ):
        url = "/v1/stream/fan/out"
        json_type = {"content-type": "application/json"}
        assert (await http.put(url, headers=json_type)).status_code == 201
        readies = [asyncio.Event() for _ in range(8)]
        readers = [asyncio.create_task(read_sse(http, url, ready)) for ready in readies]
        async with asyncio.timeout(20):
            await asyncio.gather(*(ready.wait() for ready in readies))
        for n in range(30):
            answer = await http.post(url, content=json.dumps({"n": n}), headers=json_type)
            assert answer.status_code == 204
        closed = await http.post(url, headers={"stream-closed": "true"})
        assert closed.status_code == 204
        async with asyncio.timeout(20):
            got = await asyncio.gather(*readers)
        assert got == [[{"n": n} for n in range(30)]] * 8
        fanout = srv.app.state.streams.fanout
        assert len(fanout) == 0
        # tsync serve offers the raw write (HTTP/1.1): the appends went out raw.
        assert fanout.raw_count > 0 and fanout.raw_count + fanout.queued_count == 8 * 30


async def test_long_polls_one_append_woke_share_one_answer() -> None:
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
    ):
        url = "/v1/stream/shared"
        json_type = {"content-type": "application/json"}
        assert (await http.put(url, headers=json_type)).status_code == 201
        tail = (await http.head(url)).headers["stream-next-offset"]
        registry = srv.app.state.streams
        params = [{"offset": tail, "live": "long-poll"}] * 5
        params.append({"offset": tail, "live": "long-poll", "cursor": "1"})
        polls = [asyncio.create_task(http.get(url, params=p)) for p in params]
        await until(lambda: len(registry._waiters.get(url, ())) == len(polls), timeout=20)
        assert (await http.post(url, content=b'{"a":1}', headers=json_type)).status_code == 204
        answers = await asyncio.gather(*polls)
        assert all(a.status_code == 200 and a.json() == [{"a": 1}] for a in answers)
        first = answers[0].headers
        for answer in answers[:5]:
            assert answer.headers == first  # one answer, built once
        assert first["stream-next-offset"] > tail and first["stream-up-to-date"] == "true"
        assert first["x-content-type-options"] == "nosniff" and "etag" in first
        # Another cursor: its own answer (the cursor moves on from the reader's).
        assert answers[5].json() == [{"a": 1}]
        assert answers[5].headers["stream-cursor"] != ""
        # A stream made again at the same path never gets the old answer.
        assert (await http.delete(url)).status_code == 204
        assert (await http.put(url, headers=json_type)).status_code == 201
        again = asyncio.create_task(http.get(url, params=params[0]))
        await until(lambda: registry._waiters.get(url), timeout=20)
        assert (await http.post(url, content=b'{"b":2}', headers=json_type)).status_code == 204
        assert (await again).json() == [{"b": 2}]


async def test_an_http_1_0_sse_reader_is_served_through_its_queue() -> None:
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
    ):
        url = "/v1/stream/old-client"
        assert (await http.put(url, headers={"content-type": "text/plain"})).status_code == 201
        host, port = srv.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"GET {url}?offset=-1&live=sse HTTP/1.0\r\n\r\n".encode())
        async with asyncio.timeout(20):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and b"chunked" not in head.lower()
            assert (await reader.readuntil(b"\n\n")).startswith(b"event: control")
            for n in range(3):
                posted = await http.post(
                    url, content=f"line {n}", headers={"content-type": "text/plain"}
                )
                assert posted.status_code == 204
            got = b""
            while got.count(b"event: data") < 3:
                got += await reader.readuntil(b"\n\n")
        # Not framed as chunks (no raw write for HTTP/1.0): plain SSE events, in order.
        assert [line for line in got.split(b"\n") if line.startswith(b"data:line")] == [
            b"data:line 0",
            b"data:line 1",
            b"data:line 2",
        ]
        fanout = srv.app.state.streams.fanout
        assert fanout.raw_count == 0 and fanout.queued_count == 3
        writer.close()


async def test_transcript_sse_readers_share_each_change_through_the_fanout() -> None:
    """A transcript's SSE readers follow the same fan-out: each change's
    page encoded once for all of them and written raw; a reader that joins
    behind catches up by itself, and then follows too."""
    readers, appends = 6, 5
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
        client_py.connect(srv.url) as client,
    ):
        await client.create("fan", [{"role": "user", "content": "first"}])
        url = "/v1/stream/transcripts/fan"
        fanout = srv.app.state.streams.fanout
        seen: list[list[int]] = [[] for _ in range(readers + 1)]

        async def read(i: int, last: int) -> None:
            params = {"offset": "-1", "live": "sse"}
            async with http.stream("GET", url, params=params) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data:["):
                        seen[i] += [event["revision"] for event in json.loads(line[5:])]
                        if seen[i][-1] >= last:
                            return

        tasks = [asyncio.create_task(read(i, 1 + appends)) for i in range(readers)]
        await until(lambda: fanout.count("/v1/stream/transcripts/fan") == readers, timeout=20)
        encoded, raw, queued = fanout.encoded_count, fanout.raw_count, fanout.queued_count

        def reached(revision: int) -> bool:
            return all(s[-1:] == [revision] for s in seen[:readers])

        for n in range(appends):
            await client.append("fan", [{"role": "user", "content": str(n)}])
            await until(functools.partial(reached, n + 2), timeout=20)
        async with asyncio.timeout(20):
            await asyncio.gather(*tasks)
        assert seen[:readers] == [list(range(1, appends + 2))] * readers
        # One data event per change, whatever the number of readers.
        assert fanout.encoded_count - encoded == appends
        assert fanout.raw_count - raw > 0
        assert fanout.raw_count - raw + fanout.queued_count - queued == appends * readers
        # A late reader: the history first, then the next change as it comes.
        late = asyncio.create_task(read(readers, 2 + appends))
        await until(lambda: seen[readers][-1:] == [1 + appends], timeout=20)
        await client.append("fan", [{"role": "user", "content": "last"}])
        async with asyncio.timeout(20):
            await late
        assert seen[readers] == list(range(1, appends + 3))
