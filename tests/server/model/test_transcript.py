"""server.model.transcript: the Transcript entity, its order of one change and restore."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest

from protocol.digest import genesis_digest, history_digest, next_digest
from protocol.errors import InvalidId, InvalidMessage
from protocol.limits import MAX_MESSAGE_BYTES, MAX_MESSAGES_PER_BATCH, MessageLimits
from protocol.pairs import group_adjacent_pairs
from protocol.types import (
    Message,
    MessageLocator,
    MessagesAppended,
    Origin,
    Segment,
    SegmentStarted,
    TextPart,
    TranscriptEvent,
    TranscriptSnapshot,
)
from protocol.validation import parse_messages
from server.model.changes import (
    ChangeBuffer,
    RecordingObservation,
    record_of,
)
from server.model.ranges import fixed_range
from server.model.transcript import (
    AppendedEntry,
    ChangeCaptureError,
    InvalidSegment,
    ObservationError,
    Transcript,
)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


class Boom(Exception):
    pass


class RefusingCapture:
    def capture(self, event: TranscriptEvent) -> None:
        raise Boom("capture")


class FailingObservation:
    def observe(self, record: Any) -> None:
        raise Boom("observe")


class RecordingPersistence:
    def __init__(self) -> None:
        self.events: list[TranscriptEvent] = []
        self.fail = False

    def commit(self, event: TranscriptEvent) -> None:
        if self.fail:
            raise Boom("store down")
        self.events.append(event)


class Ports:
    """Every port of one transcript, recording what it was given and when."""

    def __init__(self) -> None:
        self.buffer = ChangeBuffer()
        self.observation = RecordingObservation()
        self.persistence = RecordingPersistence()
        self.ticks = itertools.count(1000)

    def make(self, messages: Any = (), **kwargs: Any) -> Transcript:
        return Transcript(
            messages,
            changes=self.buffer,
            observation=self.observation,
            persistence=self.persistence,
            clock=lambda: next(self.ticks),
            **kwargs,
        )

    def counts(self) -> tuple[int, int, int]:
        return len(self.buffer), len(self.observation.records), len(self.persistence.events)


def state(t: Transcript) -> tuple[Any, ...]:
    return (t.revision, t.length, t.active_start, t.segments(), t.snapshot())


# --- creating -------------------------------------------------------------------------


def test_a_new_transcript_is_empty_at_revision_zero() -> None:
    ports = Ports()
    t = ports.make()
    assert len(t.id) == 32 and int(t.id, 16) >= 0
    assert len(t.epoch) == 32 and t.epoch != t.id
    assert (t.revision, t.length, len(t), t.active_start) == (0, 0, 0, 0)
    assert t.segments() == (Segment(0, None),)
    assert t.active() == ()
    assert ports.counts() == (0, 0, 0)


def test_ids_and_epochs_are_generated_fresh() -> None:
    a, b = Transcript(), Transcript()
    assert a.id != b.id and a.epoch != b.epoch


def test_an_explicit_id_and_epoch_are_kept() -> None:
    t = Transcript(id="chat:1.a_b-C", epoch="ep")
    assert (t.id, t.epoch) == ("chat:1.a_b-C", "ep")


@pytest.mark.parametrize("bad", ["", "has space", "x" * 129, "slash/no"])
def test_an_invalid_id_is_refused(bad: str) -> None:
    with pytest.raises(InvalidId):
        Transcript(id=bad)


def test_an_empty_epoch_is_refused() -> None:
    with pytest.raises(ValueError, match="epoch"):
        Transcript(epoch="")


def test_initial_messages_are_one_append_through_every_port() -> None:
    ports = Ports()
    t = ports.make([user("a"), assistant("b")], id="t")
    assert (t.revision, t.length) == (1, 2)
    (event,) = ports.buffer.take()
    assert event.revision == 1
    assert isinstance(event.change, MessagesAppended)
    assert event.change.start == 0 and len(event.change.messages) == 2
    assert ports.persistence.events == [event]
    assert ports.observation.records == [record_of(event)]


# --- appending -------------------------------------------------------------------------


def test_append_returns_entries_and_an_index_always_gives_the_same_object() -> None:
    t = Transcript(id="t")
    first = t.append([user("a"), assistant("b")])
    assert [(e.transcript_id, e.index) for e in first] == [("t", 0), ("t", 1)]
    assert all(isinstance(e, AppendedEntry) for e in first)
    assert first[0].message == Message("user", "a")
    second = t.append([user("c")])
    assert second[0].index == 2
    t.start_segment(1)
    for entry in first + second:
        assert t.get(entry.index) is entry.message
    assert t.revision == 3


def test_message_structs_are_kept_as_the_same_objects() -> None:
    t = Transcript()
    m1 = Message("user", (TextPart("look"),), metadata={"k": [1, 2]})
    m2 = Message("assistant", "ok", name="bot")
    entries = t.append((m1, m2))
    assert entries[0].message is m1 and t.get(1) is m2


def test_mixed_structs_and_dicts_and_any_iterable_are_accepted() -> None:
    t = Transcript()
    m = Message("system", "be brief")
    batch: list[Any] = [m, user("hi")]
    t.append(iter(batch))
    assert t.get(0) is m
    assert t.get(1) == Message("user", "hi")


def test_an_empty_append_changes_nothing() -> None:
    ports = Ports()
    t = ports.make([user("a")])
    before, counts = state(t), ports.counts()
    assert t.append([]) == []
    assert t.append(()) == []
    assert t.prepare_append([]) is None
    assert state(t) == before
    assert ports.counts() == counts


@pytest.mark.parametrize(
    ("bad", "path"),
    [
        ({"role": "robot", "content": "x"}, "messages[1].role"),
        ({"role": "user"}, "messages[1].content"),
        ({"role": "user", "content": [{"type": "video"}]}, "messages[1].content[0].type"),
        ({"role": "user", "content": "x", "colour": "red"}, "messages[1].colour"),
        ("just text", "messages[1]"),
        (Message("bogus", "x"), "messages[1]"),  # type: ignore[arg-type]
        (Message("user", 5), "messages[1]"),  # type: ignore[arg-type]
    ],
)
def test_an_invalid_message_anywhere_refuses_the_whole_batch(bad: Any, path: str) -> None:
    ports = Ports()
    t = ports.make([user("a")])
    before, counts = state(t), ports.counts()
    with pytest.raises(InvalidMessage) as caught:
        t.append([user("ok"), bad, user("also ok")])
    assert caught.value.path.startswith(path)
    assert state(t) == before
    assert ports.counts() == counts


def test_a_bare_string_or_object_is_not_a_batch() -> None:
    t = Transcript()
    for bad in ("hello", {"role": "user", "content": "x"}, Message("user", "x")):
        with pytest.raises(InvalidMessage, match="expected a list"):
            t.append(bad)  # type: ignore[arg-type]
    assert t.revision == 0


def test_a_message_over_the_size_limit_is_refused() -> None:
    t = Transcript()
    big = "x" * MAX_MESSAGE_BYTES
    with pytest.raises(InvalidMessage, match="bytes"):
        t.append([user(big)])
    with pytest.raises(InvalidMessage, match="bytes"):
        t.append([Message("user", big)])
    assert t.length == 0


def test_a_batch_over_the_count_limit_is_refused() -> None:
    t = Transcript()
    with pytest.raises(InvalidMessage, match="too many"):
        t.append([Message("user", "x")] * (MAX_MESSAGES_PER_BATCH + 1))
    assert t.length == 0


def test_a_validated_batch_is_taken_as_is_only_within_the_limits_it_was_checked_against(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hub's ``parse_messages`` batch is not checked again by an entity
    whose limits are no tighter; one checked against looser limits is."""
    import server.model.transcript as entity

    checked: list[Message] = []
    real = entity._check_struct

    def counting(message: Message, path: str, max_bytes: int) -> Message:
        checked.append(message)
        return real(message, path, max_bytes)

    monkeypatch.setattr(entity, "_check_struct", counting)
    t = Transcript(limits=MessageLimits(max_messages_per_batch=2, max_message_bytes=100))
    t.append(parse_messages([user("a"), user("b")], max_messages=2, max_message_bytes=50))
    assert (t.length, checked) == (2, [])
    loose = parse_messages([user("x" * 200)])  # checked against the default limits: 1 MiB
    with pytest.raises(InvalidMessage, match="bytes"):
        t.append(loose)
    assert checked == list(loose)
    with pytest.raises(InvalidMessage, match="too many"):
        t.append(parse_messages([user("a")] * 3))
    assert t.length == 2


