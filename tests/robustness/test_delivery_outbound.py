"""Issue 14, items 3, 4 and 7 (baselines), against a real ``tsync serve``:
what a connection makes the server hold stays small whatever it asks for and
however little it reads, and baselines of a big transcript never stall the
event loop."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import msgspec
import pytest

from protocol import wire
from protocol.wire import Baseline, ErrorFrame, Increment
from tests.robustness.delivery_probes import ping_rtts, rtt_bound, watching
from tests.support.rawsocket import RawSocket
from tests.support.servers import ServerProcess, running_server
from tests.support.wsclient import RawClient


@pytest.fixture
async def server() -> ServerProcess:  # type: ignore[misc]
    proc = ServerProcess(store="memory", args=["--set", "max_frame_bytes=65536"])
    await asyncio.to_thread(proc.start)
    yield proc
    proc.kill()


def msg(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def test_a_client_that_never_reads_gets_no_echo_of_what_it_sent(
    server: ServerProcess,
) -> None:
    """``{"op": "<30 KB>", "ref": "<30 KB>"}`` 1,500 times from a client that reads nothing
    (issue 14: 4 MiB error frames, counted as 160 bytes each, grew the server
    by 1.2 GB). Each error now quotes 60 characters and counts its size."""
    assert server.proc is not None
    idle = await ping_rtts(server.ws_url, 0.5)
    flood = await RawSocket.connect(server.ws_url, receive_buffer=4096)
    junk = "j" * 30_000
    async with watching(server.proc.pid, server.ws_url) as probe:
        for i in range(1500):
            flood.send_text(msgspec.json.encode({"op": junk, "ref": junk}))
            if i % 50 == 0:
                await flood.drain()
        await flood.drain()
        # The server has read them all once a ping behind them is answered.
        async with await RawClient.connect(server.ws_url) as other:
            await other.send(op="ping")
            await other.expect(wire.Pong)
    print(f"\nerror echo flood: {probe.summary(idle)}")
    # 60 MB sent; 1,500 errors of ~300 bytes queued (a few copies of each frame before).
    assert probe.rss_growth_mb < 25
    assert probe.typical_rtt < rtt_bound(idle)
    frames = await flood.read(5, until=lambda frames: len(frames) >= 3)
    first = wire.accept_transcript_update(frames[0].data.split(b"\n")[0])
    assert isinstance(first, ErrorFrame) and first.code == wire.INVALID_FRAME
    assert len(first.message) < 100 and first.ref is None  # an over-long ref is not echoed
    flood.abort()


async def _big_transcript(url: str, tid: str, megabytes: int) -> int:
    """Create ``tid`` with ``megabytes`` MB of messages; its revision."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        response = await http.post("/v1/transcripts", json={"id": tid})
        assert response.status_code == 201
        for batch in range(megabytes):
            body = {"messages": [msg(f"{batch}:{i}:" + "b" * 1000) for i in range(1000)]}
            response = await http.post(f"/v1/transcripts/{tid}/messages", json=body)
            assert response.status_code in (200, 201), response.text
        # Loaded and held: what follows measures the subscribes, not the load.
        assert (await http.get(f"/v1/transcripts/{tid}", params={"end": 1})).status_code == 200
    return megabytes


