"""One benchmark run against one server: set up, spawn the subscribers' processes,
drive the writers, collect and merge what everybody saw.

``run_workload`` returns a plain dict (the ``runs[i]`` of the JSON result);
``report.judge`` decides whether the server behaved.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import msgspec
from websockets.asyncio.client import connect

from client_py.bench import host, worker
from client_py.bench.channel import Channel
from client_py.bench.histogram import LatencyHistogram
from client_py.bench.idle import hold
from client_py.bench.sampler import ServerSampler
from client_py.bench.stats import GroupStats
from client_py.bench.subscriber import Subscriber
from client_py.bench.workload import Workload, filler, window_of
from client_py.bench.writer import Writer, WriterStats
from protocol import wire

SETTLE_S = 1.0  # let the server's memory settle before reading RSS
FILL_BATCH = 500  # messages per append when filling the catchup transcript
BASELINE_SAMPLES = 5  # fresh subscribes timed on the catchup transcript
CURVE_PERCENTILES = (0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.99, 100.0)


class BenchError(Exception):
    """The run could not be carried out (server unreachable, a worker died, ...)."""


@dataclass
class Live:
    """What the progress display shows; updated as the run goes."""

    label: str = ""
    phase: str = "starting"
    started: float = field(default_factory=time.monotonic)
    appends: int = 0
    acks: int = 0
    delivered: dict[int, int] = field(default_factory=dict)  # per worker
    problems: dict[int, int] = field(default_factory=dict)
    lagged: dict[int, int] = field(default_factory=dict)


def http_base(ws_url: str) -> str:
    """``ws://host:port/v1/ws`` -> ``http://host:port``."""
    parts = urlsplit(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme)
    if scheme is None:
        raise BenchError(f"not a WebSocket URL: {ws_url!r} (expected ws://host:port/v1/ws)")
    return urlunsplit((scheme, parts.netloc, "", "", ""))


def _http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        status = exc.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


async def probe(ws_url: str) -> dict[str, Any]:
    """``GET /healthz``: is anybody there, and does it create transcripts on first use?"""
    base = http_base(ws_url)
    try:
        status, body = await asyncio.to_thread(_http, "GET", base + "/healthz")
    except OSError as exc:
        raise BenchError(f"cannot reach {base}/healthz: {exc}") from None
    if status != 200 or not isinstance(body, dict):
        raise BenchError(f"{base}/healthz answered {status}: not a transcript-sync server")
    return body


async def create_transcripts(ws_url: str, ids: list[str]) -> None:
    base = http_base(ws_url)
    for tid in ids:
        status, body = await asyncio.to_thread(_http, "POST", base + "/v1/transcripts", {"id": tid})
        if status not in (200, 201):
            raise BenchError(f"creating transcript {tid!r}: HTTP {status} {body}")


async def fill(ws_url: str, transcript_id: str, messages: int, size: int) -> None:
    """Append ``messages`` messages of ``size`` bytes in batches (catchup scenario)."""
    content = filler(size)
    async with connect(ws_url, compression=None, max_size=None) as ws:
        done = 0
        while done < messages:
            n = min(FILL_BATCH, messages - done)
            op = {
                "op": "append",
                "transcriptId": transcript_id,
                "ref": done,
                "messages": [{"role": "user", "content": content}] * n,
            }
            await ws.send(msgspec.json.encode(op), text=True)
            while True:
                frames = [
                    wire.accept_transcript_update(f) for f in wire.split_frames(await ws.recv())
                ]
                if any(isinstance(f, wire.ErrorFrame) for f in frames):
                    raise BenchError(f"filling {transcript_id!r}: {frames}")
                if any(isinstance(f, wire.Ack) for f in frames):
                    break
            done += n


