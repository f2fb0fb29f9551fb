#!/usr/bin/env python3
"""How long each SQLite group commit holds the event loop (it runs on the
loop's thread): N appends of 200 B, one commit each, in a fresh folder;
prints p50, p99, max and how many took over 1 ms (before issue 30's slimmed
commit: the WAL's automatic checkpoints, now run on a thread of their own).
``--keys``: each append carries an idempotency key (as every client sends);
``--transcripts K``: the appends go round-robin to K transcripts (the
chatroom: 50); ``--rate R``: R appends a second (the chatroom: 250), not
back to back (then the loop is never idle and the checkpoint thread gets
the CPU only when the scheduler takes it from the loop). docs/benchmarks.md
quotes it.

    flock /work/wt/bench.lock taskset -c 0 .venv/bin/python scripts/bench_sqlite_commits.py 3000
    flock /work/wt/bench.lock taskset -c 0 .venv/bin/python scripts/bench_sqlite_commits.py \\
        3000 --keys --transcripts 50
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from typing import Any

from protocol.types import Message
from server.model.transcript import Transcript
from server.store import SQLiteStore
from server.store.base import NewTranscript


async def main(count: int, keys: bool, transcripts: int, rate: float) -> None:
    store = SQLiteStore(tempfile.mkdtemp(prefix="tsync-commits-"))
    await store.open()
    writer: Any = store._writer  # timed where the loop runs it
    commit = writer.commit
    took: list[float] = []

    def timed(batches: Any) -> Any:
        started = time.perf_counter()
        try:
            return commit(batches)
        finally:
            took.append(time.perf_counter() - started)

    # What else the loop runs of the store's: the checkpoint's outcome, in
    # which the writer copies what the checkpoint thread left (when the
    # writes outran it). Absent before issue 30's slimmed commit.
    after_checkpoint: list[float] = []
    checkpointed = getattr(store, "_checkpointed", None)
    if checkpointed is not None:

        def timed_checkpointed(*args: Any) -> None:
            started = time.perf_counter()
            try:
                checkpointed(*args)
            finally:
                after_checkpoint.append(time.perf_counter() - started)

        setattr(store, "_checkpointed", timed_checkpointed)  # noqa: B010 (a bound method)
    models = [Transcript(id=f"t{i}", epoch="e") for i in range(transcripts)]
    for model in models:
        await store.create(NewTranscript(model.id, "e", 0))
    writer.commit = timed
    loop = asyncio.get_running_loop()
    start = loop.time()
    for n in range(count):
        if rate > 0:
            # Pacing the load (not waiting for a condition).
            await asyncio.sleep(max(0.0, start + n / rate - loop.time()))
        transcript = models[n % transcripts]
        event = transcript.prepare_append((Message(role="user", content="x" * 200),))
        assert event is not None
        await store.append(event, idempotency_key=f"k{n}" if keys else None)
        transcript.apply(event)
    checkpoints = getattr(store, "checkpoints", 0)
    writer_checkpoints = getattr(store, "writer_checkpoints", 0)
    await store.close()
    took.sort()

    def at(q: float) -> float:
        return took[min(len(took) - 1, int(q * len(took)))] * 1e6

    slow = sum(t > 1e-3 for t in took)
    print(
        f"{len(took)} commits: p50 {at(0.5):.0f} us, p99 {at(0.99):.0f} us, "
        f"max {at(1.0):.0f} us, over 1 ms: {slow}"
    )
    if checkpointed is not None:
        print(
            f"  checkpoints on their thread: {checkpoints}, of which the writer finished "
            f"{writer_checkpoints}; on the loop after each: max "
            f"{max(after_checkpoint, default=0) * 1e6:.0f} us, "
            f"over 1 ms: {sum(t > 1e-3 for t in after_checkpoint)}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("count", type=int, nargs="?", default=3000, help="appends (commits)")
    parser.add_argument("--keys", action="store_true", help="an idempotency key per append")
    parser.add_argument("--transcripts", type=int, default=1, help="round-robin over this many")
    parser.add_argument("--rate", type=float, default=0, help="appends a second (0: no pause)")
    args = parser.parse_args()
    asyncio.run(main(args.count, args.keys, args.transcripts, args.rate))
