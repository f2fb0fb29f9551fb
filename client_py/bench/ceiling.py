"""``tsync bench fanout|chatroom --ceiling``: the server's ceiling, not the generator's.

Even the ``--fast`` subscribers decode each frame's envelope, and on a
2-core machine the generator saturates its core before the server does (the
burst and 1,000 x 100/s runs: docs/benchmarks.md). This mode takes almost
all per-message work out of the generator so that the server is what limits
the run:

- **Writers** send precomputed append frames: every append op of the run is
  built and framed (masked with a zero key, which RFC 6455 allows) before the
  timed window; sending is one ``transport.write`` of the frames due. Open
  loop at ``--rate`` (all frames due at a wake-up in one write) or closed
  loop (the next frame leaves from ``data_received`` when the ack is read).
  Acks are counted with a byte search, no decoding.
- **Subscribers** (over ``--procs`` processes) read with a minimal WebSocket
  parser (no library, no per-message task): per message they count frames
  (newlines + 1) and bytes, and read ``seq`` and ``revision`` of the last
  frame only (a regex on its first bytes). The check that stays: on each
  connection the last ``seq`` equals the number of frames received (no gap,
  no repeat), and the last revision reaches the writers' final revision (no
  event missing), with ``delivered == expected`` as in the other runs.

Latency is measured on a sample, so that it stays cheap. Each precomputed
append carries ``metadata.t`` (``client_py.bench.workload.append_op``, the
normal harness's convention) as a 19-digit placeholder
(``STAMP_PLACEHOLDER``); when a writer writes frames it patches the wall
clock (``time.time_ns()``, also 19 digits until 2286) over the placeholder
in place (``stamp``: one slice assignment per frame, the frame's offset
found once when it was built; the mask key is zero, so the payload is
plain). The time stamped is when the frame is *written*, not when it was due
(unlike ``client_py.bench.writer``): a writer late on its schedule does not
add to the latency, and how late the writers ever were is reported
(``writers.max_behind_ms``: when that stays small, due and written time are
the same to within it). In closed loop it is the time the frame is sent
after the last ack. About ``--latency-sample`` subscribers (every
``Workload.latency_every()``-th connection of each process) read every
``"t":<ns>`` of each whole message (``fastpath.SENT``, one ``findall``) and
record the time the message was read minus it into a ``LatencyHistogram``,
merged across the processes as the normal harness merges its own:
``latency_ms`` reports p50/p90/p99/p99.9/max as the normal runs do. All on
one machine, so one clock.

The result reports delivered/s, the latency, the server's CPU share, the
generator's, and ``bound``: which side limited the run (``report.bound``).

Why one module of over 600 lines: the writers, the subscribers' minimal
WebSocket client and the run that joins them share the frame layout (where
the placeholder sits, what a frame counter reads) and are changed together
whenever that layout changes; split, each half would restate it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import secrets
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Final
from urllib.parse import urlsplit

from client_py.bench import host, report, tsreaders
from client_py.bench.channel import Channel
from client_py.bench.fastpath import SENT
from client_py.bench.histogram import LatencyHistogram
from client_py.bench.run import (
    CURVE_PERCENTILES,
    BenchError,
    Live,
    WorkerPool,
    create_transcripts,
    probe,
)
from client_py.bench.sampler import ServerSampler
from client_py.bench.workload import Workload, append_op, filler
from protocol import wire

__all__ = [
    "STAMP_PLACEHOLDER",
    "FrameCounter",
    "masked_text_frame",
    "run_ceiling",
    "stamp",
    "stamp_offset",
    "worker_main",
    "writer_frames",
]

CONNECT_CONCURRENCY: Final = 64
_SEQ: Final = re.compile(rb'"seq":(\d+)')
_REVISION: Final = re.compile(rb'"revision":(\d+)')
_ACK: Final = b'"type":"ack"'
_ERROR: Final = b'"type":"error"'
#: Open loop: the longest a writer sleeps between two writes.
TICK_S: Final = 0.001
#: The send time a precomputed append carries until it is written: a valid
#: JSON number as wide as ``time.time_ns()`` (19 digits, 2001 to 2286).
STAMP_PLACEHOLDER: Final = 10**18
STAMP_WIDTH: Final = len(str(STAMP_PLACEHOLDER))
_STAMP_KEY: Final = b'"t":%d' % STAMP_PLACEHOLDER


def masked_text_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One final client frame of ``payload``, masked with the zero key (the
    payload is sent as is: nothing to compute per message)."""
    n = len(payload)
    if n < 126:
        header = bytes((0x80 | opcode, 0x80 | n))
    elif n < 1 << 16:
        header = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        header = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
    return header + b"\0\0\0\0" + payload


