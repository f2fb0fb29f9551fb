"""The hub: the registry of live transcripts and of connections.

It loads transcripts into memory (``load``) and lets idle ones go, creates,
deletes and lists them, takes every change (``append`` queues on the
committer in ``server.appends``; ``start_segment``), keeps live copies in step
with changes other replicas stored (catch-up and reload), and subscribes
connections. The HTTP and WebSocket layers call these methods and translate;
they never touch a live transcript.

The path of a change: validate -> build the event (``prepare_*``) -> the store
commits it (``await``, under the transcript's lock) -> ``apply`` updates
memory and captures the event -> the live transcript's pump pushes it to
every subscriber's outbound queue. Whatever changes the transcript (a
WebSocket append, an HTTP append, another replica's change learnt through the
backplane) reaches subscribers through that same path.

Subscribing is synchronous with respect to the transcript: pending events are
delivered first, then the baseline at revision R (or the increments after
``fromRevision``) is queued and the connection joins the subscribers, all
without an ``await`` in between, so the first increment it gets next is R+1:
no gap, no repeat. ``server.live.plan_subscribe`` decides which.

Modules: ``hub`` imports ``live``, ``appends`` and ``outbound``; none of them
imports the hub (``tests/server/test_imports.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from protocol import codes
from protocol.types import Message, Origin, TranscriptEvent, TranscriptSnapshot
from protocol.validation import parse_messages, validate_id
from server.appends import AppendCommitter, PendingAppend
from server.config import ServerConfig
from server.errors import TooManySubscriptions
from server.frames import EncodedEvent
from server.live import (
    CatchUpFirst,
    FetchThenSplice,
    LiveTranscript,
    SendBaseline,
    SendFromWindow,
    plan_subscribe,
    splice,
)
from server.metrics import Metrics
from server.outbound import OutboundQueue, RawFrames, Send, WriteDelay
from server.store.base import (
    AppendResult,
    Store,
    StoredTranscript,
    TranscriptInfo,
    TranscriptNotFound,
)
from server.transcript import Transcript
from server.tuning import (
    BASELINE_ENCODES_AT_ONCE,
    IDLE_SWEEPS_PER_TTL,
    MIN_IDLE_SWEEP_S,
    RESUME_FETCHES_AT_ONCE,
)

log = logging.getLogger("tsync.hub")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Hub:
    """Holds the transcripts in use and serves every change and subscription."""

    def __init__(self, store: Store, config: ServerConfig, metrics: Metrics | None = None) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics or Metrics()
        #: The transcripts in memory, by id (read it; change it through the hub).
        self.live: dict[str, LiveTranscript] = {}
        #: The open connections' outbound queues, by connection id.
        self.connections: dict[str, OutboundQueue] = {}
        self._loading: dict[str, asyncio.Future[LiveTranscript]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.committer = AppendCommitter(store, self.metrics, self)
        #: Wakes the writers of queues with new increments (``write_delay_ms``).
        self.write_delay = WriteDelay(config.write_delay_ms / 1000)
        #: How many idle sweeps have run (tests wait on it instead of sleeping).
        self.sweeps = 0
        #: Bounds on the heavy parts of subscribing, server-wide.
        self.baseline_encodes = asyncio.Semaphore(BASELINE_ENCODES_AT_ONCE)
        self.resume_fetches = asyncio.Semaphore(RESUME_FETCHES_AT_ONCE)

    # --- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_idle(), name="hub-sweeper")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        self.write_delay.cancel()
        for queue in list(self.connections.values()):
            await queue.stop()
        await self.committer.stop()
        for live in list(self.live.values()):
            await live.close()
        self.live.clear()
        self.metrics.live_transcripts.set(0)

    async def _sweep_idle(self) -> None:
        ttl = self.config.idle_ttl_s
        while True:
            await asyncio.sleep(max(ttl / IDLE_SWEEPS_PER_TTL, MIN_IDLE_SWEEP_S))
            cutoff = time.monotonic() - ttl
            for tid, live in list(self.live.items()):
                if live.idle_since(cutoff) and not self.committer.busy(live):
                    live.deliver_pending()
                    del self.live[tid]
                    await live.close()
                    log.debug("evicted idle transcript %s", tid)
            self.metrics.live_transcripts.set(len(self.live))
            self.sweeps += 1

    # --- the registry -------------------------------------------------------------

    async def load(self, transcript_id: str) -> LiveTranscript:
        """The transcript in memory, loaded from the store unless it is there
        already (one load at a time per id). Raises ``TranscriptNotFound``."""
        live = self.live.get(transcript_id)
        if live is not None:
            live.touch()
            return live
        pending = self._loading.get(transcript_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[LiveTranscript] = asyncio.get_running_loop().create_future()
        self._loading[transcript_id] = future
        try:
            stored = await self.store.load(transcript_id)
            if stored is None:
                raise TranscriptNotFound(transcript_id)
            live = self._hold(self._make_live(stored))
            future.set_result(live)
            return live
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._loading[transcript_id]

    def _make_live(self, stored: StoredTranscript) -> LiveTranscript:
        return LiveTranscript(
            stored,
            event_window=self.config.event_window,
            idempotency_retention=self.store.idempotency_retention,
        )

    def _hold(self, live: LiveTranscript) -> LiveTranscript:
        self.live[live.id] = live
        self.metrics.live_transcripts.set(len(self.live))
        return live

    def is_loaded(self, transcript_id: str) -> bool:
        """Whether the transcript is in memory now (no load needed)."""
        return transcript_id in self.live

    def holds(self, transcript_id: str) -> bool:
        """Whether the transcript is in memory or being loaded."""
        return transcript_id in self.live or transcript_id in self._loading

    async def settled(self, transcript_id: str) -> LiveTranscript | None:
        """The copy in memory once a load in flight has finished; ``None`` when
        there is none. Never loads (the backplane's view)."""
        pending = self._loading.get(transcript_id)
        if pending is not None:
            await asyncio.wait([pending])
        return self.live.get(transcript_id)

    def is_current(self, live: LiveTranscript) -> bool:
        """Whether ``live`` is still the copy in use (not reloaded or forgotten)."""
        return self.live.get(live.id) is live

    def forget(self, transcript_id: str) -> None:
        """Drop a transcript from memory (after a delete, or a lost history);
        its subscribers are unsubscribed without a word."""
        live = self.live.pop(transcript_id, None)
        if live is not None:
            live.pump.cancel()
            for queue in live.subscribers:
                queue.unfollow(transcript_id)
            self.metrics.subscriptions.dec(len(live.subscribers))
            live.subscribers.clear()
            self.metrics.live_transcripts.set(len(self.live))

    async def _drop_deleted(self, live: LiveTranscript) -> None:
        """``live`` no longer exists in the store: tell its subscribers, forget it."""
        for queue in list(live.subscribers):
            queue.push_error(
                codes.NOT_FOUND, f"transcript {live.id!r} was deleted", transcript_id=live.id
            )
        self.forget(live.id)
        await live.close()

    async def delete(self, transcript_id: str) -> None:
        """Delete a transcript and its history; its subscribers get
        ``not-found``. Raises ``TranscriptNotFound``."""
        if not await self.store.delete(transcript_id):
            raise TranscriptNotFound(transcript_id)
        live = self.live.get(transcript_id)
        if live is not None:
            await self._drop_deleted(live)

    # --- writes ---------------------------------------------------------------------

    async def create(
        self,
        transcript_id: str | None,
        messages: object = (),
        *,
        origin: Origin | None = None,
    ) -> tuple[str, str, int]:
        """Create a transcript (initial messages are revision 1); returns
        ``(id, epoch, revision)``. Raises ``TranscriptExists``."""
        tid = validate_id(transcript_id) if transcript_id is not None else uuid.uuid4().hex
        parsed = self._parse(messages)
        epoch = uuid.uuid4().hex
        draft = Transcript(id=tid, epoch=epoch)
        first = draft.prepare_append(parsed, origin=origin) if parsed else None
        await self.store.create(tid, epoch, now_ms(), first)
        if first is not None:
            self.metrics.appends.labels("create", "messages-appended").inc()
        return tid, epoch, 1 if first is not None else 0

    def _parse(self, messages: object) -> tuple[Message, ...]:
        if isinstance(messages, tuple) and all(isinstance(m, Message) for m in messages):
            return messages
        return parse_messages(
            messages,
            max_messages=self.config.max_messages_per_batch,
            max_message_bytes=self.config.max_message_bytes,
        )

    async def append(
        self,
        transcript_id: str,
        messages: object,
        *,
        expected_revision: int | None = None,
        idempotency_key: str | None = None,
        origin: Origin | None = None,
        transport: str = "ws",
    ) -> AppendResult:
        """Append one batch, all or nothing; the result's ``receipt`` is what
        to acknowledge, ``duplicate`` whether the key had been seen. Raises
        ``InvalidMessage``, ``RevisionConflict``, ``TranscriptNotFound``,
        ``StoreUnavailable``.

        Appends to one transcript that queue up while the store is busy are
        committed together (``server.appends``) and their increments leave
        together.
        """
        started = time.perf_counter()
        parsed = self._parse(messages)
        live = await self.load(transcript_id)
        pending = PendingAppend(parsed, expected_revision, idempotency_key, origin, transport)
        self.committer.submit(live, pending)
        # Not shielded: if this caller is cancelled the future is, and the
        # committer, which owns the commit, skips answering it.
        result = await pending.future  # raises what the append raised
        self.metrics.append_latency.observe(time.perf_counter() - started)
        return result

    async def requeue(self, pending: PendingAppend, transcript_id: str) -> None:
        """Queue an append again on the transcript's current copy (its copy
        was replaced while it waited)."""
        try:
            live = await self.load(transcript_id)
        except Exception as exc:
            pending.fail(exc)
            return
        self.committer.submit(live, pending)

    async def start_segment(
        self,
        transcript_id: str,
        start: int | None = None,
        *,
        origin: Origin | None = None,
        transport: str = "ws",
    ) -> AppendResult:
        """Start a segment. Raises ``InvalidSegment`` and the errors of ``append``."""
        while True:
            live = await self.load(transcript_id)
            async with live.lock:
                if not self.is_current(live):
                    continue
                result = await self.committer.commit_segment(live, start, origin, transport)
            if result is not None:
                return result

    # --- other replicas' changes ------------------------------------------------------

    async def _catch_up(self, live: LiveTranscript) -> None:
        """Apply the changes other replicas stored since our revision (under
        ``live.lock``). If the store no longer holds them, reload whole and
        give every subscriber a fresh baseline."""
        transcript = live.transcript
        events = await self.store.events_after(live.id, transcript.revision)
        if events is None or any(event.epoch != transcript.epoch for event in events):
            # History gone, or the transcript was deleted and created again.
            await self.reload(live)
            return
        for event in events:
            if event.revision == transcript.revision + 1:
                transcript.apply(event)
                self.metrics.backplane_events.inc()

    async def caught_up(self, live: LiveTranscript, *, mismatch: bool = False) -> bool:
        """``_catch_up`` for a writer holding ``live.lock``; False when ``live``
        was replaced (reloaded or forgotten): the writer starts over with the
        current copy. After a ``RevisionMismatch`` (``mismatch``) a catch-up
        that found nothing means the store holds another epoch: reload."""
        before = live.transcript.revision
        await self._catch_up(live)
        if mismatch and self.is_current(live) and live.transcript.revision == before:
            await self.reload(live)
        return self.is_current(live)

    async def reload(self, live: LiveTranscript) -> None:
        """Replace a live transcript with the store's copy (its history here is
        lost or from another epoch) and re-baseline its subscribers."""
        stored = await self.store.load(live.id)
        if stored is None:
            await self._drop_deleted(live)
            return
        fresh = self._make_live(stored)
        # The new copy's baselines are encoded (a chunk at a time) before it
        # replaces the old one; then, with no await, the subscribers move.
        for binary in {queue.binary for queue in live.subscribers}:
            await fresh.prepare_baseline(binary, self.baseline_encodes)
        if not self.is_current(live):  # replaced or forgotten meanwhile
            await fresh.close()
            return
        subscribers = list(live.subscribers)
        self.forget(live.id)
        self._hold(fresh)
        for queue in subscribers:
            self._send_baseline(fresh, queue)
        await live.close()

    def apply_remote(self, live: LiveTranscript, event: TranscriptEvent) -> bool:
        """Apply a change learnt from another replica if it is the next one.
        Returns False on a gap (the caller catches up from the store)."""
        transcript = live.transcript
        if event.epoch != transcript.epoch:
            return False
        if event.revision <= transcript.revision:
            return True
        if event.revision != transcript.revision + 1:
            return False
        transcript.apply(event)
        self.metrics.backplane_events.inc()
        return True

    # --- reads ----------------------------------------------------------------------

    async def snapshot(
        self, transcript_id: str, start: int = 0, end: int | None = None
    ) -> TranscriptSnapshot:
        live = await self.load(transcript_id)
        return live.transcript.snapshot(end, start=start)

    async def events_after(self, transcript_id: str, revision: int) -> list[TranscriptEvent] | None:
        """Events after ``revision`` from the window or the store; ``None`` when
        they are no longer held."""
        live = await self.load(transcript_id)
        current = live.transcript.revision
        if revision > current:
            return None  # a history this server never had: the caller needs a snapshot
        if revision == current:
            return []
        live.deliver_pending()
        start = live.window_start()
        if start is not None and start <= revision + 1:
            return [item.event for item in live.window if item.revision > revision]
        return await self.store.events_after(transcript_id, revision)

    # --- connections and subscriptions --------------------------------------------------

    def connect(
        self, conn_id: str, send: Send, *, binary: bool = False, raw: RawFrames | None = None
    ) -> OutboundQueue:
        """The outbound queue of a new connection, registered (start its writer
        with ``queue.start()``; ``disconnect`` it when the connection ends).
        ``raw``: the connection's raw frame write, when the ASGI server offers
        one (``server.ws_protocol``)."""
        config = self.config
        queue = OutboundQueue(
            conn_id,
            send,
            binary=binary,
            queue_max_frames=config.queue_max_frames,
            queue_max_bytes=config.queue_max_bytes,
            write_batch_bytes=config.write_batch_bytes,
            metrics=self.metrics,
            on_lagged=self._on_lagged,
            write_delay=self.write_delay,
            raw=raw,
        )
        self.connections[conn_id] = queue
        self.metrics.connections.set(len(self.connections))
        return queue

    def is_full(self) -> bool:
        """Whether ``max_connections`` connections are open."""
        return len(self.connections) >= self.config.max_connections

    def disconnect(self, queue: OutboundQueue) -> None:
        """The connection ended: drop its subscriptions and its registration."""
        self.connections.pop(queue.id, None)
        for transcript_id in queue.followed():
            self.unsubscribe(queue, transcript_id)
        self.metrics.connections.set(len(self.connections))

    def _on_lagged(self, queue: OutboundQueue, transcript_ids: set[str]) -> None:
        # The queue already forgot these subscriptions; the transcripts follow.
        for transcript_id in transcript_ids:
            live = self.live.get(transcript_id)
            if live is not None and live.leave(queue):
                self.metrics.subscriptions.dec()

    async def subscribe(
        self,
        queue: OutboundQueue,
        transcript_id: str,
        *,
        from_revision: int | None = None,
        epoch: str | None = None,
    ) -> str:
        """Subscribe ``queue``; returns how it was served: ``baseline``,
        ``resume`` or ``current``. A subscribe of a transcript the connection
        already follows replaces that subscription."""
        limit = self.config.max_subscriptions_per_connection
        if not queue.follows(transcript_id) and queue.subscription_count >= limit:
            raise TooManySubscriptions(limit)
        live = await self.load(transcript_id)
        caught_up = False
        while True:
            live.deliver_pending()
            transcript = live.transcript
            plan = plan_subscribe(
                from_revision,
                epoch,
                current_epoch=transcript.epoch,
                current_revision=transcript.revision,
                window_start=live.window_start(),
                max_resume_events=self.config.max_resume_events,
                caught_up=caught_up,
                room=queue.room(live.average_event_bytes()),
            )
            match plan:
                case CatchUpFirst():
                    # Another replica served the consumer more than this copy
                    # holds: catch up so that it can resume here.
                    async with live.lock:
                        await self._catch_up(live)
                    live = await self.load(transcript_id)
                    caught_up = True
                    continue
                case SendFromWindow():
                    assert from_revision is not None  # a plan without one is a baseline
                    items = splice(from_revision, (), live.window, transcript.revision)
                    mode = self._resume(live, queue, from_revision, items)
                    if mode is not None:
                        return mode
                case FetchThenSplice(after=after, limit=fetch_limit):
                    async with self.resume_fetches:
                        older = await self.store.events_after(
                            transcript_id, after, limit=fetch_limit
                        )
                    if older is not None and self.is_current(live):
                        # The window may have moved on during the await.
                        live.deliver_pending()
                        items = splice(after, older, live.window, live.transcript.revision)
                        mode = self._resume(live, queue, after, items)
                        if mode is not None:
                            return mode
                case SendBaseline():
                    pass
            # A baseline: its messages are encoded first, a chunk at a time;
            # then, with no await, it is queued and the connection joins.
            if not self.is_current(live):
                live = await self.load(transcript_id)
            await live.prepare_baseline(queue.binary, self.baseline_encodes)
            if self.is_current(live):
                live.deliver_pending()
                self._send_baseline(live, queue)
                return "baseline"
            live = await self.load(transcript_id)  # replaced meanwhile: start over

    def _join(self, live: LiveTranscript, queue: OutboundQueue) -> None:
        if live.join(queue):
            self.metrics.subscriptions.inc()

    def _send_baseline(self, live: LiveTranscript, queue: OutboundQueue) -> None:
        snapshot = live.encoded_snapshot(queue.binary)
        # Join before queueing: if the queue overflows, the lag handling then
        # sees (and drops) this subscription too.
        self._join(live, queue)
        queue.push_baseline(snapshot)
        self.metrics.subscribes.labels("baseline").inc()

    def _resume(
        self,
        live: LiveTranscript,
        queue: OutboundQueue,
        from_revision: int,
        items: list[EncodedEvent] | None,
    ) -> str | None:
        """Queue the increments and join; ``None`` (nothing done) when they do
        not join up or would overflow the queue: send a baseline instead (one
        frame: always progress)."""
        # No await from here on: the increments queued and the join are one step.
        if items is None or not queue.has_room(len(items), sum(item.size for item in items)):
            return None
        self._join(live, queue)
        queue.push_resume(live.id, from_revision, items)
        mode = "resume" if items else "current"
        self.metrics.subscribes.labels(mode).inc()
        return mode

    def unsubscribe(self, queue: OutboundQueue, transcript_id: str) -> bool:
        """Stop ``queue``'s subscription; False if there was none."""
        had = queue.unfollow(transcript_id)
        live = self.live.get(transcript_id)
        if live is not None and live.leave(queue):
            self.metrics.subscriptions.dec()
        return had

    def stats(self) -> dict[str, Any]:
        return {
            "connections": len(self.connections),
            "live": len(self.live),
            "subscriptions": sum(len(live.subscribers) for live in self.live.values()),
        }

    # Last in the class: below this line ``list`` would name the method.
    async def list(self, *, after: str | None = None, limit: int = 100) -> list[TranscriptInfo]:
        """Transcripts ordered by id, after ``after`` (from the store)."""
        return await self.store.list(after=after, limit=limit)
