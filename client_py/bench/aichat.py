"""``tsync bench aichat``: one reply read by many, through the AI SDK's
``WebSocketChatTransport`` protocol (``/v1/ai/chat``) beside plain draft
frames (``/v1/ws``), in the same run.

Each of the two legs works the same way on a transcript of its own: an agent
(one ``/v1/ws`` connection) opens a reply, a draft written with UI message
chunks (``start``, ``start-step``, ``text-start``); ``--subscribers``
readers over ``--procs`` processes join it; then the agent writes
``text-delta`` chunks at ``--rate`` chunks/s (open loop) for ``--duration``
seconds (or ``--count`` chunks). A chunk's delta is ``T<ns>;<n>;``: the time
it was due and its number, so every reader counts each chunk once (a repeat,
a chunk missing) and times its delivery.

- ``draft frames``: the readers are ``/v1/ws`` subscribers of the
  transcript; each draft frame brings the chunks (``chunks``).
- ``ai chat``: the readers are ``/v1/ai/chat`` connections, each sending the
  transport's ``resume`` for the chat: ``start``, the reply from sequence 0
  (its compacted chunks), then every chunk live as a ``chunk`` frame; a
  ``sequence`` that skips is a gap.

Each leg reports what the other scenarios do (``groups["on-time"]``,
latency, server CPU per delivered chunk with ``--server-pid``, the
generator's own CPU); the ``ai chat`` leg is the target and ``draft frames``
the baseline of the run's ratios.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from multiprocessing.connection import Connection
from typing import Any, Final

import httpx
import websockets

from client_py.bench import host
from client_py.bench.channel import Channel
from client_py.bench.fastsocket import FastSocket
from client_py.bench.histogram import LatencyHistogram
from client_py.bench.reader_worker import serve_readers
from client_py.bench.run import CURVE_PERCENTILES, SETTLE_S, BenchError, Live, WorkerPool
from client_py.bench.sampler import ServerSampler
from client_py.bench.stats import merge_answers
from client_py.bench.workload import Workload
from client_py.http import endpoints
from protocol import wire

__all__ = ["LEGS", "Reader", "ReaderStats", "main", "run_aichat"]

#: The two ways the reply is read: (label, path).
LEGS: Final = (("draft frames", "/v1/ws"), ("ai chat", "/v1/ai/chat"))
AI_PATH: Final = "/v1/ai/chat"
DRAFT_ID: Final = "reply"
#: A chunk's delta: the time it was due (ns) and its number.
TOKEN_RE: Final = re.compile(rb"T(\d{19});(\d+);")
SEQUENCE_RE: Final = re.compile(rb'"sequence": ?(\d+)')
START_RE: Final = re.compile(rb'"type": ?"start"')
PROGRESS_INTERVAL_S: Final = 0.5

OPENING: Final = [
    {"type": "start", "messageId": "bench-reply"},
    {"type": "start-step"},
    {"type": "text-start", "id": "t"},
]


def draft_op(transcript_id: str, chunks_json: str) -> str:
    """A ``draft`` op adding ``chunks_json`` (built by hand: the agent stays cheap)."""
    return (
        f'{{"op":"draft","transcriptId":"{transcript_id}","draftId":"{DRAFT_ID}",'
        f'"chunks":{chunks_json}}}'
    )


def delta_chunk(due_ns: int, number: int) -> str:
    return f'[{{"type":"text-delta","id":"t","delta":"T{due_ns:019d};{number};"}}]'


# --- the readers (a worker process) ------------------------------------------------


class ReaderStats:
    def __init__(self) -> None:
        self.delivered = 0
        self.repeats = 0
        self.gaps = 0
        self.errors = 0
        self.disconnects = 0
        self.frames = 0
        self.last_apply_ns = 0
        self.latency = LatencyHistogram()


class Reader:
    """One reader of the reply: a ``/v1/ws`` subscriber or a ``/v1/ai/chat``
    connection that resumed the chat."""

    def __init__(self, url: str, transcript_id: str, ai: bool, stats: ReaderStats) -> None:
        self.url = url
        self.transcript_id = transcript_id
        self.ai = ai
        self.stats = stats
        self.socket: FastSocket | None = None
        self.ready = asyncio.Event()
        self.done = asyncio.Event()
        self.next = 0
        self.sequence = -1
        self.target: int | None = None

    async def open(self) -> None:
        sub = None if self.ai else wire.SUBPROTOCOL_JSON
        self.socket = await FastSocket.connect(self.url, self.on_message, subprotocol=sub)
        self.socket.closed.add_done_callback(self._closed)
        if self.ai:
            frame = {
                "type": "resume",
                "requestId": "r1",
                "id": self.transcript_id,
                "headers": {},
                "body": {},
            }
        else:
            frame = {"op": "subscribe", "transcriptId": self.transcript_id}
        self.socket.send(json.dumps(frame).encode())

    def _closed(self, _: Any) -> None:
        if not self.done.is_set():
            self.stats.disconnects += 1
            self.done.set()

    def on_message(self, data: bytes) -> None:
        stats = self.stats
        now = time.time_ns()
        stats.frames += 1
        if self.ai:
            match = SEQUENCE_RE.search(data)
            if match is None:
                if START_RE.search(data) is None:  # end, error, no-active
                    stats.errors += 1
                return
            sequence = int(match.group(1))
            if sequence != self.sequence + 1:
                stats.gaps += 1
            self.sequence = sequence
            self.ready.set()
        elif not self.ready.is_set():
            if b'"draftId"' not in data:
                return  # the subscription's baseline
            self.ready.set()
        # A draft frame carries a chunk's text twice (its ``delta`` and its
        # ``chunks``): each number counts once per frame.
        tokens = {int(m.group(2)): int(m.group(1)) for m in TOKEN_RE.finditer(data)}
        for number, due_ns in tokens.items():
            if number == self.next:
                self.next += 1
                stats.delivered += 1
                stats.latency.record_ns(max(0, now - due_ns))
                stats.last_apply_ns = now
            elif number < self.next:
                stats.repeats += 1
            else:
                stats.gaps += 1
                self.next = number + 1
        if self.target is not None and self.next >= self.target:
            self.done.set()

    def set_target(self, owed: int) -> None:
        self.target = owed
        if self.next >= owed:
            self.done.set()

    async def close(self) -> None:
        self.done.set()
        if self.socket is not None:
            await self.socket.close()


def main(
    url: str,
    workload: Workload,
    indices: list[int],
    conn: Connection,
    cpus: frozenset[int] | None = None,
) -> None:
    """A worker process (``run.WorkerPool``'s target): ``len(indices)``
    readers of the leg ``url`` names (its path: ``/v1/ws`` or ``/v1/ai/chat``).

    Says ``ready`` once every reader joined the reply; ``targets`` (chunks
    owed) -> reads until each has them or the drain timeout -> ``result``;
    ``stop`` closes everything."""
    if cpus:
        host.pin_self(cpus)
    host.run(_Worker(url, workload, len(indices), conn).run(), fast=True)


class _Worker:
    def __init__(self, url: str, workload: Workload, count: int, conn: Connection) -> None:
        self.channel = Channel(conn)
        self.stats = ReaderStats()
        self.drain_timeout = workload.drain_timeout
        ai = url.rstrip("/").endswith(AI_PATH)
        tid = workload.writer_transcript(0)
        self.readers = [Reader(url, tid, ai, self.stats) for _ in range(count)]
        self.incomplete = 0
        self.missing = 0

    async def run(self) -> None:
        await serve_readers(
            self.channel,
            self.readers,
            owed_key="chunks",
            timeout_s=self.drain_timeout + 30,
            progress=self._progress(),
            drain=self._drain,
            result=self._result,
        )

    async def _drain(self, owed: int) -> None:
        for reader in self.readers:
            reader.set_target(owed)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.drain_timeout):
                await asyncio.gather(*(r.done.wait() for r in self.readers))
        for reader in self.readers:
            if reader.next < owed:
                self.incomplete += 1
                self.missing += owed - reader.next

    def _result(self, owed: int) -> dict[str, Any]:
        s = self.stats
        counters = {
            "subscribers": len(self.readers),
            "expected": owed * len(self.readers),
            "delivered": s.delivered,
            "repeats": s.repeats,
            "gaps": s.gaps,
            "errors": s.errors,
            "disconnects": s.disconnects,
            "incomplete": self.incomplete,
            "missing": self.missing,
            "frames": s.frames,
            "last_apply_ns": s.last_apply_ns,
        }
        return {"counters": counters, "latency": s.latency.encode()}

    async def _progress(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            s = self.stats
            with contextlib.suppress(OSError):
                self.channel.send(
                    "progress",
                    {
                        "on-time": {
                            "delivered": s.delivered,
                            "problems": s.repeats + s.gaps + s.errors,
                            "lagged": 0,
                        }
                    },
                )


# --- the harness -------------------------------------------------------------------


class _Agent:
    """The reply's writer: one ``/v1/ws`` connection sending ``draft`` ops."""

    def __init__(self, ws_url: str, transcript_id: str, workload: Workload) -> None:
        self.ws_url = ws_url
        self.transcript_id = transcript_id
        self.workload = workload
        self.chunks = 0
        self.max_behind_s = 0.0

    async def __aenter__(self) -> _Agent:
        self.ws = await websockets.connect(
            self.ws_url, subprotocols=[websockets.Subprotocol(wire.SUBPROTOCOL_JSON)]
        )
        await self.ws.send(draft_op(self.transcript_id, json.dumps(OPENING)))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.ws.close()

    async def write(self, live: Live) -> None:
        w = self.workload
        assert w.rate is not None
        interval = 1.0 / w.rate
        until = time.monotonic() + w.duration if w.duration else None
        start_mono, start_ns = time.monotonic(), time.time_ns()
        while w.count is None or self.chunks < w.count:
            due = start_mono + self.chunks * interval
            if until is not None and due >= until:
                break
            now = time.monotonic()
            if due > now:
                await asyncio.sleep(due - now)
            else:
                self.max_behind_s = max(self.max_behind_s, now - due)
            due_ns = start_ns + int(self.chunks * interval * 1e9)
            await self.ws.send(draft_op(self.transcript_id, delta_chunk(due_ns, self.chunks)))
            self.chunks += 1
            live.appends = self.chunks


async def _leg(
    http: httpx.AsyncClient,
    ws_url: str,
    reader_url: str,
    workload: Workload,
    *,
    server_pid: int | None,
    live: Live,
    client_cpus: frozenset[int] | None,
) -> dict[str, Any]:
    tid = workload.writer_transcript(0)
    response = await http.post("/v1/transcripts", json={"id": tid})
    if response.status_code != 201:
        raise BenchError(f"creating {tid}: HTTP {response.status_code} {response.text[:200]}")
    sampler = ServerSampler(server_pid) if server_pid else None
    result: dict[str, Any] = {"url": reader_url, "writer_url": ws_url}
    async with _Agent(ws_url, tid, workload) as agent:
        pool = WorkerPool(reader_url, workload, live, client_cpus, target=main)
        generator = ServerSampler(os.getpid())
        try:
            live.phase = f"connecting {workload.subscribers} readers to {reader_url}"
            await pool.start()
            if sampler is not None:
                sampler.start()
                await asyncio.sleep(SETTLE_S)
            cpu_start = sampler.cpu() if sampler else 0.0
            generator_start = (generator.cpu(), time.monotonic())
            first_send_ns = time.time_ns()
            live.phase = "writing the reply"
            live.started = time.monotonic()
            await agent.write(live)
            append_s = time.monotonic() - live.started
            live.phase = "draining"
            pool.send("targets", {"chunks": agent.chunks})
            answers = await pool.expect("result")
            cpu_used = (sampler.cpu() - cpu_start) if sampler else None
            generator_cpu = generator.cpu() - generator_start[0]
            generator_wall = time.monotonic() - generator_start[1]
            rss_peak = sampler.peak_rss if sampler else 0
        finally:
            live.phase = "closing"
            await pool.stop()
            if sampler is not None:
                await sampler.stop()
    with contextlib.suppress(httpx.HTTPError):
        await http.delete(f"/v1/transcripts/{tid}")

    counters, latency = merge_answers(answers)
    window_s = max(1e-9, (counters.get("last_apply_ns", 0) - first_send_ns) / 1e9)
    delivered = counters.get("delivered", 0)
    result.update(
        {
            "append_s": round(append_s, 3),
            "writers": {
                "chunks": agent.chunks,
                "chunks_per_s": round(agent.chunks / max(append_s, 1e-9), 1),
                "max_behind_ms": round(agent.max_behind_s * 1000, 2),
            },
            "delivery_window_s": round(window_s, 3),
            "delivered": delivered,
            "delivered_per_s": round(delivered / window_s, 1) if delivered else 0.0,
            "latency_ms": latency.summary_ms(),
            "groups": {"on-time": {**counters, "latency_ms": latency.summary_ms()}},
            "latency_curve_ms": latency.distribution_ms(list(CURVE_PERCENTILES)),
        }
    )
    result["generator_cpu"] = host.generator_cpu(
        generator_cpu, generator_wall, client_cpus, "chunk numbers", True
    )
    if cpu_used is not None:
        result["server_cpu"] = {
            "cpu_s": round(cpu_used, 3),
            "cpu_us_per_delivered": round(cpu_used * 1e6 / delivered, 2) if delivered else None,
            "cpu_share": round(cpu_used / window_s, 3),
            "rss_mb_peak": round(rss_peak / 2**20, 1),
        }
    return result


async def run_aichat(
    url: str,
    workload: Workload,
    *,
    server_pid: int | None,
    live: Live,
    client_cpus: frozenset[int] | None = None,
) -> list[dict[str, Any]]:
    """Both legs against the server at ``url`` (its ``/v1/ws`` URL), draft
    frames first; one run (a result dict) per leg, labelled."""
    http_base, ws_url = endpoints(url)
    runs = []
    async with httpx.AsyncClient(base_url=http_base, timeout=60) as http:
        for i, (label, path) in enumerate(LEGS):
            reader_url = ws_url if path == "/v1/ws" else ws_url.removesuffix("/v1/ws") + path
            run = await _leg(
                http,
                ws_url,
                reader_url,
                workload.with_run_id(f"{workload.run_id}{i}"),
                server_pid=server_pid,
                live=live,
                client_cpus=client_cpus,
            )
            run["label"] = label
            runs.append(run)
    return runs
