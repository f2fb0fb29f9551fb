"""What one request may cost the server on the Durable Streams face: a
JSON-mode body's values are counted before any is encoded and a large body
is parsed off the loop; what a stream holds is counted as what it holds."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from server.streams.model import VALUE_OVERHEAD
from server.streams.registry import Limits, StreamRegistry
from tests.support.servers import running_server

JSON = {"content-type": "application/json"}


@asynccontextmanager
async def loop_stalls() -> AsyncIterator[list[float]]:
    """The longest the loop was held while the block ran (one sample: a
    probe that asks to run every 5 ms notes how late it ran)."""
    worst = [0.0]

    async def probe() -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            worst[0] = max(worst[0], time.perf_counter() - before - 0.005)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0)
    try:
        yield worst
    finally:
        task.cancel()


async def test_a_json_append_past_the_values_limit_is_refused_naming_the_setting() -> None:
    async with (
        running_server(max_stream_append_values=3) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60) as http,
    ):
        url = "/v1/stream/j"
        assert (await http.put(url, headers=JSON)).status_code == 201
        small = await http.post(url, content=b"[1,2,3,4]", headers=JSON)
        assert small.status_code == 413 and "max_stream_append_values" in small.text
        assert (await http.post(url, content=b"[1,2,3]", headers=JSON)).status_code == 204
        created = await http.put("/v1/stream/k", content=b"[1,2,3,4]", headers=JSON)
        assert created.status_code == 413 and "max_stream_append_values" in created.text
        read = await http.get(url, params={"offset": "-1"})
        assert read.json() == [1, 2, 3]


async def test_a_large_json_body_does_not_hold_the_loop() -> None:
    """4 MiB of a flat array of 2 million values: refused (the default limit
    is 10,000) without the loop held for the parse (it was held about 2 s
    and grew RSS by hundreds of MB); an accepted 4 MiB body of 10,000 values
    is parsed off the loop too."""
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60) as http,
    ):
        url = "/v1/stream/j"
        assert (await http.put(url, headers=JSON)).status_code == 201
        # The workers start on first use: not part of what is measured.
        warm = await http.post(url, content=b"[" + b"0," * 200_000 + b"0]", headers=JSON)
        assert warm.status_code == 413
        flat = b"[" + b"1," * 2_000_000 + b"1]"
        async with loop_stalls() as worst:
            refused = await http.post(url, content=flat, headers=JSON)
        assert refused.status_code == 413 and "max_stream_append_values" in refused.text
        assert "2000001" in refused.text
        assert worst[0] < 0.4, worst[0]
        values = ["v" * 400] * 10_000
        async with loop_stalls() as worst:
            accepted = await http.post(url, content=json.dumps(values).encode(), headers=JSON)
        assert accepted.status_code == 204
        assert worst[0] < 0.4, worst[0]
        assert srv.app.state.streams.size >= 10_000 * (2 * 403 + VALUE_OVERHEAD)


def test_json_values_are_counted_with_what_holds_them() -> None:
    """A JSON value is held as its own text besides the message's bytes: the
    stream's size (``max_stream_bytes``) counts both and each value's object."""
    import asyncio as aio

    registry = StreamRegistry(Limits(max_bytes=10_000))
    aio.run(registry.create(
        "/j", content_type="application/json", ttl_s=None, expires_at=None,
        expires_at_ts=None, body=b"", closed=False, forked_from=None, fork_offset=None,
        fork_sub_offset=0,
    ))  # fmt: skip
    body = b"[" + b"1," * 99 + b"1]"
    aio.run(registry.append(
        "/j", body, content_type="application/json", stream_seq=None, producer=None,
        close=False,
    ))  # fmt: skip
    assert registry.size == 2 * 200 + 100 * VALUE_OVERHEAD


# --- catch-up pages ---------------------------------------------------------------------

MiB = 1 << 20
CHUNK = 64 * 1024


def _events(body: bytes) -> list[tuple[str, str]]:
    """``(kind, data)`` of each SSE event in ``body``."""
    found = []
    for event in body.decode().split("\n\n"):
        if not event:
            continue
        kind, _, rest = event.partition("\n")
        data = "\n".join(line.removeprefix("data:") for line in rest.split("\n"))
        found.append((kind.removeprefix("event: "), data))
    return found


async def test_an_sse_catch_up_is_written_a_page_at_a_time() -> None:
    """6 MiB to catch up: each write is one page of about
    ``read_chunk_bytes`` (1 MiB) and one message more at most, the next
    written once the one before was taken; the control events' offsets
    follow each other to the stream's end. (It was one write of it all.)"""
    from server.streams.headers import StreamSettings
    from server.streams.sse import StreamSse

    registry = StreamRegistry(Limits())
    await registry.create(
        "/s", content_type="text/plain", ttl_s=None, expires_at=None, expires_at_ts=None,
        body=b"", closed=False, forked_from=None, fork_offset=None, fork_sub_offset=0,
    )  # fmt: skip
    for index in range(96):
        await registry.append(
            "/s", bytes([97 + index % 26]) * CHUNK, content_type="text/plain",
            stream_seq=None, producer=None, close=index == 95,
        )  # fmt: skip
    stream = await registry.live("/s")
    response = StreamSse(registry, stream, "-1", None, StreamSettings(), {})
    bodies: list[bytes] = []
    taken = asyncio.Event()

    async def send(message: dict[str, object]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            bodies.append(message["body"])  # type: ignore[arg-type]
            if len(bodies) == 2:
                await taken.wait()  # the reader takes its time

    async def receive() -> dict[str, object]:
        await asyncio.Event().wait()
        return {}

    task = asyncio.create_task(response({"type": "http"}, receive, send))
    for _ in range(100):
        await asyncio.sleep(0)
    # Not taken yet: nothing more was read or encoded for this reader.
    assert len(bodies) == 2
    taken.set()
    await asyncio.wait_for(task, 10)
    assert len(bodies) >= 6
    assert max(len(b) for b in bodies) <= MiB + CHUNK + 4096
    text, offset = "", "-1"
    for body in bodies:
        for kind, data in _events(body):
            if kind == "data":
                text += data
            else:
                control = json.loads(data)
                assert control["streamNextOffset"] > offset
                offset = control["streamNextOffset"]
    assert text.encode() == b"".join(m.data for m in registry.read(stream, None))
    assert offset == stream.tail


async def test_a_transcript_catch_up_is_paged_by_bytes() -> None:
    """Events of about 200 KiB: a GET (and an SSE data event) holds about
    ``PAGE_BYTES`` of them (1 MiB), not up to a thousand; read page after
    page from each Stream-Next-Offset they are all there, in order."""
    import client_py

    page_bytes = MiB  # server.streams.transcripts.PAGE_BYTES

    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
        client_py.connect(srv.url) as client,
    ):
        text = "w" * 200_000
        await client.create("big", [{"role": "user", "content": text}])
        for _ in range(15):
            await client.append("big", [{"role": "user", "content": text}])
        url = "/v1/stream/transcripts/big"
        revisions: list[int] = []
        offset = "-1"
        pages = 0
        while True:
            read = await http.get(url, params={"offset": offset})
            assert read.status_code == 200
            assert len(read.content) <= page_bytes + 210_000
            revisions += [e["revision"] for e in read.json()]
            offset = read.headers["stream-next-offset"]
            pages += 1
            if read.headers.get("stream-up-to-date") == "true":
                break
        assert revisions == list(range(1, 17)) and pages >= 3
        # The SSE catch-up: data events of a page each.
        sizes: list[int] = []
        seen: list[int] = []
        params = {"offset": "-1", "live": "sse"}
        async with http.stream("GET", url, params=params) as response:
            buffer = ""
            async for chunk in response.aiter_text():
                buffer += chunk
                while "\n\n" in buffer:
                    event, buffer = buffer.split("\n\n", 1)
                    for kind, data in _events(event.encode() + b"\n\n"):
                        if kind == "data":
                            sizes.append(len(data))
                            seen += [e["revision"] for e in json.loads(data)]
                        elif json.loads(data).get("upToDate"):
                            buffer = None  # type: ignore[assignment]
                            break
                    if buffer is None:
                        break
                if buffer is None:
                    break
        assert seen == list(range(1, 17))
        assert max(sizes) <= page_bytes + 210_000 and len(sizes) >= 3


