"""Racing writers on one transcript in one process, on the memory and SQLite
stores (Redis and Redis Cluster, and several replicas: ``tests/redis/
test_race.py``), and a run of the committer overtaken by another replica's
append (issue 23, item 0).

After the race a fresh store instance reads the transcript: exactly the
acknowledged messages, each batch at the indices and revision its ack named,
each client's in the order of its acks (``tests.support.racing``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from protocol.types import Message, MessagesAppended, Origin, TranscriptEvent
from server.store import SharedMemoryStore, SQLiteStore, Store
from server.store.base import AppendResult, StoredTranscript
from tests.support import racing
from tests.support.servers import running_server


async def _race_on(store: Store) -> tuple[list[racing.Acked], StoredTranscript | None]:
    """The race on one server on ``store``; the acks, and the transcript as
    ``store`` holds it at the end (read before the server closes it)."""
    async with running_server(store=store) as server:
        await server.hub.writes.create("t")
        clients = await racing.connect([server.ws_url])
        try:
            acks = await racing.race(clients, "t")
        finally:
            for client in clients:
                await client.close()
        return acks, await store.load("t")


async def test_racing_writers_on_the_memory_store_keep_every_ack_in_place() -> None:
    acks, stored = await _race_on(SharedMemoryStore())
    assert stored is not None
    racing.check_stored(stored.events, acks)


async def test_racing_writers_on_the_sqlite_store_keep_every_ack_in_place(
    tmp_path: Path,
) -> None:
    acks, _ = await _race_on(SQLiteStore(tmp_path))
    fresh = SQLiteStore(tmp_path)  # closed and opened again: what is on disk
    await fresh.open()
    try:
        stored = await fresh.load("t")
    finally:
        await fresh.close()
    assert stored is not None
    racing.check_stored(stored.events, acks)


class Overtaking(SharedMemoryStore):
    """A shared store on which another replica's append lands, once, right
    before the first run of several appends reaches it: the race replicas
    run on Redis, made to happen on cue (one event loop cannot interleave
    with a store call that does not await).

    Its appends all go through ``append_many`` and the committer's queue:
    without ``submit_appends`` no append is committed inline (where each of
    the racing appends would be a run of its own)."""

    submit_appends = None  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.overtaken: TranscriptEvent | None = None
        self.runs: list[int] = []

    async def append_many(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> list[AppendResult | Exception]:
        self.runs.append(len(items))
        first = items[0][0]
        change = first.change
        if self.overtaken is None and len(items) > 1 and isinstance(change, MessagesAppended):
            # As many messages as the run's first append: the run's second
            # one then fits the stored revision and length again.
            other = tuple(Message(role="user", content="other") for _ in change.messages)  # type: ignore[arg-type]
            self.overtaken = TranscriptEvent(
                first.transcript_id,
                first.epoch,
                first.revision,
                first.occurred_at,
                MessagesAppended(change.start, other),
                Origin("another replica"),
            )
            await self.append(self.overtaken)
        return await super().append_many(items)


async def test_a_run_overtaken_by_another_replica_is_planned_again() -> None:
    store = Overtaking()
    async with running_server(store=store) as server:
        hub = server.hub
        await hub.writes.create("t")
        await hub.writes.append("t", [{"role": "user", "content": "first"}])  # now live
        # Queued together, so committed as one run; half with a key.
        results = await asyncio.gather(
            *(
                hub.writes.append(
                    "t",
                    [{"role": "user", "content": f"m{i}"}],
                    idempotency_key=f"k{i}" if i % 2 else None,
                )
                for i in range(6)
            )
        )
        assert store.overtaken is not None, f"no run to overtake: {store.runs}"
        assert max(store.runs) > 1
        stored = await store.load("t")
        assert stored is not None
        acks = [
            racing.Acked(i, 0, (f"m{i}",), r.receipt.revision, r.receipt.start, r.receipt.count)
            for i, r in enumerate(results)
        ]
        assert not any(r.duplicate for r in results)
        # The overtaking append and "first" are in the log too, unacked here.
        events = [e for e in stored.events if e.revision not in (1, store.overtaken.revision)]
        length = 0
        for event in stored.events:
            assert isinstance(event.change, MessagesAppended)
            assert event.change.start == length, f"revision {event.revision} misplaced"
            length = event.change.end
        assert len(events) == len(acks)
        for event in events:
            assert isinstance(event.change, MessagesAppended)
            [ack] = [a for a in acks if a.revision == event.revision]
            assert (ack.start, ack.texts) == (
                event.change.start,
                tuple(m.content for m in event.change.messages),
            )
        # The replica's copy caught up with the store: it holds the same.
        snapshot = await hub.reads.snapshot("t")
        assert snapshot.revision == stored.revision
        assert [m.content for m in snapshot.messages or ()] == [
            m.content
            for e in stored.events
            for m in e.change.messages  # type: ignore[union-attr]
        ]
