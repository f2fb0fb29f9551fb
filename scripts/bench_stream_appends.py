"""What writing Durable Streams through to SQLite costs: appends per second.

Two measurements (docs/protocol.md, "Where streams live", quotes them):

1. The registry alone, in this process, appending 100-byte messages with an
   idempotent producer: on no log (the memory store), and on a
   ``SQLiteStreamLog`` with ``synchronous=normal`` and ``full``.
2. A real ``tsync serve`` (memory, then SQLite) taking ``POST``s from
   ``--clients`` concurrent HTTP clients (one stream each) for ``--seconds``.

    python scripts/bench_stream_appends.py [--seconds 5] [--clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from server.streams.log import StreamLog
from server.streams.memory import Limits, Registry
from server.streams.sqlite import SQLiteStreamLog
from tests.support.servers import ServerProcess

BODY = b"x" * 100


def registry_rate(log: StreamLog | None, count: int) -> float:
    registry = Registry(Limits(max_bytes=1 << 40), log=log)
    registry.create(
        "/bench", content_type="text/plain", ttl_s=None, expires_at=None, expires_at_ts=None,
        body=b"", closed=False, forked_from=None, fork_offset=None, fork_sub_offset=0,
    )  # fmt: skip
    started = time.perf_counter()
    for seq in range(count):
        registry.append(
            "/bench", BODY, content_type="text/plain", stream_seq=None,
            producer=("p", 0, seq), close=False,
        )  # fmt: skip
    elapsed = time.perf_counter() - started
    registry.detach()
    return count / elapsed


async def http_rate(url: str, clients: int, seconds: float) -> float:
    done = 0
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
        for c in range(clients):
            await http.put(f"/v1/stream/bench-{c}", headers={"content-type": "text/plain"})
        deadline = time.perf_counter() + seconds

        async def client(c: int) -> None:
            nonlocal done
            seq = 0
            while time.perf_counter() < deadline:
                headers = {
                    "content-type": "text/plain",
                    "producer-id": "p",
                    "producer-epoch": "0",
                    "producer-seq": str(seq),
                }
                response = await http.post(f"/v1/stream/bench-{c}", content=BODY, headers=headers)
                assert response.status_code == 200, response.text
                seq += 1
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(clients)))
        return done / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--count", type=int, default=20_000, help="registry appends per run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        print(f"registry, no log:           {registry_rate(None, args.count):>9,.0f} appends/s")
        for sync in ("normal", "full"):
            log = SQLiteStreamLog(Path(folder) / sync, synchronous=sync)
            rate = registry_rate(log, args.count if sync == "normal" else args.count // 10)
            print(f"registry, SQLite {sync:<6}:    {rate:>9,.0f} appends/s")
        for store in ("memory", f"sqlite:{folder}/serve", f"sqlite:{folder}/full?synchronous=full"):
            with ServerProcess(store=store) as server:
                rate = asyncio.run(http_rate(server.url, args.clients, args.seconds))
            print(f"HTTP, {args.clients} clients, {store.split(':')[0]:<6}"
                  f"{' full' if 'full' in store else '':<5}: {rate:>7,.0f} appends/s")  # fmt: skip


if __name__ == "__main__":
    main()
