"""The delivery path against a real server: pre-framed frames written straight
to the socket (``tsync serve``'s WebSocket protocol), the queue when a client
backs up, big baselines as fragmented messages, and the same app under
uvicorn's stock protocol (no raw write: every frame through ASGI)."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest
from websockets.frames import Opcode

from protocol import wire
from protocol.types import TranscriptSnapshot
from protocol.wire import Baseline, Increment, Pong, accept_transcript_update
from tests.support.rawsocket import RawSocket
from tests.support.servers import RunningServer, running_server
from tests.support.waiting import until
from tests.support.wsclient import RawClient

STOCK = {"ws": "websockets-sansio"}  # uvicorn's own protocol: no raw write


def msg(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def create(srv: RunningServer, tid: str, messages: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
    async with httpx.AsyncClient(base_url=srv.url) as http:
        response = await http.post("/v1/transcripts", json={"id": tid, "messages": list(messages)})
        assert response.status_code == 201, response.text


def updates(raw: RawSocket, binary: bool = False) -> list[Any]:
    """The frames of every whole message received, seq checked."""
    frames: list[Any] = []
    partial = b""
    for frame in raw.frames:
        if frame.opcode not in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
            continue
        partial += frame.data
        if frame.fin:
            parts = [partial] if binary else wire.split_frames(partial)
            frames.extend(accept_transcript_update(p) for p in parts)
            partial = b""
    assert [f.seq for f in frames] == list(range(1, len(frames) + 1))
    return frames


@pytest.mark.parametrize("options", [None, STOCK], ids=["raw", "asgi"])
async def test_a_client_that_backs_up_and_catches_up_gets_every_frame_in_order(
    options: dict[str, Any] | None,
) -> None:
    """Frames written at once and frames queued while the transport was
    paused keep one order and one seq; under the stock protocol too."""
    async with running_server(uvicorn_options=options, queue_max_frames=5000) as srv:
        await create(srv, "t")
        reader = await RawSocket.connect(srv.ws_url, receive_buffer=4096)
        reader.send_op(op="subscribe", transcriptId="t")
        await until(lambda: srv.hub.stats()["subscriptions"] == 1)
        queue = next(iter(srv.hub.subscriptions.connections.values()))
        assert queue.raw is (options is None)
        # The client reads nothing while 400 appends of 16 KB go out (more
        # than loopback TCP buffers hold): the transport pauses, frames queue.
        total, window, big = 400, 8, "x" * 16_000
        most_queued = 0
        async with await RawClient.connect(srv.ws_url) as writer:
            for start in range(0, total, window):
                for i in range(start, start + window):
                    await writer.send(op="append", transcriptId="t", messages=[msg(f"{i:04}{big}")])
                for _ in range(window):
                    await writer.expect(wire.Ack)
                most_queued = max(most_queued, queue.queued[0])
        assert most_queued > 10
        reader.send_op(op="ping", ref="end")
        await reader.read(
            timeout=20, until=lambda frames: bool(frames) and b'"ref":"end"' in frames[-1].data
        )
        frames = updates(reader)
        assert isinstance(frames[-1], Pong)
        assert isinstance(frames[0], Baseline)
        increments = [f.event for f in frames if isinstance(f, Increment)]
        assert [e.change.messages[0].content[:4] for e in increments] == [
            f"{i:04}" for i in range(total)
        ]
        assert [e.revision for e in increments] == list(range(1, total + 1))
        reader.abort()


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
async def test_a_big_baseline_arrives_whole_as_a_fragmented_message(binary: bool) -> None:
    async with running_server(write_batch_bytes=16 << 10) as srv:
        await create(srv, "big", [msg(f"{i:03}" + "é" * 1000) for i in range(200)])
        subprotocol = wire.SUBPROTOCOL_MSGPACK if binary else wire.SUBPROTOCOL_JSON
        client = await RawSocket.connect(srv.ws_url, subprotocol=subprotocol)
        client.send_op(op="subscribe", transcriptId="big")
        await client.read(timeout=10, until=lambda frames: bool(frames) and frames[-1].fin)
        frames = updates(client, binary)
        assert len(frames) == 1 and isinstance(frames[0], Baseline)
        assert sum(1 for f in client.frames if f.opcode is Opcode.CONT) > 4
        async with httpx.AsyncClient(base_url=srv.url) as http:
            whole = msgspec.json.decode(
                (await http.get("/v1/transcripts/big")).content, type=TranscriptSnapshot
            )
        assert frames[0].snapshot == whole
        client.abort()


async def test_a_subscriber_that_never_reads_is_lagged_alone_under_the_stock_protocol() -> None:
    async with running_server(
        uvicorn_options=STOCK, queue_max_frames=50, queue_max_bytes=1 << 20
    ) as srv:
        await create(srv, "t")
        stuck = await RawSocket.connect(srv.ws_url, receive_buffer=4096)
        stuck.send_op(op="subscribe", transcriptId="t")
        await until(lambda: srv.hub.stats()["subscriptions"] == 1)
        async with await RawClient.connect(srv.ws_url) as fine:
            await fine.send(op="subscribe", transcriptId="t")
            await fine.expect(Baseline)
            # 8 MB: more than loopback TCP buffers (up to 4 MiB here) and the
            # queue hold, so the stuck connection's transport pauses and its
            # queue fills whatever the pace of the appends. The writer reads
            # as it goes: its own queue is bounded too.
            total, window = 256, 8
            got = 0
            for _ in range(0, total, window):
                for _ in range(window):
                    await fine.send(op="append", transcriptId="t", messages=[msg("y" * 32_000)])
                answers = 0
                while answers < 2 * window:
                    frame = await fine.recv()
                    answers += isinstance(frame, Increment | wire.Ack)
                    got += isinstance(frame, Increment)
            assert got == total
        await until(lambda: srv.hub.metrics.lagged._value.get() >= 1)
        assert srv.hub.stats()["subscriptions"] == 0
        stuck.abort()


async def test_answers_and_increments_interleave_in_one_seq_on_the_raw_path() -> None:
    async with running_server() as srv:
        await create(srv, "t")
        async with await RawClient.connect(srv.ws_url) as c:
            await c.send(op="subscribe", transcriptId="t")
            await c.expect(Baseline)
            for i in range(50):
                await c.send(op="append", transcriptId="t", messages=[msg(str(i))], ref=i)
                await c.send(op="ping", ref=f"p{i}")
            kinds: dict[type, int] = {}
            while sum(kinds.values()) < 150:
                frame = await c.recv()  # RawClient checks seq has no gap
                kinds[type(frame)] = kinds.get(type(frame), 0) + 1
            assert kinds == {Increment: 50, wire.Ack: 50, Pong: 50}
            assert await c.nothing_pending()