async def time_baselines(
    ws_url: str, transcript_id: str, samples: int, window: str | None = None
) -> dict[str, Any]:
    """Fresh subscribes to a big transcript, one after the other: connect ->
    baseline (of ``window``, a ``--window`` spec) received and validated."""
    times: list[float] = []
    sizes: list[int] = []
    for _ in range(samples):
        sub = Subscriber(ws_url, transcript_id, GroupStats(), window_of(window))
        started = time.perf_counter()
        await sub.open()
        async with asyncio.timeout(60):
            await sub.ready.wait()
        times.append((time.perf_counter() - started) * 1000)
        sizes.append(sub.since_connect_bytes)
        await sub.close()
    return {
        "samples_ms": [round(t, 2) for t in times],
        "median_ms": round(statistics.median(times), 2),
        "bytes": max(sizes),
    }


class WorkerPool:
    """The subscribers' processes and their pipes."""

    def __init__(
        self,
        ws_url: str,
        workload: Workload,
        live: Live,
        cpus: frozenset[int] | None = None,
        target: Callable[..., None] = worker.main,
    ) -> None:
        """``target(ws_url, workload, indices, conn, cpus)`` runs in each
        process (``worker.main``; ``dsreaders.main`` for Durable Streams)."""
        self.live = live
        self.timeout = workload.drain_timeout + 60
        context = multiprocessing.get_context("spawn")
        self.procs: list[Any] = []
        self.channels: list[Channel] = []
        self.replies: list[asyncio.Queue[tuple[str, Any]]] = []
        for chunk in workload.chunks():
            if not chunk:
                continue
            ours, theirs = context.Pipe()
            proc = context.Process(
                target=target, args=(ws_url, workload, chunk, theirs, cpus), daemon=True
            )
            self.procs.append(proc)
            self.channels.append(Channel(ours))
            self.replies.append(asyncio.Queue())
        self._pumps: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for proc in self.procs:
            proc.start()
        for i, channel in enumerate(self.channels):
            channel.start()
            self._pumps.append(asyncio.create_task(self._pump(i, channel)))
        await self.expect("ready")

    async def _pump(self, i: int, channel: Channel) -> None:
        while True:
            kind, payload = await channel.recv()
            if kind == "progress":
                groups = payload.values()
                self.live.delivered[i] = sum(g["delivered"] for g in groups)
                self.live.problems[i] = sum(g["problems"] for g in groups)
                self.live.lagged[i] = sum(g["lagged"] for g in groups)
                continue
            await self.replies[i].put((kind, payload))
            if kind == "eof":
                return

    def send(self, kind: str, payload: Any = None) -> None:
        for channel in self.channels:
            channel.send(kind, payload)

    async def expect(self, kind: str) -> list[Any]:
        """Wait for every worker to answer ``kind``."""
        answers = []
        for i, queue in enumerate(self.replies):
            try:
                async with asyncio.timeout(self.timeout):
                    got, payload = await queue.get()
            except TimeoutError:
                raise BenchError(f"subscriber process {i} did not answer {kind!r}") from None
            if got != kind:
                detail = payload if isinstance(payload, str) else got
                raise BenchError(f"subscriber process {i} failed: {detail}")
            answers.append(payload)
        return answers

    async def stop(self) -> None:
        for channel in self.channels:
            with contextlib.suppress(OSError):
                channel.send("stop")
        deadline = time.monotonic() + 10
        for proc in self.procs:
            await asyncio.to_thread(proc.join, max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
        for task in self._pumps:
            task.cancel()
        for channel in self.channels:
            channel.close()


def merge_results(answers: list[dict[str, Any]]) -> tuple[dict[str, GroupStats], dict[str, Any]]:
    groups = {"on-time": GroupStats(), "stopped": GroupStats(), "paused": GroupStats()}
    resume_latency = LatencyHistogram()
    resume: dict[str, Any] = {"latency": resume_latency, "frames": 0, "bytes": 0, "baselines": 0}
    for answer in answers:
        for name, data in answer["groups"].items():
            groups[name].merge(data["counters"], data["latency"], data.get("token_latency", b""))
        resume_latency.merge_encoded(answer["resume"]["latency"])
        for key in ("frames", "bytes", "baselines"):
            resume[key] += answer["resume"][key]
    return groups, resume


async def run_workload(
    ws_url: str,
    workload: Workload,
    *,
    server_pid: int | None,
    live: Live,
    client_cpus: frozenset[int] | None = None,
    writer_url: str | None = None,
) -> dict[str, Any]:
    """Run ``workload`` once against ``ws_url``; the result as plain data."""
    info = await probe(ws_url)
    ids = workload.transcript_ids()
    if not info.get("createsOnUse"):
        live.phase = "creating transcripts"
        await create_transcripts(
            ws_url, ids + ([workload.big_transcript()] if workload.scenario == "catchup" else [])
        )
    result: dict[str, Any] = {
        "url": ws_url,
        "writer_url": writer_url or ws_url,
        "server": {k: v for k, v in info.items() if isinstance(v, str | int | bool)},
    }
    if workload.scenario == "catchup":
        live.phase = f"filling a {workload.baseline_messages}-message transcript"
        await fill(ws_url, workload.big_transcript(), workload.baseline_messages, workload.size)

    sampler = ServerSampler(server_pid) if server_pid else None
    if sampler is not None:
        sampler.start()
        await asyncio.sleep(SETTLE_S)
        rss_before = sampler.rss()
    pool = WorkerPool(ws_url, workload, live, client_cpus)
    # The generator's own CPU (this process and its subscriber processes):
    # a saturated generator measures itself, and every result says so.
    generator = ServerSampler(os.getpid())
    generator_cpu, generator_wall = 0.0, 0.0
    wstats = WriterStats()
    writers = [
        # Another replica's URL: every delivery crosses the store (Redis).
        Writer(
            writer_url or ws_url,
            workload.writer_transcript(w),
            w,
            workload.size,
            wstats,
            key_prefix=f"{workload.run_id}-w" if workload.keys else "",
        )
        for w in range(workload.writers)
    ]
    try:
        live.phase = f"connecting {workload.subscribers} subscribers"
        connect_started = time.monotonic()
        await pool.start()
        connect_s = time.monotonic() - connect_started
        if workload.scenario == "idle":
            result["idle"] = await _idle(
                pool, sampler, rss_before if sampler else 0, workload, generator, client_cpus
            )
            result["idle"]["connect_s"] = round(connect_s, 3)
            answers: list[dict[str, Any]] = []
            cpu_used = None
        else:
            await asyncio.gather(*(w.open() for w in writers))
            if workload.scenario == "catchup":
                live.phase = "subscribers disconnected"
                pool.send("disconnect")
                await pool.expect("disconnected")
            cpu_start = sampler.cpu() if sampler else 0.0
            generator_start = (generator.cpu(), time.monotonic())
            first_send_ns = time.time_ns()
            live.phase = "appending"
            live.started = time.monotonic()
            writing = _drive_writers(writers, workload, wstats, live)
            await writing
            for w in writers:
                await w.settle(workload.drain_timeout)
            append_s = time.monotonic() - live.started
            targets = {tid: wstats.revisions.get(tid, 0) for tid in ids}
            live.phase = "draining"
            pool.send("resume" if workload.scenario == "catchup" else "targets", targets)
            answers = await pool.expect("result")
            cpu_used = (sampler.cpu() - cpu_start) if sampler else None
            generator_cpu = generator.cpu() - generator_start[0]
            generator_wall = time.monotonic() - generator_start[1]
            result["append_s"] = round(append_s, 3)
            result["first_send_ns"] = first_send_ns
    finally:
        live.phase = "closing"
        await asyncio.gather(*(w.close() for w in writers), return_exceptions=True)
        await pool.stop()
        if sampler is not None:
            await sampler.stop()

    if workload.scenario == "idle":
        return result
    groups, resume = merge_results(answers)
    on_time = groups["on-time"]
    window_s = max(1e-9, (on_time.last_apply_ns - result["first_send_ns"]) / 1e9)
    delivered = on_time.delivered
    result.update(
        {
            "writers": {
                "appends": wstats.appends,
                "acks": wstats.acks,
                "acks_per_s": round(wstats.acks / max(result["append_s"], 1e-9), 1),
                "errors": wstats.errors,
                "error_samples": wstats.error_samples,
                "invalid": wstats.invalid,
                "seq_gaps": wstats.seq_gaps,
                "disconnects": wstats.disconnects,
                "max_behind_ms": round(wstats.max_behind_s * 1000, 2),
                "ack_latency_ms": wstats.ack_latency.summary_ms(),
                "final_revisions": dict(sorted(wstats.revisions.items())[:5]),
            },
            "delivery_window_s": round(window_s, 3),
            "delivered": delivered,
            "delivered_per_s": round(delivered / window_s, 1) if delivered else 0.0,
            "latency_ms": on_time.latency.summary_ms(),
            "groups": {
                name: {**g.counters(), "latency_ms": g.latency.summary_ms()}
                for name, g in groups.items()
                if g.subscribers
            },
        }
    )
    result["generator_cpu"] = host.generator_cpu(
        generator_cpu,
        generator_wall,
        client_cpus,
        "fast" if workload.fast else "full",
        workload.fast,
    )
    # The percentile curve of the on-time latency, for plots (HDR-style x axis).
    result["latency_curve_ms"] = on_time.latency.distribution_ms(list(CURVE_PERCENTILES))
    if cpu_used is not None and sampler is not None:
        result["server_cpu"] = {
            "cpu_s": round(cpu_used, 3),
            "cpu_us_per_delivered": round(cpu_used * 1e6 / delivered, 2) if delivered else None,
            "cpu_share": round(cpu_used / max(window_s, 1e-9), 3),
            "rss_mb_start": round(rss_before / 2**20, 1),
            "rss_mb_peak": round(sampler.peak_rss / 2**20, 1),
        }
    if workload.scenario == "stream":
        result["drafts"] = _drafts_result(
            workload, wstats, groups, window_s, cpu_used if sampler is not None else None
        )
    if workload.scenario == "catchup":
        subs = max(1, on_time.subscribers)
        result["catchup"] = {
            "behind": workload.behind,
            "resume_ms": resume["latency"].summary_ms(),
            "frames_per_resume": round(resume["frames"] / subs, 2),
            "bytes_per_resume": round(resume["bytes"] / subs),
            "baselines_on_resume": resume["baselines"],
        }
        live.phase = f"timing {workload.baseline_messages}-message baselines"
        result["catchup"]["baseline"] = {
            "messages": workload.baseline_messages,
            "window": workload.window,
            **await time_baselines(
                ws_url, workload.big_transcript(), BASELINE_SAMPLES, workload.window
            ),
        }
    return result


def _drafts_result(
    workload: Workload,
    wstats: WriterStats,
    groups: dict[str, GroupStats],
    window_s: float,
    cpu_used: float | None,
) -> dict[str, Any]:
    """The stream scenario's figures: tokens delivered and their latency
    beside the commits' (the increments of the same run), server CPU per
    token, and what the subscriber that paused got when it read again."""
    on_time = groups["on-time"]
    paused = groups["paused"]
    every = [g for g in groups.values() if g.subscribers]
    tokens = sum(g.tokens for g in every)
    token_ms = on_time.token_latency.summary_ms()
    commit_ms = on_time.latency.summary_ms()
    out: dict[str, Any] = {
        "tokens_per_draft": workload.tokens,
        "tokens_sent": wstats.tokens,
        "drafts": wstats.drafts,
        "tokens_delivered": tokens,
        "tokens_expected": sum(g.subscribers for g in every) * wstats.tokens,
        "tokens_per_s": round(tokens / window_s, 1),
        "token_latency_ms": token_ms,
        "commit_latency_ms": commit_ms,
        "token_p99_over_commit_p99": (
            round(token_ms["p99"] / commit_ms["p99"], 3)
            if token_ms.get("count") and commit_ms.get("count") and commit_ms["p99"]
            else None
        ),
        # 0.0 is a measurement too (psutil counts in clock ticks: a tiny run
        # may take none); None only when the server's CPU was not measured.
        "cpu_us_per_token": (
            round(cpu_used * 1e6 / tokens, 3) if cpu_used is not None and tokens else None
        ),
    }
    if paused.subscribers:
        out["paused"] = {
            "seconds": workload.pause_one,
            "backlog_frames": paused.backlog_frames,
            "backlog_text_frames": paused.backlog_texts,
            "drafts_final": paused.drafts_final,
            "mismatches": paused.draft_mismatches,
            "token_latency_ms": paused.token_latency.summary_ms(),
        }
    return out


async def _drive_writers(
    writers: list[Writer], workload: Workload, wstats: WriterStats, live: Live
) -> None:
    stop = asyncio.Event()
    if workload.scenario == "catchup":
        count: int | None = workload.behind
        until = None
        rate = None
    else:
        count = None
        until = time.monotonic() + workload.duration if workload.duration else None
        rate = workload.rate

    async def show() -> None:
        while True:
            live.appends, live.acks = wstats.appends, wstats.acks
            await asyncio.sleep(0.1)

    shower = asyncio.create_task(show())
    if workload.scenario == "stream":
        assert rate is not None
        try:
            await asyncio.gather(
                *(
                    w.stream_drafts(
                        rate=rate,
                        tokens=workload.tokens,
                        until=until,
                        count=workload.appends_for_writer(i),
                        stop=stop,
                    )
                    for i, w in enumerate(writers)
                )
            )
        finally:
            shower.cancel()
            live.appends, live.acks = wstats.appends, wstats.acks
        return
    try:
        await asyncio.gather(
            *(
                w.run(
                    rate=rate,
                    until=until,
                    count=count
                    if workload.scenario == "catchup"
                    else workload.appends_for_writer(i),
                    stop=stop,
                )
                for i, w in enumerate(writers)
            )
        )
    finally:
        shower.cancel()
        live.appends, live.acks = wstats.appends, wstats.acks


async def _subscribe_all(
    pool: WorkerPool,
    sampler: ServerSampler | None,
    generator: ServerSampler,
    client_cpus: frozenset[int] | None,
    n: int,
) -> dict[str, Any]:
    """Subscribe every open connection at once and time it: the wall time
    until the last baseline is in, and the CPU the server and the generator
    spent meanwhile (a generator near its CPUs' limit times itself)."""
    server_start = sampler.cpu() if sampler else 0.0
    generator_start = generator.cpu()
    started = time.monotonic()
    pool.send("subscribe")
    await pool.expect("subscribed")
    wall = max(time.monotonic() - started, 1e-9)
    generator_cores = (generator.cpu() - generator_start) / wall
    cpus = len(client_cpus) if client_cpus else (os.cpu_count() or 1)
    out: dict[str, Any] = {
        "subscribe_s": round(wall, 3),
        "subscribe_us_per_connection": round(wall * 1e6 / n, 1),
        "generator_cores_subscribing": round(generator_cores, 3),
        "generator_share_subscribing": round(generator_cores / cpus, 3),
    }
    if sampler is not None:
        server_cpu = sampler.cpu() - server_start
        out["server_cpu_us_per_subscribe"] = round(server_cpu * 1e6 / n, 1)
        out["server_cores_subscribing"] = round(server_cpu / wall, 3)
    return out


async def _idle(
    pool: WorkerPool,
    sampler: ServerSampler | None,
    rss_before: int,
    workload: Workload,
    generator: ServerSampler,
    client_cpus: frozenset[int] | None,
) -> dict[str, Any]:
    n = workload.subscribers
    out: dict[str, Any] = {"connections": n}
    if sampler is None:
        out.update(await _subscribe_all(pool, sampler, generator, client_cpus, n))
        out["note"] = "no --server-pid: RSS not measured"
        return out
    await asyncio.sleep(SETTLE_S)
    rss_connected = sampler.rss()
    out.update(await _subscribe_all(pool, sampler, generator, client_cpus, n))
    await asyncio.sleep(SETTLE_S)
    rss_subscribed = sampler.rss()
    out.update(
        {
            "rss_mb_before": round(rss_before / 2**20, 1),
            "rss_mb_connected": round(rss_connected / 2**20, 1),
            "rss_mb_subscribed": round(rss_subscribed / 2**20, 1),
            "kb_per_connection": round((rss_connected - rss_before) / n / 1024, 2),
            "kb_per_subscribed_connection": round((rss_subscribed - rss_before) / n / 1024, 2),
        }
    )
    if workload.duration:
        out.update(await hold(sampler, generator, client_cpus, n, workload.duration))
    return out