def test_metadata_that_json_cannot_carry_is_refused() -> None:
    t = Transcript()
    with pytest.raises(InvalidMessage):
        t.append([Message("user", "x", metadata={"o": object()})])
    with pytest.raises(InvalidMessage):
        t.append([{"role": "user", "content": "x", "metadata": {"o": object()}}])
    assert t.length == 0


def test_an_event_carries_the_clock_the_origin_and_the_range() -> None:
    ports = Ports()
    t = ports.make(id="t", epoch="e")
    t.append([user("a")], origin=Origin("conn-1"))
    t.append([user("b"), user("c")])
    one, two = ports.buffer.take()
    assert one == TranscriptEvent(
        transcript_id="t",
        epoch="e",
        revision=1,
        occurred_at=1000,
        change=MessagesAppended(start=0, messages=(Message("user", "a"),)),
        origin=Origin("conn-1"),
        digest=next_digest(genesis_digest("t"), one.change),
    )
    assert two.origin is None and two.occurred_at == 1001
    assert isinstance(two.change, MessagesAppended) and two.change.start == 1
    assert two.digest == next_digest(one.digest or "", two.change) == t.digest


def test_every_change_carries_the_digest_that_follows_and_restores_keep_it() -> None:
    """Issue 29: appends (one at a time and prepared together), segment
    starts and View changes each advance the digest; a restore from the
    events or from a snapshot gives the same one."""
    ports = Ports()
    t = ports.make(id="t", epoch="e")
    assert t.digest == genesis_digest("t")
    t.append([user("a"), user("b")])
    for event in t.prepare_appends([([user("c")], None), ([user("d")], Origin("x"))]):
        t.apply(event)
    t.start_segment(2)
    t.set_view("v", 1)
    t.leave_view("v")
    events = ports.buffer.take()
    assert [e.revision for e in events] == [1, 2, 3, 4, 5, 6]
    assert t.digest == events[-1].digest == history_digest("t", [e.change for e in events])
    assert Transcript.restore(events).digest == t.digest
    assert Transcript.restore(t.snapshot()).digest == t.digest
    assert Transcript.restore_window(t.snapshot(start=3)).digest == t.digest
    assert t.snapshot().digest == t.digest


