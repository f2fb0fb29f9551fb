"""The hub: the registry of live transcripts and of connections.

It loads transcripts into memory (``load``) and lets idle ones go, creates,
deletes and lists them, takes every change (``append`` queues on the
committer in ``server.live.appends``; ``start_segment``), keeps live copies in step
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
no gap, no repeat. ``server.live.live_transcript.plan_subscribe`` decides which.

Windows and memory: a live transcript holds only its newest messages
(``server.live.live_transcript``). A baseline for a window (``protocol.views.Window``), a
range read or a snapshot that starts earlier first reads the older part from
the store (an ``await``: messages never change, so it may be read at any
time), then joins it with what memory holds in one synchronous step.

Drafts (``server.live.drafts``): a ``draft`` op, its fan-out and its publication
(``draft_publisher``) are one synchronous step (``Hub.draft``); an append with
``draftId`` closes its draft when the committer answers it, and the ``final``
leaves with the increment; every baseline and resume is followed, in the same
step, by the drafts' catch-up; a sweeper expires idle drafts.

Modules: ``hub`` imports ``live``, ``appends`` and ``outbound``; none of them
imports the hub (``tests/server/test_imports.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from protocol import codes, wire
from protocol.state import TranscriptState
from protocol.types import Message, Origin, TranscriptEvent, TranscriptSnapshot, View
from protocol.usage import MessageUsage, message_usage, named_ranges, sized_usage
from protocol.validation import parse_messages, validate_id
from protocol.views import InvalidView, Window, window_start
from server.config import ServerConfig
from server.errors import EpochChanged, Refused, TooManySubscriptions
from server.live.appends import AppendCommitter, PendingAppend
from server.live.drafts import DraftBudget, Drafts
from server.live.frames import EncodedDraft, EncodedEvent, EncodedSnapshot
from server.live.live_transcript import (
    CatchUpFirst,
    FetchThenSplice,
    LiveTranscript,
    SendBaseline,
    SendFromWindow,
    held_bytes,
    plan_subscribe,
    splice,
)
from server.live.outbound import OutboundQueue, RawFrames, Send, WriteDelay
from server.live.usage_sizes import MessageSizes
from server.metrics import Metrics
from server.model.transcript import Transcript
from server.store.base import (
    LOADED_KEYS,
    AppendResult,
    Store,
    StoredRange,
    StoredState,
    StoreError,
    TranscriptInfo,
    TranscriptNotFound,
)
from server.tuning import (
    BASELINE_ENCODES_AT_ONCE,
    DRAFT_SWEEP_BATCH,
    DRAFT_SWEEPS_PER_TTL,
    IDLE_SWEEPS_PER_TTL,
    LIVE_FULL_RETRY_AFTER_S,
    MAX_CONCURRENT_LOADS,
    MIN_DRAFT_SWEEP_S,
    MIN_IDLE_SWEEP_S,
    RESUME_FETCHES_AT_ONCE,
)

log = logging.getLogger("tsync.hub")

#: Reads of older messages one baseline or range may need: each retry means
#: the transcript let more messages go while the store answered.
_READ_ATTEMPTS = 5
#: Messages whose sizes a usage query measures at once (a few milliseconds),
#: the loop running between chunks (``Hub.usage``).
USAGE_MEASURE_MESSAGES = 5000


def _start_of(window: Window | None, state: TranscriptState) -> int:
    """Where a baseline of ``window`` starts in ``state`` now."""
    return window_start(
        window, length=state.length, active_start=state.active_start, views=state.views
    )


class _Stale(Exception):
    """The store holds another history than this live copy (it was deleted,
    or deleted and created again): reload before going on."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _draft_kind(frame: wire.DraftFrame) -> str:
    """The ``tsync_draft_updates`` label of a draft frame."""
    if frame.state != "open":
        return frame.state
    return "delta" if frame.delta is not None else "text"


