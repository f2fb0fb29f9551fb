"""Runs of appends planned by replicas whose copies trail the store, drawn by
hypothesis, on the memory and SQLite stores: whatever the interleaving, a
store refuses what no longer fits and never corrupts (issue 23, item 0).

Each step one of three replicas plans a run of 1-4 appends of 1-3 messages
on its copy (the revision and length it last saw, maybe stale) and sends it
with ``append_many``. After every step: the stored log is one continuous
history (revision r at index r - 1, each append starting where the one before
ended), every append answered as stored is stored exactly there, and what
the call stored is a prefix of the run.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.types import Message, MessagesAppended, Origin, TranscriptEvent
from server.store import MemoryStore, SQLiteStore, Store
from server.store.base import AppendResult, NewTranscript, RevisionMismatch
from tests.server.store.store_contract import CREATED_AT, EPOCH

REPLICAS = 3

#: (replica, sizes of the run's appends, whether the replica catches up first)
Step = tuple[int, list[int], bool]

steps = st.lists(
    st.tuples(
        st.integers(0, REPLICAS - 1),
        st.lists(st.integers(1, 3), min_size=1, max_size=4),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


def _event(replica: int, step: int, revision: int, start: int, size: int) -> TranscriptEvent:
    messages = tuple(
        Message(role="user", content=f"r{replica}-s{step}-{revision}-{i}")  # type: ignore[arg-type]
        for i in range(size)
    )
    return TranscriptEvent(
        "t1", EPOCH, revision, CREATED_AT + step, MessagesAppended(start, messages),
        Origin(f"replica {replica}"),
    )  # fmt: skip


async def play(store: Store, plan: list[Step]) -> None:
    """Open ``store``, play ``plan`` on a new transcript checking after every
    step (see the module docstring), close it."""
    await store.open()
    try:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        views = [(0, 0)] * REPLICAS  # (revision, length) each replica last saw
        for n, (replica, sizes, catch_up) in enumerate(plan):
            stored = await store.load("t1")
            assert stored is not None
            if catch_up:
                views[replica] = (stored.revision, _length(stored.events))
            revision, length = views[replica]
            run: list[tuple[TranscriptEvent, str | None]] = []
            for size in sizes:
                revision += 1
                run.append((_event(replica, n, revision, length, size), None))
                length += size
            outcomes = await store.append_many(run)
            after = await store.load("t1")
            assert after is not None
            _check_continuous(after.events)
            landed = list(after.events[len(stored.events) :])
            stored_now = [e for (e, _), o in zip(run, outcomes, strict=True) if _ok(o)]
            # What this call stored: exactly the appends answered as stored,
            # a prefix of the run, and nothing after the first refused one.
            assert landed == stored_now
            assert stored_now == [e for e, _ in run[: len(stored_now)]]
            assert all(isinstance(o, RevisionMismatch) for o in outcomes[len(stored_now) :])
            for event, outcome in zip((e for e, _ in run), outcomes, strict=False):
                if isinstance(outcome, AppendResult):
                    change = event.change
                    assert isinstance(change, MessagesAppended)
                    receipt = outcome.receipt
                    assert (receipt.revision, receipt.start, receipt.count) == (
                        event.revision, change.start, len(change.messages),
                    )  # fmt: skip
            if stored_now:
                views[replica] = (after.revision, _length(after.events))
    finally:
        await store.close()


def _ok(outcome: AppendResult | Exception) -> bool:
    return isinstance(outcome, AppendResult) and not outcome.duplicate


def _length(events: tuple[TranscriptEvent, ...]) -> int:
    change = events[-1].change if events else None
    return change.end if isinstance(change, MessagesAppended) else 0


def _check_continuous(events: tuple[TranscriptEvent, ...]) -> None:
    length = 0
    for i, event in enumerate(events):
        assert event.revision == i + 1
        change = event.change
        assert isinstance(change, MessagesAppended)
        assert change.start == length, f"revision {event.revision} at {change.start} of {length}"
        length = change.end


def _run(make: Callable[[], Store], plan: list[Step]) -> None:
    asyncio.run(play(make(), plan))


@settings(max_examples=150, deadline=None)
@given(steps)
def test_runs_from_stale_copies_never_corrupt_the_memory_store(plan: list[Step]) -> None:
    _run(MemoryStore, plan)


@settings(max_examples=40, deadline=None)
@given(steps)
def test_runs_from_stale_copies_never_corrupt_the_sqlite_store(plan: list[Step]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _run(lambda: SQLiteStore(folder), plan)
