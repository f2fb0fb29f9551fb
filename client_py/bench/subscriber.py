"""One subscriber connection: subscribe, verify every frame, time every message.

Each subscriber follows one transcript on its own connection through the
consumer core (``protocol.consumer.Consumer``), exactly as a real client
does: every frame is validated (one that does not is counted as invalid),
its ``seq`` checked, the transcript's continuity judged and each event
applied to a copy that keeps no messages (so every event is checked against
the length, active start and segments as the server's entity would, at no
memory cost); the ops the core asks for (resubscribes, barrier pings) are
sent. Latency is the time from the writer's timestamp (``metadata.t``,
``time.time_ns``) to the arrival of the WebSocket message that carried the
increment.

With ``fast=True`` (``tsync bench --fast``) the checks are those of
``client_py.bench.fastpath.FastCheck`` instead: ``seq`` and each
transcript's revisions from the frames' envelopes, no message decoded, so
that the generator spends far less CPU per delivery than the server does.

Drafts (``tsync bench stream``) are checked by ``client_py.bench.draftcheck``
on both paths: fed the core's draft updates, or the draft frames themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any, Final
from urllib.parse import urlsplit

import websockets
from websockets.asyncio.client import ClientConnection, connect

from client_py.bench.draftcheck import DraftCheck
from client_py.bench.fastpath import FastCheck
from client_py.bench.fastsocket import FastSocket
from client_py.bench.stats import GroupStats
from protocol import wire
from protocol.consumer import (
    Applied,
    Consumer,
    DraftClosed,
    DraftUpdated,
    ErrorReceived,
    FramesLost,
    InvalidFrameReceived,
    Replaced,
    Resubscribed,
    Stopped,
)
from protocol.continuity import Continuity
from protocol.types import MessagesAppended
from protocol.views import Window

SMALL_RCVBUF: Final = 32 << 10


class Subscriber:
    """One connection following one transcript, with continuity checks.

    ``reading`` gates the reader: a stopped subscriber (slow scenario) clears
    it and the socket's buffers fill up as a stalled client's would.
    """

    def __init__(
        self,
        url: str,
        transcript_id: str,
        stats: GroupStats,
        window: Window | None = None,
        *,
        fast: bool = False,
        check_digests: bool = True,
    ) -> None:
        self.url = url
        self.transcript_id = transcript_id
        self.stats = stats
        # ``check_digests``: every copy of a real client checks each event's
        # digest; one process holding hundreds of copies checks a sample
        # (``DIGEST_SAMPLE``), or it would spend more on digests than the
        # server spends on the deliveries.
        self.core = Consumer(keep_messages=False, check_digests=check_digests)
        self.subscription = self.core.subscribe(transcript_id, window=window)
        #: What it checks of drafts (both paths).
        self.drafts = DraftCheck(stats)
        #: Set once the first token arrived (a subscriber that pauses waits for it).
        self.first_token = asyncio.Event()
        #: The envelope-only checks (``--fast``), instead of the consumer core.
        self.fast = FastCheck(transcript_id, stats, self.drafts) if fast else None
        self.ready = asyncio.Event()  #: the first baseline arrived
        self.done = asyncio.Event()  #: the copy reached ``target``
        self.reading = asyncio.Event()
        self.reading.set()
        self.target: int | None = None
        self.start_revision: int | None = None
        self.ws: ClientConnection | None = None
        #: The connection of the fast path (``fast``) instead of ``ws``.
        self.fast_ws: FastSocket | None = None
        self.closing = False
        self.auto_reconnect = True
        #: Small socket buffers, for a subscriber that stops reading: the
        #: server then sees the stall after kilobytes rather than megabytes.
        self.small_buffers = False
        #: Frames and bytes received since the last (re)connect, and when it started.
        self.since_connect_frames = 0
        self.since_connect_bytes = 0
        self.since_connect_baselines = 0
        self.connected_at = 0.0
        self.done_at = 0.0
        #: Events a later baseline covered (they are not owed as increments).
        self.skipped_by_baselines = 0
        self.baselines = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def continuity(self) -> Continuity:
        return self.subscription.continuity

    @property
    def revision(self) -> int | None:
        """The revision of the copy held (``None`` before the first baseline)."""
        return self.fast.revision if self.fast is not None else self.continuity.revision

    # --- connection ------------------------------------------------------------

    async def open(self, *, subscribe: bool = True) -> None:
        """Connect and (unless told not to) send the subscribe op for the copy held."""
        self.connected_at = time.perf_counter()
        self.since_connect_frames = self.since_connect_bytes = self.since_connect_baselines = 0
        extra: dict[str, Any] = {}
        if self.small_buffers:
            parts = urlsplit(self.url)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_RCVBUF)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(
                sock, (parts.hostname or "127.0.0.1", parts.port or 80)
            )
            extra = {"sock": sock, "max_queue": 1}
        self.closing = False
        if self.fast is not None:
            await self._open_fast(self.fast, extra.get("sock"), subscribe=subscribe)
            return
        self.ws = await connect(
            self.url,
            subprotocols=[wire.SUBPROTOCOL_JSON],  # type: ignore[list-item]
            compression=None,
            max_size=None,
            open_timeout=30,
            ping_interval=None,
            **extra,
        )
        self.closing = False
        if subscribe:
            await self.subscribe()
        self._task = asyncio.create_task(self._read_loop())

    async def subscribe(self) -> None:
        """Send the subscribe op for the copy held (a resume if there is one)."""
        if self.fast is not None:
            assert self.fast_ws is not None
            self.fast.connection_made()
            self.fast_ws.send(self.fast.subscribe_op())
            return
        assert self.ws is not None
        self.core.connection_made()
        await self._send_ops(self.ws)

    async def _send_ops(self, ws: ClientConnection) -> None:
        for op in self.core.ops_to_send():
            await ws.send(wire.encode_json(op), text=True)

    async def close(self) -> None:
        """Close on purpose (not counted as a lost connection)."""
        self.closing = True
        if self.ws is not None:
            await self.ws.close()
        if self.fast_ws is not None:
            await self.fast_ws.close()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self.core.connection_lost()

    def set_target(self, revision: int) -> None:
        """The transcript's final revision: the subscriber is done when its copy gets there."""
        self.target = revision
        self._check_done()

    def finish(self) -> None:
        """Count what was owed and what is missing once the run is over."""
        self.drafts.finish()
        if self.fast is None:  # the fast checks count into the stats as they go
            counters = self.continuity.counters
            self.stats.repeats += counters.repeats_ignored
            self.stats.gaps += counters.gaps
            self.stats.foreign += counters.foreign
        if self.target is None:
            return
        start = self.start_revision if self.start_revision is not None else self.target
        self.stats.expected += max(0, self.target - start - self.skipped_by_baselines)
        revision = self.revision or 0
        if revision < self.target:
            self.stats.incomplete += 1
            self.stats.missing += self.target - revision

    # --- reading -----------------------------------------------------------------

    async def _read_loop(self) -> None:
        ws = self.ws
        assert ws is not None
        try:
            while True:
                if not self.reading.is_set():
                    await self.reading.wait()
                message = await ws.recv()
                self._on_message(message, time.time_ns())
                # Sent once the message is handled (sending awaits).
                await self._send_ops(ws)
        except websockets.ConnectionClosed:
            if not self.closing:
                self.stats.disconnects += 1
                if self.auto_reconnect:
                    self.core.connection_lost()
                    asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        with contextlib.suppress(OSError, websockets.InvalidHandshake, TimeoutError):
            await self.open()

    # --- the fast path (``--fast``): no reader task, messages pushed in -----------------

    async def _open_fast(
        self, fast: FastCheck, sock: socket.socket | None, *, subscribe: bool
    ) -> None:
        def received(message: bytes) -> None:
            if self._on_fast_message(fast, message, time.time_ns()) and conn.transport:
                conn.send(fast.subscribe_op())
            if not self.reading.is_set():
                # A subscriber that stops reading (slow scenario).
                conn.pause_reading()
                asyncio.get_running_loop().create_task(self._resume_when_reading(conn))

        conn = await FastSocket.connect(
            self.url, received, subprotocol=wire.SUBPROTOCOL_JSON, sock=sock
        )
        self.fast_ws = conn
        if subscribe:
            await self.subscribe()
        self._task = asyncio.create_task(self._fast_until_closed(conn))

    async def _resume_when_reading(self, conn: FastSocket) -> None:
        await self.reading.wait()
        conn.resume_reading()

    async def _fast_until_closed(self, conn: FastSocket) -> None:
        await conn.closed
        if self.fast_ws is conn:
            self.fast_ws = None
        if not self.closing:
            self.stats.disconnects += 1
            if self.auto_reconnect:
                asyncio.get_running_loop().create_task(self._reconnect())

    def _on_fast_message(self, fast: FastCheck, message: str | bytes, now_ns: int) -> bool:
        """The fast path; True when a resubscribe is due."""
        resubscribe, baselines = fast.receive(message, now_ns)
        self.since_connect_bytes += len(message)
        for previous, revision in baselines:
            self._baseline(previous, revision)
        if self.drafts.tokens_seen and not self.first_token.is_set():
            self.first_token.set()
        self._check_done()
        return resubscribe

    def _baseline(self, previous: int | None, revision: int) -> None:
        """A baseline at ``revision`` replaced the copy at ``previous``."""
        stats = self.stats
        stats.baselines += 1
        self.since_connect_baselines += 1
        self.baselines += 1
        if self.baselines > 1:
            stats.rebaselines += 1
            if previous is not None:
                self.skipped_by_baselines += max(0, revision - previous)
        if self.start_revision is None:
            self.start_revision = revision
        self.ready.set()

    def _on_message(self, message: str | bytes, now_ns: int) -> None:
        stats = self.stats
        stats.ws_messages += 1
        stats.received_bytes += len(message)
        self.since_connect_bytes += len(message)
        core = self.core
        frames, repeats = core.frames, core.repeated_frames
        core.receive_data(message)
        frames = core.frames - frames
        stats.frames += frames
        self.since_connect_frames += frames
        stats.repeats += core.repeated_frames - repeats
        for update in core.updates_received():
            if isinstance(update, Applied):  # the hot path: one per increment
                stats.delivered += 1
                stats.last_apply_ns = now_ns
                change = update.event.change
                if isinstance(change, MessagesAppended):
                    for msg in change.messages:
                        sent = msg.metadata.get("t") if msg.metadata else None
                        if isinstance(sent, int):
                            stats.latency.record_ns(now_ns - sent)
                            stats.messages += 1
                        draft_id = msg.metadata.get("d") if msg.metadata else None
                        if isinstance(draft_id, str) and isinstance(msg.content, str):
                            self.drafts.committed(draft_id, msg.content)
                self._check_done()
            elif isinstance(update, DraftUpdated):
                self.drafts.frame(
                    update.draft_id, update.n, update.delta, update.text, "open", now_ns
                )
                if not self.first_token.is_set():
                    self.first_token.set()
            elif isinstance(update, DraftClosed):
                self.drafts.frame(update.draft_id, 0, None, None, update.state, now_ns)
            elif isinstance(update, Replaced):
                self._baseline(update.previous_revision, update.snapshot.revision)
                self._check_done()
            elif isinstance(update, InvalidFrameReceived):
                stats.invalid += 1
            elif isinstance(update, FramesLost):
                stats.seq_gaps += 1
                stats.gaps += 1
            elif isinstance(update, Resubscribed):
                if update.reason == wire.LAGGED:
                    stats.lagged += 1
            elif isinstance(update, Stopped):
                stats.stops += 1
                if update.code != wire.NOT_FOUND:
                    stats.errors += 1
            elif isinstance(update, ErrorReceived):
                stats.errors += 1

    def _check_done(self) -> None:
        revision = self.revision
        if (
            self.target is not None
            and revision is not None
            and revision >= self.target
            and not self.done.is_set()
        ):
            self.done_at = time.perf_counter()
            self.done.set()
