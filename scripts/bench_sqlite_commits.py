#!/usr/bin/env python3
"""How long each SQLite group commit holds the event loop (it runs on the
loop's thread): N appends of 200 B to one transcript, one commit each, in a
fresh folder; prints p50, p99, max and how many took over 1 ms (the WAL's
automatic checkpoints). docs/benchmarks.md quotes it.

    flock /work/wt/bench.lock taskset -c 0 .venv/bin/python scripts/bench_sqlite_commits.py 3000
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from typing import Any

from protocol.types import Message
from server.model.transcript import Transcript
from server.store import SQLiteStore


async def main(count: int) -> None:
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

    writer.commit = timed
    await store.create("t", "e", 0, None)
    transcript = Transcript(id="t", epoch="e")
    for _ in range(count):
        event = transcript.prepare_append((Message(role="user", content="x" * 200),))
        assert event is not None
        await store.append(event)
        transcript.apply(event)
    await store.close()
    took.sort()

    def at(q: float) -> float:
        return took[min(len(took) - 1, int(q * len(took)))] * 1e6

    slow = sum(t > 1e-3 for t in took)
    print(
        f"{len(took)} commits: p50 {at(0.5):.0f} us, p99 {at(0.99):.0f} us, "
        f"max {at(1.0):.0f} us, over 1 ms: {slow}"
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
