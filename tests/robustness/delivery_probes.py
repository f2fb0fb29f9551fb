"""What the delivery robustness tests watch during an attack: the server's
resident memory (sampled) and an unrelated client's ping round trip, measured
from a process of its own (the attacking clients keep the test's own event
loop busy, which would count against the server).

    python -m tests.robustness.delivery_probes URL SECONDS   # prints the round trips
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import psutil

from protocol.wire import Pong
from tests.support.wsclient import RawClient


@dataclass
class Probe:
    """Peak RSS of the server process and ping round trips, while it runs."""

    pid: int
    rss_before: int = 0
    rss_peak: int = 0
    rtts: list[float] = field(default_factory=list)

    @property
    def rss_growth_mb(self) -> float:
        return (self.rss_peak - self.rss_before) / (1 << 20)

    @property
    def worst_rtt(self) -> float:
        return max(self.rtts, default=0.0)

    @property
    def typical_rtt(self) -> float:
        """The 90th percentile: what a client sees unless the machine's other
        load (other processes on two shared cores) picks that moment."""
        ordered = sorted(self.rtts)
        return ordered[int(0.9 * (len(ordered) - 1))] if ordered else 0.0

    def summary(self, idle: list[float]) -> str:
        return (
            f"RSS +{self.rss_growth_mb:.1f} MB, ping p90 {self.typical_rtt * 1000:.0f} ms, "
            f"worst {self.worst_rtt * 1000:.0f} ms of {len(self.rtts)} "
            f"(idle worst {max(idle, default=0) * 1000:.0f} ms)"
        )


async def _pings(url: str, stop: asyncio.Event) -> list[float]:
    rtts: list[float] = []
    async with await RawClient.connect(url) as client:
        print("ready", flush=True)
        n = 0
        while not stop.is_set():
            n += 1
            sent = time.monotonic()
            await client.send(op="ping", ref=n)
            while not isinstance(await client.recv(60), Pong):
                pass
            rtts.append(time.monotonic() - sent)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.01)
    return rtts


async def _ping_main(url: str) -> None:
    """Ping until stdin closes, then print the round trips as JSON."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(sys.stdin.fileno(), stop.set)
    rtts = await _pings(url, stop)
    print(json.dumps(rtts), flush=True)


async def ping_rtts(url: str, seconds: float) -> list[float]:
    """Round trips of pings sent one after the other for ``seconds``, from
    another process."""
    async with pinging(url) as rtts:
        await asyncio.sleep(seconds)  # the measurement's length, not a wait for state
    return rtts


@contextlib.asynccontextmanager
async def pinging(url: str) -> AsyncIterator[list[float]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.robustness.delivery_probes",
        url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    rtts: list[float] = []
    assert proc.stdout is not None
    ready = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert ready == b"ready\n", ready
    try:
        yield rtts
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        rtts.extend(json.loads(out or b"[]"))


@contextlib.asynccontextmanager
async def watching(pid: int, url: str) -> AsyncIterator[Probe]:
    """Sample the server's RSS every 20 ms and ping it from an unrelated
    client in another process for as long as the block runs."""
    process = psutil.Process(pid)
    probe = Probe(pid, rss_before=process.memory_info().rss)
    probe.rss_peak = probe.rss_before
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            probe.rss_peak = max(probe.rss_peak, process.memory_info().rss)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 0.02)

    sampler = asyncio.create_task(sample())
    try:
        async with pinging(url) as rtts:
            try:
                yield probe
            finally:
                done.set()
                await sampler
        probe.rtts = rtts
    finally:
        done.set()
        probe.rss_peak = max(probe.rss_peak, process.memory_info().rss)


def rtt_bound(idle: list[float]) -> float:
    """100 ms, or twice the worst idle round trip on a machine busy enough
    that even idle pings take longer (as tests/server/store/test_store_sqlite.py's
    loop-lag test does). Compared with ``Probe.typical_rtt``: a stalled loop
    stalls every ping that waits on it, not one in ten."""
    return max(0.1, 2 * max(idle, default=0.0))


if __name__ == "__main__":
    asyncio.run(_ping_main(sys.argv[1]))