def test_the_default_clock_is_milliseconds_since_the_epoch() -> None:
    import time

    buffer = ChangeBuffer()
    before = int(time.time() * 1000)
    Transcript([user("a")], changes=buffer)
    after = int(time.time() * 1000)
    (event,) = buffer.take()
    assert before - 1 <= event.occurred_at <= after + 1


def test_an_origin_must_be_an_origin() -> None:
    t = Transcript()
    with pytest.raises(TypeError):
        t.append([user("a")], origin="conn")  # type: ignore[arg-type]
    assert t.revision == 0


# --- reading ---------------------------------------------------------------------------


def test_get_and_ref_refuse_indices_outside_the_messages() -> None:
    t = Transcript([user("a"), user("b")], id="t")
    assert t.ref(1) == MessageLocator(transcript_id="t", index=1)
    for bad in (-1, 2, 100):
        with pytest.raises(IndexError, match=f"message index {bad} is out of range"):
            t.get(bad)
        with pytest.raises(IndexError):
            t.ref(bad)
    with pytest.raises(IndexError, match="no messages"):
        Transcript().get(0)


def test_snapshot_of_the_whole_and_of_a_range() -> None:
    t = Transcript([user("a"), assistant("b"), user("c")], id="t", epoch="e")
    t.start_segment(2)
    whole = t.snapshot()
    assert whole == TranscriptSnapshot(
        transcript_id="t",
        epoch="e",
        revision=2,
        start=0,
        messages=(Message("user", "a"), Message("assistant", "b"), Message("user", "c")),
        active_start=2,
        segments=(Segment(0, 3), Segment(2, None)),
        digest=t.digest,
    )
    part = t.snapshot(2, start=1)
    assert (part.start, part.end, part.revision) == (1, 2, 2)
    assert part.messages[0] is t.get(1)
    assert part.segments == whole.segments and part.active_start == 2
    assert t.snapshot(0).messages == ()
    for end, start in ((4, 0), (1, 2), (None, -1)):
        with pytest.raises(ValueError, match="not within"):
            t.snapshot(end, start=start)


