#!/usr/bin/env python3
"""Where the server's memory per idle connection goes (tracemalloc).

Runs the app in this process under uvicorn (memory store), lets
``tsync bench idle`` open N subscribed connections from another process, and
compares tracemalloc snapshots taken before and while they are open, grouped
by file. This is the evidence behind the "RSS per idle connection" note in
docs/benchmarks.md.

    PYTHONPATH=. python scripts/bench_conn_memory.py [--connections 500]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tracemalloc

from tests.support.servers import running_server


async def main(connections: int) -> None:
    tracemalloc.start(1)
    async with running_server(log_level="warning") as srv:
        gc.collect()
        before = tracemalloc.take_snapshot()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "server.cli", "bench", "idle", "--url", srv.ws_url,
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
    stats = during.compare_to(before, "filename")
    total = sum(s.size_diff for s in stats)
    each = total / connections / 1024
    print(f"{connections} subscribed connections: {each:.1f} KB each (Python heap)")
    for stat in stats[:15]:
        name = stat.traceback[0].filename.split("site-packages/")[-1].split("/work/main/")[-1]
        print(
            f"  {stat.size_diff / connections:8.0f} B/conn  {stat.count_diff / connections:6.1f} "
            f"blocks/conn  {name}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=500)
    asyncio.run(main(parser.parse_args().connections))
