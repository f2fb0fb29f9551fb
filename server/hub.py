"""The hub: live transcripts in memory, their subscribers, and the fan-out.

Each live transcript has a ``ChangeBuffer`` as its ``changes`` port and one
pump task that loops ``await buffer.wait()`` / ``buffer.take()`` and pushes each
event, encoded once, to every subscriber's connection queue in revision order.

Writes go through the hub: validate -> build the event (``prepare_*``) -> the
store commits it (``await``, under the transcript's lock) -> ``apply`` updates
memory and captures the event. Whatever changes the transcript (a WebSocket
append, an HTTP append, another replica's change learnt through the
backplane) reaches subscribers through that same path.

Subscribing is synchronous with respect to the transcript: pending events are
delivered first (``_flush``), then the baseline at revision R is queued and
the connection joins the subscribers, all without an ``await`` in between, so
the first increment it gets is R+1: no gap, no repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any

from protocol.types import Message, Origin, TranscriptEvent, TranscriptSnapshot
from protocol.validation import parse_messages, validate_id
from server.changes import ChangeBuffer
from server.config import ServerConfig
from server.connection import Connection, Flusher
from server.frames import EncodedEvent, EncodedSnapshot
from server.metrics import Metrics
from server.store.base import (
    AppendAck,
    AppendResult,
    RevisionMismatch,
    Store,
    StoredTranscript,
    StoreUnavailable,
    TranscriptNotFound,
)
from server.transcript import Transcript

log = logging.getLogger("tsync.hub")


class RevisionConflict(Exception):
    """``expectedRevision`` did not match; ``current`` is the actual revision."""

    def __init__(self, transcript_id: str, expected: int, current: int) -> None:
        super().__init__(f"transcript {transcript_id!r} is at revision {current}, not {expected}")
        self.transcript_id = transcript_id
        self.expected = expected
        self.current = current


class TooManySubscriptions(Exception):
    pass


class Ack:
    """The answer to an accepted (or replayed) change."""

    __slots__ = ("ack", "duplicate", "transcript_id")

    def __init__(self, transcript_id: str, ack: AppendAck, duplicate: bool = False) -> None:
        self.transcript_id = transcript_id
        self.ack = ack
        self.duplicate = duplicate


class _PendingAppend:
    """An append waiting for its transcript's lock; ``future`` gets its ack."""

    __slots__ = ("expected_revision", "future", "key", "messages", "origin", "transport")

    def __init__(
        self,
        messages: tuple[Message, ...],
        expected_revision: int | None,
        key: str | None,
        origin: Origin | None,
        transport: str,
    ) -> None:
        self.messages = messages
        self.expected_revision = expected_revision
        self.key = key
        self.origin = origin
        self.transport = transport
        self.future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        # The caller may be gone (cancelled): its error is then nobody's.
        self.future.add_done_callback(_retrieve)

    def succeed(self, ack: Ack) -> None:
        if not self.future.done():
            self.future.set_result(ack)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def append_many(
    store: Store, items: Sequence[tuple[TranscriptEvent, str | None]]
) -> list[AppendResult | Exception]:
    """``store.append_many`` when the store has it (one transaction, one
    round trip), else one ``append`` after the other; one outcome per item."""
    many = getattr(store, "append_many", None)
    if many is not None:
        outcomes: list[AppendResult | Exception] = await many(items)
        return outcomes
    results: list[AppendResult | Exception] = []
    for event, key in items:
        try:
            results.append(await store.append(event, idempotency_key=key))
        except Exception as exc:  # this one failed: the rest was planned on it
            results.append(exc)
            break
    return results + [
        RevisionMismatch(event.transcript_id, event.revision - 1, -1)
        for event, _ in items[len(results) :]
    ]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Live:
    """One transcript held in memory, with its buffer, subscribers and window."""

    def __init__(self, hub: Hub, stored: StoredTranscript) -> None:
        self.hub = hub
        self.buffer = ChangeBuffer()
        self.transcript = Transcript.restore(
            stored.events, id=stored.transcript_id, epoch=stored.epoch, changes=self.buffer
        )
        self.id = stored.transcript_id
        self.created_at = stored.created_at
        self.subscribers: dict[Connection, None] = {}
        self.window: deque[EncodedEvent] = deque(maxlen=hub.config.event_window)
        self.idempotency: OrderedDict[str, AppendAck] = OrderedDict(stored.idempotency)
        #: Appends waiting to be committed, and the task that commits them.
        self.appends: list[_PendingAppend] = []
        self.committer: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        self._snapshot_cache: EncodedSnapshot | None = None
        self.pump = asyncio.create_task(self._pump(), name=f"pump-{self.id}")

    async def _pump(self) -> None:
        buffer = self.buffer
        while True:
            await buffer.wait()
            self._deliver(buffer.take())

    def flush(self) -> None:
        """Deliver whatever the buffer holds now (before a subscribe)."""
        if len(self.buffer):
            self._deliver(self.buffer.take())

    def _deliver(self, events: Sequence[TranscriptEvent]) -> None:
        window = self.window
        for event in events:
            item = EncodedEvent(event)
            window.append(item)
            revision = item.revision
            for conn in list(self.subscribers):
                # Subscriptions made after this event was captured but before
                # it was pumped already have it in their baseline.
                if conn.subscriptions.get(self.id, revision) < revision:
                    conn.subscriptions[self.id] = revision
                    conn.push_event(item)

    def remember(self, key: str | None, ack: AppendAck) -> None:
        if key is None:
            return
        self.idempotency[key] = ack
        self.idempotency.move_to_end(key)
        while len(self.idempotency) > self.hub.config.idempotency_retention:
            self.idempotency.popitem(last=False)

    def encoded_snapshot(self) -> EncodedSnapshot:
        cached = self._snapshot_cache
        if cached is None or cached.revision != self.transcript.revision:
            cached = self._snapshot_cache = EncodedSnapshot(self.transcript.snapshot())
        return cached

    async def close(self) -> None:
        self.pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.pump


