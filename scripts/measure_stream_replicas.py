"""What reading a Durable Stream on another replica costs: append-to-delivery
latency with the SSE reader on the writer's replica (the baseline) and on the
other one, two ``tsync serve`` on one private ``redis-server``
(``appendfsync everysec``), in alternating rounds of the same run.

Each append is POSTed to A once the reader has the one before, and timed from
just before the POST to its data event at the reader (so it includes the
POST's own round trip). docs/benchmarks.md quotes the result.

    python scripts/measure_stream_replicas.py [--appends 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from tests.support.redis_server import RedisServer
from tests.support.servers import ServerProcess

TEXT = {"content-type": "text/plain"}


async def round_trip(writer: str, reader: str, path: str, appends: int) -> list[float]:
    """Latencies (ms) of ``appends`` appends through ``writer`` seen by an
    SSE reader on ``reader``."""
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=30) as http:
        created = await http.put(writer + path, headers=TEXT)
        offset = created.headers["stream-next-offset"]
        params = {"offset": offset, "live": "sse"}
        async with http.stream("GET", reader + path, params=params) as events:
            lines = events.aiter_lines()
            for i in range(appends):
                started = time.perf_counter()
                answer = await http.post(writer + path, headers=TEXT, content=f"{i}".encode())
                assert answer.status_code == 204, answer.text
                event = ""
                async for line in lines:
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:") and event == "data":
                        latencies.append((time.perf_counter() - started) * 1000)
                        break
    return latencies


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered):6.2f} ms  p99 {p99:6.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    binary = shutil.which("redis-server") or "redis-server"
    with tempfile.TemporaryDirectory() as folder:
        redis = RedisServer(binary, Path(folder) / "redis", extra=["--appendfsync", "everysec"])
        with (
            redis,
            ServerProcess(store=f"{redis.url}?prefix=m:") as a,
            ServerProcess(store=f"{redis.url}?prefix=m:") as b,
        ):
            same: list[float] = []
            other: list[float] = []
            for r in range(args.rounds):
                same += asyncio.run(round_trip(a.url, a.url, f"/v1/stream/same-{r}", args.appends))
                other += asyncio.run(
                    round_trip(a.url, b.url, f"/v1/stream/other-{r}", args.appends)
                )
    print(f"reader on the writer's replica: {summary(same)}")
    print(f"reader on the other replica:    {summary(other)}")
    ratio50 = statistics.median(other) / statistics.median(same)
    print(f"p50 ratio other/same: {ratio50:.2f}x ({len(same)} appends each)")


if __name__ == "__main__":
    main()
