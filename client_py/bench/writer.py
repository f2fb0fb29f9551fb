"""One writer connection: appends at a fixed rate (open loop) or ack by ack (closed loop).

In open loop the timestamp put into each message is the time the append was
*due*, not the time it left: if the generator falls behind, that delay shows
up in the latency instead of being hidden (no coordinated omission). In
closed loop it is the time the append was sent.

In the stream scenario (``stream_drafts``) a writer streams drafts instead:
tokens at a fixed rate (each token is its own due time, see
``client_py.bench.draftcheck``), then the append that commits the draft.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import websockets
from websockets.asyncio.client import ClientConnection, connect

from client_py.bench.draftcheck import token
from client_py.bench.histogram import LatencyHistogram
from client_py.bench.workload import append_op, commit_op, draft_op, filler
from protocol import wire
from protocol.continuity import SeqTracker, SeqVerdict
from protocol.errors import InvalidFrame


@dataclass(slots=True)
class WriterStats:
    """What every writer of a run sent and got back."""

    appends: int = 0
    acks: int = 0
    tokens: int = 0  #: draft tokens sent (stream scenario)
    drafts: int = 0  #: drafts streamed and committed
    errors: int = 0
    invalid: int = 0
    seq_gaps: int = 0
    disconnects: int = 0
    #: Largest delay (s) between when an open-loop append was due and when it left.
    max_behind_s: float = 0.0
    error_samples: list[str] = field(default_factory=list)
    #: transcript id -> highest revision acknowledged.
    revisions: dict[str, int] = field(default_factory=dict)
    ack_latency: LatencyHistogram = field(default_factory=LatencyHistogram)


class Writer:
    """Appends one-message batches of ``size`` bytes to one transcript."""

    def __init__(
        self,
        url: str,
        transcript_id: str,
        index: int,
        size: int,
        stats: WriterStats,
        *,
        key_prefix: str = "",
    ) -> None:
        """``key_prefix``: when set, every append carries the idempotency key
        ``<key_prefix><index>-<ref>``."""
        self.url = url
        self.key_prefix = key_prefix
        self.transcript_id = transcript_id
        self.index = index
        self.stats = stats
        self.content = filler(size)
        self.ws: ClientConnection | None = None
        self._seq = SeqTracker()
        self._sent_at: dict[int, int] = {}
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._next_ref = 0
        self._closing = False
        self._answered = asyncio.Event()  #: set whenever no append awaits its answer
        self._answered.set()

    async def open(self) -> None:
        self.ws = await connect(
            self.url,
            subprotocols=[wire.SUBPROTOCOL_JSON],  # type: ignore[list-item]
            compression=None,
            max_size=None,
            open_timeout=30,
            ping_interval=None,
        )
        self._reader = asyncio.create_task(self._read_loop())

    async def close(self) -> None:
        self._closing = True
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    async def append(self, sent_ns: int | None = None, *, wait: bool = False) -> None:
        """Send one append; with ``wait`` return when its ack (or error) is back."""
        self._next_ref += 1
        ref = self._next_ref
        now = time.time_ns()
        op = append_op(
            self.transcript_id,
            ref,
            self.content,
            now if sent_ns is None else sent_ns,
            self.index,
            f"{self.key_prefix}{self.index}-{ref}" if self.key_prefix else "",
        )
        await self._send_append(ref, now, op, wait=wait)

    async def _send_append(self, ref: int, now: int, op: bytes, *, wait: bool) -> None:
        assert self.ws is not None
        self._sent_at[ref] = now
        self._answered.clear()
        future: asyncio.Future[None] | None = None
        if wait:
            future = self._waiting[ref] = asyncio.get_running_loop().create_future()
        await self.ws.send(op, text=True)
        self.stats.appends += 1
        if future is not None:
            await future

    async def run(
        self, *, rate: float | None, until: float | None, count: int | None, stop: asyncio.Event
    ) -> None:
        """Append until ``until`` (a ``time.monotonic()``), ``count`` appends, or ``stop``."""
        sent = 0
        interval = 1.0 / rate if rate else 0.0
        start_mono = time.monotonic()
        start_ns = time.time_ns()
        while not stop.is_set():
            if count is not None and sent >= count:
                break
            now = time.monotonic()
            if until is not None and now >= until:
                break
            if rate is None:
                await self.append(wait=True)
            else:
                due = start_mono + sent * interval
                if due > now:
                    await asyncio.sleep(due - now)
                else:
                    self.stats.max_behind_s = max(self.stats.max_behind_s, now - due)
                await self.append(start_ns + int(sent * interval * 1e9))
            sent += 1

    async def stream_drafts(
        self,
        *,
        rate: float,
        tokens: int,
        until: float | None,
        count: int | None,
        stop: asyncio.Event,
    ) -> None:
        """Stream drafts of ``tokens`` tokens at ``rate`` tokens/s, each
        committed right after its last token, until ``until`` or ``count``
        drafts (a draft under way is always finished and committed)."""
        assert self.ws is not None
        interval = 1.0 / rate
        start_mono = time.monotonic()
        start_ns = time.time_ns()
        sent = 0
        drafts = 0
        while not stop.is_set():
            if count is not None and drafts >= count:
                break
            if until is not None and time.monotonic() >= until:
                break
            draft_id = f"{self.transcript_id}-w{self.index}-{drafts}"
            parts: list[str] = []
            for _ in range(tokens):
                due = start_mono + sent * interval
                now = time.monotonic()
                if due > now:
                    await asyncio.sleep(due - now)
                else:
                    self.stats.max_behind_s = max(self.stats.max_behind_s, now - due)
                piece = token(start_ns + int(sent * interval * 1e9))
                parts.append(piece)
                await self.ws.send(draft_op(self.transcript_id, draft_id, piece), text=True)
                self.stats.tokens += 1
                sent += 1
            self._next_ref += 1
            ref = self._next_ref
            now_ns = time.time_ns()
            op = commit_op(self.transcript_id, ref, draft_id, "".join(parts), now_ns, self.index)
            await self._send_append(ref, now_ns, op, wait=False)
            self.stats.drafts += 1
            drafts += 1

    async def settle(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until every append sent has its answer."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._answered.wait()

    async def _read_loop(self) -> None:
        ws = self.ws
        assert ws is not None
        stats = self.stats
        try:
            async for message in ws:
                now = time.time_ns()
                for raw in wire.split_frames(message):
                    try:
                        frame = wire.accept_transcript_update(raw)
                    except InvalidFrame:
                        stats.invalid += 1
                        continue
                    if self._seq.observe(frame.seq) is not SeqVerdict.OK:
                        stats.seq_gaps += 1
                    ref = getattr(frame, "ref", None)
                    if isinstance(frame, wire.Ack):
                        stats.acks += 1
                        tid = frame.transcript_id
                        if frame.revision > stats.revisions.get(tid, 0):
                            stats.revisions[tid] = frame.revision
                    elif isinstance(frame, wire.ErrorFrame):
                        stats.errors += 1
                        if len(stats.error_samples) < 5:
                            stats.error_samples.append(f"{frame.code}: {frame.message}")
                    if isinstance(ref, int):
                        sent = self._sent_at.pop(ref, None)
                        if sent is not None and isinstance(frame, wire.Ack):
                            stats.ack_latency.record_ns(now - sent)
                        if not self._sent_at:
                            self._answered.set()
                        future = self._waiting.pop(ref, None)
                        if future is not None and not future.done():
                            future.set_result(None)
        except websockets.ConnectionClosed:
            if not self._closing:  # a close we asked for is no loss, however it ends
                stats.disconnects += 1
        finally:
            self._answered.set()
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError("writer connection closed"))
            self._waiting.clear()