def test_messages_and_active_are_the_same_objects() -> None:
    t = Transcript([user("a"), user("b"), user("c")])
    t.start_segment(1)
    assert t.active() == (t.get(1), t.get(2))
    assert all(a is b for a, b in zip(t.messages(1), t.active(), strict=True))
    with pytest.raises(ValueError):
        t.messages(2, 1)


# --- segments ----------------------------------------------------------------------------


def test_segments_move_forward_and_old_ones_are_kept() -> None:
    ports = Ports()
    t = ports.make([user("a"), assistant("b")], id="t")
    event = t.start_segment()
    assert event.change == SegmentStarted(previous_start=0, start=2, end=2)
    assert t.active_start == 2 and t.active() == ()
    t.append([user("c"), assistant("d"), user("e")])
    t.start_segment(4)
    assert t.segments() == (Segment(0, 2), Segment(2, 5), Segment(4, None))
    assert t.active() == (t.get(4),)
    assert t.revision == 4
    assert ports.observation.records[-1] == record_of(ports.persistence.events[-1])
    assert ports.observation.records[-1].kind == "segment-started"
    assert (ports.observation.records[-1].start, ports.observation.records[-1].end) == (4, 5)


@pytest.mark.parametrize("start", [0, 1, 4, -1, "2", 2.0, True])
def test_an_invalid_segment_start_changes_nothing(start: Any) -> None:
    ports = Ports()
    t = ports.make([user("a"), user("b"), user("c")])
    t.start_segment(1)
    before, counts = state(t), ports.counts()
    with pytest.raises(InvalidSegment):
        t.start_segment(start)
    assert state(t) == before
    assert ports.counts() == counts


def test_a_segment_cannot_start_on_an_empty_or_already_started_tail() -> None:
    t = Transcript()
    with pytest.raises(InvalidSegment, match=r"active_start \(0\) < start <= length \(0\)"):
        t.start_segment()
    t.append([user("a")])
    t.start_segment()
    with pytest.raises(InvalidSegment):
        t.start_segment()
    assert t.revision == 2


# --- the order of one change and its failures ----------------------------------------------


def test_persistence_commits_before_memory_and_capture_and_observation_follow() -> None:
    seen: list[tuple[str, int, int]] = []
    t: Transcript

    class Persist:
        def commit(self, event: TranscriptEvent) -> None:
            seen.append(("commit", t.revision, t.length))

    class Capture:
        def capture(self, event: TranscriptEvent) -> None:
            seen.append(("capture", t.revision, t.length))

    class Observe:
        def observe(self, record: Any) -> None:
            seen.append(("observe", t.revision, t.length))

    t = Transcript(persistence=Persist(), changes=Capture(), observation=Observe())
    t.append([user("a"), user("b")])
    assert seen == [("commit", 0, 0), ("capture", 1, 2), ("observe", 1, 2)]


def test_a_failing_persistence_changes_nothing_and_propagates() -> None:
    ports = Ports()
    t = ports.make([user("a")])
    ports.buffer.take()
    ports.persistence.fail = True
    before, counts = state(t), ports.counts()
    with pytest.raises(Boom):
        t.append([user("b")])
    with pytest.raises(Boom):
        t.start_segment()
    assert state(t) == before
    assert ports.counts() == counts


def test_a_failing_capture_keeps_the_change_and_still_observes() -> None:
    observation = RecordingObservation()

    class Refusing:
        def capture(self, event: TranscriptEvent) -> None:
            raise Boom("queue closed")

    t = Transcript(id="t", changes=Refusing(), observation=observation)
    with pytest.raises(ChangeCaptureError) as caught:
        t.append([user("a")])
    assert (t.revision, t.length) == (1, 1)
    (event,) = caught.value.events
    assert event.revision == 1 and isinstance(caught.value.cause, Boom)
    assert observation.records == [record_of(event)]
    # The event the capture lost is enough to rebuild the transcript.
    assert Transcript.restore(caught.value.events).snapshot() == t.snapshot()


