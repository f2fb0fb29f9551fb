"""Appends per second of the Durable Streams registry alone (no server), on
no log (the memory store) and on a ``SQLiteStreamLog``: this tree against
another (``--baseline``, e.g. a checkout of main), in one run.

    .venv/bin/python scripts/bench_stream_registry_ab.py --baseline /work/main --rounds 6

Each round runs each tree in a process of its own (``python -c`` with that
tree on ``sys.path``), the two trees taking turns, and times the appends in
CPU seconds of that process (``time.process_time``), which a busy machine
disturbs less than the wall clock. Prints every round and the ratio of the
medians (this tree / baseline).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

RUN = """
import asyncio, json, sys, tempfile, time
from server.streams.registry import StreamRegistry, Limits
from server.store.sqlite.streams import SQLiteStreamLog

async def rate(log, count):
    registry = StreamRegistry(Limits(max_bytes=1 << 40), log=log)
    await registry.create(
        "/b", content_type="text/plain", ttl_s=None, expires_at=None, expires_at_ts=None,
        body=b"", closed=False, forked_from=None, fork_offset=None, fork_sub_offset=0)
    started = time.process_time()
    for seq in range(count):
        await registry.append(
            "/b", b"x" * 100, content_type="text/plain", stream_seq=None,
            producer=("p", 0, seq), close=False)
    took = time.process_time() - started
    registry.detach()
    return count / took

with tempfile.TemporaryDirectory() as folder:
    count = int(sys.argv[1])
    memory = asyncio.run(rate(None, count))
    sqlite = asyncio.run(rate(SQLiteStreamLog(folder), count // 4))
    print(json.dumps([memory, sqlite]))
"""


def _rates(root: Path, count: int) -> list[float]:
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(count)],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    rates: list[float] = json.loads(done.stdout)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--count", type=int, default=20_000, help="appends per run (memory)")
    options = parser.parse_args()
    trees = {"baseline": options.baseline, "this tree": HERE}
    runs: dict[str, list[list[float]]] = {name: [] for name in trees}
    for _ in range(options.rounds):
        for name, root in trees.items():
            runs[name].append(_rates(root, options.count))
    medians = {}
    for name, rows in runs.items():
        memory, sqlite = (sorted(r[i] for r in rows) for i in (0, 1))
        medians[name] = statistics.median(memory), statistics.median(sqlite)
        print(f"{name:10} memory {[round(r) for r in memory]}")
        print(f"{'':10} SQLite {[round(r) for r in sqlite]}")
    for i, store in enumerate(("memory", "SQLite")):
        ratio = medians["this tree"][i] / medians["baseline"][i]
        print(f"this tree / baseline, {store}: {ratio:.2f}x (medians, appends per CPU second)")


if __name__ == "__main__":
    main()
