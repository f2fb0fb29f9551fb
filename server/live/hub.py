"""The hub: the registry of live transcripts, and the coordinator of its parts.

It loads transcripts into memory (``load``) and lets idle ones go, creates
and deletes them, takes every change (``append`` queues on the committer in
``server.live.appends``; segment starts and Views commit under the
transcript's lock) and keeps live copies in step with what other replicas
stored (``catch_up``: the one rule, which the backplane uses too). Its parts
do the rest, each given the hub as a small port when the hub builds them
(``server.live.ports``; none imports the hub):

- ``hub.subscriptions`` (``server.live.subscriptions``): connections,
  subscribe, baseline, resume, unsubscribe;
- ``hub.reads`` (``server.live.reads``): snapshots, ranges, events, Views and
  usage, joining memory and the store;
- ``hub.drafts`` (``server.live.draft_fanout``): the drafts' fan-out,
  timers, sweeper and publication;
- ``hub.committer`` (``server.live.appends``): appends committed in runs.

The path of a change: validate -> build the event (``prepare_*``) -> the store
commits it (``await``, under the transcript's lock) -> ``apply`` updates
memory and captures the event -> the live transcript's pump pushes it to
every subscriber's outbound queue. Whatever changes the transcript (a
WebSocket append, an HTTP append, another replica's change) reaches
subscribers through that same path.

Other replicas (``server.replicas``) attach to the hub (``attach``): the hub
tells them which transcripts it holds and hands them its drafts' updates.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from protocol import codes, wire
from protocol.consumer import Applied, Resubscribed, Subscription
from protocol.types import TranscriptEvent
from protocol.views import InvalidView
from server.config import ServerConfig
from server.errors import Refused
from server.live.appends import AppendCommitter, PendingAppend
from server.live.draft_fanout import DraftFanOut
from server.live.drafts import Drafts
from server.live.live_transcript import LiveTranscript, held_bytes
from server.live.ports import CaughtUp
from server.live.presence import PresenceRegistry
from server.live.reads import Reads
from server.live.subscriptions import Subscriptions
from server.live.writes import Writes
from server.metrics import Metrics
from server.store.base import (
    LOADED_KEYS,
    Store,
    StoredState,
    TranscriptInfo,
    TranscriptNotFound,
)
from server.tasks import cancel_and_wait
from server.tuning import (
    IDLE_SWEEPS_PER_TTL,
    LIVE_FULL_RETRY_AFTER_S,
    MAX_CONCURRENT_LOADS,
    MIN_IDLE_SWEEP_S,
)

log = logging.getLogger("tsync.hub")


class ReplicaLink(Protocol):
    """Another replica's link to this hub (``server.replicas.backplane``):
    told which transcripts the hub holds (the backplane watches their
    notices): ``held`` when a load begins (and again when a copy is
    replaced), ``released`` when the hub lets one go; both return at once.
    ``publish_draft`` (``None``: drafts stay here) takes every local draft
    update and close."""

    def held(self, transcript_id: str) -> None: ...

    def released(self, transcript_id: str) -> None: ...

    @property
    def publish_draft(self) -> Callable[[wire.DraftFrame], None] | None: ...


class Hub:
    """Holds the transcripts in use; serves every change; its parts serve
    subscriptions, reads and drafts."""

    def __init__(self, store: Store, config: ServerConfig, metrics: Metrics | None = None) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics or Metrics()
        #: The transcripts in memory, by id, least recently used first (read
        #: it through ``copy_of``/``copies``; change it through the hub).
        self.live: dict[str, LiveTranscript] = {}
        self._loading: dict[str, asyncio.Future[LiveTranscript]] = {}
        #: Deletes in flight, by id: loads of that id wait for them.
        self._deleting: dict[str, asyncio.Future[None]] = {}
        self._loads = asyncio.Semaphore(MAX_CONCURRENT_LOADS)
        self._sweeper: asyncio.Task[None] | None = None
        #: How many idle sweeps have run (tests wait on it instead of sleeping).
        self.sweeps = 0
        self._link: ReplicaLink | None = None
        self.committer = AppendCommitter(store, self.metrics, self)
        self.drafts = DraftFanOut(self)
        self.reads = Reads(self)
        #: Who is on each transcript (``server.live.presence``).
        self.presence = PresenceRegistry(
            interval_s=config.presence_interval_s,
            max_members=config.presence_max_members,
            max_connection_bytes=config.max_connection_presence_bytes,
            frames_made=self.metrics.presence_frames.inc,
        )
        self.metrics.presence_members.set_function(self.presence.member_count)
        self.subscriptions = Subscriptions(self, self.reads, self.drafts, self.presence)
        self.drafts.connections = self.subscriptions.connections
        self.writes = Writes(self, self.committer)

    def attach(self, link: ReplicaLink) -> Callable[[], None]:
        """Link another replica's backplane (one at most); returns the call
        that detaches it."""
        if self._link is not None:
            raise RuntimeError("the hub is linked to a backplane already")
        self._link = link
        self.drafts.publisher = link.publish_draft

        def detach() -> None:
            if self._link is link:
                self._link = None
                self.drafts.publisher = None

        return detach

    # --- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_idle(), name="hub-sweeper")
        self.drafts.start()

    async def stop(self) -> None:
        await cancel_and_wait([self._sweeper])
        await self.drafts.stop()
        await self.subscriptions.stop()
        self.presence.close()
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

    def held(self, transcript_id: str) -> LiveTranscript | None:
        """The transcript if it is in memory now (touched, as ``load``
        touches it), else ``None``: no load, no wait (a read answered
        without a task, ``server.streams.transcripts.ready_long_poll``)."""
        if transcript_id in self._deleting:
            return None
        live = self.live.get(transcript_id)
        if live is not None:
            live.touch()
            self.live[transcript_id] = self.live.pop(transcript_id)
        return live

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
        self._tell_held(transcript_id)
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
            self._tell_released(transcript_id)
            raise
        finally:
            del self._loading[transcript_id]

    async def _load_stored(self, transcript_id: str) -> StoredState | None:
        """The transcript's state with the messages a live copy holds."""
        keep = self.config.live_messages
        return await self.store.load_recent(transcript_id, messages=keep or None)

    def _hold(self, stored: StoredState, drafts: Drafts | None = None) -> LiveTranscript:
        config = self.config
        live = LiveTranscript(
            stored,
            limits=config.message_limits,
            event_window=config.event_window,
            remembered_keys=min(LOADED_KEYS, self.store.idempotency_retention),
            live_messages=config.live_messages,
            drafts=self.drafts.drafts_for(stored.transcript_id, drafts),
        )
        self.live[live.id] = live
        self._tell_held(live.id)
        self.metrics.live_transcripts.set(len(self.live))
        return live

    def _tell_held(self, transcript_id: str) -> None:
        if self._link is not None:
            self._link.held(transcript_id)

    def _tell_released(self, transcript_id: str) -> None:
        if self._link is not None:
            self._link.released(transcript_id)

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
        self.drafts.park(live)
        del self.live[live.id]
        self._tell_released(live.id)
        live.release()
        self.metrics.live_transcripts.set(len(self.live))

    def live_bytes(self) -> int:
        """About the bytes the transcripts in memory hold (``max_live_bytes``):
        their messages, the encodings their queued baselines share, and their
        drafts."""
        held = sum(live.size + live.shared_bytes() for live in self.live.values())
        return held + self.drafts.budget.total

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

    def copy_of(self, transcript_id: str) -> LiveTranscript | None:
        """The copy in memory now, if any (never loads)."""
        return self.live.get(transcript_id)

    def copies(self) -> list[LiveTranscript]:
        """The copies in memory now, least recently used first."""
        return list(self.live.values())

    def forget(self, transcript_id: str) -> None:
        """Drop a transcript from memory (after a delete, or a lost history);
        its subscribers are unsubscribed without a word."""
        live = self.live.pop(transcript_id, None)
        if live is not None:
            self._tell_released(transcript_id)
            live.release()
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
            self.presence.forget(queue, live.id)
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
            self.drafts.drop_parked(transcript_id)
        finally:
            del self._deleting[transcript_id]
            done.set_result(None)

    async def requeue(self, pending: PendingAppend, transcript_id: str) -> None:
        """Queue an append again on the transcript's current copy (its copy
        was replaced while it waited)."""
        try:
            live = await self.load(transcript_id)
        except Exception as exc:
            pending.fail(exc)
            return
        self.committer.submit(live, pending)

    def commit_draft(self, live: LiveTranscript, draft_id: str, revision: int) -> None:
        """``CommitPort.commit_draft``: the append that commits ``draft_id``
        landed as ``revision`` (``DraftFanOut.commit``)."""
        self.drafts.commit(live, draft_id, revision)

    # --- other replicas' changes ----------------------------------------------------

    async def catch_up(self, live: LiveTranscript) -> CaughtUp:
        """Apply the changes other replicas stored since ``live``'s revision
        (under ``live.lock``), checked by the consumer core's continuity rule
        (``Subscription.following``): the hub (a subscriber ahead of this
        copy, a writer overtaken) and the backplane (a notice) catch up with
        this one rule. When the store no longer holds those changes, holds
        another epoch or a gap, ``live`` is reloaded and every subscriber
        gets a fresh baseline."""
        transcript = live.transcript
        try:
            events = await self.store.events_after(live.id, transcript.revision)
        except TranscriptNotFound:
            events, reason = None, "deleted"
        else:
            reason = "history not in the store"
        applied = 0
        follower = Subscription.following(transcript.state)
        for event in events or ():
            update = follower.on_event(event)
            if isinstance(update, Applied):
                transcript.apply(event)
                self.metrics.backplane_events.inc()
                applied += 1
            elif isinstance(update, Resubscribed):
                events, reason = None, update.reason
                if reason == "digest":
                    self.metrics.digest_mismatches.inc()
                break
        if events is None:
            log.info("reloading %s (%s)", live.id, reason)
            await self.reload(live)
            return CaughtUp(applied, reason)
        return CaughtUp(applied)

    async def caught_up(self, live: LiveTranscript, *, mismatch: bool = False) -> bool:
        """``CommitPort.caught_up``: ``catch_up`` for a writer holding
        ``live.lock``; False when ``live`` was replaced (reloaded or
        forgotten): the writer starts over with the current copy. After a
        ``RevisionMismatch`` (``mismatch``) a catch-up that found nothing
        means the store holds another epoch: reload."""
        before = live.transcript.revision
        await self.catch_up(live)
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
                await self.subscriptions.send_baseline(fresh, queue, window)
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

    def stats(self) -> dict[str, Any]:
        return {
            "connections": len(self.subscriptions.connections),
            "live": len(self.live),
            "subscriptions": sum(len(live.subscribers) for live in self.live.values()),
        }

    async def list_transcripts(
        self, *, after: str | None = None, limit: int = 100
    ) -> list[TranscriptInfo]:
        """Transcripts ordered by id, after ``after`` (from the store)."""
        return await self.store.list(after=after, limit=limit)
