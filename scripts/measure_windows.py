#!/usr/bin/env python3
"""Measure what issue 18 promises for long transcripts, with one command:

    .venv/bin/python scripts/measure_windows.py [--messages 100000] [--long 100]
        [--long-messages 10000] [--rounds 200] [--samples 10] [--json out.json]

1. Baselines: a ``tail 50`` subscribe to a transcript of ``--messages``
   messages against a whole subscribe to it and against a whole subscribe to
   a 50-message transcript: the server process's CPU per baseline (each at a
   fresh revision, so nothing is served from the per-revision cache; see
   ``baseline_cost``) and the baseline's bytes. Target: the tail within 2x
   of the 50-message transcript.
2. Memory: the server's RSS with ``--long`` transcripts of
   ``--long-messages`` messages each loaded (one tail subscriber each),
   with ``live_messages=0`` (every message kept: before trimming) and with
   the default (after).
3. ``load_earlier(500)``: the Python client's time to widen a tail-50 mirror
   of the long transcript by 500 messages, ``--samples`` times.

It writes the data straight into a SQLite data folder (fast), then starts
``tsync serve`` on it as a subprocess (on 127.0.0.1) for each part. Run it on
a quiet machine; it takes a few minutes with the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402
import websockets  # noqa: E402

import client_py  # noqa: E402
from protocol import wire  # noqa: E402
from protocol.types import Message, MessagesAppended, TranscriptEvent  # noqa: E402
from server.store.base import NewTranscript  # noqa: E402
from server.store.sqlite import SQLiteStore  # noqa: E402

BATCH = 1000
BIG, SMALL = "long-100k", "short-50"


def message(i: int) -> Message:
    role = "user" if i % 2 == 0 else "assistant"
    return Message(role=role, content=f"message {i}: " + "lorem ipsum dolor sit amet " * 6)


async def write(folder: Path, transcripts: dict[str, int]) -> None:
    """Write ``{id: length}`` straight into the data folder's SQLite store."""
    store = SQLiteStore(folder)
    await store.open()
    try:
        for tid, length in transcripts.items():
            epoch = "e-" + tid
            await store.create(NewTranscript(tid, epoch, 0))
            events = []
            for revision, start in enumerate(range(0, length, BATCH), 1):
                batch = tuple(message(start + i) for i in range(min(BATCH, length - start)))
                change = MessagesAppended(start, batch)
                events.append((TranscriptEvent(tid, epoch, revision, revision, change), None))
            for i in range(0, len(events), 50):
                for outcome in await store.append_many(events[i : i + 50]):
                    if isinstance(outcome, Exception):
                        raise outcome
    finally:
        await store.close()


