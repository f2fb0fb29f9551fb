"""One WebSocket connection's outbound side: a bounded queue and how it is written.

The hub pushes frames (synchronous, never blocks, never awaits a socket).

Where the ASGI server offers the raw frame write (``server.web.ws_protocol``,
which ``tsync serve`` runs), a frame pushed while nothing is queued and the
socket is taking data is numbered (``seq``), framed and written to the
transport at once, in the pusher's own step: no ASGI ``send``, no task
wake-up. Only when the transport is paused (its buffer is full: the client
reads slower than we write) do frames wait in the queue, and the queue's
writer task writes them, coalesced, when the transport drains. That task is
started the first time a frame has to wait: a raw connection that is idle,
or whose client keeps up, holds none.

Elsewhere (another ASGI server) every frame goes through the queue and the
writer task's ASGI ``send``.

The writer coalesces JSON frames into one WebSocket message separated by
``\\n`` (up to ``write_batch_bytes``); MessagePack frames are one message
each. A baseline bigger than ``write_batch_bytes`` goes to a raw connection
as a fragmented message, a chunk of the shared encoding at a time as the
client reads, so it is never copied whole per connection.

Bounds (every frame counts its real size): when an increment would take the
queue over ``queue_max_frames`` or ``queue_max_bytes`` the queued data frames
are dropped and each affected subscription gets a ``lagged`` error and is
unsubscribed, so the server's memory stays bounded and nobody else waits.
Baselines count too, by what is left of them to send, with their own rule: a
new baseline of a transcript replaces that transcript's frames still waiting
(a re-subscribe drops the superseded one), it must fit the budget behind
queued increments, and it is let in whatever its size behind nothing but
answers and other baselines (a transcript bigger than the budget can always
be sent; its bytes are shared with every other subscriber's, not copied).
The bytes of baselines not sent yet count on top of the budget, so that they
never crowd out the increments behind them. A client that lets increments
pass the budget while it still holds a baseline it has not read is cut with
4008 rather than lagged: lagging would keep that baseline (and the shared
encoding it holds alive) queued for a client that does not read it (issue
24: 15 of them held 15 encodings of a 60 MB transcript), and a resubscribe
could only start the same baseline again. Acks, pongs and errors
are never dropped; when they too pass the limits (by ``CONTROL_FRAME_SLACK``
frames or ``CONTROL_BYTES_SLACK`` bytes) the client reads nothing at all and
is closed with 4008.

A shared frame that cannot be built in this connection's format
(``server.live.frames.Unencodable``: a fault, logged once where the encoding
failed) ends that one subscription: its frames still waiting are dropped, it
is forgotten, and the client gets an ``internal`` error naming the
transcript (it may subscribe again). It takes no ``seq``; every other
subscription, and every other connection, goes on.

The queue is also the one owner of what each subscription has been sent: the
revision up to which each followed transcript's frames were queued. Dropping
frames on lag and forgetting the subscription are one step here; the hub
learns of it through ``on_lagged``.

The rules (what each subscription was sent, the budget, lag, draft slots)
are ``server.live.outbound_policy.QueuePolicy``, pure; ``OutboundQueue`` is
that policy with the two writers (the raw frame write and the ASGI task),
``seq`` numbering and what the client and the hub are told.

Why one module of over 600 lines: the raw write in the pusher's step, the
queued path and the streamed baseline number the same ``seq`` and take
frames off the same queue by the policy's rules; they are kept together so
that each path can be checked against the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from protocol import codes, wire
from server.live.frames import (
    BINARY,
    TEXT,
    ControlFrame,
    EncodedDraft,
    EncodedEvent,
    EncodedSnapshot,
    Outbound,
    SharedFrame,
    Unencodable,
    ws_header,
)
from server.live.outbound_policy import QUEUED, READS_NOTHING, QueuePolicy
from server.tuning import MAX_ERROR_MESSAGE_CHARS, RAW_FLUSH_BYTES

if TYPE_CHECKING:
    from server.metrics import Metrics

log = logging.getLogger("tsync.outbound")

Send = Callable[[dict[str, Any]], Awaitable[None]]

#: The ASGI scope extension that carries a connection's raw frame write
#: (``server.web.ws_protocol`` puts it there; other ASGI servers do not).
RAW_FRAMES: Final = "tsync.raw_frames"


class RawFrames(Protocol):
    """The raw frame write of a connection (``server.web.ws_protocol``)."""

    def raw_ready(self) -> bool:
        """Whether a write goes out now: open, and the transport not paused."""
        ...

    def raw_write(self, data: bytes) -> None:
        """Write whole frames (or whole fragments), already framed."""
        ...

    def raw_writelines(self, parts: Sequence[bytes | memoryview]) -> None:
        """Write one frame given as its header and payload pieces (shared
        buffers the transport keeps by reference, not copied)."""
        ...

    async def raw_writable(self) -> bool:
        """Wait until writes may go out; False once they never will."""
        ...

    def raw_fail(self, code: int) -> None:
        """Close the connection now with ``code`` (the app's ``receive``
        then returns the disconnect, even from a client that sends nothing)."""
        ...


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


class OutboundQueue(QueuePolicy):
    """What the server sends one client connection: the queue, its writer, and
    the revision each followed transcript has been queued up to."""

    # Thousands of these live at once: no per-instance __dict__.
    __slots__ = (
        "_batch_bytes",
        "_drained",
        "_marked",
        "_metrics",
        "_on_lagged",
        "_raw",
        "_send",
        "_started",
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
        raw: RawFrames | None = None,
    ) -> None:
        super().__init__(queue_max_frames=queue_max_frames, queue_max_bytes=queue_max_bytes)
        self.id = conn_id
        self.context_id = f"ws:{conn_id}"
        self.binary = binary
        self.seq = 0
        self.closed = False
        self._send = send
        self._raw = raw
        self._batch_bytes = write_batch_bytes
        #: The writer's wake-up, made only while it waits (an Event and its
        #: waiter deque would cost ~700 bytes on every idle connection).
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Event | None = None  # made on the first drain()
        self._metrics = metrics
        self._on_lagged = on_lagged
        self._writer: asyncio.Task[None] | None = None  # made when a frame first waits
        self._started = False
        self._write_delay = write_delay
        self._marked = False

    @property
    def raw(self) -> bool:
        """Whether this connection takes raw frames (the fast path)."""
        return self._raw is not None

    # --- pushing (hub side; synchronous) ---------------------------------------

    def push_increments(
        self, items: Sequence[EncodedEvent], finals: Sequence[EncodedDraft] = ()
    ) -> None:
        """Send or queue increments of one followed transcript, in revision
        order, skipping what this subscription already has (a baseline taken
        after they were captured) and everything if it does not follow the
        transcript. ``finals``: the ``final`` frames of the drafts these
        events commit, sent right behind them in the same flush (the same
        WebSocket message in JSON). The hot path: once per subscriber per
        delivery."""
        last = items[-1]
        sent = self._sent.get(last.transcript_id)
        if sent is None or sent >= last.revision:
            return
        if items[0].revision <= sent:
            items = [item for item in items if item.revision > sent]
        self._sent[last.transcript_id] = last.revision
        raw = self._raw
        if raw is not None and not self._queue and not self.closed and raw.raw_ready():
            if len(items) == 1 and not self.binary and not finals:
                try:
                    frame = items[0].frame_json(self.seq + 1)
                except Unencodable:
                    self._unsendable(last.transcript_id)
                    return
                self.seq += 1
                raw.raw_write(frame)
                self._count_sent(1, 1, len(frame))
                return
            self._queue = [*items, *finals]
            self._queued_bytes = sum(item.size for item in items)
            self._draft_items = len(finals)
            self._flush_raw()
            if self._queue:
                self._wake_up()
            return
        for item in items:
            if not self._enqueue_data(item):
                return  # lagged: the subscription is gone
        for final in finals:
            self.push_draft(final)

    def push_resume(
        self, transcript_id: str, from_revision: int, items: Sequence[EncodedEvent]
    ) -> None:
        """Follow ``transcript_id`` from ``from_revision`` (what the consumer
        holds) and queue ``items``, its increments after it, in order. A lag on
        the way stops the rest: the subscription is then dropped."""
        self._sent[transcript_id] = from_revision
        if items:
            self.push_increments(items)

    def push_baseline(self, item: EncodedSnapshot) -> None:
        """Follow the snapshot's transcript from its revision and queue it in
        place of that transcript's frames still waiting. A baseline that does
        not fit behind the increments queued lags the connection instead (the
        consumer resubscribes and gets it in a queue without them)."""
        transcript_id = item.transcript_id
        self._drop_waiting(transcript_id)
        self._sent[transcript_id] = item.revision
        self._enqueue_data(item)

    def push_draft(self, update: EncodedDraft, *, catch_up: bool = False) -> None:
        """Send or queue one draft update or close of a followed transcript
        (nothing if it is not followed). While frames wait, the updates of
        one open draft merge into one slot (``server.live.frames.DraftSlot``); a
        close takes the place of its draft's slot, at the end of the queue
        (behind the increment of a commit). Draft frames never count against
        the bounds and never lag the connection. ``catch_up``: a frame of the
        catch-up behind a baseline or resume (``Hub._push_drafts``, bounded
        there), never taken as a sign that the client reads nothing."""
        if self.closed or update.transcript_id not in self._sent:
            return
        raw = self._raw
        q = self._queue
        if raw is not None and not q and raw.raw_ready():
            try:
                if self.binary:
                    data = update.render(self.seq + 1, True)
                    frame = ws_header(BINARY, len(data)) + data
                else:
                    frame = update.frame_json(self.seq + 1)
            except Unencodable:
                self._unsendable(update.transcript_id)
                return
            self.seq += 1
            raw.raw_write(frame)
            self._count_sent(1, 1, len(frame))
            return
        verdict = self._queue_draft(update, catch_up=catch_up)
        if verdict is QUEUED:
            self._have_written()
        elif verdict is READS_NOTHING:
            # One slot per open draft and a close per draft ended: this many
            # waiting means the client reads nothing at all (4008), as for answers.
            log.warning("closing %s: outbound queue full of unread draft frames", self.id)
            self.closed = True
            self._wake_up()

    def push_shared(self, item: SharedFrame) -> None:
        """Send or queue a frame shared by the subscribers of a followed
        transcript (a ``presence`` frame; nothing if it is not followed).
        Counted like an answer and never dropped on lag: its sender makes
        at most one a second per transcript. Its encoding is shared, but a
        queued one keeps it alive for as long as this client does not read
        it: past the byte budget and ``CONTROL_BYTES_SLACK`` (as answers) the
        connection is closed with 4008 (presence frames of 256 transcripts,
        100 members each with 1 KiB states, would pile up 25 MB a second)."""
        if self.closed or item.transcript_id not in self._sent:
            return
        raw = self._raw
        if raw is not None and not self._queue and raw.raw_ready():
            data = item.render(self.seq + 1, self.binary)
            self.seq += 1
            raw.raw_write(ws_header(BINARY if self.binary else TEXT, len(data)) + data)
            self._count_sent(1, 1, len(data))
            return
        if not self._shared_fits(item.size):
            self._cut("outbound queue full of presence frames it does not read")
            return
        self._queue.append(item)
        self._queued_bytes += item.size
        self._have_written()

    def _enqueue_data(self, item: EncodedEvent | EncodedSnapshot) -> bool:
        q = self._queue
        if q and not self._fits(item):
            if q[0].baseline:
                # Over the budget behind a baseline it has not read: lagging
                # would keep that baseline (and its shared encoding) queued
                # for a client that does not read it.
                self._cut("outbound queue over its budget behind a baseline it does not read")
            else:
                self._lag({item.transcript_id})
            return False
        q.append(item)
        self._count(item, 1)
        self._have_written()
        return True

    def _cut(self, why: str) -> None:
        """Close the connection with 4008: it does not read what it was sent."""
        log.warning("closing %s: %s", self.id, why)
        self.closed = True
        self._wake_up()
        if self._raw is not None:
            self._raw.raw_fail(codes.CLOSE_OVERFLOW)

    def _have_written(self) -> None:
        """Have the frame just queued written: at once when it is alone and
        the transport takes data, else by the writer, woken now (raw) or
        together with the others' by ``write_delay`` (ASGI)."""
        q = self._queue
        raw = self._raw
        if raw is not None or self._write_delay is None:
            if raw is not None and len(q) == 1 and not self.closed and raw.raw_ready():
                self._flush_raw()
            if q:
                self._wake_up()
        elif not self._marked:
            self._marked = True
            self._write_delay.mark(self)

    def _wake_writer(self) -> None:
        self._marked = False
        self._wake_up()

    def _wake_up(self) -> None:
        """Have the writer look at the queue: wake it, or start it on the
        first frame that has to wait (most connections never need one: a
        raw write goes out in the pusher's own step)."""
        waiter = self._waiter
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(None)
        elif self._writer is None and self._started and self._queue and not self.closed:
            self._writer = asyncio.create_task(self._write_loop(), name=f"writer-{self.id}")

    def push_control(self, frame: Any) -> None:
        """Send or queue an ack, pong or error (a wire struct with ``seq=0``)."""
        if self.closed:
            return
        q = self._queue
        raw = self._raw
        if raw is not None and not q and raw.raw_ready():
            # The common case (an ack or pong to a client that keeps up):
            # encoded with its seq and written at once.
            self.seq += 1
            data = wire.encode(wire.with_seq(frame, self.seq), binary=self.binary)
            raw.raw_write(ws_header(BINARY if self.binary else TEXT, len(data)) + data)
            self._count_sent(1, 1, len(data))
            return
        item = ControlFrame(frame, binary=self.binary)
        if not self._control_fits(item.size):
            # Only answers are left and the client still reads none of them:
            # it is not a slow consumer but a dead or abusive one.
            log.warning("closing %s: outbound queue full of unread answers", self.id)
            self.closed = True
            self._wake_up()
            return
        q.append(item)
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
        """Queue an ``error`` frame; a long ``message`` (one that quotes what
        the client sent) is cut to ``MAX_ERROR_MESSAGE_CHARS``."""
        if self._metrics is not None:
            self._metrics.errors.labels(code).inc()
        if len(message) > MAX_ERROR_MESSAGE_CHARS:
            message = message[: MAX_ERROR_MESSAGE_CHARS - 1] + "\u2026"
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

    def end_subscription(self, transcript_id: str) -> None:
        """End the subscription of ``transcript_id`` with an ``internal``
        error (its frames still waiting go): what the server does when it
        cannot send it what it must (``_unsendable``)."""
        self._unsendable(transcript_id)

    def _unsendable(self, transcript_id: str | None, queued: Outbound | None = None) -> None:
        """A frame of ``transcript_id`` (``queued``, when it waits in the
        queue) cannot be built in this connection's format (``Unencodable``,
        logged where the encoding failed): end that subscription alone, with
        an ``internal`` error. Its frames still waiting go (the next would
        follow a gap); nothing else changes."""
        if not self._forget(transcript_id, queued):
            return  # no longer followed (or none): its frames just go
        assert transcript_id is not None
        if self._on_lagged is not None:
            self._on_lagged(self, {transcript_id})
        self.push_error(
            wire.INTERNAL,
            "a frame of this transcript could not be encoded for this connection: "
            "the subscription ended; subscribe again",
            transcript_id=transcript_id,
        )

    def _lag(self, transcript_ids: set[str]) -> None:
        lagged = self._drop_lagged(transcript_ids)
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

    def _count_sent(self, frames: int, messages: int, size: int) -> None:
        """Count what went out (``tsync_frames_sent``, ...)."""
        if self._metrics is not None:
            sent = self._metrics.sent
            sent.frames += frames
            sent.messages += messages
            sent.bytes += size

    # --- writing: raw frames (synchronous, while the transport takes them) --------------

    def _flush_raw(self) -> None:
        """Write what is queued, in order, for as long as the transport takes
        it: JSON frames coalesced into messages of up to ``write_batch_bytes``,
        MessagePack frames one message each (several per write), a big
        baseline one fragment at a time."""
        raw = self._raw
        assert raw is not None
        q = self._queue
        binary = self.binary
        limit = self._batch_bytes
        budget = RAW_FLUSH_BYTES
        while q and not self.closed and raw.raw_ready():
            if budget <= 0:
                # Enough for one turn of the loop: the writer goes on in the next.
                self._wake_up()
                return
            head = q[0]
            if head.baseline and (self._stream is not None or head.size > limit):
                assert isinstance(head, EncodedSnapshot)
                budget -= self._stream_step(raw, head)
                continue
            frames, size, broken = self._render_head(q, limit, binary)
            taken = len(frames)
            del q[:taken]
            if taken:
                # One copy into one write: headers (binary) or newlines (JSON)
                # between the frames.
                parts: list[bytes] = [] if binary else [ws_header(TEXT, size + taken - 1)]
                for i, frame in enumerate(frames):
                    if binary:
                        parts.append(ws_header(BINARY, len(frame)))
                    elif i:
                        parts.append(b"\n")
                    parts.append(frame)
                raw.raw_write(b"".join(parts))
                budget -= size
                self._count_sent(taken, taken if binary else 1, size)
                self.seq += taken
            if broken is not None:
                self._unsendable(broken.transcript_id, broken)
                q = self._queue

    def _render_head(
        self, q: list[Outbound], limit: int, binary: bool
    ) -> tuple[list[bytes], int, Outbound | None]:
        """The frames of the items at the head of ``q`` that go out in one
        write, numbered from the next ``seq``: up to about ``limit`` bytes
        (a bare ``EncodedDraft`` is a close: a commit's ``final`` stays in its
        increment's message), never a baseline over ``limit`` behind others
        (it is streamed on its own), and never past an item that cannot be
        encoded (returned last, to be dropped). Returns the frames, their
        size and that item; the items taken are counted out of the queue,
        and the caller removes them and moves ``seq`` on by as many."""
        frames: list[bytes] = []
        size = 0
        seq = self.seq
        for item in q:
            if (size >= limit and type(item) is not EncodedDraft) or (
                frames and item.baseline and item.size > limit
            ):
                break
            try:
                frame = item.render(seq + 1, binary)
            except Unencodable:
                return frames, size, item
            self._count(item, -1)
            seq += 1
            frames.append(frame)
            size += len(frame)
        return frames, size, None

    def _stream_step(self, raw: RawFrames, head: EncodedSnapshot) -> int:
        """Write the next fragment of the baseline at the head of the queue;
        returns its size."""
        index = self._stream
        if index is None:
            index = 0
            self.seq += 1
        parts, size, last = head.fragment(index, self.seq)
        raw.raw_writelines(parts)
        self._streamed(head, index, size, last)
        if last:
            self._count_sent(1, 1, head.size)
        return size

    # --- writing (the queue's own task) ---------------------------------------------

    def start(self) -> None:
        """Let the writer run. With a raw write it is started when a frame
        first has to wait (an idle connection holds no task and no coroutine
        for it), and then waits for the next; through ASGI every frame goes
        through it, so it starts now."""
        self._started = True
        if self._raw is None and self._writer is None:
            self._writer = asyncio.create_task(self._write_loop(), name=f"writer-{self.id}")
        else:
            self._wake_up()

    async def _write_loop(self) -> None:
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
                raw = self._raw
                if raw is not None:
                    if not await raw.raw_writable():
                        self.closed = True  # the connection is going: the reader will notice
                        return
                    self._flush_raw()
                    if self._queue and raw.raw_ready():
                        await asyncio.sleep(0)  # flushed its share of this turn
                elif self.binary:
                    await self._write_binary()
                else:
                    await self._write_json()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the socket is gone; the reader will notice
            log.debug("writer of %s stopped: %r", self.id, exc)
            self.closed = True

    async def _write_json(self) -> None:
        """Send what is queued as one WebSocket message through ASGI."""
        q = self._queue
        parts, size, broken = self._render_head(q, self._batch_bytes, False)
        taken = len(parts)
        # Pushes made while the send below is awaited go to the new list.
        self._queue = q[taken:] if taken < len(q) else []
        self.seq += taken
        if broken is not None:
            self._unsendable(broken.transcript_id, broken)
        if not parts:
            return
        payload = parts[0] if len(parts) == 1 else b"\n".join(parts)
        await self._send({"type": "websocket.send", "text": payload.decode()})
        self._count_sent(len(parts), 1, size)

    async def _write_binary(self) -> None:
        item = self._queue.pop(0)
        self._count(item, -1)
        try:
            frame = item.render(self.seq + 1, True)
        except Unencodable:
            self._unsendable(item.transcript_id)
            return
        self.seq += 1
        await self._send({"type": "websocket.send", "bytes": frame})
        self._count_sent(1, 1, len(frame))

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
