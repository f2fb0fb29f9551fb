"""Draft frames in one connection's outbound queue (a fake raw transport):
written at once while the socket takes data; while it does not, one slot per
draft written as the draft's text when it goes out; closes behind their
increment, in the same message; never counted against the bounds, never a
reason to lag, dropped with the increments of a lagged transcript."""

from __future__ import annotations

import pytest

from protocol.wire import Draft, DraftFrame, ErrorFrame, Increment
from server.live.drafts import DraftRules, Drafts
from server.live.frames import EncodedDraft
from server.tuning import CONTROL_FRAME_SLACK
from tests.server.live.test_outbound import FakeRaw, event, make_queue, sent_all


def registry(tid: str = "t") -> Drafts:
    return Drafts(tid, DraftRules(max_open=16, max_bytes=1 << 20, ttl=30.0, max_closed=100_000))


def delta(d: Drafts, draft_id: str, text: str) -> EncodedDraft:
    update = d.write(Draft(d.transcript_id, draft_id, delta=text), now=0).update
    assert update is not None
    return update


def drafts_of(raw: FakeRaw) -> list[tuple[str, int, str | None, str | None, str]]:
    return [
        (f.draft_id, f.n, f.delta, f.text, f.state)
        for f in raw.frames()
        if isinstance(f, DraftFrame)
    ]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
async def test_draft_updates_to_a_connection_that_keeps_up_are_written_at_once(
    binary: bool,
) -> None:
    raw = FakeRaw()
    queue = make_queue(raw, binary=binary)
    d = registry()
    queue.push_draft(delta(d, "a", "x"))  # not subscribed: nothing
    assert raw.writes == 0
    queue.push_resume("t", 0, [])
    queue.push_draft(delta(d, "a", "y"))
    queue.push_draft(delta(d, "a", "z"))
    assert raw.writes == 2  # in the pusher's own step
    assert drafts_of(raw) == [("a", 2, "y", None, "open"), ("a", 3, "z", None, "open")]
    await queue.stop()


async def test_a_paused_connection_keeps_one_slot_per_draft_written_as_its_text() -> None:
    raw = FakeRaw()
    queue = make_queue(raw, frames=5)
    d = registry()
    queue.push_resume("t", 0, [])
    queue.push_increments([event(1)])
    raw.paused = True
    queue.push_increments([event(2)])
    for i in range(100):
        queue.push_draft(delta(d, "a", f"{i} "))
        queue.push_draft(delta(d, "b", "."))
    # Two slots, counted apart: the queue still has room for 4 increments.
    assert queue.queued[0] == 3
    assert queue.has_room(4, 100) and not queue.has_room(5, 100)
    for r in range(3, 7):
        queue.push_increments([event(r)])
    assert queue.follows("t")  # drafts lagged nothing
    queue.push_draft(delta(d, "a", "end"))  # taken into its slot still
    raw.resume()
    await sent_all(queue)
    assert drafts_of(raw) == [
        ("a", 101, None, "".join(f"{i} " for i in range(100)) + "end", "open"),
        ("b", 100, None, "." * 100, "open"),
    ]
    assert [f.event.revision for f in raw.frames() if isinstance(f, Increment)] == list(range(1, 7))
    # The slots went out: the next update waits in a new one, as a delta.
    raw.paused = True
    queue.push_increments([event(7)])
    queue.push_draft(delta(d, "a", "!"))
    raw.resume()
    await sent_all(queue)
    assert drafts_of(raw)[-1] == ("a", 102, "!", None, "open")
    await queue.stop()


async def test_a_commit_sends_the_increment_and_the_final_in_one_message() -> None:
    raw = FakeRaw()
    queue = make_queue(raw)
    d = registry()
    queue.push_resume("t", 0, [])
    d.write(Draft(d.transcript_id, "a", delta="hi"), now=0)
    final = d.commit("a", 1, now=0)
    assert final is not None
    queue.push_increments([event(1)], [final])
    assert raw.writes == 1 and len(raw.messages()) == 1
    frames = raw.frames()
    assert isinstance(frames[0], Increment) and isinstance(frames[1], DraftFrame)
    assert (frames[1].state, frames[1].revision) == ("final", 1)
    await queue.stop()


