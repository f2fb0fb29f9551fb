"""Defence in depth (issue 23, item 1): an increment one format cannot
encode ends only the subscriptions that need it in that format, with an
``internal`` error, logged once; every other subscriber, and the committer,
go on without a gap.

Validation refuses every value that could cause this for real, so the fault
is injected: the event encoder of one format fails for one event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from protocol import wire
from protocol.types import Message, MessagesAppended, TranscriptEvent
from protocol.wire import Baseline, ErrorFrame, Increment, Pong
from server.live.frames import EncodedEvent
from server.live.outbound import OutboundQueue
from tests.server.live.test_outbound import FakeRaw, make_queue
from tests.support.servers import running_server
from tests.support.wsclient import RawClient

FORMATS = {"json": ("encode_event_json", False), "msgpack": ("encode_event_msgpack", True)}


def inject(monkeypatch: pytest.MonkeyPatch, fmt: str, transcript_id: str, revision: int) -> None:
    """Make the ``fmt`` encoder fail for one event."""
    name, _ = FORMATS[fmt]
    real: Callable[[TranscriptEvent], bytes] = getattr(wire, name)

    def faulty(event: TranscriptEvent) -> bytes:
        if event.transcript_id == transcript_id and event.revision == revision:
            raise OverflowError("injected fault")
        return real(event)

    monkeypatch.setattr(wire, name, faulty)


def frame_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tsync.frames" and r.levelno >= logging.ERROR]


def msg(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def revisions_of(client: RawClient, transcript_id: str, count: int) -> list[int]:
    got: list[int] = []
    while len(got) < count:
        frame = await client.expect(Increment)
        assert frame.event.transcript_id == transcript_id, frame
        got.append(frame.event.revision)
    return got


@pytest.mark.parametrize("broken", list(FORMATS))
async def test_an_increment_one_format_cannot_encode_ends_only_those_subscriptions(
    broken: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    inject(monkeypatch, broken, "t", 3)
    hit_binary = FORMATS[broken][1]
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        for tid in ("t", "u"):
            r = await http.post("/v1/transcripts", json={"id": tid, "messages": [msg("1")]})
            assert r.status_code == 201, r.text

        async def append(tid: str, text: str) -> None:
            r = await http.post(f"/v1/transcripts/{tid}/messages", json={"messages": [msg(text)]})
            assert r.status_code == 201, r.text

        async with (
            await RawClient.connect(srv.ws_url, binary=not hit_binary) as ok_a,
            await RawClient.connect(srv.ws_url, binary=not hit_binary) as ok_b,
            await RawClient.connect(srv.ws_url, binary=hit_binary) as hit,
            await RawClient.connect(srv.ws_url, binary=hit_binary) as hit2,
        ):
            for client, tids in ((ok_a, "t"), (ok_b, "t"), (hit, "tu"), (hit2, "t")):
                for tid in tids:
                    await client.send(op="subscribe", transcriptId=tid)
                    assert (await client.expect(Baseline)).snapshot.revision == 1
            for text in ("2", "3", "4"):
                await append("t", text)
            # The other format's subscribers get every increment, in order.
            for client in (ok_a, ok_b):
                assert await revisions_of(client, "t", 3) == [2, 3, 4]
            # Those of the broken format get 2, then the end of that subscription.
            for client in (hit, hit2):
                assert await revisions_of(client, "t", 1) == [2]
                error = await client.expect(ErrorFrame)
                assert (error.code, error.transcript_id) == ("internal", "t")
            # The committer goes on, and so does hit's other subscription;
            # hit follows t no more.
            await append("t", "5")
            await append("u", "2")
            assert await revisions_of(ok_a, "t", 1) == [5]
            assert await revisions_of(hit, "u", 1) == [2]
            assert await hit.nothing_pending()
            # Subscribing again gives a baseline of everything.
            await hit.send(op="subscribe", transcriptId="t")
            baseline = await hit.expect(Baseline)
            assert baseline.snapshot.revision == 5
            assert [m.content for m in baseline.snapshot.messages] == ["1", "2", "3", "4", "5"]
            await hit.send(op="ping", ref="p")
            assert (await hit.expect(Pong)).ref == "p"
    # Two subscribers needed it: logged once, where the encoding failed.
    assert len(frame_errors(caplog)) == 1, frame_errors(caplog)


async def test_a_queue_that_fails_to_take_an_increment_stops_no_one_else(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in one connection's queue (not an encoding) ends its
    subscription; the committer and the other subscribers go on."""
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post("/v1/transcripts", json={"id": "t", "messages": [msg("1")]})
        assert r.status_code == 201, r.text
        async with await RawClient.connect(srv.ws_url) as victim:
            await victim.send(op="subscribe", transcriptId="t")
            await victim.expect(Baseline)
            (victim_queue,) = srv.hub.subscriptions.connections.values()
            async with await RawClient.connect(srv.ws_url, binary=True) as other:
                await other.send(op="subscribe", transcriptId="t")
                await other.expect(Baseline)
                real = OutboundQueue.push_increments

                def faulty(self: OutboundQueue, *args: Any, **kwargs: Any) -> None:
                    if self is victim_queue:
                        raise RuntimeError("injected fault")
                    real(self, *args, **kwargs)

                monkeypatch.setattr(OutboundQueue, "push_increments", faulty)
                for text in ("2", "3"):
                    r = await http.post(
                        "/v1/transcripts/t/messages", json={"messages": [msg(text)]}
                    )
                    assert r.status_code == 201, r.text
                assert await revisions_of(other, "t", 2) == [2, 3]
                error = await victim.expect(ErrorFrame)
                assert (error.code, error.transcript_id) == ("internal", "t")
                assert await victim.nothing_pending()
    failed = [r for r in caplog.records if r.name == "tsync.live" and r.levelno >= logging.ERROR]
    assert len(failed) == 1