async def test_a_fork_of_a_json_stream_counts_its_body_off_the_loop_too() -> None:
    """A fork created without a Content-Type takes its source's: a large
    JSON body is counted in a worker as any other."""
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60) as http,
    ):
        assert (await http.put("/v1/stream/src", headers=JSON)).status_code == 201
        flat = b"[" + b"1," * 7_000_000 + b"1]"
        async with loop_stalls() as worst:
            fork = await http.put(
                "/v1/stream/fork", content=flat, headers={"stream-forked-from": "/v1/stream/src"}
            )
        assert fork.status_code == 413 and "max_stream_append_values" in fork.text
        assert worst[0] < 0.3, worst[0]  # was 0.6-1.1 s on the loop; now about 0.03


def test_a_queue_is_sent_in_bounded_writes_that_keep_each_event_whole() -> None:
    """A reader's task sends its queue in writes of about 64 KiB (it sent
    all of it, up to 4 MiB, in one copy of its own), and never a data
    event without its control event."""
    from server.streams.sse import _send_count

    data, big, control = (
        b"event: data\ndata:x\n\n",
        b"event: data\n" + b"x" * 70_000,
        b"event: control\n{}",
    )
    assert _send_count([data, control, data, control]) == 4
    assert _send_count([big, control, data, control]) == 2
    assert _send_count([b"event: data\n" + b"x" * 60_000, control, big, control]) == 2
    many = [data, control] * 10_000
    assert _send_count(many) < len(many)
    assert sum(len(e) for e in many[: _send_count(many)]) <= 64 * 1024 + len(data)