async def test_a_close_takes_its_slots_place_behind_the_commits_increment() -> None:
    raw = FakeRaw()
    queue = make_queue(raw)
    d = registry()
    queue.push_resume("t", 0, [])
    queue.push_increments([event(1)])
    raw.paused = True
    queue.push_increments([event(2)])
    queue.push_draft(delta(d, "a", "hel"))
    queue.push_draft(delta(d, "a", "lo"))
    final = d.commit("a", 3, now=0)
    assert final is not None
    queue.push_increments([event(3)], [final])
    raw.resume()
    await sent_all(queue)
    kinds = [
        (type(f).__name__, getattr(f, "state", None))
        for f in raw.frames()
        if not isinstance(f, Increment) or f.event.revision == 3
    ]
    # The slot is gone (the text is moot), the final follows its increment.
    assert kinds == [("Increment", None), ("DraftFrame", "final")]
    messages = raw.messages()
    assert b'"state":"final"' in messages[-1] and b'"revision":3,"occurredAt"' in messages[-1]
    await queue.stop()


async def test_a_lagged_transcript_loses_its_draft_slots_and_the_others_keep_theirs() -> None:
    raw = FakeRaw()
    lagged: list[set[str]] = []
    queue = make_queue(raw, frames=3, lagged=lagged)
    t, u = registry("t"), registry("u")
    queue.push_resume("t", 0, [])
    queue.push_resume("u", 0, [])
    raw.paused = True
    queue.push_draft(delta(t, "a", "x"))
    queue.push_draft(delta(u, "b", "y"))
    for r in range(1, 5):
        queue.push_increments([event(r)])
    assert lagged == [{"t"}]
    assert queue.queued[0] == 2  # u's slot and the lagged error
    raw.resume()
    await sent_all(queue)
    frames = raw.frames()
    assert [(type(f).__name__, f.transcript_id) for f in frames] == [
        ("DraftFrame", "u"),
        ("ErrorFrame", "t"),
    ]
    assert isinstance(frames[1], ErrorFrame) and frames[1].code == "lagged"
    await queue.stop()


async def test_a_new_baseline_drops_the_waiting_draft_slots_of_its_transcript() -> None:
    from tests.server.live.test_outbound import baseline

    raw = FakeRaw()
    queue = make_queue(raw)
    d = registry()
    queue.push_resume("t", 0, [])
    raw.paused = True
    queue.push_draft(delta(d, "a", "x"))
    queue.push_baseline(baseline(3))
    queue.push_draft(d.open["a"].text_frame())  # what the hub sends behind a baseline
    raw.resume()
    await sent_all(queue)
    assert [type(f).__name__ for f in raw.frames()] == ["Baseline", "DraftFrame"]
    assert drafts_of(raw) == [("a", 1, None, "x", "open")]
    await queue.stop()


async def test_a_client_that_lets_draft_closes_pile_up_past_the_slack_is_closed() -> None:
    """Slots are one per open draft, but every draft that ends leaves its
    close: a client that never reads is closed (4008) instead of holding
    them without bound, as for unread answers. Never lagged."""
    raw = FakeRaw()
    lagged: list[set[str]] = []
    queue = make_queue(raw, frames=2, lagged=lagged)
    d = registry()
    queue.push_resume("t", 0, [])
    raw.paused = True
    i = 0
    while not queue.closed and i < 10_000:
        d.write(Draft(d.transcript_id, f"d{i}", delta="x"), now=0)
        closed = d.write(Draft(d.transcript_id, f"d{i}", cancel=True), now=0).update
        assert closed is not None
        queue.push_draft(closed)
        i += 1
    assert queue.closed and i == 2 + CONTROL_FRAME_SLACK + 1
    assert lagged == [] and queue.follows("t")
    await queue.stop()


async def test_catch_up_frames_never_close_a_client_however_many() -> None:
    """Issue 24.6: the catch-up behind a baseline or resume once counted
    toward 4008 (a reading client with many subscriptions was closed on every
    attempt). Catch-up frames are bounded where they are made
    (``Drafts.catch_up``) and never taken as a client that reads nothing."""
    raw = FakeRaw()
    queue = make_queue(raw, frames=2)
    d = registry()
    queue.push_resume("t", 0, [])
    raw.paused = True
    finals = []
    for i in range(2 + CONTROL_FRAME_SLACK + 10):
        d.write(Draft(d.transcript_id, f"d{i}", delta="x"), now=0)
        final = d.commit(f"d{i}", i + 1, now=0)
        assert final is not None
        finals.append(final)
    for final in finals:
        queue.push_draft(final, catch_up=True)
    assert not queue.closed
    raw.resume()
    await sent_all(queue)
    assert len(drafts_of(raw)) == len(finals)
    await queue.stop()