def stamp_offset(frame: bytes | bytearray) -> int:
    """Where the placeholder send time of a precomputed append starts."""
    at = frame.find(_STAMP_KEY)
    if at < 0:
        raise ValueError("no placeholder send time in the frame")
    return at + len(_STAMP_KEY) - STAMP_WIDTH


def stamp(frame: bytearray, offset: int, digits: bytes) -> None:
    """Patch a send time (``b"%d" % time.time_ns()``) over the one at ``offset``."""
    if len(digits) != STAMP_WIDTH:
        raise ValueError(f"a send time of {len(digits)} digits, not {STAMP_WIDTH}")
    frame[offset : offset + STAMP_WIDTH] = digits


class FrameCounter:
    """What a ceiling subscriber keeps of the text it reads: frames, bytes,
    error frames, and the ``seq`` and ``revision`` of the last frame. Pure."""

    __slots__ = ("_tail", "bytes", "errors", "frames", "last_revision", "last_seq", "messages")

    def __init__(self) -> None:
        self.frames = 0
        self.bytes = 0
        self.messages = 0
        self.errors = 0
        self.last_seq = 0
        self.last_revision = -1
        self._tail = b""

    def feed(self, payload: bytes, fin: bool) -> None:
        """One data frame of a text message (``fin``: its last fragment)."""
        self.bytes += len(payload)
        self.frames += payload.count(b"\n")
        if _ERROR in payload:
            self.errors += payload.count(_ERROR)
        cut = payload.rfind(b"\n")
        tail = payload[cut + 1 :] if cut >= 0 else self._tail + payload
        if not fin:
            self._tail = tail
            return
        self._tail = b""
        self.frames += 1
        self.messages += 1
        head = tail[:200]  # seq, then the event's revision, come first
        seq = _SEQ.search(head)
        if seq is not None:
            self.last_seq = int(seq.group(1))
        revision = _REVISION.search(head)
        if revision is not None:
            self.last_revision = int(revision.group(1))

    @property
    def consistent(self) -> bool:
        """``seq`` went 1, 2, ..., n over the n frames read (no gap, no repeat)."""
        return self.last_seq == self.frames


class RawSocket(asyncio.Protocol):
    """A WebSocket client reduced to what the ceiling needs: the handshake,
    unmasked server frames parsed in place, pings answered, data frames
    handed to ``on_data(payload, fin)``."""

    def __init__(self, url: str, on_data: Callable[[bytes, bool], None]) -> None:
        self.url = url
        self.on_data = on_data
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self._buf = bytearray()

    @classmethod
    async def connect(
        cls, url: str, on_data: Callable[[bytes, bool], None], timeout: float = 30
    ) -> RawSocket:
        parts = urlsplit(url)
        conn = cls(url, on_data)
        async with asyncio.timeout(timeout):
            await asyncio.get_running_loop().create_connection(
                lambda: conn, parts.hostname or "127.0.0.1", parts.port or 80
            )
            await conn.opened
        return conn

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        parts = urlsplit(self.url)
        key = base64.b64encode(secrets.token_bytes(16)).decode()
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        transport.write(
            (
                f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                f"Sec-WebSocket-Protocol: {wire.SUBPROTOCOL_JSON}\r\n\r\n"
            ).encode()
        )

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        if not self.opened.done():
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(buf[: buf.find(b"\r\n")])
            del buf[: end + 4]
            if b" 101 " not in status + b" ":
                self.opened.set_exception(BenchError(f"handshake refused: {status!r}"))
                self.abort()
                return
            self.opened.set_result(None)
        pos, size = 0, len(buf)
        while size - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1] & 0x7F
            start = pos + 2
            if b1 == 126:
                if size - start < 2:
                    break
                b1, start = int.from_bytes(buf[start : start + 2], "big"), start + 2
            elif b1 == 127:
                if size - start < 8:
                    break
                b1, start = int.from_bytes(buf[start : start + 8], "big"), start + 8
            end = start + b1
            if end > size:
                break
            opcode = b0 & 0x0F
            payload = bytes(buf[start:end])
            pos = end
            if opcode <= 0x2:  # text, binary, continuation
                self.on_data(payload, bool(b0 & 0x80))
            elif opcode == 0x9:  # ping -> pong
                self.write(masked_text_frame(payload, 0xA))
            elif opcode == 0x8:  # close: answer it, then the socket goes
                self.write(masked_text_frame(payload[:2], 0x8))
                self.abort()
        del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(exc or BenchError("connection closed"))
        if not self.closed.done():
            self.closed.set_result(None)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def close(self) -> None:
        self.write(masked_text_frame(b"\x03\xe8", 0x8))  # 1000
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await asyncio.shield(self.closed)
        self.abort()


