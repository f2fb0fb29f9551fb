"""protocol.state: the one TranscriptState, its apply, and the snapshot invariants."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings

from protocol.state import (
    InvalidChange,
    InvalidSnapshot,
    TranscriptState,
    check_baseline,
    check_snapshot,
)
from protocol.types import (
    Message,
    MessagesAppended,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
)
from tests.strategies import snapshots

T, E = "t1", "e1"


def _append(state: TranscriptState, count: int = 1) -> TranscriptEvent:
    messages = tuple(Message("user", f"m{state.length + i}") for i in range(count))
    change = MessagesAppended(state.length, messages)
    return TranscriptEvent(T, E, state.revision + 1, 0, change)


def _segment(state: TranscriptState, start: int) -> TranscriptEvent:
    change = SegmentStarted(state.active_start, start, state.length)
    return TranscriptEvent(T, E, state.revision + 1, 0, change)


@settings(max_examples=60, deadline=None)
@given(snapshots())
def test_every_possible_snapshot_keeps_the_invariants_and_round_trips(
    snapshot: TranscriptSnapshot,
) -> None:
    check_baseline(snapshot)
    assert TranscriptState.from_snapshot(snapshot).snapshot() == snapshot
    headless = TranscriptState.from_snapshot(snapshot, keep_messages=False)
    assert (headless.revision, headless.length, headless.segments()) == (
        snapshot.revision,
        snapshot.length,
        snapshot.segments,
    )


def test_a_window_holds_its_messages_and_continues() -> None:
    state = TranscriptState(T, E)
    state.apply(_append(state, 5))
    state.apply(_segment(state, 3))
    window = TranscriptState.from_snapshot(state.snapshot(3))
    assert (window.start, window.length, window.whole) == (3, 5, False)
    with pytest.raises(IndexError, match=r"indices 3\.\.4"):
        window.get(2)
    event = _append(window, 2)
    window.apply(event)
    state.apply(event)
    assert window.snapshot() == state.snapshot(3)
    assert window.get(6) is state.get(6)


def test_a_head_range_is_a_snapshot_but_not_a_baseline() -> None:
    state = TranscriptState(T, E)
    state.apply(_append(state, 4))
    head = state.snapshot(0, 2)
    check_snapshot(head)
    with pytest.raises(InvalidSnapshot, match="reach the length"):
        TranscriptState.from_snapshot(head)


def test_apply_changes_nothing_when_the_event_does_not_fit() -> None:
    state = TranscriptState(T, E)
    state.apply(_append(state, 2))
    before = state.snapshot()
    bad = [
        msgspec.structs.replace(_append(state), revision=5),
        msgspec.structs.replace(_append(state), epoch="e2"),
        TranscriptEvent(T, E, 2, 0, MessagesAppended(1, (Message("user", "x"),))),
        TranscriptEvent(T, E, 2, 0, MessagesAppended(2, ())),
        TranscriptEvent(T, E, 2, 0, SegmentStarted(0, 3, 2)),
        TranscriptEvent(T, E, 2, 0, SegmentStarted(1, 2, 2)),
        TranscriptEvent(T, E, 2, 0, SegmentStarted(0, 1, 1)),
    ]
    for event in bad:
        with pytest.raises(InvalidChange):
            state.apply(event)
        assert state.snapshot() == before


def test_the_revision_must_count_the_changes() -> None:
    segments = (Segment(0, 1), Segment(1, None))
    whole = TranscriptSnapshot(T, E, 2, 0, (Message("user", "a"),), 1, segments)
    check_snapshot(whole)  # one append and one segment start: revision 2 at least, 2 at most
    with pytest.raises(InvalidSnapshot, match=r"within 2\.\.2"):
        check_snapshot(msgspec.structs.replace(whole, revision=3))
