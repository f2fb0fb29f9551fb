"""One WebSocket connection's outbound side: a bounded queue and a writer task.

The hub pushes frames with ``push`` (synchronous, never blocks, never
awaits a socket). The connection's own writer task drains the queue, numbers
the frames (``seq``), coalesces JSON frames into one WebSocket message
separated by ``\\n`` and awaits the socket. A client that stops reading only
blocks its own writer; once its queue is over ``queue_max_frames`` or
``queue_max_bytes`` its queued data frames are dropped and each affected
subscription gets a ``lagged`` error and is unsubscribed, so the server's
memory stays bounded and nobody else waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from protocol import wire
from server.frames import ControlFrame, EncodedEvent, EncodedSnapshot, Outbound

if TYPE_CHECKING:
    from server.metrics import Metrics

log = logging.getLogger("tsync.connection")

Send = Callable[[dict[str, Any]], Awaitable[None]]


class Flusher:
    """Wakes the writers of connections that got new increments, at most once
    per ``delay`` seconds (Centrifugo's ``write_delay``).

    Without it every event wakes every subscriber's writer at once and each
    sends that one frame on its own: one trip through the ASGI and WebSocket
    layers per frame per subscriber. Waking them together a moment later lets
    the increments of events that arrive close together leave in one
    WebSocket message, at the cost of at most ``delay`` of latency. With
    ``delay`` 0 the writers are woken at the end of the current loop turn.
    """

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self._dirty: list[Connection] = []
        self._handle: asyncio.Handle | None = None

    def mark(self, conn: Connection) -> None:
        self._dirty.append(conn)
        if self._handle is None:
            loop = asyncio.get_running_loop()
            self._handle = (
                loop.call_later(self.delay, self._flush)
                if self.delay > 0
                else loop.call_soon(self._flush)
            )

    def _flush(self) -> None:
        self._handle = None
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            conn._wake_writer()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._dirty.clear()


class Connection:
    """The server's view of one client connection."""

    # Thousands of these live at once: no per-instance __dict__.
    __slots__ = (
        "_batch_bytes",
        "_drained",
        "_flusher",
        "_marked",
        "_max_bytes",
        "_max_frames",
        "_metrics",
        "_on_lagged",
        "_queue",
        "_queued_bytes",
        "_send",
        "_waiter",
        "_writer",
        "binary",
        "closed",
        "context_id",
        "id",
        "seq",
        "subscriptions",
    )

    def __init__(
        self,
        conn_id: str,
        send: Send,
        *,
        binary: bool = False,
        queue_max_frames: int = 10_000,
        queue_max_bytes: int = 8 << 20,
        write_batch_bytes: int = 256 << 10,
        metrics: Metrics | None = None,
        on_lagged: Callable[[Connection, set[str]], None] | None = None,
        flusher: Flusher | None = None,
    ) -> None:
        self.id = conn_id
        self.context_id = f"ws:{conn_id}"
        self.binary = binary
        #: transcript id -> the revision the subscriber has been sent up to.
        self.subscriptions: dict[str, int] = {}
        self.seq = 0
        self.closed = False
        self._send = send
        # A list, not a deque: an empty deque costs ~600 bytes per connection
        # and the writer takes whole batches off the front anyway.
        self._queue: list[Outbound] = []
        self._queued_bytes = 0
        self._max_frames = queue_max_frames
        self._max_bytes = queue_max_bytes
        self._batch_bytes = write_batch_bytes
        #: The writer's wake-up, made only while it waits (an Event and its
        #: waiter deque would cost ~700 bytes on every idle connection).
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Event | None = None  # made on the first drain()
        self._metrics = metrics
        self._on_lagged = on_lagged
        self._writer: asyncio.Task[None] | None = None
        self._flusher = flusher
        self._marked = False

    # --- pushing (hub side; synchronous) ---------------------------------------

    def push_event(self, item: EncodedEvent) -> None:
        """Queue one increment (hot path: called once per event per subscriber)."""
        if len(self._queue) >= self._max_frames or self._queued_bytes + item.size > self._max_bytes:
            self._lag({item.transcript_id})
            return
        self._queue.append(item)
        self._queued_bytes += item.size
        if self._flusher is None:
            self._wake_up()
        elif not self._marked:
            self._marked = True
            self._flusher.mark(self)

    def _wake_writer(self) -> None:
        self._marked = False
        self._wake_up()

    def _wake_up(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def push_baseline(self, item: EncodedSnapshot) -> None:
        """Queue a baseline. A baseline is the repair path, so it is let in even
        when it alone is larger than the byte limit, as long as the queue is
        not otherwise full."""
        if len(self._queue) >= self._max_frames:
            self._lag({item.transcript_id})
            return
        self._queue.append(item)
        self._queued_bytes += item.size
        self._wake_up()

    def push_control(self, frame: Any) -> None:
        """Queue an ack, pong or error (a wire struct with ``seq=0``)."""
        if self.closed:
            return
        if len(self._queue) >= self._max_frames + 1024:
            # Only control frames are left and the client still reads none of
            # them: it is not a slow consumer but a dead or abusive one.
            log.warning("closing %s: outbound queue full of unread answers", self.id)
            self.closed = True
            self._wake_up()
            return
        item = ControlFrame(frame)
        self._queue.append(item)
        self._queued_bytes += item.size
        self._wake_up()

    def push_error(
        self,
        code: str,
        message: str,
        *,
        transcript_id: str | None = None,
        ref: str | int | None = None,
        revision: int | None = None,
    ) -> None:
        if self._metrics is not None:
            self._metrics.errors.labels(code).inc()
        self.push_control(
            wire.ErrorFrame(
                seq=0,
                code=code,
                message=message,
                transcript_id=transcript_id,
                ref=ref,
                revision=revision,
            )
        )

    def has_room(self, frames: int, size: int) -> bool:
        """Whether ``frames`` more data frames of ``size`` bytes fit the queue."""
        return (
            len(self._queue) + frames <= self._max_frames
            and self._queued_bytes + size <= self._max_bytes
        )

    @property
    def queued(self) -> tuple[int, int]:
        """(frames, bytes) waiting to be written."""
        return len(self._queue), self._queued_bytes

    def _lag(self, transcript_ids: set[str]) -> None:
        kept: list[Outbound] = []
        kept_bytes = 0
        for item in self._queue:
            if item.data and item.transcript_id is not None:
                transcript_ids.add(item.transcript_id)
            else:
                kept.append(item)
                kept_bytes += item.size
        self._queue = kept
        self._queued_bytes = kept_bytes
        lagged = {t for t in transcript_ids if t in self.subscriptions}
        if self._on_lagged is not None:
            self._on_lagged(self, lagged)
        for transcript_id in sorted(lagged):
            self.subscriptions.pop(transcript_id, None)
            self.push_error(
                wire.LAGGED,
                "outbound queue full: frames were dropped; resubscribe from your revision",
                transcript_id=transcript_id,
            )
        if self._metrics is not None:
            self._metrics.lagged.inc(len(lagged))

    # --- writing (the connection's own task) ---------------------------------------

    def start(self) -> asyncio.Task[None]:
        self._writer = asyncio.create_task(self._write_loop(), name=f"writer-{self.id}")
        return self._writer

    async def _write_loop(self) -> None:
        metrics = self._metrics
        try:
            while True:
                if not self._queue:
                    if self._drained is not None:
                        self._drained.set()
                    if self.closed:
                        return
                    self._waiter = asyncio.get_running_loop().create_future()
                    try:
                        await self._waiter
                    finally:
                        self._waiter = None
                    continue
                if self.closed:
                    return
                if self.binary:
                    await self._write_binary()
                    continue
                q = self._queue
                parts: list[bytes] = []
                size = 0
                accounted = 0
                seq = self.seq
                limit = self._batch_bytes
                taken = 0
                for item in q:
                    if size >= limit:
                        break
                    taken += 1
                    accounted += item.size
                    seq += 1
                    frame = item.render_json(seq)
                    parts.append(frame)
                    size += len(frame)
                # Pushes made while the send below is awaited go to the new list.
                self._queue = q[taken:] if taken < len(q) else []
                self.seq = seq
                self._queued_bytes -= accounted
                payload = parts[0] if len(parts) == 1 else b"\n".join(parts)
                await self._send({"type": "websocket.send", "text": payload.decode()})
                if metrics is not None:
                    sent = metrics.sent
                    sent.frames += len(parts)
                    sent.messages += 1
                    sent.bytes += size
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the socket is gone; the reader will notice
            log.debug("writer of %s stopped: %r", self.id, exc)
            self.closed = True

    async def _write_binary(self) -> None:
        item = self._queue.pop(0)
        self._queued_bytes -= item.size
        self.seq += 1
        frame = item.render_msgpack(self.seq)
        await self._send({"type": "websocket.send", "bytes": frame})
        if self._metrics is not None:
            sent = self._metrics.sent
            sent.frames += 1
            sent.messages += 1
            sent.bytes += len(frame)

    async def drain(self) -> None:
        """Wait until the writer has sent everything queued (bound it with a
        timeout: a client that does not read never lets it finish)."""
        if self._drained is None:
            self._drained = asyncio.Event()
        while self._queue and not self.closed:
            self._drained.clear()
            await self._drained.wait()

    async def send_close(self, code: int, reason: str) -> None:
        """Close the WebSocket (after ``drain`` for a graceful goodbye)."""
        self.closed = True
        await self._send({"type": "websocket.close", "code": code, "reason": reason})

    async def stop(self) -> None:
        self.closed = True
        self._wake_up()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer
