"""The hub with long transcripts (issue 18): live copies hold their newest
messages and read older ones from the store; a windowed baseline costs what
the window holds; what a subscriber, a range or an export gets is the same
whatever memory holds."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from protocol.types import Message, MessagesAppended, TranscriptEvent
from protocol.views import Window
from protocol.wire import Baseline, ErrorFrame, Increment, accept_transcript_update
from server.config import ServerConfig
from server.live.hub import Hub
from server.live.subscriptions import Subscriptions
from server.store.base import NewTranscript, StoredRange
from server.store.memory import MemoryStore
from server.tuning import BASELINE_READ_FIRST
from tests.server.live.test_hub import connect
from tests.support.waiting import within


class CountingStore(MemoryStore):
    """A memory store that counts what the hub reads of it."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[int, int]] = []
        self.loads: list[int | None] = []
        self.whole_loads = 0

    async def read_messages(self, transcript_id: str, start: int, end: int) -> StoredRange:
        self.reads.append((start, end))
        return await super().read_messages(transcript_id, start, end)

    async def load_recent(self, transcript_id: str, *, messages: int | None = None) -> Any:
        self.loads.append(messages)
        return await super().load_recent(transcript_id, messages=messages)

    async def load(self, transcript_id: str) -> Any:
        self.whole_loads += 1
        return await super().load(transcript_id)


def message(i: int) -> Message:
    return Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}")


async def long_transcript(store: MemoryStore, tid: str, length: int, batch: int = 1000) -> str:
    """``tid`` with ``length`` messages, written to the store directly."""
    epoch = "e-" + tid
    await store.create(NewTranscript(tid, epoch, 0))
    for revision, start in enumerate(range(0, length, batch), 1):
        count = min(batch, length - start)
        change = MessagesAppended(start, tuple(message(start + i) for i in range(count)))
        await store.append(TranscriptEvent(tid, epoch, revision, revision, change))
    return epoch


@pytest.fixture
async def store() -> Any:
    store = CountingStore()
    await store.open()
    yield store
    await store.close()


async def make_hub(store: MemoryStore, **settings: Any) -> Hub:
    config = ServerConfig(
        store="memory", queue_max_frames=100, queue_max_bytes=64 << 20, write_delay_ms=0, **settings
    )
    hub = Hub(store, config)
    await hub.start()
    return hub


async def test_a_tail_of_a_long_transcript_costs_what_the_tail_holds(store: CountingStore) -> None:
    await long_transcript(store, "big", 100_000)
    hub = await make_hub(store, live_messages=500)
    try:
        conn, sock = connect(hub, "c")
        assert await hub.subscriptions.subscribe(conn, "big", window=Window(tail=50)) == "baseline"
        await sock.got(1)
        # Loaded with its newest messages only, never whole.
        assert store.loads == [500] and store.whole_loads == 0
        live = hub.live["big"]
        assert (live.transcript.held_start, live.transcript.length) == (99_500, 100_000)
        # The baseline holds the 50 and nothing else was read.
        [frame] = sock.frames()
        assert isinstance(frame, Baseline)
        snapshot = frame.snapshot
        assert (snapshot.start, snapshot.length, len(snapshot.messages)) == (99_950, 100_000, 50)
        assert snapshot.messages[0] == message(99_950)
        assert len(sock.messages[0]) < 50 * 100
        assert store.reads == []
        # A second subscriber at the same revision shares the encoding.
        other, _ = connect(hub, "d")
        await hub.subscriptions.subscribe(other, "big", window=Window(tail=50))
        assert live.cached_snapshot(99_950) is live.encoded_snapshot(99_950)
    finally:
        await hub.stop()


async def test_a_whole_baseline_joins_the_store_and_memory_exactly(store: CountingStore) -> None:
    await long_transcript(store, "t", 3_000, batch=7)
    hub = await make_hub(store, live_messages=100)
    try:
        conn, sock = connect(hub, "c")
        await hub.subscriptions.subscribe(conn, "t")
        await sock.got(1)
        [frame] = sock.frames()
        assert isinstance(frame, Baseline)
        assert frame.snapshot.whole
        assert list(frame.snapshot.messages) == [message(i) for i in range(3_000)]
        # Read once, in pieces (the first small, the next by the average size).
        assert store.reads == [(0, BASELINE_READ_FIRST), (BASELINE_READ_FIRST, 2_900)]
        # Ranges and snapshots read the same way.
        assert (await hub.reads.snapshot("t", 2_850, 2_950)).messages == tuple(
            message(i) for i in range(2_850, 2_950)
        )
        found, revision = await hub.reads.read_messages("t", 10, 20)
        assert (found.start, found.messages, revision) == (
            10,
            tuple(message(i) for i in range(10, 20)),
            found.revision,
        )
    finally:
        await hub.stop()


async def test_windowed_and_partly_stored_baselines_are_encoded_once_per_format(
    store: CountingStore,
) -> None:
    """A JSON and a MessagePack subscriber of the same window (or of a whole
    transcript memory no longer holds whole) each get the baseline in their
    own format, each encoded once per revision and window start."""
    await long_transcript(store, "t", 3_000, batch=7)
    hub = await make_hub(store, live_messages=100)
    try:
        received: list[bytes] = []

        async def send_bytes(message: dict[str, Any]) -> None:
            received.append(message["bytes"])

        packed = hub.subscriptions.connect("b", send_bytes, binary=True)
        packed.start()
        conn, sock = connect(hub, "c")
        for window in (Window(tail=50), None):
            for queue in (conn, packed, conn):
                assert await hub.subscriptions.subscribe(queue, "t", window=window) == "baseline"
                # Sent (a new baseline would replace one still queued).
                await within(queue.drain(), f"the baseline sent to {queue.id}")
        live = hub.live["t"]
        assert live.cached_snapshot(2_950, False) is not live.cached_snapshot(2_950, True)
        assert live.cached_snapshot(0, False) is not live.cached_snapshot(0, True)
        assert not live.transcript.state.whole and not live._encoded
        json_frames = sock.frames()
        msgpack_frames = [accept_transcript_update(data) for data in received]
        assert all(data[:1] != b"{" for data in received)
        for frames, expected in ((json_frames, 4), (msgpack_frames, 2)):
            assert len(frames) == expected and all(isinstance(f, Baseline) for f in frames)
            spans = {(f.snapshot.start, len(f.snapshot.messages)) for f in frames}
            assert spans == {(2_950, 50), (0, 3_000)}
        # The older messages were read once per format, not per subscriber.
        assert store.reads == [(0, BASELINE_READ_FIRST), (BASELINE_READ_FIRST, 2_900)] * 2
    finally:
        await hub.stop()


async def test_a_transcript_no_longer_held_whole_lets_its_encoded_messages_go(
    store: CountingStore,
) -> None:
    """Whole baselines share encoded chunks while every message is held; once
    the oldest are let go, so are the chunks, and whole baselines join the
    store's older messages like any other."""
    await store.create(NewTranscript("t", "e", 0))
    hub = await make_hub(store, live_messages=20)
    try:
        conn, sock = connect(hub, "c")
        for i in range(20):
            await hub.writes.append("t", [{"role": "user", "content": f"m{i}"}])
        await hub.subscriptions.subscribe(conn, "t")
        await sock.got(1)
        live = hub.live["t"]
        assert live._encoded[False].count == 20
        for i in range(20, 40):
            await hub.writes.append("t", [{"role": "user", "content": f"m{i}"}])
        await sock.got(21)  # every increment delivered: the window moved
        assert not live.transcript.state.whole and not live._encoded
        await hub.subscriptions.subscribe(conn, "t")
        await sock.got(22)
        last = sock.frames()[-1]
        assert isinstance(last, Baseline) and last.snapshot.whole
        assert [m.content for m in last.snapshot.messages] == [f"m{i}" for i in range(40)]
    finally:
        await hub.stop()


async def test_memory_follows_the_working_set_as_messages_arrive(store: CountingStore) -> None:
    await store.create(NewTranscript("t", "e", 0))
    hub = await make_hub(store, live_messages=20)
    try:
        conn, sock = connect(hub, "c")
        await hub.subscriptions.subscribe(conn, "t", window=Window(tail=5))
        for i in range(200):
            await hub.writes.append("t", [{"role": "user", "content": f"m{i}"}])
        await sock.got(201)
        transcript = hub.live["t"].transcript
        assert transcript.length == 200
        assert transcript.length - transcript.held_start <= 30  # at most 1.5 x live_messages
        # The subscriber got every increment; a new whole baseline is still whole.
        increments = [f for f in sock.frames() if isinstance(f, Increment)]
        assert [f.event.revision for f in increments] == list(range(1, 201))
        late, late_sock = connect(hub, "late")
        await hub.subscriptions.subscribe(late, "t")
        await late_sock.got(1)
        [baseline] = late_sock.frames()
        assert isinstance(baseline, Baseline)
        assert [m.content for m in baseline.snapshot.messages] == [f"m{i}" for i in range(200)]
        usage = (await hub.reads.usage("t"))[1]
        assert (usage.messages, usage.references) == (200, 200)
    finally:
        await hub.stop()


async def test_live_messages_zero_keeps_every_message(store: CountingStore) -> None:
    await long_transcript(store, "t", 5_000, batch=50)
    hub = await make_hub(store, live_messages=0)
    try:
        live = await hub.load("t")
        assert store.loads == [None]
        assert live.transcript.held_start == 0
        conn, _ = connect(hub, "c")
        await hub.subscriptions.subscribe(conn, "t")
        assert store.reads == []
    finally:
        await hub.stop()


