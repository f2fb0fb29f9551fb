#!/usr/bin/env python3
"""Where the server's memory per idle connection goes (tracemalloc).

Runs the app in this process under uvicorn (memory store), lets
``tsync bench idle`` open N subscribed connections from another process, and
compares tracemalloc snapshots taken before and while they are open, grouped
by file. This is the evidence behind the "RSS per idle connection" note in
docs/benchmarks.md.

    PYTHONPATH=. python scripts/bench_conn_memory.py [--connections 500] [--by lineno] [--top 30]

``--by lineno`` attributes the bytes to the line that allocated them (what
the table "Idle memory per connection" in docs/benchmarks.md was built
from). The server runs on asyncio's own loop here, not uvloop as under
``tsync serve``: uvloop's transports are C objects tracemalloc does not see,
so compare totals with ``tsync bench idle``'s RSS figure, not line by line.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tracemalloc

from tests.support.servers import running_server

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/"


def _where(filename: str) -> str:
    """A file's name without the site-packages or checkout prefix."""
    name = filename.split("site-packages/")[-1].split(ROOT)[-1]
    return name.split("/lib/python3.")[-1].split("/", 1)[-1] if "/lib/python3." in name else name


async def main(connections: int, by: str, top: int) -> None:
    tracemalloc.start(1)
    async with running_server(log_level="warning") as srv:
        gc.collect()
        before = tracemalloc.take_snapshot()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "server.run.cli", "bench", "idle", "--url", srv.ws_url,
            "--subscribers", str(connections), "--no-progress",
            # With a pid the harness holds the connections open for a second
            # after subscribing (to read RSS): the snapshot is taken then.
            "--server-pid", str(os.getpid()),
            stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        hub = srv.hub
        async with asyncio.timeout(120):
            while hub.stats()["subscriptions"] < connections:  # noqa: ASYNC110 - polls another process
                await asyncio.sleep(0.1)
        gc.collect()
        during = tracemalloc.take_snapshot()
        await proc.wait()
    stats = during.compare_to(before, by)
    total = sum(s.size_diff for s in stats)
    each = total / connections / 1024
    print(f"{connections} subscribed connections: {each:.2f} KiB each (Python heap)")
    for stat in stats[:top]:
        frame = stat.traceback[0]
        name = _where(frame.filename) + (f":{frame.lineno}" if by == "lineno" else "")
        print(
            f"  {stat.size_diff / connections:8.0f} B/conn  {stat.count_diff / connections:6.1f} "
            f"blocks/conn  {name}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--by", choices=["filename", "lineno"], default="filename")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    asyncio.run(main(args.connections, args.by, args.top))