def event(transcript_id: str, revision: int) -> TranscriptEvent:
    message = Message(role="user", content=f"m{revision}")
    change = MessagesAppended(start=revision - 1, messages=(message,))
    return TranscriptEvent(
        transcript_id=transcript_id, epoch="e", revision=revision, occurred_at=0, change=change
    )


class AsgiSend:
    """The ASGI ``send`` of a connection served without the raw write."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def frames(self) -> list[Any]:
        out: list[Any] = []
        for message in self.sent:
            data = message.get("bytes") or message["text"]
            parts = wire.split_frames(data)
            out.extend(wire.accept_transcript_update(p) for p in parts)
        return out


def _summary(frames: list[Any]) -> list[tuple[Any, ...]]:
    return [
        ("inc", f.event.transcript_id, f.event.revision)
        if isinstance(f, Increment)
        else ("err", f.code, f.transcript_id)
        for f in frames
    ]


#: What the connection gets: the error where the queue finds the frame it
#: cannot build (at once on an idle transport, when writing what waited).
EXPECTED = {
    "raw-idle": [("inc", "t", 1), ("inc", "u", 1), ("err", "internal", "t"), ("inc", "u", 2)],
    "raw-backed-up": [("inc", "t", 1), ("inc", "u", 1), ("inc", "u", 2), ("err", "internal", "t")],
}
EXPECTED["asgi"] = EXPECTED["raw-backed-up"]


@pytest.mark.parametrize("broken", list(FORMATS))
@pytest.mark.parametrize("path", ["raw-idle", "raw-backed-up", "asgi"])
async def test_the_queue_skips_what_it_cannot_build_and_numbers_the_rest(
    broken: str, path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every write path of the queue: the raw write to an idle transport
    (each frame at once), the raw write of frames that waited, and ASGI."""
    inject(monkeypatch, broken, "t", 2)
    binary = FORMATS[broken][1]
    lagged: list[set[str]] = []
    raw = FakeRaw()
    send = AsgiSend()
    queue: OutboundQueue
    if path == "asgi":
        queue = OutboundQueue(
            "c",
            send,
            queue_max_frames=100,
            queue_max_bytes=1 << 20,
            write_batch_bytes=1 << 16,
            binary=binary,
            on_lagged=lambda q, tids: lagged.append(tids),
        )
        queue.start()
    else:
        queue = make_queue(raw, binary=binary, lagged=lagged)
    try:
        queue.push_resume("t", 0, [])
        queue.push_resume("u", 0, [])
        if path == "raw-backed-up":
            raw.paused = True
        t = [EncodedEvent(event("t", r)) for r in (1, 2, 3)]
        u = [EncodedEvent(event("u", r)) for r in (1, 2)]
        queue.push_increments(t[:1])
        queue.push_increments(u[:1])
        queue.push_increments(t[1:2])
        queue.push_increments(t[2:])
        queue.push_increments(u[1:])
        if path == "raw-backed-up":
            raw.resume()
        await asyncio.wait_for(queue.drain(), 5)
        frames = send.frames() if path == "asgi" else raw.frames()
        assert _summary(frames) == EXPECTED[path]
        assert [f.seq for f in frames] == [1, 2, 3, 4]
        assert lagged == [{"t"}]
        assert not queue.follows("t") and queue.follows("u")
        assert len(frame_errors(caplog)) == 1
    finally:
        await queue.stop()