class Hub:
    """Holds the transcripts in use and serves every change and subscription."""

    def __init__(self, store: Store, config: ServerConfig, metrics: Metrics | None = None) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics or Metrics()
        self.live: dict[str, Live] = {}
        self.connections: dict[str, Connection] = {}
        self._loading: dict[str, asyncio.Future[Live]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        #: Wakes the writers of connections with new increments (write delay).
        self.flusher = Flusher(config.write_delay_ms / 1000)
        #: How many idle sweeps have run (tests wait on it instead of sleeping).
        self.sweeps = 0

    # --- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_idle(), name="hub-sweeper")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        self.flusher.cancel()
        for conn in list(self.connections.values()):
            await conn.stop()
        for live in list(self.live.values()):
            if live.committer is not None and not live.committer.done():
                live.committer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await live.committer
            await live.close()
        self.live.clear()
        self.metrics.live_transcripts.set(0)

    async def _sweep_idle(self) -> None:
        ttl = self.config.idle_ttl_s
        while True:
            await asyncio.sleep(max(ttl / 4, 0.05))
            cutoff = time.monotonic() - ttl
            for tid, live in list(self.live.items()):
                if (
                    not live.subscribers
                    and live.last_used < cutoff
                    and not live.lock.locked()
                    and not live.appends
                ):
                    live.flush()
                    del self.live[tid]
                    await live.close()
                    log.debug("evicted idle transcript %s", tid)
            self.metrics.live_transcripts.set(len(self.live))
            self.sweeps += 1

    # --- loading ------------------------------------------------------------------

    async def acquire(self, transcript_id: str) -> Live:
        """The live transcript, loaded from the store if needed."""
        live = self.live.get(transcript_id)
        if live is not None:
            live.last_used = time.monotonic()
            return live
        pending = self._loading.get(transcript_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Live] = asyncio.get_running_loop().create_future()
        self._loading[transcript_id] = future
        try:
            stored = await self.store.load(transcript_id)
            if stored is None:
                raise TranscriptNotFound(transcript_id)
            live = Live(self, stored)
            self.live[transcript_id] = live
            self.metrics.live_transcripts.set(len(self.live))
            future.set_result(live)
            return live
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._loading[transcript_id]

    def forget(self, transcript_id: str) -> None:
        """Drop a transcript from memory (after a delete, or a lost history)."""
        live = self.live.pop(transcript_id, None)
        if live is not None:
            live.pump.cancel()
            for conn in list(live.subscribers):
                conn.subscriptions.pop(transcript_id, None)
            self.metrics.subscriptions.dec(len(live.subscribers))
            live.subscribers.clear()
            self.metrics.live_transcripts.set(len(self.live))

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
    ) -> Ack:
        """Append one batch, all or nothing. Raises ``InvalidMessage``,
        ``RevisionConflict``, ``TranscriptNotFound``, ``StoreUnavailable``.

        Appends to one transcript that queue up while the store is busy are
        committed together (``Store.append_many``: one transaction or one
        round trip), then applied in order: the store's latency is paid once
        per batch, not once per append, and their increments leave together.
        """
        started = time.perf_counter()
        parsed = self._parse(messages)
        live = await self.acquire(transcript_id)
        pending = _PendingAppend(parsed, expected_revision, idempotency_key, origin, transport)
        live.appends.append(pending)
        if live.committer is None or live.committer.done():
            live.committer = asyncio.create_task(
                self._commit_appends(live), name=f"appends-{live.id}"
            )
        # The commit runs in the committer task: a caller that goes away
        # (its connection closed) cannot cut a store write in half.
        ack = await asyncio.shield(pending.future)  # raises what the append raised
        self.metrics.append_latency.observe(time.perf_counter() - started)
        return ack

    async def _commit_appends(self, live: Live) -> None:
        async with live.lock:
            try:
                while live.appends:
                    await self._append_queued(live)
            finally:
                for p in live.appends:  # only if this task was cancelled (shutdown)
                    p.fail(StoreUnavailable("server shutting down"))
                live.appends.clear()

    async def _append_queued(self, live: Live) -> None:
        """Commit every append queued on ``live`` (under its lock), resolving
        each one's future. Simple appends go in runs through ``append_many``;
        one that needs more care (a key seen before, an expected revision
        that differs, an empty batch, a store that moved on) goes alone
        through ``_append_one``."""
        batch, live.appends = live.appends, []
        i = 0
        careful = False  # send batch[i] alone (the store refused it in a run)
        try:
            while i < len(batch):
                if self.live.get(live.id) is not live:
                    # A catch-up replaced this copy: start the rest over on the new one.
                    for p in batch[i:]:
                        await self._resolve_later(p, live.id)
                    i = len(batch)
                    return
                run = [] if careful else self._plan_run(live, batch, i)
                careful = False
                if not run:
                    p = batch[i]
                    try:
                        p.succeed(await self._append_one(live, p))
                    except Exception as exc:
                        p.fail(exc)
                    i += 1
                    continue
                events = live.transcript.prepare_appends([(p.messages, p.origin) for p in run])
                try:
                    results = await append_many(
                        self.store, [(e, p.key) for p, e in zip(run, events, strict=True)]
                    )
                except Exception as exc:  # the store is unavailable: none of them landed
                    for p in run:
                        p.fail(exc)
                    i += len(run)
                    continue
                for p, event, result in zip(run, events, results, strict=True):
                    if isinstance(result, RevisionMismatch):
                        careful = True  # another replica moved on: catch up first
                        break
                    if isinstance(result, Exception):
                        p.fail(result)
                        i += 1
                        break  # the rest was planned on top of this one: plan again
                    if not result.duplicate:
                        live.transcript.apply(event)
                        self.metrics.appends.labels(p.transport, "messages-appended").inc()
                    else:
                        self.metrics.duplicates.inc()
                    live.remember(p.key, result.ack)
                    p.succeed(Ack(live.id, result.ack, duplicate=result.duplicate))
                    i += 1
                    if result.duplicate:
                        break  # the next ones were planned on a revision that did not happen
        finally:
            # Cancelled (shutdown) half-way: what is left goes back in the queue.
            live.appends[:0] = [p for p in batch[i:] if not p.future.done()]

    def _plan_run(self, live: Live, batch: list[_PendingAppend], i: int) -> list[_PendingAppend]:
        """The longest run of appends from ``batch[i]`` that can be committed
        together without looking anything up."""
        revision = live.transcript.revision
        keys: set[str] = set()
        run: list[_PendingAppend] = []
        for p in batch[i:]:
            if not p.messages:
                break
            if p.key is not None and (p.key in live.idempotency or p.key in keys):
                break
            if p.expected_revision is not None and p.expected_revision != revision:
                break
            run.append(p)
            revision += 1
            if p.key is not None:
                keys.add(p.key)
        return run

    async def _resolve_later(self, p: _PendingAppend, transcript_id: str) -> None:
        try:
            p.succeed(
                await self.append(
                    transcript_id,
                    p.messages,
                    expected_revision=p.expected_revision,
                    idempotency_key=p.key,
                    origin=p.origin,
                    transport=p.transport,
                )
            )
        except Exception as exc:
            p.fail(exc)

    async def _append_one(self, live: Live, p: _PendingAppend) -> Ack:
        """One append on its own (under ``live.lock``): replays, conflicts,
        catching up with other replicas."""
        transcript_id = live.id
        caught_up = False
        while True:
            if self.live.get(transcript_id) is not live:
                return await self.append(
                    transcript_id,
                    p.messages,
                    expected_revision=p.expected_revision,
                    idempotency_key=p.key,
                    origin=p.origin,
                    transport=p.transport,
                )
            replay = live.idempotency.get(p.key) if p.key else None
            if replay is not None:
                self.metrics.duplicates.inc()
                return Ack(transcript_id, replay, duplicate=True)
            transcript = live.transcript
            expected = p.expected_revision
            if expected is not None and expected != transcript.revision:
                if expected > transcript.revision and not caught_up:
                    # This copy may trail a change made through another replica.
                    caught_up = True
                    await self._caught_up(live)
                    continue
                raise RevisionConflict(transcript_id, expected, transcript.revision)
            event = transcript.prepare_append(p.messages, origin=p.origin)
            if event is None:  # an empty batch changes nothing
                return Ack(transcript_id, AppendAck(transcript.revision, transcript.length, 0))
            try:
                result = await self.store.append(event, idempotency_key=p.key)
            except RevisionMismatch:
                # Another replica moved the transcript on: catch up and retry.
                await self._caught_up(live, mismatch=True)
                continue
            if not result.duplicate:
                transcript.apply(event)
                self.metrics.appends.labels(p.transport, "messages-appended").inc()
            live.remember(p.key, result.ack)
            return Ack(transcript_id, result.ack, duplicate=result.duplicate)

    async def start_segment(
        self,
        transcript_id: str,
        start: int | None = None,
        *,
        origin: Origin | None = None,
        transport: str = "ws",
    ) -> Ack:
        """Start a segment. Raises ``InvalidSegment`` (a ValueError) and the
        errors of ``append``."""
        live = await self.acquire(transcript_id)
        async with live.lock:
            while True:
                event = live.transcript.prepare_segment(start, origin=origin)
                try:
                    result = await self.store.append(event)
                except RevisionMismatch:
                    if not await self._caught_up(live, mismatch=True):
                        return await self.start_segment(
                            transcript_id, start, origin=origin, transport=transport
                        )
                    continue
                live.transcript.apply(event)
                self.metrics.appends.labels(transport, "segment-started").inc()
                return Ack(transcript_id, result.ack)

    async def _catch_up(self, live: Live) -> None:
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

    async def _caught_up(self, live: Live, *, mismatch: bool = False) -> bool:
        """``_catch_up`` for a writer holding ``live.lock``; False when ``live``
        was replaced (reloaded or forgotten): the writer starts over with the
        current copy. After a ``RevisionMismatch`` (``mismatch``) a catch-up
        that found nothing means the store holds another epoch: reload."""
        before = live.transcript.revision
        await self._catch_up(live)
        if mismatch and self.live.get(live.id) is live and live.transcript.revision == before:
            await self.reload(live)
        return self.live.get(live.id) is live

    async def reload(self, live: Live) -> None:
        """Replace a live transcript with the store's copy (its history here is
        lost or from another epoch) and re-baseline its subscribers."""
        stored = await self.store.load(live.id)
        subscribers = list(live.subscribers)
        self.forget(live.id)
        await live.close()
        if stored is None:
            for conn in subscribers:
                conn.push_error(
                    "not-found", f"transcript {live.id!r} was deleted", transcript_id=live.id
                )
            return
        fresh = Live(self, stored)
        self.live[live.id] = fresh
        for conn in subscribers:
            self._subscribe_baseline(fresh, conn)

    def apply_remote(self, live: Live, event: TranscriptEvent) -> bool:
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
        live = await self.acquire(transcript_id)
        return live.transcript.snapshot(end, start=start)

    async def events_after(self, transcript_id: str, revision: int) -> list[TranscriptEvent] | None:
        """Events after ``revision`` from the window or the store; ``None`` when
        they are no longer held."""
        live = await self.acquire(transcript_id)
        current = live.transcript.revision
        if revision > current:
            return None  # a history this server never had: the caller needs a snapshot
        if revision == current:
            return []
        live.flush()
        window = live.window
        if window and window[0].revision <= revision + 1:
            return [item.event for item in window if item.revision > revision]
        return await self.store.events_after(transcript_id, revision)

    # --- subscriptions ----------------------------------------------------------------

    def register(self, conn: Connection) -> None:
        self.connections[conn.id] = conn
        self.metrics.connections.set(len(self.connections))

    def unregister(self, conn: Connection) -> None:
        self.connections.pop(conn.id, None)
        for transcript_id in list(conn.subscriptions):
            self.unsubscribe(conn, transcript_id)
        self.metrics.connections.set(len(self.connections))

    def on_lagged(self, conn: Connection, transcript_ids: set[str]) -> None:
        for transcript_id in transcript_ids:
            live = self.live.get(transcript_id)
            if live is not None and live.subscribers.pop(conn, 0) is None:
                self.metrics.subscriptions.dec()

    async def subscribe(
        self,
        conn: Connection,
        transcript_id: str,
        *,
        from_revision: int | None = None,
        epoch: str | None = None,
    ) -> str:
        """Subscribe ``conn``; returns how it was served: ``baseline``,
        ``resume`` or ``current``. A subscribe of a transcript the connection
        already follows replaces that subscription."""
        if (
            transcript_id not in conn.subscriptions
            and len(conn.subscriptions) >= self.config.max_subscriptions_per_connection
        ):
            limit = self.config.max_subscriptions_per_connection
            raise TooManySubscriptions(f"at most {limit} subscriptions per connection")
        live = await self.acquire(transcript_id)
        if (
            from_revision is not None
            and epoch == live.transcript.epoch
            and from_revision > live.transcript.revision
        ):
            # The consumer saw more than this copy holds: another replica
            # served it. Catch up first so that it can resume here.
            async with live.lock:
                await self._catch_up(live)
            live = await self.acquire(transcript_id)
        transcript = live.transcript
        older: list[TranscriptEvent] = []
        if (
            from_revision is not None
            and epoch == transcript.epoch
            and from_revision <= transcript.revision
            and transcript.revision - from_revision <= self.config.max_resume_events
        ):
            live.flush()
            window = live.window
            if not (window and window[0].revision <= from_revision + 1) and (
                from_revision < transcript.revision
            ):
                # Older than the window: fetch from the store, then splice with
                # the window (which may have moved on during the await).
                fetched = await self.store.events_after(
                    transcript_id, from_revision, limit=self.config.max_resume_events
                )
                if fetched is not None:
                    older = fetched
                    live.flush()
                    window = live.window
                    covered = older[-1].revision if older else from_revision
                    if covered < transcript.revision and not (
                        window and window[0].revision <= covered + 1
                    ):
                        older = []  # neither source covers the whole range
                    else:
                        return self._subscribe_resume(live, conn, from_revision, older)
            else:
                return self._subscribe_resume(live, conn, from_revision, older)
        live.flush()
        self._subscribe_baseline(live, conn)
        return "baseline"

    def _join(self, live: Live, conn: Connection, revision: int) -> None:
        if conn not in live.subscribers:
            live.subscribers[conn] = None
            self.metrics.subscriptions.inc()
        conn.subscriptions[live.id] = revision
        live.last_used = time.monotonic()

    def _subscribe_baseline(self, live: Live, conn: Connection) -> None:
        snapshot = live.encoded_snapshot()
        # Join before queueing: if the queue overflows, the lag handling then
        # sees (and drops) this subscription too.
        self._join(live, conn, snapshot.revision)
        conn.push_baseline(snapshot)
        self.metrics.subscribes.labels("baseline").inc()

    def _subscribe_resume(
        self, live: Live, conn: Connection, from_revision: int, older: list[TranscriptEvent]
    ) -> str:
        # No await from here on: the increments queued and the join are one step.
        items: list[EncodedEvent] = []
        sent = from_revision
        for event in older:
            if event.revision == sent + 1:
                items.append(EncodedEvent(event))
                sent = event.revision
        for item in live.window:
            if item.revision == sent + 1:
                items.append(item)
                sent = item.revision
        if sent != live.transcript.revision or not conn.has_room(
            len(items), sum(item.size for item in items)
        ):
            # The sources did not join up, or the increments would overflow
            # the connection's queue (and lag it before the writer could send
            # any: no progress). A baseline is one frame: always progress.
            self._subscribe_baseline(live, conn)
            return "baseline"
        self._join(live, conn, sent)
        subscriptions = conn.subscriptions
        for item in items:
            if live.id not in subscriptions:  # lagged on the way: stop here
                break
            conn.push_event(item)
        mode = "current" if sent == from_revision else "resume"
        self.metrics.subscribes.labels(mode).inc()
        return mode

    def unsubscribe(self, conn: Connection, transcript_id: str) -> bool:
        had = conn.subscriptions.pop(transcript_id, None) is not None
        live = self.live.get(transcript_id)
        if live is not None and conn in live.subscribers:
            del live.subscribers[conn]
            live.last_used = time.monotonic()
            self.metrics.subscriptions.dec()
        return had

    def stats(self) -> dict[str, Any]:
        return {
            "connections": len(self.connections),
            "live": len(self.live),
            "subscriptions": sum(len(live.subscribers) for live in self.live.values()),
        }
