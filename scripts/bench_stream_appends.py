"""What writing Durable Streams through to SQLite or Redis costs: appends per second.

Two measurements (docs/protocol.md, "Where streams live", quotes them):

1. The registry alone, in this process, appending 100-byte messages with an
   idempotent producer: on no log (the memory store), on a
   ``SQLiteStreamLog`` with ``synchronous=normal`` and ``full``, and on a
   private ``redis-server`` (``SharedPort``: a read and a write script each).
2. A real ``tsync serve`` (memory, SQLite, Redis) taking ``POST``s from
   ``--clients`` concurrent HTTP clients (one stream each) for ``--seconds``.

    python scripts/bench_stream_appends.py [--seconds 5] [--clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from server.store.open import backend_of
from server.store.redis import RedisStore
from server.store.sqlite.streams import SQLiteStreamLog
from server.streams.log import StreamLog
from server.streams.open import stream_port
from server.streams.registry import Limits, StreamRegistry
from tests.support.redis_server import RedisServer
from tests.support.servers import ServerProcess

BODY = b"x" * 100


async def registry_rate(log: StreamLog | None, count: int, redis_url: str = "") -> float:
    """Appends per second of one registry (on ``redis_url``'s Redis if given)."""
    store = None
    registry = StreamRegistry(Limits(max_bytes=1 << 40), log=log)
    if redis_url:
        store = RedisStore(redis_url)
        await store.open()
        registry = StreamRegistry(Limits(max_bytes=1 << 40), port=stream_port(backend_of(store)))
    await registry.create(
        "/bench", content_type="text/plain", ttl_s=None, expires_at=None, expires_at_ts=None,
        body=b"", closed=False, forked_from=None, fork_offset=None, fork_sub_offset=0,
    )  # fmt: skip
    started = time.perf_counter()
    for seq in range(count):
        await registry.append(
            "/bench", BODY, content_type="text/plain", stream_seq=None,
            producer=("p", 0, seq), close=False,
        )  # fmt: skip
    elapsed = time.perf_counter() - started
    registry.detach()
    if store is not None:
        await store.close()
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
    binary = shutil.which("redis-server") or "redis-server"
    with (
        tempfile.TemporaryDirectory() as folder,
        # An fsync per write (the tests' Redis), and Redis's default of one a second.
        RedisServer(binary, Path(folder) / "always") as always,
        RedisServer(binary, Path(folder) / "every", extra=["--appendfsync", "everysec"]) as every,
    ):
        rate = asyncio.run(registry_rate(None, args.count))
        print(f"registry, no log:           {rate:>9,.0f} appends/s")
        for sync in ("normal", "full"):
            log = SQLiteStreamLog(Path(folder) / sync, synchronous=sync)
            count = args.count if sync == "normal" else args.count // 10
            rate = asyncio.run(registry_rate(log, count))
            print(f"registry, SQLite {sync:<6}:    {rate:>9,.0f} appends/s")
        for name, redis, count in (
            ("always", always, args.count // 10),
            ("everysec", every, args.count),
        ):
            rate = asyncio.run(registry_rate(None, count, f"{redis.url}?prefix=bench:"))
            print(f"registry, Redis {name:<8}:   {rate:>9,.0f} appends/s")
        stores = [
            ("memory", "memory"),
            ("sqlite", f"sqlite:{folder}/serve"),
            ("sqlite full", f"sqlite:{folder}/full?synchronous=full"),
            ("redis always", f"{always.url}?prefix=http:"),
            ("redis everysec", f"{every.url}?prefix=http:"),
        ]
        for name, store in stores:
            with ServerProcess(store=store) as server:
                rate = asyncio.run(http_rate(server.url, args.clients, args.seconds))
            print(f"HTTP, {args.clients} clients, {name:<15}: {rate:>7,.0f} appends/s")


if __name__ == "__main__":
    main()