# --- the subscribers' processes -------------------------------------------------


class _Sub:
    __slots__ = (
        "_parts",
        "counter",
        "done",
        "done_ns",
        "last_ns",
        "latency",
        "socket",
        "target",
        "transcript_id",
    )

    def __init__(self, transcript_id: str, latency: LatencyHistogram | None = None) -> None:
        self.transcript_id = transcript_id
        self.counter = FrameCounter()
        self.target = -1
        self.done = asyncio.Event()
        self.done_ns = 0
        #: When the last complete message arrived.
        self.last_ns = 0
        self.socket: RawSocket | None = None
        #: Where this subscriber records each delivery's latency (sampled ones only).
        self.latency = latency
        self._parts: list[bytes] = []  # a fragmented message's first fragments

    def on_data(self, payload: bytes, fin: bool) -> None:
        counter = self.counter
        counter.feed(payload, fin)
        latency = self.latency
        if not fin:
            if latency is not None:
                self._parts.append(payload)
            return
        now = self.last_ns = time.time_ns()
        if latency is not None:
            if self._parts:
                self._parts.append(payload)
                payload = b"".join(self._parts)
                self._parts.clear()
            for sent in SENT.findall(payload):
                latency.record_ns(now - int(sent))
        if self.target >= 0 and counter.last_revision >= self.target:
            self._reached()

    def aim(self, target: int) -> None:
        self.target = target
        if self.counter.last_revision >= target:
            self._reached()

    def _reached(self) -> None:
        if not self.done.is_set():
            self.done_ns = self.last_ns
            self.done.set()


def worker_main(
    url: str,
    workload: Workload,
    indices: list[int],
    conn: Connection,
    cpus: frozenset[int] | None = None,
) -> None:
    """A subscribers' process (``run.WorkerPool`` target): ``ready`` once every
    connection has its baseline; ``targets`` -> ``result``; ``stop``."""
    if cpus:
        host.pin_self(cpus)
    host.run(_worker(url, workload, indices, conn), fast=True)


async def _worker(url: str, workload: Workload, indices: list[int], conn: Connection) -> None:
    channel = Channel(conn)
    channel.start()
    every = workload.latency_every()
    latency = LatencyHistogram()
    subs = [
        _Sub(
            workload.subscriber_transcript(i),
            latency if every is not None and j % every == 0 else None,
        )
        for j, i in enumerate(indices)
    ]
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def open_one(sub: _Sub) -> None:
        async with gate:
            sub.socket = await RawSocket.connect(url, sub.on_data)
        op = b'{"op":"subscribe","transcriptId":"' + sub.transcript_id.encode() + b'"}'
        sub.socket.write(masked_text_frame(op))

    try:
        await asyncio.gather(*(open_one(sub) for sub in subs))
        for sub in subs:
            sub.aim(0)  # the baseline of the fresh transcript
        async with asyncio.timeout(workload.drain_timeout):
            await asyncio.gather(*(sub.done.wait() for sub in subs))
        channel.send("ready", {"connections": len(subs)})
        while True:
            kind, payload = await channel.recv()
            if kind != "targets":
                break
            for sub in subs:
                sub.done.clear()
                sub.aim(payload.get(sub.transcript_id, 0))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(workload.drain_timeout):
                    await asyncio.gather(*(sub.done.wait() for sub in subs))
            channel.send("result", _worker_result(subs, latency))
    except Exception as exc:
        channel.send("failed", repr(exc))
    finally:
        await asyncio.gather(
            *(sub.socket.close() for sub in subs if sub.socket is not None),
            return_exceptions=True,
        )
        channel.close()