def test_a_failing_observation_keeps_the_change_and_the_capture() -> None:
    buffer = ChangeBuffer()

    class Failing:
        def __init__(self) -> None:
            self.fail = False

        def observe(self, record: Any) -> None:
            if self.fail:
                raise Boom("metrics down")

    observation = Failing()
    t = Transcript([user("a")], changes=buffer, observation=observation)
    buffer.take()
    observation.fail = True
    with pytest.raises(ObservationError) as caught:
        t.start_segment()
    assert t.revision == 2 and t.active_start == 1
    assert [e.revision for e in buffer.take()] == [2]
    (record,) = caught.value.records
    assert (record.revision, record.kind) == (2, "segment-started")


def test_capture_and_observation_failing_together_are_raised_as_a_group() -> None:
    t = Transcript(changes=RefusingCapture(), observation=FailingObservation())
    with pytest.raises(ExceptionGroup) as caught:
        t.append([user("a")])
    capture_error, observation_error = caught.value.exceptions
    assert isinstance(capture_error, ChangeCaptureError)
    assert isinstance(observation_error, ObservationError)
    assert t.revision == 1


# --- the two phases ---------------------------------------------------------------------------


def test_prepare_changes_nothing_and_apply_does_not_persist() -> None:
    ports = Ports()
    t = ports.make([user("a")], id="t")
    ports.buffer.take()
    before, counts = state(t), ports.counts()
    event = t.prepare_append([user("b")], origin=Origin("c"))
    segment = t.prepare_segment(1)
    assert event is not None and event.revision == 2 and segment.revision == 2
    assert state(t) == before and ports.counts() == counts
    t.apply(event)
    assert (t.revision, t.length) == (2, 2)
    assert ports.buffer.take() == (event,)
    assert len(ports.persistence.events) == 1  # only the initial append


def test_apply_refuses_an_event_that_is_not_the_next_change() -> None:
    t = Transcript([user("a")], id="t", epoch="e")
    stale = t.prepare_append([user("b")])
    assert stale is not None
    t.append([user("c")])
    before = state(t)
    wrong_id = msgspec.structs.replace(stale, transcript_id="u", revision=3)
    wrong_epoch = msgspec.structs.replace(stale, epoch="other", revision=3)
    wrong_start = msgspec.structs.replace(stale, revision=3)  # still starts at index 1
    bad_segment = msgspec.structs.replace(
        stale, revision=3, change=SegmentStarted(previous_start=1, start=2, end=2)
    )
    for bad, reason in (
        (stale, "revision 2"),
        (wrong_id, "transcript 'u'"),
        (wrong_epoch, "epoch 'other'"),
        (wrong_start, "append at index 1"),
        (bad_segment, "segment start"),
    ):
        with pytest.raises(ValueError, match=reason):
            t.apply(bad)
        assert state(t) == before


def test_prepare_segment_refuses_like_start_segment() -> None:
    t = Transcript([user("a")])
    with pytest.raises(InvalidSegment):
        t.prepare_segment(2)


# --- append_from ------------------------------------------------------------------------------


def test_append_from_reuses_the_same_objects_of_a_fixed_range() -> None:
    source = Transcript([user("a"), assistant("b"), user("c")], id="src")
    reader = fixed_range(source, 1)
    source.append([user("later")])
    buffer = ChangeBuffer()
    target = Transcript([user("x")], id="dst", changes=buffer)
    entries = target.append_from(reader, origin=Origin("copy"))
    assert [(e.transcript_id, e.index) for e in entries] == [("dst", 1), ("dst", 2)]
    assert target.get(1) is source.get(1) and target.get(2) is source.get(2)
    assert target.length == 3  # "later" was appended after the range was fixed
    (_, event) = buffer.take()
    assert event.origin == Origin("copy")
    assert target.append_from(fixed_range(source, 2, 2)) == []
    assert target.revision == 2


def test_append_from_its_own_range() -> None:
    t = Transcript([user("a"), user("b")])
    t.append_from(fixed_range(t))
    assert t.length == 4 and t.get(2) is t.get(0) and t.get(3) is t.get(1)


# --- restore -------------------------------------------------------------------------------------


def _busy_transcript(ports: Ports) -> Transcript:
    t = ports.make([user("a"), assistant("b")], id="t", epoch="e")
    t.start_segment(1)
    t.append([user("c")], origin=Origin("x"))
    t.append_from(fixed_range(t, 0, 2))
    t.start_segment()
    return t


