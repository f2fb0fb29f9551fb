#!/usr/bin/env python3
"""The server's Python cost of one WebSocket append, without sockets.

One hub on the memory store, ``SUBSCRIBERS`` subscriptions whose raw frame
write keeps nothing, one writer's ``OpHandler`` fed the same JSON append
frames as ``tsync bench chatroom`` writes (200 B, ``metadata.t`` in ns):
what an append costs from the decoded WebSocket message to the increments
and the ack handed to the transports, without the syscalls, the WebSocket
framing or the event loop's polling. ``--profile`` prints cProfile's top
functions (call counts are exact, times inflated by the profiler).

    python scripts/bench_append_path.py [--appends 20000] [--subscribers 4] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time
from collections.abc import Sequence

import msgspec

from server.config import ServerConfig
from server.live.hub import Hub
from server.store import MemoryStore
from server.web.ws import OpHandler


class NullRaw:
    """A raw frame write that is always ready and keeps nothing."""

    def __init__(self) -> None:
        self.frames = 0

    def raw_ready(self) -> bool:
        return True

    def raw_write(self, data: bytes) -> None:
        self.frames += 1

    def raw_writelines(self, parts: Sequence[bytes | memoryview]) -> None:
        self.frames += 1

    async def raw_writable(self) -> bool:
        return True

    def raw_fail(self, code: int) -> None:
        pass

    def inbound_waiting(self) -> bool:
        return False


async def _send(message: object) -> None:
    pass


async def run(appends: int, subscribers: int, profile: bool) -> None:
    store = MemoryStore()
    await store.open()
    hub = Hub(store, ServerConfig(store="memory", max_ops_per_second=10**9, max_ops_burst=10**9))
    await hub.start()
    await hub.writes.create("t")
    raws = [NullRaw() for _ in range(subscribers)]
    for i, raw in enumerate(raws):
        queue = hub.subscriptions.connect(f"s{i}", _send, raw=raw)
        queue.start()
        await hub.subscriptions.subscribe(queue, "t")
    writer_raw = NullRaw()
    writer = hub.subscriptions.connect("w", _send, raw=writer_raw)
    writer.start()
    handler = OpHandler(hub, writer, inbound_waiting=writer_raw.inbound_waiting)
    filler = "x" * 160
    frames = [
        msgspec.json.encode(
            {
                "op": "append",
                "transcriptId": "t",
                "ref": i,
                "idempotencyKey": f"k{i}",
                "messages": [
                    {"role": "user", "content": filler, "metadata": {"t": time.time_ns(), "w": 0}}
                ],
            }
        ).decode()
        for i in range(appends)
    ]
    for frame in frames[:200]:  # warm up
        await handler.handle(frame)
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    cpu_started = time.process_time()
    if profiler:
        profiler.enable()
    for frame in frames[200:]:
        await handler.handle(frame)
    if profiler:
        profiler.disable()
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    n = appends - 200
    print(
        f"{n} appends x {subscribers} subscribers: {elapsed / n * 1e6:.1f} us per append "
        f"({cpu / n * 1e6:.1f} us of CPU: on a busy machine, read this one)"
    )
    print(f"frames written: {sum(r.frames for r in raws)} increments, {writer_raw.frames} acks")
    if profiler:
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(30)
    await hub.stop()
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=20000)
    parser.add_argument("--subscribers", type=int, default=4)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    asyncio.run(run(args.appends, args.subscribers, args.profile))


if __name__ == "__main__":
    main()