async def test_a_baseline_storm_on_a_big_transcript_holds_one_encoding(
    server: ServerProcess,
) -> None:
    """20 subscribers that never read, on an 8 MB transcript, then 5 of them
    re-subscribing 20 times with appends in between (issue 14: 20 on 98 MiB
    took the server to 2.5 GB; re-subscribes queued a baseline each)."""
    assert server.proc is not None
    await _big_transcript(server.url, "big", 8)
    idle = await ping_rtts(server.ws_url, 0.5)
    async with watching(server.proc.pid, server.ws_url) as probe:
        stuck = [await RawSocket.connect(server.ws_url, receive_buffer=4096) for _ in range(20)]
        for conn in stuck:
            conn.send_op(op="subscribe", transcriptId="big")
        async with await RawClient.connect(server.ws_url, max_size=None) as reader:
            await reader.send(op="subscribe", transcriptId="big")
            assert isinstance(await reader.recv(30), Baseline)
            for round_ in range(20):
                await reader.send(op="append", transcriptId="big", messages=[msg(str(round_))])
                for conn in stuck[:5]:
                    conn.send_op(op="subscribe", transcriptId="big")
                for conn in stuck:
                    await conn.drain()
            seen = 0
            while seen < 20:
                frame = await reader.recv(30)
                seen += isinstance(frame, Increment)
    print(f"\nbaseline storm: {probe.summary(idle)}")
    # One encoding (8 MB, shared) and the subscribers' socket buffers; 20
    # copies of several times the transcript before.
    assert probe.rss_growth_mb < 60
    assert probe.typical_rtt < rtt_bound(idle)
    for conn in stuck:
        conn.abort()


async def test_a_fresh_baseline_encodes_a_chunk_per_loop_turn_and_only_what_is_new() -> None:
    """Encoding a big transcript's baseline held the loop for the whole
    encode (0.4 s for 98 MiB, every time it changed). The chunks shared
    across revisions are kept for a transcript held whole (``live_messages``
    0 here: by default a 4,000-message one holds its newest 2,000)."""
    async with running_server(live_messages=0) as srv:
        await _big_transcript(srv.url, "big", 4)
        live = srv.hub.live["big"]
        turns = 0
        busy = True

        async def count_turns() -> None:
            nonlocal turns
            while busy:
                turns += 1
                await asyncio.sleep(0)  # counts loop turns: the measurement itself

        ticker = asyncio.create_task(count_turns())
        async with await RawClient.connect(srv.ws_url, max_size=None) as c:
            await c.send(op="subscribe", transcriptId="big")
            first = await c.expect(Baseline, timeout=30)
            busy = False
            await ticker
            encoded = live._encoded[False]
            chunks = len(encoded.chunks)
            assert chunks > 30  # 4 MB in chunks of 64 KiB
            assert turns > chunks // 2  # the loop ran between them
            before = encoded.encoded_bytes
            await c.send(op="append", transcriptId="big", messages=[msg("new")])
            answers = {type(await c.recv()), type(await c.recv())}
            assert answers == {wire.Ack, Increment}
            await c.send(op="subscribe", transcriptId="big")
            again = await c.expect(Baseline)
            assert again.snapshot.revision == first.snapshot.revision + 1
            assert again.snapshot.messages[-1].content == "new"
            assert encoded.encoded_bytes - before < 100  # the one new message


async def test_a_resume_that_will_end_in_a_baseline_reads_no_events() -> None:
    """50 resumes from 10,000 back each read 10,000 events, then sent a
    baseline anyway (issue 14: 4.8 GB)."""
    async with running_server(queue_max_frames=50, event_window=10) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as http:
            await http.post("/v1/transcripts", json={"id": "t"})
            for i in range(200):
                await http.post("/v1/transcripts/t/messages", json={"messages": [msg(str(i))]})
        reads: list[tuple[Any, ...]] = []
        store = srv.hub.store
        original = store.events_after

        async def counting(*args: Any, **kwargs: Any) -> Any:
            reads.append(args)
            return await original(*args, **kwargs)

        store.events_after = counting  # type: ignore[method-assign]
        epoch = srv.hub.live["t"].transcript.epoch
        async with await RawClient.connect(srv.ws_url) as c:
            await c.send(op="subscribe", transcriptId="t", fromRevision=100, epoch=epoch)
            assert isinstance(await c.recv(), Baseline)  # 100 behind, room for 50
            assert reads == []
            await c.send(op="unsubscribe", transcriptId="t")
            await c.send(op="subscribe", transcriptId="t", fromRevision=170, epoch=epoch)
            frames = [await c.recv() for _ in range(30)]
            assert [f.event.revision for f in frames] == list(range(171, 201))
            assert len(reads) == 1  # beyond the window, within the room: read once
