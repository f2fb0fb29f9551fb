"""Live SSE readers through ``server.streams.fanout``: each append encoded
once per cursor and written raw to readers that take data, queued in order
for one that does not, and a reader too far behind cut (it reads again from
its offset); end to end, many SSE readers of a real server get every append
in order and the stream's closing."""

from __future__ import annotations

import asyncio
import json

import httpx

from server.streams.fanout import Fanout, Follower
from server.streams.model import Message, Stream
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
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, stream: Stream, message: Message, cursor: str | None) -> bytes:
        self.calls += 1
        return f"{message.offset}|{cursor}".encode()


def stream(path: str = "/v1/stream/s") -> Stream:
    return Stream(path=path, content_type="text/plain", created_at=0.0, last_access=0.0)


def test_an_append_is_encoded_once_per_cursor_and_written_raw() -> None:
    fanout, encode, s = Fanout(), Encoder(), stream()
    fast = [FakeRaw(), FakeRaw()]
    other, paused = FakeRaw(), FakeRaw(ready=False)
    followers = [Follower(raw, None, encode, "0") for raw in fast]
    followers += [Follower(other, "7", encode, "0"), Follower(paused, None, encode, "0")]
    for follower in followers:
        fanout.follow(s.path, follower)
    fanout.deliver(s, Message(b"x", "1"), "0")
    assert encode.calls == 2  # one per cursor, whatever the number of readers
    assert fast[0].written == fast[1].written == [b"6\r\n1|None\r\n"]
    assert other.written == [b"3\r\n1|7\r\n"]
    # The paused reader's event waits, unframed, and its task is woken.
    assert paused.written == [] and followers[3].pending == [b"1|None"]
    assert followers[3].wake.is_set() and not followers[0].wake.is_set()
    assert all(f.offset == "1" for f in followers)
    # Once something is queued, later events queue behind it, even if the
    # transport takes data again: never written raw ahead of the queue.
    paused.ready = True
    fanout.deliver(s, Message(b"y", "2"), "1")
    assert paused.written == [] and followers[3].pending == [b"1|None", b"2|None"]
    # Another stream's readers hear nothing.
    fanout.deliver(stream("/v1/stream/other"), Message(b"z", "3"), "2")
    assert fast[0].written == [b"6\r\n1|None\r\n", b"6\r\n2|None\r\n"]


def test_a_reader_before_the_append_is_woken_to_read_what_it_missed() -> None:
    """A shared store's copy may learn of another replica's appends with no
    delivery: a follower still before the new message's predecessor gets
    nothing written (it would skip those), only its task woken."""
    fanout, encode, s = Fanout(), Encoder(), stream()
    raw = FakeRaw()
    behind = Follower(raw, None, encode, "1")
    fanout.follow(s.path, behind)
    fanout.deliver(s, Message(b"x", "3"), "2")
    assert raw.written == [] and behind.pending == [] and behind.offset == "1"
    assert behind.wake.is_set() and encode.calls == 0


def test_a_reader_too_far_behind_is_cut_and_nobody_else_waits() -> None:
    fanout, encode, s = Fanout(max_queued_bytes=10), Encoder(), stream()
    slow = Follower(FakeRaw(ready=False), None, encode, "0")
    fast_raw = FakeRaw()
    fast = Follower(fast_raw, None, encode, "0")
    fanout.follow(s.path, slow)
    fanout.follow(s.path, fast)
    for n in range(1, 5):
        fanout.deliver(s, Message(b"x", str(n)), str(n - 1))
    assert slow.cut and slow.over() and slow.wake.is_set()
    assert fanout.cut_count == 1 and len(fanout) == 1
    assert (fanout.raw_count, fanout.queued_count) == (4, 2)  # cut at the second
    assert len(fast_raw.written) == 4 and not fast.cut


def test_closing_and_shutdown_wake_the_readers() -> None:
    fanout, encode, s = Fanout(), Encoder(), stream()
    follower = Follower(FakeRaw(), None, encode, "0")
    fanout.follow(s.path, follower)
    s.closed = True
    fanout.deliver(s, Message(b"x", "1"), "0")  # an append that closes the stream
    assert follower.closed_sent and follower.wake.is_set()
    follower.wake.clear()
    fanout.end_all()
    assert follower.cut and follower.wake.is_set() and len(fanout) == 0


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
