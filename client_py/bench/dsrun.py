"""``tsync bench streams``: one Durable Stream, many readers, writers at a rate.

The run creates a JSON-mode stream at ``/v1/stream/bench-<run id>`` on any
server that speaks the Durable Streams protocol (ours, or the Node reference
server: ``scripts/ds_reference``), connects ``--subscribers`` readers in
``--live`` mode (``sse`` or ``long-poll``, ``client_py.bench.dsreaders``)
over ``--procs`` processes, then ``--writers`` writers POST one value each
time at ``--rate`` values/s (open loop: a value carries the time it was
*due*, ``"t"`` in ns, so a generator that falls behind shows as latency).
Each value is ``{"t":NS,"w":WRITER,"n":NUMBER,"p":"xxx..."}``, ``--size``
bytes of JSON; ``n`` numbers the values of the run from 0, so every reader
can tell a repeat from a first arrival and count what it was owed.

The result has the shape of the other scenarios' (``run.run_workload``):
``groups["on-time"]`` (values owed, received, repeats, missing), latency,
delivered values/s, the writers' acks, server CPU per delivered value
(psutil, ``--server-pid``) and the generator's own CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any, Final

import httpx

from client_py.bench import dsreaders, host
from client_py.bench.histogram import LatencyHistogram
from client_py.bench.run import CURVE_PERCENTILES, SETTLE_S, BenchError, Live, WorkerPool
from client_py.bench.sampler import ServerSampler
from client_py.bench.stats import merge_answers
from client_py.bench.workload import Workload

__all__ = ["run_streams", "value"]

#: Writer connections kept open; an append waits for a free one.
WRITER_CONNECTIONS: Final = 8
_VALUE_OVERHEAD: Final = len(b'{"t":1700000000000000000,"w":0,"n":0,"p":""}')


def value(sent_ns: int, writer: int, number: int, pad: str) -> bytes:
    """One appended value (built by hand: the writer must stay cheap)."""
    return f'{{"t":{sent_ns},"w":{writer},"n":{number},"p":"{pad}"}}'.encode()


class StreamWriters:
    """``writers`` open-loop writers sharing a pool of keep-alive connections."""

    def __init__(self, client: httpx.AsyncClient, path: str, workload: Workload) -> None:
        self.client = client
        self.path = path
        self.workload = workload
        self.pad = "x" * max(1, workload.size - _VALUE_OVERHEAD)
        self.appends = 0
        self.acks = 0
        self.errors = 0
        self.error_samples: list[str] = []
        self.max_behind_s = 0.0
        self.ack_latency = LatencyHistogram()
        self._number = 0
        self._gate = asyncio.Semaphore(WRITER_CONNECTIONS)
        self._pending: set[asyncio.Task[None]] = set()

    async def _post(self, body: bytes) -> None:
        started = time.time_ns()
        try:
            async with self._gate:
                response = await self.client.post(
                    self.path, content=body, headers={"content-type": "application/json"}
                )
        except httpx.HTTPError as exc:
            self._error(f"{type(exc).__name__}: {exc}")
            return
        if response.status_code in (200, 204):
            self.acks += 1
            self.ack_latency.record_ns(time.time_ns() - started)
        else:
            self._error(f"HTTP {response.status_code}: {response.text[:200]}")

    def _error(self, text: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(text)

    async def run_one(self, writer: int, until: float | None, count: int | None) -> None:
        rate = self.workload.rate
        assert rate is not None
        interval = 1.0 / rate
        start_mono = time.monotonic()
        start_ns = time.time_ns()
        sent = 0
        while count is None or sent < count:
            due = start_mono + sent * interval
            if until is not None and due >= until:
                break
            now = time.monotonic()
            if due > now:
                await asyncio.sleep(due - now)
            else:
                self.max_behind_s = max(self.max_behind_s, now - due)
            body = value(start_ns + int(sent * interval * 1e9), writer, self._number, self.pad)
            self._number += 1
            self.appends += 1
            task = asyncio.create_task(self._post(body))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            sent += 1

    async def run(self, live: Live) -> None:
        w = self.workload
        until = time.monotonic() + w.duration if w.duration else None

        async def show() -> None:
            while True:
                live.appends, live.acks = self.appends, self.acks
                await asyncio.sleep(0.1)

        shower = asyncio.create_task(show())
        try:
            await asyncio.gather(
                *(self.run_one(i, until, w.appends_for_writer(i)) for i in range(w.writers))
            )
            if self._pending:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(w.drain_timeout):
                        await asyncio.gather(*self._pending, return_exceptions=True)
        finally:
            shower.cancel()
            live.appends, live.acks = self.appends, self.acks

    def result(self, append_s: float) -> dict[str, Any]:
        return {
            "appends": self.appends,
            "acks": self.acks,
            "acks_per_s": round(self.acks / max(append_s, 1e-9), 1),
            "errors": self.errors,
            "error_samples": self.error_samples,
            "max_behind_ms": round(self.max_behind_s * 1000, 2),
            "ack_latency_ms": self.ack_latency.summary_ms(),
        }


async def create_stream(client: httpx.AsyncClient, path: str) -> None:
    try:
        response = await client.put(path, headers={"content-type": "application/json"})
    except httpx.HTTPError as exc:
        raise BenchError(f"cannot reach {client.base_url}: {exc}") from None
    if response.status_code not in (200, 201):
        raise BenchError(
            f"creating the stream {path}: HTTP {response.status_code} {response.text[:200]} "
            "(not a Durable Streams server?)"
        )


async def run_streams(
    base_url: str,
    workload: Workload,
    *,
    server_pid: int | None,
    live: Live,
    client_cpus: frozenset[int] | None = None,
) -> dict[str, Any]:
    """Run ``workload`` (scenario ``streams``) once against the server at
    ``base_url`` (``http://host:port``); the result as plain data."""
    path = workload.stream_path()
    limits = httpx.Limits(max_connections=WRITER_CONNECTIONS, max_keepalive_connections=8)
    result: dict[str, Any] = {
        "url": base_url,
        "writer_url": base_url,
        "server": {"stream": path, "live": workload.live},
    }
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as client:
        live.phase = "creating the stream"
        await create_stream(client, path)
        sampler = ServerSampler(server_pid) if server_pid else None
        rss_before = 0
        if sampler is not None:
            sampler.start()
            await asyncio.sleep(SETTLE_S)
            rss_before = sampler.rss()
        pool = WorkerPool(base_url, workload, live, client_cpus, target=dsreaders.main)
        generator = ServerSampler(os.getpid())
        writers = StreamWriters(client, path, workload)
        try:
            live.phase = f"connecting {workload.subscribers} {workload.live} readers"
            await pool.start()
            cpu_start = sampler.cpu() if sampler else 0.0
            generator_start = (generator.cpu(), time.monotonic())
            first_send_ns = time.time_ns()
            live.phase = "appending"
            live.started = time.monotonic()
            await writers.run(live)
            append_s = time.monotonic() - live.started
            live.phase = "draining"
            pool.send("targets", {"values": writers.acks})
            answers = await pool.expect("result")
            cpu_used = (sampler.cpu() - cpu_start) if sampler else None
            generator_cpu = generator.cpu() - generator_start[0]
            generator_wall = time.monotonic() - generator_start[1]
        finally:
            live.phase = "closing"
            await pool.stop()
            if sampler is not None:
                await sampler.stop()
        with contextlib.suppress(httpx.HTTPError):
            await client.delete(path)

    counters, latency = merge_answers(answers)
    window_s = max(1e-9, (counters.get("last_apply_ns", 0) - first_send_ns) / 1e9)
    delivered = counters.get("delivered", 0)
    result.update(
        {
            "append_s": round(append_s, 3),
            "first_send_ns": first_send_ns,
            "writers": writers.result(append_s),
            "delivery_window_s": round(window_s, 3),
            "delivered": delivered,
            "delivered_per_s": round(delivered / window_s, 1) if delivered else 0.0,
            "latency_ms": latency.summary_ms(),
            "groups": {"on-time": {**counters, "latency_ms": latency.summary_ms()}},
            "latency_curve_ms": latency.distribution_ms(list(CURVE_PERCENTILES)),
        }
    )
    # Values per answer: how much each long-poll answer (or SSE event) carried.
    frames = counters.get("frames", 0)
    result["streams"] = {
        "live": workload.live,
        "values_per_answer": round(delivered / frames, 2) if frames else None,
        "requests": counters.get("requests", 0),
        "reconnects": counters.get("reconnects", 0),
        "disconnects": counters.get("disconnects", 0),
    }
    result["generator_cpu"] = host.generator_cpu(
        generator_cpu, generator_wall, client_cpus, f"streams {workload.live}", True
    )
    if cpu_used is not None and sampler is not None:
        result["server_cpu"] = {
            "cpu_s": round(cpu_used, 3),
            "cpu_us_per_delivered": round(cpu_used * 1e6 / delivered, 2) if delivered else None,
            "cpu_share": round(cpu_used / window_s, 3),
            "rss_mb_start": round(rss_before / 2**20, 1),
            "rss_mb_peak": round(sampler.peak_rss / 2**20, 1),
        }
    return result