class HoldListener(Protocol):
    """Told which transcripts the hub holds (the backplane watches their
    notices): ``held`` when a load begins (and again when a copy is replaced),
    ``released`` when the hub lets one go. Both must return at once."""

    def held(self, transcript_id: str) -> None: ...

    def released(self, transcript_id: str) -> None: ...


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
        #: Deletes in flight, by id: loads of that id wait for them.
        self._deleting: dict[str, asyncio.Future[None]] = {}
        self._loads = asyncio.Semaphore(MAX_CONCURRENT_LOADS)
        self._sweeper: asyncio.Task[None] | None = None
        self.committer = AppendCommitter(store, self.metrics, self)
        #: Wakes the writers of queues with new increments (``write_delay_ms``).
        self.write_delay = WriteDelay(config.write_delay_ms / 1000)
        #: How many idle sweeps have run (tests wait on it instead of sleeping).
        self.sweeps = 0
        #: Told which transcripts are held (set by the backplane).
        self.hold_listener: HoldListener | None = None
        #: Bounds on the heavy parts of subscribing, server-wide.
        self.baseline_encodes = asyncio.Semaphore(BASELINE_ENCODES_AT_ONCE)
        self.resume_fetches = asyncio.Semaphore(RESUME_FETCHES_AT_ONCE)
        #: The encoded sizes of messages, kept between usage queries.
        self.message_sizes = MessageSizes()
        #: Told every local draft update and close (the Redis backplane
        #: publishes them; ``None`` when standalone). See ``server.live.drafts``.
        self.draft_publisher: Callable[[wire.DraftFrame], None] | None = None
        #: The bytes every transcript's drafts hold (``max_draft_bytes``,
        #: ``max_connection_draft_bytes``).
        self.draft_budget = DraftBudget(config.max_draft_bytes, config.max_connection_draft_bytes)
        #: The drafts of transcripts let go from memory while they had open
        #: or recently closed drafts, by id: taken back when the transcript
        #: is loaded again, expired by the sweeper meanwhile (a draft does
        #: not pin its transcript in memory).
        self.parked_drafts: dict[str, Drafts] = {}
        self._draft_sweeper: asyncio.Task[None] | None = None
        #: How many draft sweeps have run.
        self.draft_sweeps = 0
        self.metrics.drafts_open.set_function(self.open_drafts)
        # A child per kind, looked up once (``labels`` takes a lock: once per token).
        self._draft_counters = {
            kind: self.metrics.draft_updates.labels(kind)
            for kind in ("delta", "text", "final", "cancelled", "expired")
        }

    # --- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_idle(), name="hub-sweeper")
        self._draft_sweeper = asyncio.create_task(self._sweep_drafts(), name="draft-sweeper")

    async def stop(self) -> None:
        for sweeper in (self._sweeper, self._draft_sweeper):
            if sweeper is not None:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper
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
                if not self.is_current(live):
                    continue  # let go meanwhile (to make room) or reloaded
                if live.idle_since(cutoff) and not self.committer.busy(live):
                    self._evict(live)
                    await live.close()
                    log.debug("evicted idle transcript %s", tid)
            self.metrics.live_transcripts.set(len(self.live))
            self.sweeps += 1

    # --- the registry -------------------------------------------------------------

    async def load(self, transcript_id: str) -> LiveTranscript:
        """The transcript in memory, loaded from the store unless it is there
        already (one load at a time per id). Raises ``TranscriptNotFound``.

        A load racing a delete of the same id waits for it (and then finds
        nothing): what a delete answered 204 for is never loaded again."""
        while (deleting := self._deleting.get(transcript_id)) is not None:
            await asyncio.wait([deleting])
        live = self.live.get(transcript_id)
        if live is not None:
            live.touch()
            # ``live`` is in least recently used order.
            self.live[transcript_id] = self.live.pop(transcript_id)
            return live
        pending = self._loading.get(transcript_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[LiveTranscript] = asyncio.get_running_loop().create_future()
        self._loading[transcript_id] = future
        self._held(transcript_id)
        try:
            async with self._loads:
                stored = await self._load_stored(transcript_id)
            if stored is None:
                raise TranscriptNotFound(transcript_id)
            self._make_room(held_bytes(stored.snapshot))
            live = self._hold(stored)
            future.set_result(live)
            return live
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            self._released(transcript_id)
            raise
        finally:
            del self._loading[transcript_id]

    async def _load_stored(self, transcript_id: str) -> StoredState | None:
        """The transcript's state with the messages a live copy holds."""
        keep = self.config.live_messages
        return await self.store.load_recent(transcript_id, messages=keep or None)

    def _hold(self, stored: StoredState, drafts: Drafts | None = None) -> LiveTranscript:
        config = self.config
        parked = self.parked_drafts.pop(stored.transcript_id, None)
        if drafts is None:
            drafts = parked
        elif parked is not None:
            parked.drop()
        if drafts is None:
            drafts = Drafts(
                stored.transcript_id,
                max_open=config.max_drafts_per_transcript,
                max_bytes=config.max_message_bytes,
                ttl=config.draft_ttl_s,
                coalesce=config.draft_coalesce_s,
                max_closed=config.max_closed_drafts,
                budget=self.draft_budget,
            )
        live = LiveTranscript(
            stored,
            limits=config.message_limits,
            event_window=config.event_window,
            remembered_keys=min(LOADED_KEYS, self.store.idempotency_retention),
            live_messages=config.live_messages,
            drafts=drafts,
        )
        self.live[live.id] = live
        self._held(live.id)
        self.metrics.live_transcripts.set(len(self.live))
        return live

    def _held(self, transcript_id: str) -> None:
        if self.hold_listener is not None:
            self.hold_listener.held(transcript_id)

    def _released(self, transcript_id: str) -> None:
        if self.hold_listener is not None:
            self.hold_listener.released(transcript_id)

    def _make_room(self, size: int) -> None:
        """Let the least recently used transcripts nobody subscribes to or
        writes go until one more of ``size`` bytes fits the caps; raise
        ``unavailable`` when they cannot be made to fit (all in use). A
        transcript is always let in when nothing else is held."""
        config = self.config
        held = self.live_bytes()

        def fits() -> bool:
            return not self.live or (
                len(self.live) < config.max_live_transcripts
                and held + size <= config.max_live_bytes
            )

        if fits():
            return
        for live in list(self.live.values()):
            # Open drafts do not keep it (``_evict`` parks them): a writer
            # cannot pin transcripts in memory with drafts.
            if (
                not live.subscribers
                and not live.watchers
                and not live.lock.locked()
                and not self.committer.busy(live)
            ):
                self._evict(live)
                held -= live.size + live.shared_bytes()
                if fits():
                    return
        raise Refused(
            codes.UNAVAILABLE,
            f"the server holds as many transcripts as it may ({len(self.live)}, "
            f"{held} bytes) and all of them are in use; retry shortly",
            retryAfter=LIVE_FULL_RETRY_AFTER_S,
        )

    def _evict(self, live: LiveTranscript) -> None:
        """Let an unused transcript go (it is loaded again when asked for)."""
        live.deliver_pending()
        if live.drafts:
            self._flush_drafts(live)
            live.drafts.drop_remote()
            if live.drafts:
                self.parked_drafts[live.id] = live.drafts
        del self.live[live.id]
        self._released(live.id)
        live.pump.cancel()
        self.metrics.live_transcripts.set(len(self.live))

    def live_bytes(self) -> int:
        """About the bytes the transcripts in memory hold (``max_live_bytes``):
        their messages, the encodings their queued baselines share, and their
        drafts."""
        held = sum(live.size + live.shared_bytes() for live in self.live.values())
        return held + self.draft_budget.total

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
            self._released(transcript_id)
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
        live.drafts.drop()
        await live.close()

    async def delete(self, transcript_id: str) -> None:
        """Delete a transcript and its history; its subscribers get
        ``not-found``. Raises ``TranscriptNotFound``.

        A load of the id already in flight lands first (it read the store
        before the delete), then the store deletes, then the copy in memory
        goes; loads that arrive meanwhile wait until all of that is done."""
        while (other := self._deleting.get(transcript_id)) is not None:
            await asyncio.wait([other])
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._deleting[transcript_id] = done
        try:
            loading = self._loading.get(transcript_id)
            if loading is not None:
                await asyncio.wait([loading])
            if not await self.store.delete(transcript_id):
                raise TranscriptNotFound(transcript_id)
            live = self.live.get(transcript_id)
            if live is not None:
                await self._drop_deleted(live)
            parked = self.parked_drafts.pop(transcript_id, None)
            if parked is not None:
                parked.drop()
        finally:
            del self._deleting[transcript_id]
            done.set_result(None)

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
        draft = Transcript(id=tid, epoch=epoch, limits=self.config.message_limits)
        first = draft.prepare_append(parsed, origin=origin) if parsed else None
        await self.store.create(tid, epoch, now_ms(), first)
        if first is not None:
            self.metrics.appends.labels("create", "messages-appended").inc()
        return tid, epoch, 1 if first is not None else 0

    def _parse(self, messages: object) -> tuple[Message, ...]:
        if isinstance(messages, tuple) and all(isinstance(m, Message) for m in messages):
            return messages
        limits = self.config.message_limits
        return parse_messages(
            messages,
            max_messages=limits.max_messages_per_batch,
            max_message_bytes=limits.max_message_bytes,
            max_depth=limits.max_depth,
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
        draft_id: str | None = None,
    ) -> AppendResult:
        """Append one batch, all or nothing; the result's ``receipt`` is what
        to acknowledge, ``duplicate`` whether the key had been seen. Raises
        ``InvalidMessage``, ``RevisionConflict``, ``TranscriptNotFound``,
        ``StoreUnavailable``. ``draft_id``: the batch commits that draft (it
        closes in the same step; a refused append leaves it open).

        Appends to one transcript that queue up while the store is busy are
        committed together (``server.live.appends``) and their increments leave
        together.
        """
        started = time.perf_counter()
        parsed = self._parse(messages)
        live = await self.load(transcript_id)
        pending = PendingAppend(
            parsed, expected_revision, idempotency_key, origin, transport, draft_id
        )
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
        return await self._change(
            transcript_id,
            lambda transcript: transcript.prepare_segment(start, origin=origin),
            transport,
        )

    # --- drafts (server.live.drafts) ---------------------------------------------------------

    async def draft(
        self,
        transcript_id: str,
        draft_id: str,
        *,
        role: str | None = None,
        delta: str | None = None,
        text: str | None = None,
        cancel: bool = False,
        flush: bool = False,
        writer: str | None = None,
    ) -> tuple[int, int]:
        """Apply one ``draft`` op (open, ``delta``, ``text``, ``cancel`` or a
        keep-alive); returns the transcript's revision and the draft's ``n``.
        Its frame goes to every subscriber (encoded once) and to
        ``draft_publisher``; a delta that came soon after the draft's last
        update waits up to ``draft_coalesce_s`` and goes out with the others
        that came meanwhile, as one update (``flush``: now, with this one).
        ``writer``: the connection that sent it, charged for the draft's
        bytes (``max_connection_draft_bytes``). Raises ``Refused``
        (``too-many-drafts``, ``draft-too-large``, ``draft-closed``) and
        ``TranscriptNotFound``; a refused op changes nothing."""
        live = await self.load(transcript_id)
        # No await from here on: the op and its fan-out are one step.
        now = time.monotonic()
        written = live.drafts.write(
            draft_id, now=now, role=role, delta=delta, text=text, cancel=cancel, writer=writer
        )
        live.touch()
        n = written.n
        if written.update is not None:
            self._send_draft(live, written.update)
        if flush:
            update = live.drafts.flush(draft_id, now)
            if update is not None:
                self._send_draft(live, update)
                n = update.frame.n
        elif written.flush_at is not None:
            asyncio.get_running_loop().call_later(
                max(0.0, written.flush_at - now), self._flush_draft, live, draft_id
            )
        return live.transcript.revision, n

    def _send_draft(self, live: LiveTranscript, update: EncodedDraft) -> None:
        """A local update or close: to every subscriber, then to the other
        replicas."""
        self._fan_out_draft(live, update)
        self._publish_draft(update)

    def _flush_draft(self, live: LiveTranscript, draft_id: str) -> None:
        """Send the deltas a draft held (``draft_coalesce_s`` passed)."""
        if self.is_current(live):
            update = live.drafts.flush(draft_id, time.monotonic())
            if update is not None:
                self._send_draft(live, update)

    def _flush_drafts(self, live: LiveTranscript) -> None:
        """Send every held delta of ``live`` now (before a catch-up, whose
        ``text`` frames must be of updates every subscriber gets)."""
        for update in live.drafts.flush_all(time.monotonic()):
            self._send_draft(live, update)

    def commit_draft(self, live: LiveTranscript, draft_id: str, revision: int) -> None:
        """``CommitPort.commit_draft``: the append that commits the draft
        landed as ``revision`` (the committer calls it before answering).
        Deltas it held go out first: every reader's text is the whole draft
        when the message replaces it."""
        update = live.drafts.flush(draft_id, time.monotonic())
        if update is not None:
            self._send_draft(live, update)
        frame = live.commit_draft(draft_id, revision, time.monotonic())
        if frame is not None:
            self._draft_counters["final"].inc()
            self._publish_draft(frame)

    def draft_text(self, transcript_id: str, draft_id: str) -> wire.DraftFrame | None:
        """The ``text`` frame (``seq=0``) of an open draft as this replica
        holds it now; ``None`` when it is not open here (or the transcript is
        not held)."""
        live = self.live.get(transcript_id)
        frame = None if live is None else live.drafts.text(draft_id)
        return None if frame is None else frame.frame

    def apply_remote_draft(self, frame: wire.DraftFrame) -> bool:
        """An update or close of a draft that another replica published:
        applied to the copy here and fanned out to the local subscribers like
        a local one, never published again. False on a gap (apply the
        draft's current ``text`` then). A transcript not held here ignores
        it."""
        live = self.live.get(frame.transcript_id)
        if live is None:
            return True
        result = live.drafts.apply_remote(frame, time.monotonic())
        if result is False:
            return False
        if result is not None:
            self._fan_out_draft(live, result)
        return True

    def _fan_out_draft(self, live: LiveTranscript, update: EncodedDraft) -> None:
        live.push_draft(update)
        self._draft_counters[_draft_kind(update.frame)].inc()

    def _publish_draft(self, update: EncodedDraft) -> None:
        publisher = self.draft_publisher
        if publisher is not None:
            publisher(update.frame)

    def _push_drafts(
        self, live: LiveTranscript, queue: OutboundQueue, resumed_from: int | None = None
    ) -> None:
        """Right behind a baseline or a resume, in the same step: the
        ``text`` of each open draft and, after a resume from
        ``resumed_from``, the ``final`` of each draft committed since
        (``Drafts.catch_up``): never the closes of drafts this consumer
        cannot hold, and nothing that counts against a reading client."""
        if live.drafts:
            self._flush_drafts(live)
            for frame in live.drafts.catch_up(time.monotonic(), resumed_from):
                queue.push_draft(frame, catch_up=True)

    async def _sweep_drafts(self) -> None:
        """Expire the drafts idle for ``draft_ttl_s``, on the loop, a batch of
        transcripts at a time."""
        ttl = self.config.draft_ttl_s
        while True:
            await asyncio.sleep(max(ttl / DRAFT_SWEEPS_PER_TTL, MIN_DRAFT_SWEEP_S))
            looked = 0
            for live in list(self.live.values()):
                looked += 1
                if looked % DRAFT_SWEEP_BATCH == 0:
                    await asyncio.sleep(0)
                if not live.drafts or not self.is_current(live):
                    continue
                local, remote = live.drafts.expire(time.monotonic())
                for frame in (*local, *remote):
                    self._fan_out_draft(live, frame)
                for frame in local:
                    self._publish_draft(frame)
            for transcript_id, drafts in list(self.parked_drafts.items()):
                # Let go from memory: nobody subscribes; only published.
                local, _ = drafts.expire(time.monotonic())
                for frame in local:
                    self._draft_counters["expired"].inc()
                    self._publish_draft(frame)
                if not drafts:
                    del self.parked_drafts[transcript_id]
            self.draft_sweeps += 1

    def open_drafts(self) -> int:
        """Open drafts of the transcripts held here (``tsync_drafts_open``)."""
        held = sum(len(live.drafts.open) for live in self.live.values())
        return held + sum(len(drafts.open) for drafts in self.parked_drafts.values())

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
        stored = await self._load_stored(live.id)
        if stored is None:
            await self._drop_deleted(live)
            return
        subscribers = list(live.subscribers.items())
        self.forget(live.id)
        await live.close()
        # Drafts are not history: the same transcript keeps them; one created
        # again does not (its subscribers' baseline of another epoch closes
        # theirs as gone).
        same = stored.snapshot.epoch == live.transcript.epoch
        if not same:
            live.drafts.drop()
        fresh = self._hold(stored, live.drafts if same else None)

        # One subscriber after the other: the first one's baseline is encoded
        # (a chunk at a time, or from the store's older messages), those of
        # the others at the same revision and window share it.
        for queue, window in subscribers:
            try:
                await self._send_baseline(fresh, queue, window)
            except InvalidView as exc:
                queue.push_error(codes.INVALID_VIEW, str(exc), transcript_id=live.id)
            except TranscriptNotFound:
                return  # deleted meanwhile: its subscribers were told

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
        self,
        transcript_id: str,
        start: int = 0,
        end: int | None = None,
        *,
        window: Window | None = None,
    ) -> TranscriptSnapshot:
        """The transcript now with messages ``[start, end)`` (default all), or
        from where ``window`` starts, read from memory and, for what it no
        longer holds, the store. ``ValueError`` unless ``0 <= start <= end
        <= length``; ``InvalidView`` for a window naming no View."""
        live = await self.load(transcript_id)
        while True:
            state = live.transcript.state
            if window is not None:
                start = _start_of(window, state)
            length = live.transcript.length
            stop = length if end is None else end
            if not 0 <= start <= stop <= length:
                raise ValueError(f"range [{start}, {stop}) is not within [0, {length}]")
            current, messages = await self._messages(live, start, stop)
            if current is live:
                return live.transcript.state.snapshot_of(start, messages)
            live = current  # reloaded: another history, measure again

    async def head(self, transcript_id: str) -> TranscriptSnapshot:
        """The transcript now without its messages (revision, segments, Views,
        length): what a streamed read starts with (``server.web.http_reads``)."""
        live = await self.load(transcript_id)
        state = live.transcript.state
        return state.snapshot_of(state.length, ())

    async def read_messages(
        self, transcript_id: str, start: int, end: int, *, epoch: str | None = None
    ) -> tuple[StoredRange, int]:
        """Messages ``[start, end)`` (clamped to the length) as a
        ``StoredRange`` of the current revision, and that revision. Raises
        ``EpochChanged`` when ``epoch`` is given and is not the transcript's."""
        live = await self.load(transcript_id)
        while True:
            transcript = live.transcript
            if epoch is not None and epoch != transcript.epoch:
                raise EpochChanged(transcript_id, epoch, transcript.epoch)
            length = transcript.length
            first, last = min(start, length), min(end, length)
            current, messages = await self._messages(live, first, last)
            if current is live:
                break
            live = current  # reloaded: another history, look again
        transcript = live.transcript
        found = StoredRange(
            transcript.epoch, transcript.revision, transcript.length, first, messages
        )
        return found, transcript.revision

    async def _messages(
        self, live: LiveTranscript, start: int, end: int
    ) -> tuple[LiveTranscript, tuple[Message, ...]]:
        """Messages ``[start, end)`` (``end`` at most the length): what the
        live copy holds from memory, the older part from the store, and
        ``live``. When the store holds another history, ``live`` is reloaded
        and the current copy is returned with no messages: the caller, which
        measured the range on ``live``, measures again."""
        for _ in range(_READ_ATTEMPTS):
            state = live.transcript.state
            if start >= state.start:
                return live, state.slice(start, end)
            try:
                older = await self._read_older(live, start, min(end, state.start))
            except _Stale:
                return await self._refresh(live), ()
            held = live.transcript.state.start
            if older.end >= min(end, held):
                tail = live.transcript.state.slice(held, end) if end > held else ()
                return live, older.messages[: min(end, held) - start] + tail
        raise StoreError(
            f"transcript {live.id!r}: the store did not give messages [{start}, {end})"
        )

    async def _read_older(self, live: LiveTranscript, start: int, end: int) -> StoredRange:
        """Messages the live copy no longer holds, from the store; ``_Stale``
        when the store holds another history."""
        try:
            older = await self.store.read_messages(live.id, start, end)
        except TranscriptNotFound:
            raise _Stale from None
        if older.epoch != live.transcript.epoch or older.end < end:
            raise _Stale
        return older

    async def _refresh(self, live: LiveTranscript) -> LiveTranscript:
        """The current copy after ``live`` turned out stale: reloaded (its
        subscribers get a new baseline or ``not-found``). Raises
        ``TranscriptNotFound`` when the transcript is gone."""
        if self.is_current(live):
            async with live.lock:
                if self.is_current(live):
                    await self.reload(live)
        return await self.load(live.id)

    # --- Views and usage ----------------------------------------------------------------

    async def views(self, transcript_id: str) -> tuple[int, tuple[View, ...]]:
        """The revision and the Views of a transcript, ordered by name."""
        live = await self.load(transcript_id)
        return live.transcript.revision, live.transcript.views()

    async def set_view(
        self,
        transcript_id: str,
        name: str,
        start: int,
        end: int | None = None,
        *,
        origin: Origin | None = None,
        transport: str = "ws",
    ) -> AppendResult:
        """Create or move a View; ``duplicate`` when it already had that range
        (nothing changed). Raises ``InvalidView`` and the errors of ``append``."""
        return await self._change(
            transcript_id,
            lambda transcript: self._prepare_view(transcript, name, start, end, origin),
            transport,
        )

    def _prepare_view(
        self, transcript: Transcript, name: str, start: int, end: int | None, origin: Origin | None
    ) -> TranscriptEvent | None:
        limit = self.config.max_views_per_transcript
        views = transcript.state.views
        if name not in views and len(views) >= limit:
            raise InvalidView(
                f"transcript {transcript.id!r} has {limit} Views, its max_views_per_transcript: "
                "leave one before setting another"
            )
        return transcript.prepare_view(name, start, end, origin=origin)

    async def leave_view(
        self, transcript_id: str, name: str, *, origin: Origin | None = None, transport: str = "ws"
    ) -> AppendResult:
        """Leave a View; ``duplicate`` when there was none (nothing changed)."""
        return await self._change(
            transcript_id,
            lambda transcript: transcript.prepare_leave_view(name, origin=origin),
            transport,
        )

    async def _change(
        self,
        transcript_id: str,
        prepare: Callable[[Transcript], TranscriptEvent | None],
        transport: str,
    ) -> AppendResult:
        """Commit the one change ``prepare`` builds (a segment start, a View
        change) under the transcript's lock, on its current copy."""
        while True:
            live = await self.load(transcript_id)
            async with live.lock:
                if not self.is_current(live):
                    continue
                result = await self.committer.commit_change(live, prepare, transport)
            if result is not None:
                return result

    async def usage(
        self,
        transcript_id: str,
        *,
        segments: str | list[int] | None = "all",
        views: list[str] | None = None,
    ) -> tuple[int, MessageUsage]:
        """The revision, and how the chosen segments and Views use the
        messages (``protocol.usage``): from the sizes of the messages, kept
        between queries (``message_sizes``; each index holds a message of its
        own here, so sizes are all it takes), a query then costing its
        ranges' bounds; only the messages never measured are read. Raises
        ``InvalidView``, ``ValueError`` (no such segment, one asked twice),
        ``Refused`` (more than ``max_usage_ranges``)."""
        live = await self.load(transcript_id)
        limit = self.config.max_usage_ranges
        while True:
            state = live.transcript.state
            ranges = named_ranges(state, segments=segments, views=views)
            if len(ranges) > limit:
                raise Refused(
                    codes.INVALID_QUERY,
                    f"{len(ranges)} segments and Views asked, more than max_usage_ranges "
                    f"({limit}): ask for fewer (segments=0,2,...&views=a,b)",
                )
            high = max((r.end for r in ranges), default=0)
            current = await self._measure(live, high)
            if current is live:
                break
            live = current  # reloaded: another history, choose again
        sums = self.message_sizes.sums(live.id, state.epoch)
        if sums is not None and len(sums) > high:
            return state.revision, sized_usage(ranges, sums)
        # Longer than the sizes kept: measured for this query alone.
        low = min((r.start for r in ranges), default=0)
        current, messages = await self._messages(live, low, high)
        if current is not live:  # reloaded: another history, count again
            return await self.usage(transcript_id, segments=segments, views=views)
        return state.revision, await asyncio.to_thread(message_usage, ranges, messages, low)

    async def _measure(self, live: LiveTranscript, high: int) -> LiveTranscript:
        """Measure the sizes of messages ``[0, high)`` not measured yet, a
        chunk at a time (the loop runs between chunks), into
        ``message_sizes``; the copy the messages came from (another one
        when ``live`` was reloaded: the caller measures again)."""
        sizes = self.message_sizes
        epoch = live.transcript.epoch
        known = sizes.known(live.id, epoch)
        while known < high:
            stop = min(high, known + USAGE_MEASURE_MESSAGES)
            current, messages = await self._messages(live, known, stop)
            if current is not live:
                return current
            sizes.extend(live.id, epoch, known, messages)
            now = sizes.known(live.id, epoch)
            if now <= known:
                break  # not kept (over the budget): the caller measures its own
            known = now
        return live

    async def events_after(
        self, transcript_id: str, revision: int, *, limit: int | None = None
    ) -> list[TranscriptEvent] | None:
        """Events after ``revision`` (at most ``limit``) from the window or the
        store; ``None`` when they are no longer held."""
        live = await self.load(transcript_id)
        current = live.transcript.revision
        if revision > current:
            return None  # a history this server never had: the caller needs a snapshot
        if revision == current:
            return []
        live.deliver_pending()
        start = live.window_start()
        if start is not None and start <= revision + 1:
            found = [item.event for item in live.window if item.revision > revision]
            return found if limit is None else found[:limit]
        return await self.store.events_after(transcript_id, revision, limit=limit)

    async def wait_change(self, transcript_id: str, revision: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the transcript to move past
        ``revision`` (here or, through the backplane, on another replica);
        whether it did. The copy stays in memory while someone waits."""
        live = await self.load(transcript_id)
        if live.transcript.revision > revision:
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await live.watch()
        return self.is_current(live) and live.transcript.revision > revision

    async def draft_stream(
        self, transcript_id: str, draft_id: str, start: int
    ) -> tuple[bytes, int, bool] | None:
        """A draft's Durable Stream from byte ``start`` (``Drafts.stream``):
        its bytes, its end, whether it is closed; ``None`` when the draft is
        neither open nor closed within ``draft_ttl_s``."""
        live = await self.load(transcript_id)
        return live.drafts.stream(draft_id, start)

    async def wait_draft(self, transcript_id: str, draft_id: str, end: int, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the draft's stream to move past
        ``end`` bytes or close (its next update or close, here or, through
        the backplane, from another replica). The copy stays in memory while
        someone waits."""
        live = await self.load(transcript_id)
        now = live.drafts.stream(draft_id, end)
        if now is None or now[1] != end or now[2]:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await live.watch_draft(draft_id)

    # --- connections and subscriptions --------------------------------------------------

    def connect(
        self, conn_id: str, send: Send, *, binary: bool = False, raw: RawFrames | None = None
    ) -> OutboundQueue:
        """The outbound queue of a new connection, registered (start its writer
        with ``queue.start()``; ``disconnect`` it when the connection ends).
        ``raw``: the connection's raw frame write, when the ASGI server offers
        one (``server.web.ws_protocol``)."""
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
        window: Window | None = None,
    ) -> str:
        """Subscribe ``queue``; returns how it was served: ``baseline``,
        ``resume`` or ``current``. A subscribe of a transcript the connection
        already follows replaces that subscription. A baseline holds only
        ``window`` (``protocol.views.Window``) of the transcript; raises
        ``InvalidView`` when it names a View the transcript does not have."""
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
                    mode = self._resume(live, queue, from_revision, items, window)
                    if mode is not None:
                        return mode
                    break
                case FetchThenSplice(after=after, limit=fetch_limit):
                    async with self.resume_fetches:
                        older = await self.store.events_after(
                            transcript_id, after, limit=fetch_limit
                        )
                    if older is None or not self.is_current(live):
                        live = await self.load(transcript_id)
                        live.deliver_pending()
                        break
                    # The window may have moved on during the await.
                    live.deliver_pending()
                    items = splice(after, older, live.window, live.transcript.revision)
                    mode = self._resume(live, queue, after, items, window)
                    if mode is not None:
                        return mode
                    break
                case SendBaseline():
                    break
        # A resume answered with a baseline of the same epoch: the consumer
        # may hold drafts committed since its revision (their finals follow).
        same = from_revision is not None and epoch == live.transcript.epoch
        return await self._send_baseline(live, queue, window, from_revision if same else None)

    def _join(self, live: LiveTranscript, queue: OutboundQueue, window: Window | None) -> None:
        if live.join(queue, window):
            self.metrics.subscriptions.inc()

    async def _send_baseline(
        self,
        live: LiveTranscript,
        queue: OutboundQueue,
        window: Window | None,
        resumed_from: int | None = None,
    ) -> str:
        """Queue a baseline of ``window`` and join ``queue`` to the subscribers
        (``resumed_from``: in answer to a resume from that revision)."""
        while True:
            snapshot = await self._baseline(live, window, queue.binary)
            if snapshot is None:
                live = await self.load(live.id)  # reloaded meanwhile: the current copy
                continue
            break
        # No await from here on (``_baseline`` returned right after its last
        # synchronous step): the snapshot is of the current revision.
        if self.connections.get(queue.id) is not queue:
            return "baseline"  # the connection went away while the store answered
        # Join before queueing: if the queue overflows, the lag handling then
        # sees (and drops) this subscription too.
        self._join(live, queue, window)
        queue.push_baseline(snapshot)
        self._push_drafts(live, queue, resumed_from)
        self.metrics.subscribes.labels("baseline").inc()
        return "baseline"

    async def _baseline(
        self, live: LiveTranscript, window: Window | None, binary: bool
    ) -> EncodedSnapshot | None:
        """The encoded baseline of ``window`` at the current revision in one
        format, made in one synchronous step after any encoding a chunk at a
        time of a big transcript (``LiveTranscript.prepare_baseline``) or of
        the older messages the store gives (``LiveTranscript.encode_older``):
        each message once per window start and format, shared by every
        connection. ``None`` when ``live`` is no longer the current copy."""
        prepared = None  # holds the shared encoding alive until it is used
        for _ in range(_READ_ATTEMPTS):
            if not self.is_current(live):
                return None
            live.deliver_pending()
            state = live.transcript.state
            start = _start_of(window, state)
            cached = live.cached_snapshot(start, binary)
            if cached is not None:
                return cached
            if live.encodes_in_steps(start, binary):
                # Encoded a chunk per loop turn; then at most one chunk is
                # left for the synchronous step (the next time round).
                await live.prepare_baseline(binary, self.baseline_encodes)
                continue
            if not live.older_missing(start, binary):
                return live.encoded_snapshot(start, binary)
            try:
                prepared = await live.encode_older(
                    start,
                    binary,
                    lambda first, end: self._read_older(live, first, end),
                    self.baseline_encodes,
                )
            except _Stale:
                await self._refresh(live)
                return None
        del prepared
        raise StoreError(f"transcript {live.id!r}: the store did not give its older messages")

    def _resume(
        self,
        live: LiveTranscript,
        queue: OutboundQueue,
        from_revision: int,
        items: list[EncodedEvent] | None,
        window: Window | None,
    ) -> str | None:
        """Queue the increments after ``from_revision`` and join; ``None``
        (nothing done) when they do not join up or would overflow the queue
        (and lag it before the writer could send any: no progress): send a
        baseline instead (one frame: always progress)."""
        # No await from here on: the increments queued and the join are one step.
        if items is None or not queue.has_room(len(items), sum(item.size for item in items)):
            return None
        self._join(live, queue, window)
        queue.push_resume(live.id, from_revision, items)
        self._push_drafts(live, queue, from_revision)
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