class Server:
    """``tsync serve`` on the data folder, on a free port of 127.0.0.1."""

    def __init__(self, folder: Path, **settings: Any) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {**os.environ, **{f"TSYNC_{k.upper()}": str(v) for k, v in settings.items()}}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.run.cli", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--store", f"sqlite:{folder}", "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.process = psutil.Process(self.proc.pid)
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}/v1/ws"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=0.5).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the server did not start")

    def cpu(self) -> float:
        times = self.process.cpu_times()
        return float(times.user + times.system)

    def rss_mb(self) -> float:
        return round(self.process.memory_info().rss / 2**20, 1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def baseline_cost(
    server: Server, tid: str, window: dict[str, Any] | None, rounds: int
) -> dict[str, Any]:
    """Server CPU and bytes of ``rounds`` fresh baselines, each at a new
    revision (a View moved before each: none is served from the cache, and
    the transcript keeps its length).

    The process's CPU clock ticks too coarsely for one baseline, so the CPU
    of ``rounds`` View moves alone is measured first and taken off the CPU of
    ``rounds`` moves each followed by a subscribe on a new connection."""
    sizes: list[int] = []
    wall: list[float] = []
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:

        async def probe(i: int) -> None:
            # A View moved back and forth: a new revision, no new message.
            body = {"start": i % 2}
            assert (await http.put(f"/v1/transcripts/{tid}/views/probe", json=body)).is_success

        began = server.cpu()
        for i in range(rounds):
            await probe(i)
        appends_only = server.cpu() - began

        began = server.cpu()
        for i in range(rounds):
            await probe(rounds + i)
            async with websockets.connect(server.ws_url, max_size=None) as ws:
                op: dict[str, Any] = {"op": "subscribe", "transcriptId": tid}
                if window is not None:
                    op["window"] = window
                sent = time.perf_counter()
                await ws.send(json.dumps(op))
                raw = await ws.recv()
                wall.append((time.perf_counter() - sent) * 1000)
                frame = wire.accept_transcript_update(raw)
                assert isinstance(frame, wire.Baseline), frame
                sizes.append(len(raw))
        with_baselines = server.cpu() - began
    return {
        "window": window,
        "rounds": rounds,
        "server_cpu_ms_per_baseline": round((with_baselines - appends_only) * 1000 / rounds, 3),
        "wall_ms_median": round(statistics.median(wall), 2),
        "bytes": max(sizes),
    }


async def memory(server: Server, ids: list[str]) -> dict[str, Any]:
    before = server.rss_mb()
    async with client_py.connect(server.ws_url, request_timeout=120) as client:
        for tid in ids:
            await client.subscribe(tid, window={"tail": 50})
        await asyncio.sleep(1)  # let the allocator settle before reading RSS
        loaded = server.rss_mb()
    return {"rss_mb_empty": before, "rss_mb_loaded": loaded}


async def load_earlier(server: Server, tid: str, samples: int) -> dict[str, Any]:
    times: list[float] = []
    async with client_py.connect(server.ws_url, request_timeout=60) as client:
        mirror = await client.subscribe(tid, window={"tail": 50})
        for _ in range(samples):
            began = time.perf_counter()
            added = await mirror.load_earlier(500)
            times.append((time.perf_counter() - began) * 1000)
            assert added == 500, added
    return {
        "samples_ms": [round(t, 2) for t in times],
        "median_ms": round(statistics.median(times), 2),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"messages": args.messages}
    with tempfile.TemporaryDirectory(prefix="tsync-windows-") as tmp:
        folder = Path(tmp) / "data"
        long_ids = [f"long-{i}" for i in range(args.long)]
        print(f"writing {args.messages:,} + 50 + {args.long} x {args.long_messages:,} messages")
        await write(
            folder,
            {BIG: args.messages, SMALL: 50} | dict.fromkeys(long_ids, args.long_messages),
        )

        server = Server(folder)
        try:
            print("baselines ...")
            result["baselines"] = {
                "tail_50_of_big": await baseline_cost(server, BIG, {"tail": 50}, args.rounds),
                "whole_small": await baseline_cost(server, SMALL, None, args.rounds),
                "whole_big": await baseline_cost(server, BIG, None, max(3, args.rounds // 20)),
            }
            print("load_earlier(500) ...")
            result["load_earlier_500"] = await load_earlier(server, BIG, args.samples)
        finally:
            server.stop()
        tail = result["baselines"]["tail_50_of_big"]["server_cpu_ms_per_baseline"]
        small = result["baselines"]["whole_small"]["server_cpu_ms_per_baseline"]
        result["tail_over_small"] = round(tail / small, 2) if small else None

        for name, settings in (("before_trimming", {"live_messages": 0}), ("after", {})):
            print(f"memory {name} ...")
            server = Server(folder, idle_ttl_s=3600, **settings)
            try:
                result[f"memory_{name}"] = await memory(server, long_ids)
            finally:
                server.stop()
    return result


def markdown(result: dict[str, Any]) -> str:
    b = result["baselines"]
    rows = [
        "| baseline | server CPU per baseline (ms) | wall (median ms) | bytes |",
        "|---|---|---|---|",
        *(
            f"| {name} | {v['server_cpu_ms_per_baseline']} | {v['wall_ms_median']} | "
            f"{v['bytes']:,} |"
            for name, v in b.items()
        ),
        "",
        f"tail 50 of {result['messages']:,} / whole 50-message: {result['tail_over_small']}x "
        "(target: within 2x)",
        f"load_earlier(500): median {result['load_earlier_500']['median_ms']} ms",
        f"RSS with the long transcripts loaded: {result['memory_before_trimming']} (every "
        f"message kept) vs {result['memory_after']} (live_messages default)",
    ]
    return "\n".join(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--long", type=int, default=100, help="long transcripts for RSS")
    parser.add_argument("--long-messages", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=10, help="load_earlier(500) calls")
    parser.add_argument("--rounds", type=int, default=200, help="baselines timed per kind")
    parser.add_argument("--json", type=Path, help="write the result here too")
    arguments = parser.parse_args()
    outcome = asyncio.run(main(arguments))
    print(json.dumps(outcome, indent=2))
    print(markdown(outcome))
    if arguments.json:
        arguments.json.write_text(json.dumps(outcome, indent=2))
