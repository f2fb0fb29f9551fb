"""The entity's Views, windows and usage (issue 18)."""

from __future__ import annotations

import msgspec
import pytest

from protocol.state import InvalidSnapshot, check_snapshot
from protocol.types import Segment, TranscriptRecord, View, ViewChanged, ViewLeft
from protocol.usage import UsageRange
from protocol.views import InvalidView
from server.model.changes import ChangeBuffer, RecordingObservation
from server.model.transcript import Transcript


def user(i: int) -> dict[str, str]:
    return {"role": "user", "content": f"m{i}"}


def test_a_view_change_is_a_change_that_touches_no_message_or_segment() -> None:
    buffer, observation = ChangeBuffer(), RecordingObservation()
    t = Transcript([user(i) for i in range(6)], changes=buffer, observation=observation)
    t.start_segment(4)
    before = (t.messages(), t.segments(), t.active_start)
    event = t.set_view("draft", 1, 5)
    assert event is not None and event.revision == 3 == t.revision
    assert event.change == ViewChanged("draft", 1, 5)
    assert (t.messages(), t.segments(), t.active_start) == before
    assert t.views() == (View("draft", 1, 5),)
    assert t.set_view("draft", 1, 5) is None  # the range it has: nothing changes
    assert t.revision == 3
    moved = t.set_view("draft", 2)
    assert moved is not None and t.view("draft") == View("draft", 2, None)
    left = t.leave_view("draft")
    assert left is not None and left.change == ViewLeft("draft", 2, None)
    assert t.leave_view("draft") is None  # none left: nothing changes
    assert (t.revision, t.views(), t.length) == (5, (), 6)
    assert [e.revision for e in buffer.take()] == [1, 2, 3, 4, 5]
    assert observation.records[-2:] == [
        TranscriptRecord(t.id, 4, "view-changed", 2, 6, moved.occurred_at, "draft"),
        TranscriptRecord(t.id, 5, "view-left", 2, 6, left.occurred_at, "draft"),
    ]
    # The snapshot counts View changes so that its revision is explained.
    snapshot = t.snapshot()
    assert snapshot.view_changes == 3
    check_snapshot(snapshot)
    assert Transcript.restore(snapshot).snapshot() == snapshot


@pytest.mark.parametrize(
    ("name", "start", "end"),
    [("v", 7, None), ("v", 3, 2), ("v", 0, 7), ("", 0, None), ("a b", 0, None), ("x" * 65, 0, 1)],
)
def test_a_view_outside_the_transcript_or_badly_named_changes_nothing(
    name: str, start: int, end: int | None
) -> None:
    t = Transcript([user(i) for i in range(6)])
    with pytest.raises(InvalidView):
        t.set_view(name, start, end)
    assert (t.revision, t.views()) == (1, ())


def test_a_snapshot_whose_revision_does_not_count_its_view_changes_is_refused() -> None:
    t = Transcript([user(i) for i in range(3)])
    t.set_view("v", 0)
    good = t.snapshot()
    with pytest.raises(InvalidSnapshot):
        check_snapshot(msgspec.structs.replace(good, view_changes=0))
    with pytest.raises(InvalidSnapshot):
        check_snapshot(msgspec.structs.replace(good, views=(View("v", 0, 9),)))


def test_a_window_holds_the_newest_messages_and_changes_as_a_whole_one() -> None:
    whole = Transcript([user(i) for i in range(10)])
    whole.start_segment(5)
    whole.set_view("v", 1, 3)
    t = Transcript.restore_window(whole.snapshot(start=7))
    assert (t.held_start, t.length, t.segments(), t.views()) == (
        7,
        10,
        (Segment(0, 10), Segment(5, None)),
        (View("v", 1, 3),),
    )
    with pytest.raises(IndexError):
        t.get(6)
    with pytest.raises(ValueError):
        t.messages(0, 8)
    for other in (t, whole):
        other.append([user(10)])
        other.start_segment(8)
        other.set_view("w", 9)
    assert t.snapshot(start=7) == whole.snapshot(start=7)
    assert t.forget_before(10) == 3
    assert (t.held_start, t.messages(10)) == (10, whole.messages(10))
    assert t.forget_before(4) == 0  # never grows back


def test_usage_counts_shared_messages_once() -> None:
    t = Transcript([user(i) for i in range(8)])
    t.start_segment(5)
    t.set_view("v", 2, 6)
    usage = t.usage()
    assert (usage.messages, usage.references) == (8, 8 + 3 + 4)
    assert t.usage(segments="active", views=[]).messages == 3
    assert t.usage([UsageRange("x", 0, 2), UsageRange("y", 1, 3)]).messages == 3
