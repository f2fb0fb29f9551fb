"""One connection's outbound queue against a fake raw frame write: frames go
straight to the socket while it takes them, queue (in order) while it is
paused, count their real size, and baselines keep to the byte budget."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from protocol import wire
from protocol.types import Message, MessagesAppended, TranscriptEvent
from protocol.wire import (
    Baseline,
    ErrorFrame,
    Increment,
    Member,
    Pong,
    PresenceCounts,
    PresenceFrame,
    accept_transcript_update,
)
from server.live.baselines import EncodedMessages
from server.live.frames import EncodedEvent, EncodedSnapshot, SharedFrame
from server.live.outbound import OutboundQueue
from server.model.transcript import Transcript
from server.tuning import MAX_ERROR_MESSAGE_CHARS
from tests.server.live.test_frames import parse_frames
from tests.support.waiting import Changes, within


class FakeRaw:
    """A transport that takes writes until paused; ``changes`` is notified on
    every write, failure and return from ``raw_writable``."""

    def __init__(self) -> None:
        self.changes = Changes()
        self.written = bytearray()
        self.writes = 0
        self.paused = False
        self.open = True
        self.failed: int | None = None
        self._resumed: asyncio.Future[None] | None = None

    def raw_ready(self) -> bool:
        return self.open and not self.paused

    def raw_write(self, data: bytes) -> None:
        assert self.raw_ready(), "written while not ready"
        self.written += data
        self.writes += 1
        self.changes.notify()

    def raw_writelines(self, parts: Sequence[bytes | memoryview]) -> None:
        self.raw_write(b"".join(parts))

    def raw_fail(self, code: int) -> None:
        self.failed = code
        self.open = False
        self.changes.notify()

    async def raw_writable(self) -> bool:
        while self.open and self.paused:
            self._resumed = asyncio.get_running_loop().create_future()
            await self._resumed
        self.changes.notify()
        return self.open

    def resume(self) -> None:
        self.paused = False
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)

    def messages(self) -> list[bytes]:
        """The WebSocket messages written (fragments joined)."""
        out: list[bytes] = []
        partial = b""
        for first, payload in parse_frames(bytes(self.written)):
            partial += payload
            if first & 0x80:
                out.append(partial)
                partial = b""
        return out

    def frames(self) -> list[Any]:
        return [
            accept_transcript_update(f)
            for m in self.messages()
            for f in (wire.split_frames(m) if m[:1] == b"{" else [m])
        ]


async def no_send(message: dict[str, Any]) -> None:
    raise AssertionError("a raw connection never sends through ASGI")


def make_queue(raw: FakeRaw, *, frames: int = 100, size: int = 1 << 20, binary: bool = False,
               lagged: list[set[str]] | None = None) -> OutboundQueue:  # fmt: skip
    queue = OutboundQueue(
        "c",
        no_send,
        queue_max_frames=frames,
        queue_max_bytes=size,
        write_batch_bytes=64 << 10,
        binary=binary,
        raw=raw,
        on_lagged=(lambda q, ids: lagged.append(ids)) if lagged is not None else None,
    )
    queue.start()
    return queue


def event(revision: int, body: str = "", tid: str = "t") -> EncodedEvent:
    return EncodedEvent(
        TranscriptEvent(
            tid,
            "e",
            revision,
            0,
            MessagesAppended(revision - 1, (Message("user", f"{revision}{body}"),)),
        )
    )


def baseline(revision: int, size: int = 10, tid: str = "t") -> EncodedSnapshot:
    transcript = Transcript(id=tid, epoch="e")
    for i in range(revision):
        transcript.append([Message("user", "x" * (size // max(revision, 1)) + str(i))])
    encoded = EncodedMessages(binary=False)
    encoded.encode_all(transcript.state)
    return encoded.snapshot(transcript.state)


async def sent_all(queue: OutboundQueue) -> None:
    """Wait for the writer to have written everything queued (``drain``)."""
    await within(queue.drain(), "the queue to send all it held")


async def test_a_frame_pushed_to_an_idle_connection_is_written_at_once() -> None:
    raw = FakeRaw()
    queue = make_queue(raw)
    queue.push_resume("t", 0, [])
    queue.push_increments([event(1)])
    assert raw.writes == 1  # in the pusher's own step: no task ran
    queue.push_control(wire.Pong(seq=0, ref="p"))
    assert raw.writes == 2
    queue.push_increments([event(2), event(3)])
    assert raw.writes == 3  # events taken together leave together
    frames = raw.frames()
    assert [f.seq for f in frames] == [1, 2, 3, 4]
    assert [type(f) for f in frames] == [Increment, Pong, Increment, Increment]
    assert len(raw.messages()) == 3
    await queue.stop()


async def test_a_paused_transport_queues_and_the_writer_sends_in_order_when_it_drains() -> None:
    raw = FakeRaw()
    queue = make_queue(raw)
    queue.push_resume("t", 0, [])
    queue.push_increments([event(1)])
    raw.paused = True
    for r in range(2, 12):
        queue.push_increments([event(r)])
    queue.push_control(wire.Pong(seq=0, ref="after"))
    assert queue.queued[0] == 11 and raw.writes == 1
    raw.resume()
    await sent_all(queue)
    raw.paused = False
    queue.push_increments([event(12)])  # the queue is empty again: written at once
    frames = raw.frames()
    assert [f.seq for f in frames] == list(range(1, 14))
    assert [f.event.revision for f in frames if isinstance(f, Increment)] == list(range(1, 13))
    assert isinstance(frames[11], Pong)
    assert len(raw.messages()) == 3  # one, the queued eleven coalesced, one
    await queue.stop()


async def test_a_connection_backed_up_past_its_budget_is_lagged_and_answers_still_go() -> None:
    raw = FakeRaw()
    lagged: list[set[str]] = []
    queue = make_queue(raw, frames=5, lagged=lagged)
    queue.push_resume("t", 0, [])
    raw.paused = True
    for r in range(1, 10):
        queue.push_increments([event(r)])
    assert lagged == [{"t"}]
    assert not queue.follows("t")
    raw.resume()
    await sent_all(queue)
    frames = raw.frames()
    errors = [f for f in frames if isinstance(f, ErrorFrame)]
    assert [e.code for e in errors] == ["lagged"]
    assert [f.seq for f in frames] == list(range(1, len(frames) + 1))
    await queue.stop()


async def test_every_frame_counts_its_real_size() -> None:
    raw = FakeRaw()
    queue = make_queue(raw)
    raw.paused = True
    queue.push_resume("t", 0, [])
    big = event(1, "x" * 5000)
    queue.push_increments([big])
    queue.push_error("invalid-frame", "y" * 10_000, ref="r")
    frames, size = queue.queued
    assert frames == 2
    rendered = big.render(1, False) + wire.encode_json(
        wire.ErrorFrame(seq=2, code="invalid-frame", message="y" * 10_000, ref="r")
    )
    assert 5000 < size < len(rendered)  # the error was cut, and counted as cut
    raw.resume()
    await sent_all(queue)
    error = raw.frames()[1]
    assert isinstance(error, ErrorFrame)
    assert len(error.message) == MAX_ERROR_MESSAGE_CHARS
    await queue.stop()


async def test_answers_a_client_never_reads_close_it_once_past_the_slack() -> None:
    raw = FakeRaw()
    queue = make_queue(raw, frames=2, size=1000)
    raw.paused = True
    pushed = 0
    while not queue.closed and pushed < 10_000:
        queue.push_error("invalid-frame", "z" * 250)
        pushed += 1
    assert queue.closed
    _, size = queue.queued
    assert size < 1000 + (1 << 20) + 1000  # the budget plus CONTROL_BYTES_SLACK
    await queue.stop()


async def test_presence_frames_a_client_never_reads_close_it_once_past_the_slack() -> None:
    """Issue "The Durable Streams face as tight as the WebSocket face", item 9:
    the presence of other members a connection is sent (shared frames) was
    queued without bound for a client that does not read."""
    raw = FakeRaw()
    queue = make_queue(raw, frames=2, size=1000)
    queue.push_resume("t", 0, [])
    raw.paused = True
    members = [
        Member(id=f"m{i}", who=f"w{i}", kind="viewer", state={"note": "x" * 1000})
        for i in range(100)
    ]
    frame = PresenceFrame(seq=0, transcript_id="t", counts=PresenceCounts(), members=members)
    pushed = 0
    while not queue.closed and pushed < 10_000:
        queue.push_shared(SharedFrame(frame))  # one a second per transcript, for hours
        pushed += 1
    assert queue.closed
    assert raw.failed == 4008
    _, size = queue.queued
    assert size < 1000 + (1 << 20) + 110_000  # the budget, CONTROL_BYTES_SLACK and a frame
    await queue.stop()


async def test_a_new_baseline_replaces_the_frames_of_its_transcript_still_waiting() -> None:
    raw = FakeRaw()
    queue = make_queue(raw)
    raw.paused = True
    queue.push_resume("other", 0, [])
    queue.push_baseline(baseline(3))
    queue.push_increments([event(4), event(5)])
    queue.push_increments([event(1, tid="other")])
    for r in range(6, 10):
        queue.push_baseline(baseline(r))  # a re-subscribe storm
    assert queue.queued[0] == 2  # the other transcript's increment and the last baseline
    raw.resume()
    await sent_all(queue)
    frames = raw.frames()
    assert [type(f) for f in frames] == [Increment, Baseline]
    assert frames[1].snapshot.revision == 9
    await queue.stop()


async def test_baselines_over_the_byte_budget_go_out_whole_as_fragments() -> None:
    raw = FakeRaw()
    lagged: list[set[str]] = []
    queue = make_queue(raw, size=100_000, lagged=lagged)
    queue.push_resume("u", 0, [])
    raw.paused = True
    big = baseline(40, size=400_000)
    assert big.size > 100_000
    queue.push_baseline(big)  # into an empty queue: let in whatever its size
    queue.push_baseline(baseline(40, size=400_000, tid="v"))  # behind a baseline: too
    for r in range(1, 6):
        queue.push_increments([event(r, tid="u")])  # the baselines do not crowd them out
    assert not lagged
    raw.resume()
    await sent_all(queue)
    frames = raw.frames()
    assert [type(f) for f in frames] == [Baseline, Baseline, *[Increment] * 5]
    assert [f.event.revision for f in frames if isinstance(f, Increment)] == [1, 2, 3, 4, 5]
    assert len(parse_frames(bytes(raw.written))) > len(frames)  # fragments
    await queue.stop()


async def test_a_big_baseline_behind_waiting_increments_lags_the_connection() -> None:
    raw = FakeRaw()
    lagged: list[set[str]] = []
    queue = make_queue(raw, size=100_000, lagged=lagged)
    queue.push_resume("u", 0, [])
    raw.paused = True
    queue.push_increments([event(1, tid="u")])
    queue.push_baseline(baseline(40, size=400_000))
    assert lagged == [{"t", "u"}]
    assert queue.queued[0] == 2  # the two lagged errors
    await queue.stop()


async def test_the_fragments_of_a_streaming_baseline_wait_for_the_transport() -> None:
    raw = FakeRaw()
    queue = make_queue(raw)
    big = baseline(40, size=400_000)
    fragments = len(big.chunks) + 2
    assert fragments > 4
    original = raw.raw_write

    def write_then_pause(data: bytes) -> None:
        original(data)
        raw.paused = True  # the transport's buffer is full after each write

    raw.raw_write = write_then_pause  # type: ignore[method-assign]
    queue.push_baseline(big)
    queue.push_control(wire.Pong(seq=0, ref="behind"))
    assert raw.writes == 1
    for resumes in range(1, fragments + 1):
        raw.resume()
        await raw.changes.until(lambda: raw.writes > resumes, f"write {resumes + 1}")  # noqa: B023
        assert raw.writes == resumes + 1  # one write per drain of the transport
    frames = raw.frames()
    assert [type(f) for f in frames] == [Baseline, Pong]
    assert [f.seq for f in frames] == [1, 2]
    await queue.stop()


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
async def test_msgpack_and_json_raw_frames_decode(binary: bool) -> None:
    raw = FakeRaw()
    queue = make_queue(raw, binary=binary)
    queue.push_resume("t", 0, [])
    queue.push_increments([event(1), event(2)])
    queue.push_control(wire.Pong(seq=0))
    messages = raw.messages()
    assert len(messages) == (3 if binary else 2)
    frames = raw.frames()
    assert [f.seq for f in frames] == [1, 2, 3]
    await queue.stop()


async def test_a_closed_raw_connection_stops_the_writer() -> None:
    raw = FakeRaw()
    queue = make_queue(raw)
    queue.push_resume("t", 0, [])
    raw.paused = True
    queue.push_increments([event(1)])
    raw.open = False
    raw.resume()
    await raw.changes.until(lambda: queue.closed, "the writer to find the transport closed")
    assert queue.closed
    await queue.stop()


async def test_a_client_not_reading_its_baseline_is_cut_when_increments_pass_the_budget() -> None:
    """Issue 24 item 3: lagging such a client kept its baseline (and the
    encoding shared with every other subscriber) queued for a reader that
    never comes; the budget now closes it with 4008."""
    raw = FakeRaw()
    lagged: list[set[str]] = []
    queue = make_queue(raw, size=20_000, lagged=lagged)
    raw.paused = True
    big = baseline(40, size=400_000)
    queue.push_baseline(big)
    assert queue.queued == (1, big.size)
    revision = 40
    while not queue.closed and revision < 1000:
        revision += 1
        queue.push_increments([event(revision)])
    assert queue.closed and raw.failed == 4008
    assert not lagged
    assert revision < 40 + 20_000 // 50  # cut once the increments passed the budget
    await queue.stop()


async def test_a_streaming_baseline_counts_what_is_left_of_it_to_send() -> None:
    raw = FakeRaw()
    queue = make_queue(raw, size=20_000)
    original = raw.raw_write

    def write_then_pause(data: bytes) -> None:
        original(data)
        raw.paused = True

    raw.raw_write = write_then_pause  # type: ignore[method-assign]
    big = baseline(40, size=400_000)
    queue.push_baseline(big)
    left = [queue.queued[1]]
    while queue.queued[0]:
        writes = raw.writes
        raw.resume()
        await raw.changes.until(lambda: raw.writes > writes, "the next fragment written")  # noqa: B023
        left.append(queue.queued[1])
    assert left[0] <= big.size and left[-1] == 0
    assert left == sorted(left, reverse=True) and len(set(left)) > 3
    assert isinstance(raw.frames()[0], Baseline) and raw.failed is None
    await queue.stop()
