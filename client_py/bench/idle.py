"""The idle scenario's hold: every connection open and subscribed, sending
nothing, while the server's CPU is measured (``tsync bench idle --duration S``).

What an idle connection costs the server per second is its keep-alive (pings,
pongs and their timers) and whatever else runs per connection when nothing
happens; with ``--set ping_interval_s=2`` on the server the pings dominate.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from client_py.bench.sampler import ServerSampler


async def hold(
    sampler: ServerSampler,
    generator: ServerSampler,
    client_cpus: frozenset[int] | None,
    n: int,
    hold_s: float,
) -> dict[str, Any]:
    """Keep every connection open and subscribed, sending nothing, for
    ``hold_s`` and measure what the server spends meanwhile: its keep-alive
    (pings and pongs, timers) and whatever else runs per idle connection."""
    server_start, generator_start = sampler.cpu(), generator.cpu()
    started = time.monotonic()
    await asyncio.sleep(hold_s)  # the measured span itself, not a wait for an event
    wall = max(time.monotonic() - started, 1e-9)
    server_cores = (sampler.cpu() - server_start) / wall
    cpus = len(client_cpus) if client_cpus else (os.cpu_count() or 1)
    return {
        "hold_s": round(wall, 3),
        "server_cores_holding": round(server_cores, 4),
        # Server CPU per idle connection and second held.
        "server_cpu_us_per_connection_s": round(server_cores * 1e6 / n, 3),
        "generator_share_holding": round((generator.cpu() - generator_start) / wall / cpus, 3),
    }
