"""One WebSocket connection's outbound side: a bounded queue and its writer task.

The hub pushes frames (synchronous, never blocks, never awaits a socket). The
queue's own writer task drains it, numbers the frames (``seq``), coalesces
JSON frames into one WebSocket message separated by ``\\n`` and awaits the
socket. A client that stops reading only blocks its own writer; once its queue
is over ``queue_max_frames`` or ``queue_max_bytes`` its queued data frames are
dropped and each affected subscription gets a ``lagged`` error and is
unsubscribed, so the server's memory stays bounded and nobody else waits.

The queue is also the one owner of what each subscription has been sent: the
revision up to which each followed transcript's frames were queued. Dropping
frames on lag and forgetting the subscription are one step here; the hub
learns of it through ``on_lagged``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from protocol import wire
from server.frames import ControlFrame, EncodedEvent, EncodedSnapshot, Outbound
from server.tuning import CONTROL_FRAME_SLACK

if TYPE_CHECKING:
    from server.metrics import Metrics

log = logging.getLogger("tsync.outbound")

Send = Callable[[dict[str, Any]], Awaitable[None]]


class WriteDelay:
    """Wakes the writers of queues that got new increments, at most once per
    ``delay`` seconds (Centrifugo's ``write_delay``).

    Without it every event wakes every subscriber's writer at once and each
    sends that one frame on its own: one trip through the ASGI and WebSocket
    layers per frame per subscriber. Waking them together a moment later lets
    the increments of events that arrive close together leave in one
    WebSocket message, at the cost of at most ``delay`` of latency. With
    ``delay`` 0 the writers are woken at the end of the current loop turn.
    """

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self._marked: list[OutboundQueue] = []
        self._handle: asyncio.Handle | None = None

    def mark(self, queue: OutboundQueue) -> None:
        self._marked.append(queue)
        if self._handle is None:
            loop = asyncio.get_running_loop()
            self._handle = (
                loop.call_later(self.delay, self._wake_all)
                if self.delay > 0
                else loop.call_soon(self._wake_all)
            )

    def _wake_all(self) -> None:
        self._handle = None
        marked, self._marked = self._marked, []
        for queue in marked:
            queue._wake_writer()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._marked.clear()


class OutboundQueue:
    """What the server sends one client connection: the queue, its writer, and
    the revision each followed transcript has been queued up to."""

    # Thousands of these live at once: no per-instance __dict__.
    __slots__ = (
        "_batch_bytes",
        "_drained",
        "_marked",
        "_max_bytes",
        "_max_frames",
        "_metrics",
        "_on_lagged",
        "_queue",
        "_queued_bytes",
        "_send",
        "_sent",
        "_waiter",
        "_write_delay",
        "_writer",
        "binary",
        "closed",
        "context_id",
        "id",
        "seq",
    )

    def __init__(
        self,
        conn_id: str,
        send: Send,
        *,
        queue_max_frames: int,
        queue_max_bytes: int,
        write_batch_bytes: int,
        binary: bool = False,
        metrics: Metrics | None = None,
        on_lagged: Callable[[OutboundQueue, set[str]], None] | None = None,
        write_delay: WriteDelay | None = None,
    ) -> None:
        self.id = conn_id
        self.context_id = f"ws:{conn_id}"
        self.binary = binary
        self.seq = 0
        self.closed = False
        #: transcript id -> the revision its frames have been queued up to.
        self._sent: dict[str, int] = {}
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
        self._write_delay = write_delay
        self._marked = False

    # --- subscriptions ------------------------------------------------------------

    def follows(self, transcript_id: str) -> bool:
        """Whether this connection is subscribed to ``transcript_id``."""
        return transcript_id in self._sent

    def followed(self) -> list[str]:
        """The transcripts this connection is subscribed to."""
        return list(self._sent)

    @property
    def subscription_count(self) -> int:
        return len(self._sent)

    def sent_up_to(self, transcript_id: str) -> int | None:
        """The revision ``transcript_id``'s frames were queued up to, ``None``
        when not subscribed."""
        return self._sent.get(transcript_id)

    def unfollow(self, transcript_id: str) -> bool:
        """Stop sending ``transcript_id``'s increments; False if not subscribed.
        (Frames already queued still go out: the consumer handles repeats.)"""
        return self._sent.pop(transcript_id, None) is not None

    # --- pushing (hub side; synchronous) ---------------------------------------

    def push_increment(self, item: EncodedEvent) -> None:
        """Queue one increment of a followed transcript, unless this
        subscription already has it (a baseline taken after the event was
        captured) or does not follow it (hot path: once per event per
        subscriber)."""
        sent = self._sent.get(item.transcript_id)
        if sent is None or sent >= item.revision:
            return
        self._sent[item.transcript_id] = item.revision
        self._enqueue_data(item)

    def push_resume(
        self, transcript_id: str, from_revision: int, items: Iterable[EncodedEvent]
    ) -> None:
        """Follow ``transcript_id`` from ``from_revision`` (what the consumer
        holds) and queue ``items``, its increments after it, in order. A lag on
        the way stops the rest: the subscription is then dropped."""
        self._sent[transcript_id] = from_revision
        for item in items:
            self.push_increment(item)

    def push_baseline(self, item: EncodedSnapshot) -> None:
        """Follow the snapshot's transcript from its revision and queue it. A
        baseline is the repair path, so it is let in even when it alone is
        larger than the byte limit, as long as the queue is not otherwise full."""
        self._sent[item.transcript_id] = item.revision
        if len(self._queue) >= self._max_frames:
            self._lag({item.transcript_id})
            return
        self._queue.append(item)
        self._queued_bytes += item.estimated_bytes
        self._wake_up()

    def _enqueue_data(self, item: EncodedEvent) -> None:
        size = item.estimated_bytes
        if len(self._queue) >= self._max_frames or self._queued_bytes + size > self._max_bytes:
            self._lag({item.transcript_id})
            return
        self._queue.append(item)
        self._queued_bytes += size
        if self._write_delay is None:
            self._wake_up()
        elif not self._marked:
            self._marked = True
            self._write_delay.mark(self)

    def _wake_writer(self) -> None:
        self._marked = False
        self._wake_up()

    def _wake_up(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def push_control(self, frame: Any) -> None:
        """Queue an ack, pong or error (a wire struct with ``seq=0``)."""
        if self.closed:
            return
        if len(self._queue) >= self._max_frames + CONTROL_FRAME_SLACK:
            # Only control frames are left and the client still reads none of
            # them: it is not a slow consumer but a dead or abusive one.
            log.warning("closing %s: outbound queue full of unread answers", self.id)
            self.closed = True
            self._wake_up()
            return
        item = ControlFrame(frame)
        self._queue.append(item)
        self._queued_bytes += item.estimated_bytes
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
        """(frames, estimated bytes) waiting to be written."""
        return len(self._queue), self._queued_bytes

    def _lag(self, transcript_ids: set[str]) -> None:
        kept: list[Outbound] = []
        kept_bytes = 0
        for item in self._queue:
            if item.data and item.transcript_id is not None:
                transcript_ids.add(item.transcript_id)
            else:
                kept.append(item)
                kept_bytes += item.estimated_bytes
        self._queue = kept
        self._queued_bytes = kept_bytes
        lagged = {t for t in transcript_ids if t in self._sent}
        for transcript_id in lagged:
            del self._sent[transcript_id]
        if self._on_lagged is not None:
            self._on_lagged(self, lagged)
        for transcript_id in sorted(lagged):
            self.push_error(
                wire.LAGGED,
                "outbound queue full: frames were dropped; resubscribe from your revision",
                transcript_id=transcript_id,
            )
        if self._metrics is not None:
            self._metrics.lagged.inc(len(lagged))

    # --- writing (the queue's own task) ---------------------------------------------

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
                    accounted += item.estimated_bytes
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
        self._queued_bytes -= item.estimated_bytes
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