def test_restore_from_the_event_log_gives_an_equal_transcript() -> None:
    ports = Ports()
    t = _busy_transcript(ports)
    events = ports.buffer.take()
    assert len(events) == t.revision == 5
    # The events survive the store's encoding: decode them from JSON.
    decoded = msgspec.json.decode(msgspec.json.encode(events), type=list[TranscriptEvent])
    restored = Transcript.restore(iter(decoded))
    assert restored.snapshot() == t.snapshot()
    assert (restored.id, restored.epoch, restored.revision) == ("t", "e", 5)
    assert restored.segments() == t.segments()
    assert restored.active_start == t.active_start


def test_restore_calls_no_port_and_later_changes_use_them() -> None:
    ports = Ports()
    _busy_transcript(ports)
    events = ports.buffer.take()
    later = Ports()
    restored = Transcript.restore(
        events,
        changes=later.buffer,
        observation=later.observation,
        persistence=later.persistence,
        clock=lambda: 7,
    )
    assert later.counts() == (0, 0, 0)
    restored.append([user("d")])
    (event,) = later.buffer.take()
    assert (event.revision, event.occurred_at, event.epoch) == (6, 7, "e")
    assert len(later.persistence.events) == 1 and len(later.observation.records) == 1


def test_restore_from_a_whole_snapshot_gives_an_equal_transcript() -> None:
    t = _busy_transcript(Ports())
    snapshot = t.snapshot()
    restored = Transcript.restore(snapshot)
    assert restored.snapshot() == snapshot
    assert restored.get(0) is snapshot.messages[0]
    restored.append([user("d")])
    restored.start_segment(6)
    assert restored.revision == 7


def test_restore_of_an_empty_log_uses_the_keywords() -> None:
    t = Transcript.restore([], id="t", epoch="e")
    assert (t.id, t.epoch, t.revision, t.length) == ("t", "e", 0, 0)
    assert len(Transcript.restore([]).epoch) == 32


def test_restore_refuses_gaps_and_mismatches() -> None:
    ports = Ports()
    _busy_transcript(ports)
    events = list(ports.buffer.take())
    with pytest.raises(ValueError, match=r"events\[1\].*revision 3"):
        Transcript.restore([events[0], events[2]])
    with pytest.raises(ValueError, match="revision 2"):
        Transcript.restore(events[1:])
    with pytest.raises(ValueError, match="id 'other'"):
        Transcript.restore(events, id="other")
    with pytest.raises(ValueError, match="epoch 'other'"):
        Transcript.restore(events, epoch="other")
    foreign = msgspec.structs.replace(events[1], epoch="x")
    with pytest.raises(ValueError, match="epoch 'x'"):
        Transcript.restore([events[0], foreign])


def test_restore_refuses_partial_or_inconsistent_snapshots() -> None:
    t = _busy_transcript(Ports())
    with pytest.raises(ValueError, match="partial"):
        Transcript.restore(t.snapshot(start=1))
    whole = t.snapshot()
    for bad in (
        msgspec.structs.replace(whole, segments=()),
        msgspec.structs.replace(whole, segments=(Segment(1, None),), active_start=1),
        msgspec.structs.replace(whole, active_start=0),
        msgspec.structs.replace(whole, revision=0),
        msgspec.structs.replace(whole, segments=(Segment(0, 2), Segment(3, 4), Segment(4, None))),
    ):
        with pytest.raises(ValueError, match="inconsistent snapshot"):
            Transcript.restore(bad)
    with pytest.raises(ValueError, match="id 'u'"):
        Transcript.restore(whole, id="u")


# --- the seed's details (issue 12) --------------------------------------------------------


def test_a_stored_message_cannot_be_changed_through_its_event() -> None:
    buffer = ChangeBuffer()
    t = Transcript(changes=buffer)
    t.append(
        [
            {
                "role": "assistant",
                "content": "calling",
                "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
                "metadata": {"k": [1, {"x": 2}]},
            }
        ]
    )
    (event,) = buffer.take()
    assert isinstance(event.change, MessagesAppended)
    message = event.change.messages[0]
    assert message is t.get(0)
    assert message.metadata is not None and message.tool_calls is not None
    with pytest.raises(TypeError):
        message.metadata["k"] = "changed"  # type: ignore[index]
    with pytest.raises((TypeError, AttributeError)):
        message.metadata["k"].append(3)
    with pytest.raises(TypeError):
        message.metadata["k"][1]["x"] = 3
    with pytest.raises(TypeError):
        message.tool_calls[0]["id"] = "c2"  # type: ignore[index]
    with pytest.raises(TypeError):
        message.tool_calls[0]["function"]["name"] = "g"
    assert t.get(0).metadata == {"k": [1, {"x": 2}]}
    assert t.get(0).tool_calls == ({"id": "c1", "function": {"name": "f", "arguments": "{}"}},)
    # Frozen all the way down means hashable, and equal events hash alike.
    assert len({event, msgspec.json.decode(msgspec.json.encode(event), type=TranscriptEvent)}) == 1


