"""The WebSocket protocol against a real server (uvicorn, 127.0.0.1, ephemeral port)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from protocol import codes, wire
from protocol import types as wire_types
from protocol.wire import Ack, Baseline, ErrorFrame, Increment, Pong
from server.config import ServerConfig
from server.live.hub import Hub
from server.store.memory import MemoryStore
from server.tuning import CONTROL_FRAME_SLACK
from server.web.ws import websocket_endpoint
from tests.support.servers import running_server
from tests.support.wsclient import RawClient


def msg(text: str, role: str = "user") -> dict[str, str]:
    return {"role": role, "content": text}


async def create(url: str, tid: str, *messages: dict[str, str]) -> dict[str, object]:
    async with httpx.AsyncClient(base_url=url) as http:
        r = await http.post("/v1/transcripts", json={"id": tid, "messages": list(messages)})
        assert r.status_code == 201, r.text
        body: dict[str, object] = r.json()
        return body


async def test_baseline_then_increments_and_two_subscribers_agree() -> None:
    async with running_server() as srv:
        await create(srv.url, "t1", msg("hello"))
        async with (
            await RawClient.connect(srv.ws_url) as a,
            await RawClient.connect(srv.ws_url) as b,
        ):
            for c in (a, b):
                await c.send(op="subscribe", transcriptId="t1")
                base = await c.expect(Baseline)
                assert base.snapshot.revision == 1
                assert [m.content for m in base.snapshot.messages] == ["hello"]
            for i in range(5):
                await a.send(op="append", transcriptId="t1", messages=[msg(f"m{i}")], ref=i)
            seen: dict[str, list[tuple[int, str]]] = {"a": [], "b": []}
            for name, c in (("a", a), ("b", b)):
                while len(seen[name]) < 5:
                    frame = await c.recv()
                    if isinstance(frame, Increment):
                        change = frame.event.change
                        assert isinstance(change, wire_types.MessagesAppended)
                        seen[name].append((frame.event.revision, change.messages[0].content))  # type: ignore[arg-type]
                    else:
                        assert isinstance(frame, Ack)
            assert seen["a"] == seen["b"] == [(2 + i, f"m{i}") for i in range(5)]


async def test_a_baseline_says_the_length_of_the_whole() -> None:
    async with running_server() as srv:
        await create(srv.url, "t5", msg("a"), msg("b"))
        async with await RawClient.connect(srv.ws_url) as c:
            await c.send(op="subscribe", transcriptId="t5")
            raw = await asyncio.wait_for(c.ws.recv(), 5)
            snapshot = json.loads(raw)["snapshot"]
            assert (snapshot["start"], snapshot["length"], len(snapshot["messages"])) == (0, 2, 2)


async def test_http_appends_reach_ws_subscribers_with_origin() -> None:
    async with running_server() as srv:
        await create(srv.url, "t2")
        async with await RawClient.connect(srv.ws_url) as c:
            await c.send(op="subscribe", transcriptId="t2")
            assert (await c.expect(Baseline)).snapshot.revision == 0
            async with httpx.AsyncClient(base_url=srv.url) as http:
                r = await http.post(
                    "/v1/transcripts/t2/messages",
                    json={"messages": [msg("via http")]},
                    headers={"x-request-id": "req-42"},
                )
                assert r.status_code == 201
            inc = await c.expect(Increment)
            assert inc.event.revision == 1
            assert inc.event.origin is not None and inc.event.origin.context_id == "http:req-42"


async def test_resume_from_held_revision_sends_only_missing() -> None:
    async with running_server() as srv:
        info = await create(srv.url, "t3", msg("a"))
        async with httpx.AsyncClient(base_url=srv.url) as http:
            for i in range(4):
                await http.post("/v1/transcripts/t3/messages", json={"messages": [msg(str(i))]})
        async with await RawClient.connect(srv.ws_url) as c:
            await c.send(op="subscribe", transcriptId="t3", fromRevision=2, epoch=info["epoch"])
            revisions = [(await c.expect(Increment)).event.revision for _ in range(3)]
            assert revisions == [3, 4, 5]
            assert await c.nothing_pending()
            # current revision: nothing but later increments
            await c.send(op="subscribe", transcriptId="t3", fromRevision=5, epoch=info["epoch"])
            assert await c.nothing_pending()


async def test_resume_beyond_window_uses_store_then_baseline_when_dropped() -> None:
    async with running_server(event_window=2, max_resume_events=5) as srv:
        info = await create(srv.url, "t4")
        async with httpx.AsyncClient(base_url=srv.url) as http:
            for i in range(8):
                await http.post("/v1/transcripts/t4/messages", json={"messages": [msg(str(i))]})
        async with await RawClient.connect(srv.ws_url) as c:
            # 4 behind: older than the window (2), served from the store's log.
            await c.send(op="subscribe", transcriptId="t4", fromRevision=4, epoch=info["epoch"])
            assert [(await c.expect(Increment)).event.revision for _ in range(4)] == [5, 6, 7, 8]
            # 8 behind: more than max_resume_events -> a fresh baseline.
            await c.send(op="subscribe", transcriptId="t4", fromRevision=0, epoch=info["epoch"])
            assert (await c.expect(Baseline)).snapshot.revision == 8


async def test_epoch_mismatch_gets_a_baseline() -> None:
    async with running_server() as srv:
        await create(srv.url, "t5", msg("x"))
        async with await RawClient.connect(srv.ws_url) as c:
            await c.send(op="subscribe", transcriptId="t5", fromRevision=1, epoch="other-epoch")
            base = await c.expect(Baseline)
            assert base.snapshot.revision == 1 and base.snapshot.epoch != "other-epoch"


async def test_idempotent_retry_appends_once_and_conflicts_are_reported() -> None:
    async with running_server() as srv:
        await create(srv.url, "t6")
        async with await RawClient.connect(srv.ws_url) as c:
            for _ in range(2):
                await c.send(
                    op="append", transcriptId="t6", messages=[msg("once")], idempotencyKey="k-1"
                )
            first, second = await c.expect(Ack), await c.expect(Ack)
            assert (first.revision, first.duplicate) == (1, False)
            assert (second.revision, second.start, second.count, second.duplicate) == (
                1,
                0,
                1,
                True,
            )
            await c.send(
                op="append", transcriptId="t6", messages=[msg("x")], expectedRevision=0, ref="c"
            )
            err = await c.expect(ErrorFrame)
            assert (err.code, err.ref, err.revision) == ("revision-conflict", "c", 1)
            await c.send(op="append", transcriptId="t6", messages=[msg("y")], expectedRevision=1)
            assert (await c.expect(Ack)).revision == 2
        async with httpx.AsyncClient(base_url=srv.url) as http:
            snap = (await http.get("/v1/transcripts/t6")).json()
            assert [m["content"] for m in snap["messages"]] == ["once", "y"]


@pytest.mark.parametrize(
    ("raw", "code", "needle"),
    [
        ("{not json", "invalid-frame", "malformed JSON"),
        ('{"op":"dance"}', "invalid-frame", "unknown op"),
        ('{"transcriptId":"x"}', "invalid-frame", 'missing field "op"'),
        ('{"op":"append","messages":[]}', "invalid-frame", "transcriptId"),
        ("[1,2]", "invalid-frame", "object"),
        (
            '{"op":"append","transcriptId":"t7","messages":[{"role":"user","content":[{"type":"video"}]}]}',
            "invalid-message",
            'messages[0].content[0].type: unknown content part "video"',
        ),
        ('{"op":"subscribe","transcriptId":"nope"}', "not-found", "nope"),
        ('{"op":"subscribe","transcriptId":"bad id!"}', "invalid-frame", "transcriptId"),
        ('{"op":"startSegment","transcriptId":"t7","start":99}', "invalid-segment", ""),
    ],
)
async def test_bad_input_gets_an_error_and_the_connection_stays_usable(
    raw: str, code: str, needle: str
) -> None:
    async with running_server(max_frame_bytes=4096) as srv:
        await create(srv.url, "t7", msg("kept"))
        async with await RawClient.connect(srv.ws_url) as c:
            await c.ws.send(raw)
            err = await c.expect(ErrorFrame)
            assert err.code == code, err
            assert needle in err.message, err.message
            await c.send(op="ping", ref="still-there")
            assert (await c.expect(Pong)).ref == "still-there"
            await c.send(op="subscribe", transcriptId="t7")
            assert [m.content for m in (await c.expect(Baseline)).snapshot.messages] == ["kept"]


async def test_oversize_frame_and_too_many_subscriptions() -> None:
    async with running_server(max_frame_bytes=1000, max_subscriptions_per_connection=2) as srv:
        for tid in ("s1", "s2", "s3"):
            await create(srv.url, tid)
        async with await RawClient.connect(srv.ws_url) as c:
            # Over max_frame_bytes, under the WebSocket layer's cap (+25%): answered.
            await c.send(op="append", transcriptId="s1", messages=[msg("x" * 1100)], ref="big")
            err = await c.expect(ErrorFrame)
            assert err.code == "too-large"
            await c.send(op="subscribe", transcriptId="s1")
            await c.send(op="subscribe", transcriptId="s2")
            await c.send(op="subscribe", transcriptId="s3", ref="third")
            await c.expect(Baseline)
            await c.expect(Baseline)
            err = await c.expect(ErrorFrame)
            assert (err.code, err.ref) == (wire.TOO_MANY_SUBSCRIPTIONS, "third")
            await c.send(op="ping")
            await c.expect(Pong)


async def test_a_subscriber_that_never_reads_lags_alone_and_memory_stays_bounded() -> None:
    total, window = 600, 4
    async with running_server(queue_max_frames=200, queue_max_bytes=512 << 10) as srv:
        await create(srv.url, "t8")
        slow = await RawClient.connect(srv.ws_url, max_queue=1, max_size=None)
        # The slow client stops reading: its TCP buffers fill, then its queue.
        slow.ws.transport.pause_reading()  # type: ignore[attr-defined]
        await slow.send(op="subscribe", transcriptId="t8")
        fast = await RawClient.connect(srv.ws_url, max_queue=None)
        writer = await RawClient.connect(srv.ws_url)
        await fast.send(op="subscribe", transcriptId="t8")
        await fast.expect(Baseline)

        async def read_all() -> list[int]:
            revisions: list[int] = []
            while len(revisions) < total:
                frame = await fast.recv(10)
                assert isinstance(frame, Increment), frame
                revisions.append(frame.event.revision)
            return revisions

        reader = asyncio.create_task(read_all())
        big = "y" * 16_000  # 9.6 MB in all: more than loopback TCP buffers hold
        for start in range(0, total, window):
            for i in range(start, start + window):
                await writer.send(op="append", transcriptId="t8", messages=[msg(f"{i}:{big}")])
            for _ in range(window):
                await writer.expect(Ack)
        assert await reader == list(range(1, total + 1))
        assert srv.app.state.metrics.lagged._value.get() >= 1
        for conn in srv.hub.subscriptions.connections.values():
            frames, size = conn.queued
            assert frames <= 200 + 1024 and size <= (512 << 10) + 20_000
        # The slow one reads again, finds `lagged`, resumes and recovers.
        slow.ws.transport.resume_reading()  # type: ignore[attr-defined]
        revision = 0
        while True:
            frame = await slow.recv(10)
            if isinstance(frame, Baseline):
                revision = frame.snapshot.revision
            elif isinstance(frame, Increment):
                assert frame.event.revision == revision + 1
                revision = frame.event.revision
            else:
                assert isinstance(frame, ErrorFrame)
                assert (frame.code, frame.transcript_id) == ("lagged", "t8")
                break
        assert revision < total
        epoch = srv.hub.live["t8"].transcript.epoch
        await slow.send(op="subscribe", transcriptId="t8", fromRevision=revision, epoch=epoch)
        while revision < total:
            frame = await slow.recv(10)
            if isinstance(frame, ErrorFrame):
                # Still too far behind for its queue: resume again from where
                # it got to, as a consumer does. Every round makes progress.
                assert frame.code == "lagged"
                await slow.send(
                    op="subscribe", transcriptId="t8", fromRevision=revision, epoch=epoch
                )
                continue
            if isinstance(frame, Baseline):  # too far behind for its queue
                revision = frame.snapshot.revision
                continue
            assert isinstance(frame, Increment) and frame.event.revision <= revision + 1
            revision = max(revision, frame.event.revision)
        for c in (slow, fast, writer):
            await c.close()


async def test_segments_over_ws_and_http() -> None:
    async with running_server() as srv:
        await create(srv.url, "t9", msg("a"), msg("b", "assistant"))
        async with await RawClient.connect(srv.ws_url) as c:
            await c.send(op="subscribe", transcriptId="t9")
            await c.expect(Baseline)
            await c.send(op="startSegment", transcriptId="t9", ref="seg")
            ack = await c.expect(Ack)
            assert (ack.revision, ack.start) == (2, 2)
            inc = await c.expect(Increment)
            assert inc.event.change == wire_types.SegmentStarted(previous_start=0, start=2, end=2)
        async with httpx.AsyncClient(base_url=srv.url) as http:
            r = await http.post("/v1/transcripts/t9/segments", json={"start": 1})
            assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"


async def test_pipelined_appends_keep_their_order() -> None:
    async with running_server() as srv:
        await create(srv.url, "t10")
        async with await RawClient.connect(srv.ws_url) as c:
            await asyncio.gather(
                *(
                    c.send(op="append", transcriptId="t10", messages=[msg(str(i))], ref=i)
                    for i in range(50)
                )
            )
            acks = [await c.expect(Ack) for _ in range(50)]
            assert [a.ref for a in acks] == list(range(50))
            assert [a.revision for a in acks] == list(range(1, 51))


async def test_ops_over_the_rate_limit_are_refused_and_the_connection_stays_usable() -> None:
    async with running_server(max_ops_per_second=0.001, max_ops_burst=3) as srv:
        await create(srv.url, "rl")
        async with await RawClient.connect(srv.ws_url) as c:
            for i in range(5):
                await c.send(op="ping", ref=i)
            frames = [await c.recv() for _ in range(5)]
            assert [type(f).__name__ for f in frames] == ["Pong"] * 3 + ["ErrorFrame"] * 2
            assert all(f.code == "rate-limited" for f in frames[3:])  # type: ignore[union-attr]
            assert [f.ref for f in frames] == list(range(5))


async def test_a_full_server_closes_with_1013_and_the_reason() -> None:
    async with (
        running_server(max_connections=1) as srv,
        await RawClient.connect(srv.ws_url) as first,
    ):
        await first.send(op="ping", ref=1)
        await first.expect(Pong)
        async with websockets.connect(srv.ws_url) as second:
            with pytest.raises(ConnectionClosed) as refused:
                await second.recv()
        assert refused.value.rcvd is not None
        assert (refused.value.rcvd.code, refused.value.rcvd.reason) == (
            codes.CLOSE_SERVER_FULL,
            "too many connections",
        )
        assert codes.close(refused.value.rcvd.code).reconnect == "backoff"  # type: ignore[union-attr]


async def test_a_client_that_reads_not_even_its_answers_is_closed_with_4008() -> None:
    """Driven without a socket: the endpoint's ``send`` blocks like a full TCP
    buffer, so the answers to pings pile up until the queue gives up."""
    hub = Hub(MemoryStore(), ServerConfig(store="memory", queue_max_frames=10))
    await hub.store.open()
    await hub.start()
    inbound: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    inbound.put_nowait({"type": "websocket.connect"})
    for i in range(10 + CONTROL_FRAME_SLACK + 100):  # the writer takes some before it blocks
        inbound.put_nowait({"type": "websocket.receive", "text": f'{{"op":"ping","ref":{i}}}'})
    closes: list[dict[str, Any]] = []
    never = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "websocket.close":
            closes.append(message)
        elif message["type"] == "websocket.send":
            await never.wait()  # the client reads nothing

    try:
        await asyncio.wait_for(websocket_endpoint({}, inbound.get, send, hub), timeout=10)
    finally:
        await hub.stop()
    assert [(c["code"], c["reason"]) for c in closes] == [(4008, "outbound queue overflow")]
    assert codes.close(4008).reconnect == "resume"  # type: ignore[union-attr]
    assert hub.subscriptions.connections == {}