def _worker_result(subs: list[_Sub], latency: LatencyHistogram) -> dict[str, Any]:
    counters = [sub.counter for sub in subs]
    return {
        "subscribers": len(subs),
        "frames": sum(c.frames for c in counters),
        "bytes": sum(c.bytes for c in counters),
        "ws_messages": sum(c.messages for c in counters),
        "errors": sum(c.errors for c in counters),
        "seq_mismatches": sum(not c.consistent for c in counters),
        "incomplete": sum(not sub.done.is_set() for sub in subs),
        # One baseline per connection; every other frame is an event.
        "delivered": sum(c.frames - 1 - c.errors for c in counters),
        "last_done_ns": max((sub.done_ns for sub in subs), default=0),
        "timed_subscribers": sum(sub.latency is not None for sub in subs),
        "latency": latency.encode(),
    }


# --- the writers ---------------------------------------------------------------


class _Writer:
    """One writer connection and its precomputed frames."""

    def __init__(self, transcript_id: str, frames: list[bytearray]) -> None:
        self.transcript_id = transcript_id
        self.frames = frames
        self.offsets = [stamp_offset(frame) for frame in frames]
        self.sent = 0
        #: Open loop: the longest a frame waited past its due time to be written.
        self.max_behind_ns = 0
        self.acks = 0
        self.errors = 0
        self.revision = 0
        self.closed_loop = False
        self.finished = asyncio.Event()
        self.socket: RawSocket | None = None

    def on_data(self, payload: bytes, fin: bool) -> None:
        acks = payload.count(_ACK)
        if _ERROR in payload:
            self.errors += payload.count(_ERROR)
        if acks:
            self.acks += acks
            found = _REVISION.findall(payload)
            if found:
                self.revision = max(self.revision, int(found[-1]))
            if self.closed_loop and self.sent < len(self.frames):
                upto = min(len(self.frames), self.sent + acks)
                self.write(upto)
        if self.acks + self.errors >= len(self.frames):
            self.finished.set()

    def write(self, upto: int) -> None:
        """Stamp frames ``sent`` to ``upto`` with the time now, and write them."""
        assert self.socket is not None
        frames, offsets = self.frames, self.offsets
        now = b"%d" % time.time_ns()
        for i in range(self.sent, upto):
            stamp(frames[i], offsets[i], now)
        self.socket.write(b"".join(frames[self.sent : upto]))
        self.sent = upto

    async def run(self, rate: float | None) -> None:
        if not self.frames:
            self.finished.set()
            return
        if rate is None:
            self.closed_loop = True
            self.write(1)
            return
        started = time.monotonic_ns()
        total = len(self.frames)
        while self.sent < total:
            elapsed = time.monotonic_ns() - started
            due = min(total, int(elapsed * rate / 1e9) + 1)
            if due > self.sent:
                # Frame ``sent`` (the first of this write) was due at sent / rate.
                self.max_behind_ns = max(self.max_behind_ns, elapsed - int(self.sent * 1e9 / rate))
                self.write(due)
            await asyncio.sleep(min(TICK_S, 1 / rate))


def _busy(cpus: frozenset[int] | None = None) -> float:
    """CPU seconds the machine (or only ``cpus``) has been busy, idle excluded."""
    import psutil

    total = 0.0
    per_cpu = psutil.cpu_times(percpu=True)
    for i, times in enumerate(per_cpu):
        if cpus is None or i in cpus:
            idle = sum(getattr(times, k, 0.0) for k in ("idle", "iowait", "guest", "guest_nice"))
            total += sum(times) - idle
    return total


def writer_frames(workload: Workload, writer: int, appends: int) -> list[bytearray]:
    """Every append op of one writer, framed and ready to send but for its
    send time (``STAMP_PLACEHOLDER``, see ``stamp``)."""
    tid = workload.writer_transcript(writer)
    content = filler(workload.size)
    return [
        bytearray(masked_text_frame(append_op(tid, ref, content, STAMP_PLACEHOLDER, writer)))
        for ref in range(appends)
    ]


