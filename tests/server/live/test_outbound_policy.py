"""The outbound queue's rules alone (``server.live.outbound_policy``): no
socket, no task. Items are fakes of a chosen size (the policy reads only
``data``, ``baseline``, ``draft``, ``size`` and ``transcript_id``), drafts
are real ``EncodedDraft`` updates; hypothesis drives random sequences of
pushes, writes and drops and checks the bookkeeping after every step."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import wire
from server.live.frames import DraftSlot, EncodedDraft
from server.live.outbound_policy import MERGED, QUEUED, READS_NOTHING, QueuePolicy
from server.tuning import CONTROL_BYTES_SLACK, CONTROL_FRAME_SLACK

TRANSCRIPTS = ("a", "b", "c")


class Item:
    """A queued increment (``baseline=False``), baseline or answer
    (``data=False``) of ``size`` bytes."""

    draft = False

    def __init__(self, tid: str | None, size: int, *, baseline: bool = False, data: bool = True):
        self.transcript_id = tid
        self.size = size
        self.baseline = baseline
        self.data = data

    def __repr__(self) -> str:
        kind = "baseline" if self.baseline else "data" if self.data else "answer"
        return f"{kind}({self.transcript_id}, {self.size})"


def draft(tid: str, draft_id: str = "d", n: int = 1, *, closes: bool = False) -> EncodedDraft:
    state = "final" if closes else "open"
    return EncodedDraft(
        wire.DraftFrame(
            seq=0,
            transcript_id=tid,
            draft_id=draft_id,
            role="assistant",
            n=n,
            delta=None if closes else "x",
            state=state,
        )
    )


def policy(frames: int = 10, size: int = 1000) -> QueuePolicy:
    p = QueuePolicy(queue_max_frames=frames, queue_max_bytes=size)
    for tid in TRANSCRIPTS:
        p._sent[tid] = 0
    return p


def push(p: QueuePolicy, item: Any) -> bool:
    """What ``OutboundQueue._enqueue_data`` does with its verdict, minus the
    telling: queued, or (not fitting) the queue lagged."""
    if p._queue and not p._fits(item):
        p._drop_lagged({item.transcript_id})
        return False
    p._queue.append(item)
    p._count(item, 1)
    return True


def check_books(p: QueuePolicy) -> None:
    """The counters are what a recount from the queue gives, and the draft
    slots are exactly the ``DraftSlot`` items queued, one per draft."""
    q = p._queue
    assert p._queued_bytes == sum(i.size for i in q if not (i.baseline or i.draft))
    assert p._baseline_bytes == sum(i.size for i in q if i.baseline) - (
        p._stream_sent if p._stream is not None else 0
    )
    assert p._draft_items == sum(1 for i in q if i.draft)
    slots = p._draft_slots or {}
    queued_slots = [i for i in q if isinstance(i, DraftSlot)]
    assert sorted(map(id, slots.values())) == sorted(map(id, queued_slots))
    assert len({(s.transcript_id, s.update.draft_id) for s in queued_slots}) == len(queued_slots)
    for key, slot in slots.items():
        assert key == (slot.transcript_id, slot.update.draft_id)


tids = st.sampled_from(TRANSCRIPTS)
steps = st.one_of(
    st.tuples(st.just("increment"), tids, st.integers(1, 400)),
    st.tuples(st.just("baseline"), tids, st.integers(1, 3000)),
    st.tuples(st.just("answer"), tids, st.integers(1, 100)),
    st.tuples(st.just("draft"), tids, st.sampled_from(("d", "e"))),
    st.tuples(st.just("close"), tids, st.sampled_from(("d", "e"))),
    st.tuples(st.just("write"), tids, st.integers(1, 5)),
    st.tuples(st.just("drop_waiting"), tids, st.just(0)),
    st.tuples(st.just("lag"), tids, st.just(0)),
    st.tuples(st.just("forget"), tids, st.just(0)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=60), st.integers(1, 12), st.integers(1, 2000))
def test_the_books_hold_whatever_happens(
    ops: list[tuple[str, str, Any]], max_frames: int, max_bytes: int
) -> None:
    p = policy(max_frames, max_bytes)
    for kind, tid, arg in ops:
        before = list(p._queue)
        if kind == "increment":
            push(p, Item(tid, arg))
        elif kind == "baseline":
            p._drop_waiting(tid)
            p._sent[tid] = 0
            push(p, Item(tid, arg, baseline=True))
        elif kind == "answer":
            item = Item(tid, arg, data=False)
            if p._control_fits(item.size):
                p._queue.append(item)
                p._count(item, 1)
        elif kind in ("draft", "close"):
            verdict = p._queue_draft(draft(tid, arg, closes=kind == "close"), catch_up=False)
            assert verdict in (MERGED, QUEUED, READS_NOTHING)
        elif kind == "write":
            for item in p._queue[:arg]:
                p._count(item, -1)
            del p._queue[:arg]
        elif kind == "drop_waiting":
            p._drop_waiting(tid)
            gone = [i for i in before if i not in p._queue]
            assert all(i.transcript_id == tid and (i.data or i.draft) for i in gone)
        elif kind == "lag":
            followed = set(p._sent)
            lagged = p._drop_lagged({tid})
            assert lagged <= followed and not lagged & set(p._sent)
            assert not any(i.data for i in p._queue)
            assert not any(i.draft and i.transcript_id in lagged for i in p._queue)
        elif kind == "forget":
            was = tid in p._sent
            assert p._forget(tid) is was
            assert not p.follows(tid)
            assert not any(i.transcript_id == tid and (i.data or i.draft) for i in p._queue)
            p._sent[tid] = 0
        check_books(p)
        # Increments (not baselines) never pass the frame budget once queued behind others.
        increments = [i for i in p._queue if i.data and not i.baseline]
        assert len(increments) <= max(max_frames, 1)


@given(st.lists(st.integers(1, 500), max_size=20), st.integers(1, 20), st.integers(1, 3000),
       st.integers(1, 600))  # fmt: skip
def test_room_is_exactly_what_has_room_lets_in(
    sizes: list[int], max_frames: int, max_bytes: int, frame_bytes: int
) -> None:
    p = policy(max_frames, max_bytes)
    for size in sizes:
        push(p, Item("a", size))
    n = p.room(frame_bytes)
    assert n >= 0
    if n:
        assert p.has_room(n, n * frame_bytes)
    assert not p.has_room(n + 1, (n + 1) * frame_bytes)


def test_a_baseline_fits_behind_answers_whatever_its_size_but_not_behind_increments() -> None:
    p = policy(frames=10, size=100)
    p._queue.append(Item("a", 50, data=False))  # type: ignore[arg-type]
    p._count(p._queue[0], 1)
    assert p._fits(Item("b", 10_000, baseline=True))  # type: ignore[arg-type]
    push(p, Item("a", 40))
    assert not p._fits(Item("b", 10_000, baseline=True))  # type: ignore[arg-type]
    assert not push(p, Item("b", 10_000, baseline=True))  # it lags the connection
    assert not p.follows("a") and not p.follows("b")
    # What is left of a queued baseline is on top of the budget.
    assert push(p, Item("c", 10_000, baseline=True))
    assert p._limit() == 100 + 10_000
    assert p.has_room(1, 100 - 50) and not p.has_room(1, 100 - 49)


def test_a_lag_drops_data_frames_keeps_answers_and_forgets_the_followed_only() -> None:
    p = policy(frames=5, size=1000)
    del p._sent["c"]
    push(p, Item("a", 10))
    answer = Item("a", 5, data=False)
    p._queue.append(answer)  # type: ignore[arg-type]
    p._count(answer, 1)  # type: ignore[arg-type]
    push(p, Item("b", 10))
    assert p._queue_draft(draft("b"), catch_up=False) == QUEUED
    assert p._queue_draft(draft("a", "other"), catch_up=False) == QUEUED
    assert p._drop_lagged({"c"}) == {"a", "b"}
    assert [type(i).__name__ for i in p._queue] == ["Item"]
    assert p._queue == [answer]
    assert p.followed() == []
    check_books(p)


def test_a_streaming_baseline_at_the_head_is_never_dropped_and_counts_what_is_left() -> None:
    p = policy(frames=10, size=100)
    head = Item("a", 1000, baseline=True)
    push(p, head)
    p._streamed(head, 0, 300, last=False)  # type: ignore[arg-type]
    assert p._stream == 1
    assert p._baseline_bytes == 700 and p._limit() == 800
    push(p, Item("a", 50))
    p._drop_waiting("a")
    assert p._queue == [head]
    assert p._drop_lagged(set()) == set()
    assert p._queue == [head]
    check_books(p)
    p._streamed(head, 1, 700, last=True)  # type: ignore[arg-type]
    assert p._queue == [] and p._stream is None and p.queued == (0, 0)


def test_updates_of_an_open_draft_merge_and_its_close_goes_last() -> None:
    p = policy()
    push(p, Item("a", 10))
    assert p._queue_draft(draft("a", n=1), catch_up=False) == QUEUED
    assert p._queue_draft(draft("a", n=2), catch_up=False) == MERGED
    push(p, Item("a", 10))
    assert p._queue_draft(draft("a", closes=True), catch_up=False) == QUEUED
    assert [i.draft for i in p._queue] == [False, False, True]
    assert isinstance(p._queue[-1], EncodedDraft) and p._queue[-1].closes
    assert not p._draft_slots
    check_books(p)


def test_a_client_past_the_slack_reads_nothing() -> None:
    p = policy(frames=1, size=10)
    for n in range(1 + CONTROL_FRAME_SLACK):
        assert p._queue_draft(draft("a", f"d{n}"), catch_up=False) == QUEUED
    assert p._queue_draft(draft("a", "more"), catch_up=False) == READS_NOTHING
    assert p._queue_draft(draft("a", "more"), catch_up=True) == QUEUED
    assert p._shared_fits(10 + CONTROL_BYTES_SLACK)
    assert not p._shared_fits(11 + CONTROL_BYTES_SLACK)
    assert not p._control_fits(11 + CONTROL_BYTES_SLACK)
