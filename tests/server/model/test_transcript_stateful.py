"""A hypothesis state machine of the Transcript entity.

Rules: appends (valid and invalid batches, dicts and structs, from another
range), segment starts (valid and invalid), with persistence, capture and
observation failures injected at random. Invariants: an index always returns
the same message object; revision == number of accepted changes; replaying the
captured events (and the persisted ones) gives an equal transcript; invalid
input changes nothing; a fixed range never widens.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from protocol.errors import InvalidMessage
from protocol.types import (
    Message,
    Segment,
    TextPart,
    TranscriptEvent,
    TranscriptRecord,
    TranscriptSnapshot,
)
from server.model.changes import ChangeBuffer, record_of
from server.model.ranges import TranscriptRangeReader, fixed_range
from server.model.transcript import ChangeCaptureError, InvalidSegment, ObservationError, Transcript


class Injected(Exception):
    """A failure a test port raised on purpose."""


class FlakyPersistence:
    def __init__(self) -> None:
        self.fail = False
        self.events: list[TranscriptEvent] = []

    def commit(self, event: TranscriptEvent) -> None:
        if self.fail:
            raise Injected("persistence")
        self.events.append(event)


class FlakyCapture:
    def __init__(self) -> None:
        self.fail = False
        self.buffer = ChangeBuffer()

    def capture(self, event: TranscriptEvent) -> None:
        if self.fail:
            raise Injected("capture")
        self.buffer.capture(event)


class FlakyObservation:
    def __init__(self) -> None:
        self.fail = False
        self.records: list[TranscriptRecord] = []

    def observe(self, record: TranscriptRecord) -> None:
        if self.fail:
            raise Injected("observation")
        self.records.append(record)


texts = st.text(max_size=8)
roles = st.sampled_from(["user", "assistant", "system", "tool", "context"])
message_structs = st.builds(
    Message,
    role=roles,
    content=texts | st.lists(st.builds(TextPart, text=texts), max_size=2).map(tuple),
    name=st.none() | texts,
)
#: A valid message either as a struct or in its plain-data form.
valid_messages: st.SearchStrategy[Any] = message_structs | message_structs.map(msgspec.to_builtins)
invalid_messages: st.SearchStrategy[Any] = st.sampled_from(
    [
        {"role": "robot", "content": "x"},
        {"role": "user"},
        {"role": "user", "content": [{"type": "video"}]},
        {"role": "user", "content": "x", "extra": 1},
        {"role": "user", "content": 5},
        "not a message",
        None,
        Message("bogus", "x"),  # type: ignore[arg-type]
    ]
)
#: Which ports fail during one change: (persistence, capture, observation).
failures = st.tuples(st.booleans(), st.booleans(), st.booleans()) | st.just((False, False, False))


class TranscriptMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.persistence = FlakyPersistence()
        self.capture = FlakyCapture()
        self.observation = FlakyObservation()
        self.clock = iter(range(10**9))
        self.transcript = Transcript(
            id="t",
            changes=self.capture,
            observation=self.observation,
            persistence=self.persistence,
            clock=lambda: next(self.clock),
        )
        # The model: what the transcript must hold.
        self.messages: list[Message] = []
        self.accepted = 0
        self.active_start = 0
        self.closed: list[Segment] = []
        # Every accepted event, from the buffer or from a ChangeCaptureError.
        self.captured: list[TranscriptEvent] = []
        self.observed = 0
        self.ranges: list[tuple[TranscriptRangeReader, tuple[tuple[int, Message], ...]]] = []

    # --- helpers -----------------------------------------------------------------

    def _state(self) -> tuple[Any, ...]:
        t = self.transcript
        return (
            t.revision,
            t.length,
            t.active_start,
            t.segments(),
            t.snapshot(),
            len(self.capture.buffer),
            len(self.persistence.events),
            len(self.observation.records),
        )

    def _change(self, action: Any, fail: tuple[bool, bool, bool]) -> Any:
        """Run one valid change with the given failures injected.

        Returns the action's result, or None when nothing was accepted.
        """
        fail_persist, fail_capture, fail_observe = fail
        self.persistence.fail = fail_persist
        self.capture.fail = fail_capture
        self.observation.fail = fail_observe
        before = self._state()
        result = None
        try:
            result = action()
        except Injected:
            assert fail_persist
            assert self._state() == before, "a failed commit changed something"
            return None
        except ExceptionGroup as group:
            # Both failed: a group that is a ChangeCaptureError too.
            assert fail_capture and fail_observe and not fail_persist
            assert isinstance(group, ChangeCaptureError)
            capture_error, observation_error = group.exceptions
            assert isinstance(capture_error, ChangeCaptureError)
            assert isinstance(observation_error, ObservationError)
            assert group.events == capture_error.events
            self.captured.extend(capture_error.events)
        except ChangeCaptureError as error:
            assert fail_capture and not fail_observe and not fail_persist
            self.captured.extend(error.events)
        except ObservationError:
            assert fail_observe and not fail_capture and not fail_persist
        else:
            assert not (fail_persist or fail_capture or fail_observe)
        finally:
            self.persistence.fail = self.capture.fail = self.observation.fail = False
        self.accepted += 1
        if not fail_observe:
            self.observed += 1
        return result

    def _expect_refused(self, action: Any, error: type[Exception]) -> None:
        before = self._state()
        try:
            action()
        except error:
            pass
        else:
            raise AssertionError(f"expected {error.__name__}")
        assert self._state() == before, "invalid input changed something"

    # --- rules -------------------------------------------------------------------------

    @rule(batch=st.lists(valid_messages, min_size=1, max_size=4), fail=failures)
    def append_valid(self, batch: list[Any], fail: tuple[bool, bool, bool]) -> None:
        start = self.transcript.length
        entries = self._change(lambda: self.transcript.append(batch), fail)
        if self.transcript.length == start:
            return
        added = [self.transcript.get(i) for i in range(start, self.transcript.length)]
        assert len(added) == len(batch)
        for item, message in zip(batch, added, strict=True):
            if isinstance(item, Message):
                assert message is item
            else:
                assert msgspec.to_builtins(message) == item
        if entries is not None:
            assert [e.message for e in entries] == added
        self.messages.extend(added)

    @rule()
    def append_empty(self) -> None:
        before = self._state()
        assert self.transcript.append([]) == []
        assert self._state() == before

    @rule(
        batch=st.lists(valid_messages, max_size=3),
        bad=invalid_messages,
        where=st.integers(min_value=0, max_value=3),
    )
    def append_invalid(self, batch: list[Any], bad: Any, where: int) -> None:
        items = [*batch[:where], bad, *batch[where:]]
        self._expect_refused(lambda: self.transcript.append(items), InvalidMessage)

    @precondition(lambda self: self.transcript.length > 0)
    @rule(data=st.data(), fail=failures)
    def append_from_a_range(self, data: st.DataObject, fail: tuple[bool, bool, bool]) -> None:
        length = self.transcript.length
        start = data.draw(st.integers(min_value=0, max_value=length - 1))
        end = data.draw(st.integers(min_value=start + 1, max_value=length))
        reader = fixed_range(self.transcript, start, end)
        before = self.transcript.length
        self._change(lambda: self.transcript.append_from(reader), fail)
        if self.transcript.length > before:
            for k, (_, message) in enumerate(reader.entries()):
                assert self.transcript.get(before + k) is message
            self.messages.extend(message for _, message in reader.entries())

    @rule(start=st.none() | st.integers(min_value=-1, max_value=30), fail=failures)
    def start_segment(self, start: int | None, fail: tuple[bool, bool, bool]) -> None:
        length = self.transcript.length
        target = length if start is None else start
        if not self.active_start < target <= length:
            self._expect_refused(lambda: self.transcript.start_segment(start), InvalidSegment)
            return
        revision = self.transcript.revision
        self._change(lambda: self.transcript.start_segment(start), fail)
        if self.transcript.revision > revision:
            self.closed.append(Segment(self.active_start, length))
            self.active_start = target

    @rule(data=st.data())
    def fix_a_range(self, data: st.DataObject) -> None:
        length = self.transcript.length
        start = data.draw(st.integers(min_value=0, max_value=length))
        end = data.draw(st.integers(min_value=start, max_value=length))
        reader = fixed_range(self.transcript, start, end)
        if len(self.ranges) < 5:
            self.ranges.append((reader, reader.entries()))

    @rule()
    def take_captured(self) -> None:
        self.captured.extend(self.capture.buffer.take())

    # --- invariants -----------------------------------------------------------------------

    @invariant()
    def indices_always_give_the_same_objects(self) -> None:
        t = self.transcript
        assert t.length == len(self.messages)
        for i, message in enumerate(self.messages):
            assert t.get(i) is message

    @invariant()
    def revision_counts_the_accepted_changes(self) -> None:
        assert self.transcript.revision == self.accepted
        assert len(self.persistence.events) == self.accepted
        assert len(self.observation.records) == self.observed

    @invariant()
    def segments_follow_the_model(self) -> None:
        t = self.transcript
        assert t.active_start == self.active_start
        assert t.segments() == (*self.closed, Segment(self.active_start, None))
        assert t.active() == tuple(self.messages[self.active_start :])

    @invariant()
    def replaying_the_events_gives_an_equal_transcript(self) -> None:
        t = self.transcript
        events = [*self.captured, *self.capture.buffer.take()]
        self.captured = events
        assert [e.revision for e in events] == list(range(1, t.revision + 1))
        snapshot = t.snapshot()
        # A store keeps id and epoch in the creation record; an empty log needs them.
        assert Transcript.restore(events, id=t.id, epoch=t.epoch).snapshot() == snapshot
        assert (
            Transcript.restore(self.persistence.events, id=t.id, epoch=t.epoch).snapshot()
            == snapshot
        )
        # The persisted form: events and snapshots survive JSON.
        encoded = msgspec.json.encode(events)
        decoded = msgspec.json.decode(encoded, type=list[TranscriptEvent])
        assert Transcript.restore(decoded, id=t.id, epoch=t.epoch).snapshot() == snapshot
        again = msgspec.json.decode(msgspec.json.encode(snapshot), type=TranscriptSnapshot)
        assert Transcript.restore(again).snapshot() == snapshot
        # Observation saw exactly the changes it did not fail on, in order, as records.
        observed = {r.revision for r in self.observation.records}
        assert self.observation.records == [record_of(e) for e in events if e.revision in observed]

    @invariant()
    def fixed_ranges_never_widen(self) -> None:
        for reader, entries in self.ranges:
            assert len(reader) == len(entries)
            now = reader.entries()
            assert len(now) == len(entries)
            assert all(a is b and i == j for (i, a), (j, b) in zip(now, entries, strict=True))


TranscriptMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None
)
test_transcript_machine = TranscriptMachine.TestCase