def appends_of(workload: Workload, writer: int) -> int:
    share = workload.appends_for_writer(writer)
    if share is not None:
        return share
    assert workload.rate is not None and workload.duration is not None
    return round(workload.rate * workload.duration)


# --- the run ---------------------------------------------------------------------


async def run_ceiling(
    ws_url: str,
    workload: Workload,
    *,
    server_pid: int | None,
    live: Live,
    client_cpus: frozenset[int] | None = None,
    server_cpus: frozenset[int] | None = None,
) -> dict[str, Any]:
    """One ceiling run against one server: the ``runs[i]`` of the JSON result."""
    info = await probe(ws_url)
    ids = workload.transcript_ids()
    if not info.get("createsOnUse"):
        await create_transcripts(ws_url, ids)
    result: dict[str, Any] = {
        "url": ws_url,
        "mode": "ceiling",
        "server": {k: v for k, v in info.items() if isinstance(v, str | int | bool)},
    }
    live.phase = "precomputing frames"
    writers = [
        _Writer(workload.writer_transcript(w), writer_frames(workload, w, appends_of(workload, w)))
        for w in range(workload.writers)
    ]
    sampler = ServerSampler(server_pid) if server_pid else None
    generator = ServerSampler(os.getpid())
    # The same appends, read over the WebSocket or through the transcript's
    # Durable Stream (``--live``).
    http = workload.reads_transcript_streams
    target = tsreaders.main if http else worker_main
    pool = WorkerPool(ws_url, workload, live, client_cpus, target=target)
    try:
        live.phase = f"connecting {workload.subscribers} {workload.live} subscribers"
        await pool.start()
        for w in writers:
            w.socket = await RawSocket.connect(ws_url, w.on_data)
        machine_start = _busy()
        server_cpus_start = _busy(server_cpus)
        cpu_start = sampler.cpu() if sampler else 0.0
        generator_start = generator.cpu()
        first_send_ns = time.time_ns()
        live.phase = "appending"
        await asyncio.gather(*(w.run(workload.rate) for w in writers))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(workload.drain_timeout):
                await asyncio.gather(*(w.finished.wait() for w in writers))
        acked_ns = time.time_ns()
        targets: dict[str, int] = {}
        for w in writers:
            targets[w.transcript_id] = max(targets.get(w.transcript_id, 0), w.revision)
        live.phase = "draining"
        pool.send("targets", targets)
        answers = await pool.expect("result")
        cpu_used = (sampler.cpu() - cpu_start) if sampler else None
        generator_cpu = generator.cpu() - generator_start
        machine_cpu = _busy() - machine_start
        server_cpus_busy = _busy(server_cpus) - server_cpus_start
    except OSError as exc:
        raise BenchError(f"{ws_url}: {exc}") from None
    finally:
        live.phase = "closing"
        await asyncio.gather(
            *(w.socket.close() for w in writers if w.socket is not None), return_exceptions=True
        )
        await pool.stop()

    merged = {
        k: sum(a[k] for a in answers) for k in answers[0] if k not in ("last_done_ns", "latency")
    }
    latency = LatencyHistogram()
    for answer in answers:
        latency.merge_encoded(answer["latency"])
    last_ns = max([a["last_done_ns"] for a in answers] + [acked_ns])
    window_s = max(1e-9, (last_ns - first_send_ns) / 1e9)
    subscribers_of = {tid: 0 for tid in ids}
    for i in range(workload.subscribers):
        subscribers_of[workload.subscriber_transcript(i)] += 1
    expected = sum(subscribers_of[tid] * rev for tid, rev in targets.items())
    appends = sum(w.sent for w in writers)
    acks = sum(w.acks for w in writers)
    delivered = merged["delivered"]
    result.update(
        {
            "writers": {
                "appends": appends,
                "acks": acks,
                "acks_per_s": round(acks / window_s, 1),
                "errors": sum(w.errors for w in writers),
                "max_behind_ms": round(max((w.max_behind_ns for w in writers), default=0) / 1e6, 2),
                "final_revisions": dict(sorted(targets.items())[:5]),
            },
            "delivery_window_s": round(window_s, 3),
            "delivered": delivered,
            "delivered_per_s": round(delivered / window_s, 1),
            # The sampled subscribers' append -> delivery latency (module docstring).
            "latency_ms": latency.summary_ms(),
            "latency_sample": {
                "subscribers": merged["timed_subscribers"],
                "every": workload.latency_every(),
                "clamped": latency.clamped,
            },
            "latency_curve_ms": latency.distribution_ms(list(CURVE_PERCENTILES)),
            # What the rate asked for (open loop): expected over the appending's span.
            "offered_per_s": (
                round(expected * workload.rate / max(1, max(len(w.frames) for w in writers)), 1)
                if workload.rate and writers
                else None
            ),
            "groups": {
                "on-time": {
                    "subscribers": merged["subscribers"],
                    "delivered": delivered,
                    "expected": expected,
                    "frames": merged["frames"],
                    "bytes": merged["bytes"],
                    "ws_messages": merged["ws_messages"],
                    "errors": merged["errors"],
                    "seq_gaps": merged["seq_mismatches"],
                    "incomplete": merged["incomplete"],
                    "latency_ms": latency.summary_ms(),
                }
            },
        }
    )
    if http:
        # A transcript's Durable Stream: a skip or a repeat of a revision is a
        # failure; a connection lost or an SSE response ended is not (the
        # reader goes on from its offset, as the protocol means it to).
        group = result["groups"]["on-time"]
        group.update({k: merged[k] for k in ("repeats", "gaps", "invalid")})
        frames = merged["frames"]
        result["streams"] = {
            "live": workload.live,
            "path": tsreaders.stream_path(ids[0]),
            "values_per_answer": round(delivered / frames, 2) if frames else None,
            "requests": merged["requests"],
            "reconnects": merged["reconnects"],
            "disconnects": merged["disconnects"],
        }
    cpus: float = len(client_cpus) if client_cpus else (os.cpu_count() or 1)
    quota = host.cpu_quota()  # a cgroup's cap (scripts/run_benchmarks.sh ceiling's workers)
    if quota is not None:
        cpus = min(cpus, quota)
    cores = generator_cpu / window_s
    result["generator_cpu"] = {
        "cpu_s": round(generator_cpu, 3),
        "cores": round(cores, 3),
        "cpus": cpus,
        "quota": quota,
        "pinned": sorted(client_cpus) if client_cpus else None,
        "share": round(cores / cpus, 3),
        "check": "ceiling" if workload.live == "ws" else f"ceiling {workload.live}",
        "loop": host.loop_name(True),
    }
    if cpu_used is not None and sampler is not None:
        # What the server can use at most: one core per process (its
        # ``--workers`` or itself), no more than the CPUs it may run on.
        # A generator capped by a quota on the same CPUs leaves the rest.
        procs = max(1, len(sampler.process.children(recursive=True)))
        available: float = min(len(server_cpus or ()) or os.cpu_count() or 1, procs)
        if quota is not None and not client_cpus:
            available = min(available, (os.cpu_count() or 1) - quota)
        result["server_cpu"] = {
            "cpu_s": round(cpu_used, 3),
            "cpu_us_per_delivered": round(cpu_used * 1e6 / delivered, 2) if delivered else None,
            "cpu_share": round(cpu_used / window_s, 3),
            "cores_available": round(available, 3),
        }
        if server_cpus:
            # The server's CPUs were full, whoever used them (other processes too).
            result["server_cpu"]["its_cpus_busy"] = round(server_cpus_busy / window_s, 3)
        offered = result["offered_per_s"]
        result["bound"] = report.bound(
            result["server_cpu"]["cpu_share"],
            available,
            result["generator_cpu"]["share"],
            None if offered is None else result["delivered_per_s"] >= 0.95 * offered,
            server_cpus_busy / window_s / len(server_cpus) if server_cpus else None,
        )
    # Everything else that ran on the machine meanwhile (other processes).
    others = machine_cpu - generator_cpu - (cpu_used or 0.0)
    result["machine_cpu"] = {
        "busy_cores": round(machine_cpu / window_s, 3),
        "other_cores": round(max(0.0, others) / window_s, 3),
    }
    return result
