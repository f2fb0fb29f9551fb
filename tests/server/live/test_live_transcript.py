"""What a subscribe gets (``plan_subscribe``, ``splice``): pure, no awaits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.types import Message, MessagesAppended, TranscriptEvent
from server.live.frames import EncodedEvent
from server.live.live_transcript import (
    CatchUpFirst,
    FetchThenSplice,
    SendBaseline,
    SendFromWindow,
    plan_subscribe,
    splice,
)


def event(revision: int) -> TranscriptEvent:
    return TranscriptEvent(
        "t", "e", revision, 0, MessagesAppended(revision - 1, (Message("user", str(revision)),))
    )


def window(first: int, last: int) -> list[EncodedEvent]:
    return [EncodedEvent(event(r)) for r in range(first, last + 1)]


def plan(
    from_revision: int | None,
    epoch: str | None = "e",
    *,
    current: int = 10,
    window_start: int | None = 6,
    caught_up: bool = False,
    room: int | None = None,
) -> object:
    return plan_subscribe(
        from_revision,
        epoch,
        current_epoch="e",
        current_revision=current,
        window_start=window_start,
        max_resume_events=100,
        caught_up=caught_up,
        room=room,
    )


def test_the_plans() -> None:
    assert plan(None) == SendBaseline("no fromRevision")
    assert plan(9, "other") == SendBaseline("another epoch")
    assert plan(9, None) == SendBaseline("another epoch")
    assert plan(10) == SendFromWindow()  # current: nothing to send
    assert plan(5) == SendFromWindow()  # the window starts at 6 = 5 + 1
    assert plan(4) == FetchThenSplice(after=4, limit=100)
    assert plan(4, window_start=None) == FetchThenSplice(after=4, limit=100)
    assert plan(10, window_start=None) == SendFromWindow()
    assert plan(11) == CatchUpFirst()  # another replica served more
    assert plan(11, caught_up=True) == SendBaseline("ahead of the store")
    assert plan(0, current=500, window_start=450) == SendBaseline("too far behind")


def test_a_resume_the_queue_cannot_hold_is_a_baseline_before_anything_is_read() -> None:
    """Issue 14: resumes fetched thousands of events, then sent a baseline anyway."""
    assert plan(4, room=6) == FetchThenSplice(after=4, limit=100)
    assert plan(4, room=5) == SendBaseline("more than the queue holds")
    assert plan(7, room=3) == SendFromWindow()
    assert plan(6, room=3) == SendBaseline("more than the queue holds")
    assert plan(10, room=0) == SendFromWindow()  # current: nothing to hold


def test_splice_joins_the_store_and_the_window_without_a_gap_or_a_repeat() -> None:
    older = [event(r) for r in range(5, 9)]  # 5..8, overlapping the window
    held = window(7, 10)
    items = splice(4, older, held, 10)
    assert items is not None
    assert [i.revision for i in items] == [5, 6, 7, 8, 9, 10]
    # The window's items are shared with the other subscribers, not encoded again.
    assert items[-2] is held[-2] and items[-1] is held[-1]


def test_splice_gives_up_when_the_sources_do_not_meet() -> None:
    assert splice(4, [event(5), event(6)], window(8, 10), 10) is None
    assert splice(4, [], window(6, 10), 10) is None
    assert splice(10, [], [], 10) == []


@given(st.integers(0, 20), st.integers(0, 20), st.integers(1, 20), st.integers(0, 20))
def test_splice_is_either_the_exact_range_or_nothing(
    from_revision: int, older_count: int, window_first: int, window_len: int
) -> None:
    current = max(from_revision, window_first + window_len - 1)
    older = [event(r) for r in range(from_revision + 1, from_revision + 1 + older_count)]
    items = splice(
        from_revision, older, window(window_first, window_first + window_len - 1), current
    )
    if items is not None:
        assert [i.revision for i in items] == list(range(from_revision + 1, current + 1))
