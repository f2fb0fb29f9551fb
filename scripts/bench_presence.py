#!/usr/bin/env python3
"""What presence costs: 1,000 subscribers joining one transcript within one
second, with presence and without (issue 29).

Starts ``tsync serve`` (memory store) as a subprocess, optionally pinned to
one CPU, opens N raw WebSocket connections in this process (pinned to the
other CPU; the cheap clients of ``measure_delivery.py``), then, spread evenly
over ``--window`` seconds, each sends its join: ``subscribe`` (with
``presence: true`` and a ``presence`` op stating ``{"typing": false}`` in the
presence runs; the bare ``subscribe`` in the baseline runs). The server's CPU
seconds (``/proc/<pid>/schedstat``, else ``psutil``) are taken from the first
join until ``--settle`` seconds after the last (the same wall time in both kinds of run, so that
idle costs cancel), after checking that every subscriber got its baseline
and, with presence, a last presence frame that counts all N members.

Reported per kind of run (median of ``--reps``, the runs alternating):
server CPU for the joins, and with presence the presence frames each
subscriber got within the join window (mean, max) and in all.

    python scripts/bench_presence.py --subscribers 1000 --reps 3 --server-cpu 0 --client-cpu 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_delivery import ROOT, Counter, free_port, start_server

PRESENCE = b'"type":"presence"'
BASELINE = b'"type":"baseline"'
COUNTS = re.compile(rb'"counts":\{"viewers":(\d+),"writers":(\d+),"agents":(\d+)\}')


class Joiner(Counter):
    """A ``Counter`` that also counts presence frames (by when they came) and
    remembers the last counts it was sent."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.baselines = 0
        self.presence_at: list[float] = []
        self.last_total = -1
        self.text = b""

    def data_received(self, data: bytes) -> None:
        if not self.handshaken:
            super().data_received(data)
            return
        now = time.monotonic()
        chunk = self.text + data
        self.presence_at += [now] * (chunk.count(PRESENCE) - self.text.count(PRESENCE))
        self.baselines += chunk.count(BASELINE) - self.text.count(BASELINE)
        for found in COUNTS.finditer(chunk):
            self.last_total = sum(int(n) for n in found.groups())
        self.text = chunk[-96:]


def cpu_seconds(proc: psutil.Process) -> float:
    """The process's CPU time: from ``/proc/<pid>/schedstat`` (nanoseconds,
    Linux) where there is one, else ``psutil`` (clock ticks: 10 ms)."""
    try:
        with open(f"/proc/{proc.pid}/schedstat") as stat:
            return int(stat.read().split()[0]) / 1e9
    except OSError:
        times = proc.cpu_times()
        return float(times.user + times.system)


async def join_ready(port: int, url: str) -> Joiner:
    """A connection, handshaken, that has not joined yet."""
    _, conn = await asyncio.get_running_loop().create_connection(
        lambda: Joiner(url), "127.0.0.1", port
    )
    await asyncio.wait_for(conn.open, 30)
    return conn


async def one_run(args: argparse.Namespace, presence: bool) -> dict[str, float]:
    port = free_port()
    args.set = [f"presence_interval_s={args.interval}", "max_ops_per_second=1000000"]
    proc = start_server(args, port)
    server = psutil.Process(proc.pid)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            r = await http.post(
                "/v1/transcripts",
                json={"id": "room", "messages": [{"role": "user", "content": "hello"}]},
            )
            r.raise_for_status()
        url = f"ws://127.0.0.1:{port}/v1/ws"
        conns: list[Joiner] = []
        for start in range(0, args.subscribers, 100):
            batch = range(start, min(start + 100, args.subscribers))
            conns += await asyncio.gather(*(join_ready(port, url) for _ in batch))
        await asyncio.sleep(0.5)
        before = cpu_seconds(server)
        began = time.monotonic()
        joined_at: list[float] = []
        for i, conn in enumerate(conns):
            due = began + args.window * i / len(conns)
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            joined_at.append(time.monotonic())
            conn.send({"op": "subscribe", "transcriptId": "room", "presence": presence})
            if presence:
                op = {"op": "presence", "transcriptId": "room", "name": f"u{i}"}
                conn.send({**op, "state": {"typing": False}})
        await asyncio.sleep(max(0.0, began + args.window + args.settle - time.monotonic()))
        after = cpu_seconds(server)
        missing = sum(1 for c in conns if c.baselines < 1)
        if missing:
            raise SystemExit(f"{missing} subscribers got no baseline")
        result = {"cpu_s": after - before, "join_span_s": joined_at[-1] - began}
        if presence:
            short = sum(1 for c in conns if c.last_total != len(conns))
            if short:
                raise SystemExit(f"{short} subscribers' last presence frame missed members")
            end = began + args.window
            within = [sum(1 for t in c.presence_at if t <= end) for c in conns]
            late = [len(c.presence_at) for c in conns]
            result |= {
                "frames_in_window_mean": statistics.fmean(within),
                "frames_in_window_max": float(max(within)),
                "frames_total_mean": statistics.fmean(late),
                "frames_total_max": float(max(late)),
            }
        for conn in conns:
            if conn.transport is not None:
                conn.transport.close()
        return result
    finally:
        proc.terminate()
        proc.wait(10)


async def main(args: argparse.Namespace) -> None:
    if args.client_cpu is not None:
        os.sched_setaffinity(0, {args.client_cpu})
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for rep in range(args.reps):
        for presence in (False, True):
            result = await one_run(args, presence)
            runs[presence].append(result)
            kind = "presence" if presence else "plain"
            print(f"rep {rep + 1} {kind}: {result}", file=sys.stderr, flush=True)
    plain = statistics.median(r["cpu_s"] for r in runs[False])
    with_presence = statistics.median(r["cpu_s"] for r in runs[True])
    print(f"subscribers {args.subscribers}, joins over {args.window} s, interval {args.interval} s")
    print(f"server CPU for the joins, plain:    {plain:.3f} s (median of {args.reps})")
    print(f"server CPU for the joins, presence: {with_presence:.3f} s")
    print(f"ratio presence / plain: {with_presence / plain:.2f}x")
    span = max(r["join_span_s"] for rs in runs.values() for r in rs)
    print(f"longest join span (first to last join sent): {span:.2f} s")
    for key in ("frames_in_window_mean", "frames_in_window_max", "frames_total_mean"):
        value = statistics.median(r[key] for r in runs[True])
        print(f"presence {key.replace('_', ' ')}: {value:.2f}")
    print(f"presence frames total max: {max(r['frames_total_max'] for r in runs[True]):.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--window", type=float, default=1.0, help="seconds the joins span")
    parser.add_argument("--settle", type=float, default=2.5, help="seconds measured after them")
    parser.add_argument("--interval", type=float, default=1.0, help="presence_interval_s")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--server-cpu", type=int, default=None)
    parser.add_argument("--client-cpu", type=int, default=None)
    parser.add_argument("--tree", default=str(ROOT), help="the source tree to serve")
    parser.add_argument("--store", default="memory")
    parser.add_argument("--broadcast", action="store_true", help=argparse.SUPPRESS)
    asyncio.run(main(parser.parse_args()))