async def test_a_window_naming_no_view_is_refused_and_views_move_windows(
    store: CountingStore,
) -> None:
    await long_transcript(store, "t", 30, batch=10)
    hub = await make_hub(store)
    try:
        conn, sock = connect(hub, "c")
        with pytest.raises(ValueError, match="no View named 'v'"):
            await hub.subscriptions.subscribe(conn, "t", window=Window(view="v"))
        assert not conn.follows("t")
        result = await hub.writes.set_view("t", "v", 12, 20)
        assert (result.receipt.revision, result.duplicate) == (4, False)
        assert (await hub.writes.set_view("t", "v", 12, 20)).duplicate
        await hub.subscriptions.subscribe(conn, "t", window=Window(view="v"))
        await sock.got(1)
        [frame] = [f for f in sock.frames() if isinstance(f, Baseline)]
        # A closed View's baseline still reaches the length: increments extend it.
        assert (frame.snapshot.start, frame.snapshot.length) == (12, 30)
        assert [v.name for v in frame.snapshot.views] == ["v"]
        left = await hub.writes.leave_view("t", "v")
        assert left.receipt.revision == 5
        assert (await hub.writes.leave_view("t", "v")).duplicate
        await sock.got(2)  # the baseline and the increment of revision 5
        last = sock.frames()[-1]
        assert isinstance(last, Increment) and last.event.revision == 5
        assert not [f for f in sock.frames() if isinstance(f, ErrorFrame)]
    finally:
        await hub.stop()


async def test_a_stale_copy_found_by_a_range_read_is_reloaded(store: CountingStore) -> None:
    await long_transcript(store, "t", 300, batch=10)
    hub = await make_hub(store, live_messages=50)
    try:
        conn, sock = connect(hub, "c")
        await hub.subscriptions.subscribe(conn, "t", window=Window(tail=10))
        # Deleted and created again behind this hub's back (as another replica would).
        await store.delete("t")
        await long_transcript(store, "t", 40, batch=10)
        snapshot = await hub.reads.snapshot("t")
        assert (snapshot.epoch, snapshot.length) == ("e-t", 40)
        await sock.changes.until(
            lambda: len([f for f in sock.frames() if isinstance(f, Baseline)]) == 2,
            "the baseline of the copy reloaded",
        )
        baselines = [f for f in sock.frames() if isinstance(f, Baseline)]
        assert [b.snapshot.length for b in baselines] == [300, 40]
        assert baselines[-1].snapshot.start == 30  # the subscriber's window, again
    finally:
        await hub.stop()


def test_window_json_is_exactly_one_of_its_forms() -> None:
    for good in ({"tail": 5}, {"from": 0}, {"segment": "active"}, {"view": "a.b"}):
        assert msgspec.json.decode(msgspec.json.encode(good), type=Window) is not None
    for bad in (
        {},
        {"tail": 1, "from": 2},
        {"segment": "all"},
        {"tail": -1},
        {"view": ""},
        {"x": 1},
    ):
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(msgspec.json.encode(bad), type=Window)
    assert asyncio.iscoroutinefunction(Subscriptions.subscribe)


async def test_baselines_of_a_long_transcript_share_one_encoding_across_revisions(
    store: CountingStore,
) -> None:
    """Issue 24 item 3: each baseline of a transcript longer than
    ``live_messages`` was its own encoding of the whole (15 that were not
    read held 15 of a 60 MB transcript). Now the older messages are read and
    encoded once, and every later baseline, at any revision, shares those
    chunks and encodes only what was appended."""
    await long_transcript(store, "t", 3_000, batch=7)
    hub = await make_hub(store, live_messages=100)
    try:
        first, _ = connect(hub, "c1")
        await hub.subscriptions.subscribe(first, "t")
        reads = list(store.reads)
        chunks = hub.live["t"].cached_snapshot(0, False)
        assert chunks is not None
        for i in range(5):
            await hub.writes.append("t", [{"role": "user", "content": f"new {i}"}])
            queue, sock = connect(hub, f"c{i + 2}")
            await hub.subscriptions.subscribe(queue, "t")
            await sock.got(1)
            later = hub.live["t"].cached_snapshot(0, False)
            assert later is not None and later is not chunks
            # The same encoded chunks (the last may have grown).
            assert all(a is b for a, b in zip(later.chunks[:-1], chunks.chunks[:-1], strict=False))
            frames = sock.frames()
            assert isinstance(frames[0], Baseline) and frames[0].snapshot.length == 3_001 + i
        assert store.reads == reads
        assert hub.live_bytes() >= hub.live["t"].shared_bytes() > 3_000 * 10
    finally:
        await hub.stop()