def test_a_message_built_in_python_is_frozen_too() -> None:
    parts = [TextPart("a"), TextPart("b")]
    message = Message(role="user", content=parts, metadata={"k": {"x": [1]}})  # type: ignore[arg-type]
    t = Transcript([message])
    stored = t.get(0)
    parts.append(TextPart("c"))
    assert stored.content == (TextPart("a"), TextPart("b"))
    assert isinstance(stored.content, tuple)
    with pytest.raises(TypeError):
        stored.metadata["k"]["x"] = 2  # type: ignore[index]
    hash(stored)


def test_a_partial_snapshot_says_so_and_restore_refuses_it() -> None:
    t = Transcript([user(f"m{i}") for i in range(4)])
    t.start_segment(2)
    t.append([user("m4")])
    head = t.snapshot(2)
    tail = t.snapshot(start=3)
    for part in (head, tail):
        assert part.length == 5 and part.revision == 3 and not part.whole
        with pytest.raises(ValueError, match="partial"):
            Transcript.restore(part)
    whole = t.snapshot()
    assert whole.length == 5 and whole.whole
    restored = Transcript.restore(whole)
    assert restored.snapshot() == whole
    # The fork of the issue: a restored copy's next append lands where the real one's does.
    # (occurred_at aside: the two are made a clock tick apart now and then.)
    mine, theirs = restored.prepare_append([user("m5")]), t.prepare_append([user("m5")])
    assert msgspec.structs.replace(mine, occurred_at=0) == msgspec.structs.replace(
        theirs, occurred_at=0
    )


def test_capture_and_observation_failing_together_are_catchable_as_capture_errors() -> None:
    t = Transcript(changes=RefusingCapture(), observation=FailingObservation())
    with pytest.raises(ChangeCaptureError) as caught:
        t.append([user("a")])
    assert isinstance(caught.value, ExceptionGroup)
    assert [e.revision for e in caught.value.events] == [1]
    assert isinstance(caught.value.cause, Boom)


@pytest.mark.parametrize("observe", [False, True])
def test_a_constructor_whose_capture_fails_hands_over_the_transcript(observe: bool) -> None:
    with pytest.raises(ChangeCaptureError) as caught:
        Transcript(
            [user("a")],
            id="made",
            changes=RefusingCapture(),
            observation=FailingObservation() if observe else None,
        )
    t = caught.value.transcript
    assert isinstance(t, Transcript)
    assert (t.id, t.revision, t.get(0).content) == ("made", 1, "a")


def test_append_from_keeps_the_batch_limit() -> None:
    source = Transcript([user("m")] * MAX_MESSAGES_PER_BATCH)
    source.append([user("one more")])
    target = Transcript()
    with pytest.raises(InvalidMessage, match="too many messages"):
        target.append_from(fixed_range(source))
    assert (target.revision, target.length) == (0, 0)
    target.append_from(fixed_range(source, 1))
    assert target.length == MAX_MESSAGES_PER_BATCH


def test_a_boolean_is_not_an_index() -> None:
    t = Transcript([user("a"), user("b")])
    with pytest.raises(TypeError):
        t.get(True)
    with pytest.raises(TypeError):
        t.ref(False)
    with pytest.raises((TypeError, IndexError)):
        fixed_range(t).read(True)


def test_appended_entries_group_into_pairs() -> None:
    t = Transcript([user("first")])
    entries = t.append([user("q"), assistant("a")])
    groups = group_adjacent_pairs(entries)
    assert groups == (((1, t.get(1)), (2, t.get(2))),)
    assert groups[0][1][1] is t.get(2)
    other = Transcript([user("x")])
    with pytest.raises(ValueError, match="one transcript"):
        group_adjacent_pairs([*entries, *other.append([assistant("y")])])
