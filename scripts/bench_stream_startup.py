"""How long a SQLite store's Durable Streams take to open, with N streams in
``streams.sqlite3`` and with none: this tree's registry against another
tree's (``--baseline``, e.g. a checkout of main), in one run.

    .venv/bin/python scripts/bench_stream_startup.py --baseline /work/main --streams 100000

Each side runs in a process of its own (``python -c`` with that tree on
``sys.path``): the baseline writes the streams (its schema), this tree opens
a copy of that file once (its migration, timed apart) and then as a server
restarts. Prints seconds per open (best of ``--rounds``) and the ratios.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

FILL = """
import asyncio, sys
from server.streams.{module} import {cls}, Limits
from {log_module} import SQLiteStreamLog
async def main():
    registry = {cls}(Limits(max_streams=10**7), log=SQLiteStreamLog(sys.argv[1]))
    for i in range(int(sys.argv[2])):
        await registry.create(
            f"/s{{i}}", content_type="text/plain", ttl_s=None, expires_at=None,
            expires_at_ts=None, body=b"hello %d" % i, closed=False, forked_from=None,
            fork_offset=None, fork_sub_offset=0)
    registry.detach()
asyncio.run(main())
"""

OPEN = """
import json, sys, time
from server.streams.{module} import {cls}, Limits
from {log_module} import SQLiteStreamLog
best = None
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    registry = {cls}(Limits(max_streams=10**7), log=SQLiteStreamLog(sys.argv[1]))
    took = time.perf_counter() - start
    assert len(registry) == int(sys.argv[3]), len(registry)
    registry.detach()
    best = took if best is None else min(best, took)
print(json.dumps(best))
"""


def _names(root: Path) -> dict[str, str]:
    """The registry's module and class in ``root`` (renamed in issue 41)."""
    if (root / "server/streams/registry.py").exists():
        return {
            "module": "registry",
            "cls": "StreamRegistry",
            "log_module": "server.store.sqlite.streams",
        }
    return {"module": "memory", "cls": "Registry", "log_module": "server.streams.sqlite"}


def _run(root: Path, code: str, *args: object) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code.format(**_names(root)), *map(str, args)],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--streams", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        full, empty = Path(tmp, "full"), Path(tmp, "empty")
        _run(options.baseline, FILL, full, options.streams)
        _run(options.baseline, FILL, empty, 0)
        mine_full, mine_empty = Path(tmp, "mine-full"), Path(tmp, "mine-empty")
        shutil.copytree(full, mine_full)
        shutil.copytree(empty, mine_empty)
        migrate = json.loads(_run(HERE, OPEN, mine_full, 1, options.streams))
        _run(HERE, OPEN, mine_empty, 1, 0)
        rows = {
            "baseline, none": json.loads(_run(options.baseline, OPEN, empty, options.rounds, 0)),
            "baseline, N": json.loads(
                _run(options.baseline, OPEN, full, options.rounds, options.streams)
            ),
            "this tree, none": json.loads(_run(HERE, OPEN, mine_empty, options.rounds, 0)),
            "this tree, N": json.loads(
                _run(HERE, OPEN, mine_full, options.rounds, options.streams)
            ),
        }
    print(f"N = {options.streams} streams; best of {options.rounds} opens, seconds")
    for name, seconds in rows.items():
        print(f"  {name:16} {seconds:.4f}")
    print(f"  this tree's first open (its migration): {migrate:.3f}")
    print(f"  baseline N / none: {rows['baseline, N'] / rows['baseline, none']:.1f}x")
    print(f"  this tree N / none: {rows['this tree, N'] / rows['this tree, none']:.1f}x")
    print(f"  baseline N / this tree N: {rows['baseline, N'] / rows['this tree, N']:.1f}x")


if __name__ == "__main__":
    main()
