"""The backplane: keeps this replica's live transcripts in step with changes
other replicas stored in the shared store (Redis).

How a change made through replica A reaches a subscriber on replica B:

1. A's append script stores the event (log + stream) and PUBLISHes a small
   notice ``[id, epoch, revision]`` (never the body).
2. B's listener gets the notice. If B holds that transcript live and its copy
   is behind (or of another epoch), the id is marked for a sync.
3. The sync takes the live transcript's lock (so it never interleaves with a
   local append), reads the events after B's revision from the store's stream
   and feeds them to the consumer core, as a subscription that follows the
   live transcript's state (``protocol.consumer.Subscription.following``):
   an event the core applies (the next revision, fitting the length, active
   start and segments, checked as any consumer's copy checks it) is applied
   with ``Hub.apply_remote`` (the transcript captures it into its
   ``ChangeBuffer`` and the pump fans it out exactly like a local change); a
   gap, another epoch, an event that does not fit, a trimmed stream or a
   deleted transcript mean the copy is replaced by the store's
   (``Hub.reload``: subscribers get a fresh baseline or ``not-found``).

Pub/sub is only a wake-up: Redis drops messages while a subscriber is
disconnected, so after every (re)subscription every live transcript is
checked, and a safety net compares every live copy with the store's head
(epoch, revision; one pipelined read) every ``resync_interval_s``.

The backplane ``watch``es in the store every transcript the hub holds (it is
the hub's ``ReplicaLink``). A single Redis announces every change on one
channel anyway; a Redis Cluster subscribes each transcript's sharded channel
on its node and answers with a ``Recheck`` once subscribed: those copies
(one transcript just loaded, or every transcript of a node that came back)
are compared with the store, as after a resubscription, shard by shard. The
safety net reads the heads of every node that answers.

Drafts (a store that also implements ``SharedDrafts``, as Redis does): the
same channel carries every draft update a replica relays, so the backplane
hands them to its ``DraftRelay`` (``server.replicas.draft_relay``), tells it when
updates may have been dropped (the same (re)subscriptions and rechecks) and
when a sync brought a revision a parked ``final`` waits for.

Presence (a store that implements ``SharedPresence``): the channel carries
each replica's presence changes too, handed to ``PresenceBackplane``
(``server.replicas.presence_relay``), which reads the entries back after the same
(re)subscriptions and rechecks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from protocol import wire
from server.live.hub import Hub
from server.live.live_transcript import LiveTranscript
from server.replicas.draft_relay import DraftRelay
from server.replicas.presence_relay import PresenceBackplane
from server.store.base import (
    Notice,
    Recheck,
    RelayedDraft,
    RelayedPresence,
    SharedDrafts,
    SharedPresence,
    SharedStore,
    StoreError,
)
from server.tasks import Background
from server.tuning import BACKPLANE_CONCURRENCY

__all__ = ["Backplane", "BackplaneCounters", "SharedStore"]

log = logging.getLogger("tsync.backplane")


@dataclass
class BackplaneCounters:
    """What the backplane did, for tests and logs."""

    notices: int = 0  #: notices received
    resubscribed: int = 0  #: (re)subscriptions to the notices
    rechecks: int = 0  #: transcripts to check after their (shard's) subscription
    syncs: int = 0  #: copies brought up to date from the stream
    reloads: int = 0  #: copies replaced by the store's (gap, epoch, trimmed, deleted)
    errors: int = 0  #: syncs or safety-net checks that failed (store unavailable)


class Backplane:
    """Mirrors other replicas' changes into ``hub``'s live transcripts.

    Create with ``Backplane.for_hub(hub)`` (``None`` when the hub's store is
    not shared), then ``await start()``; ``await stop()`` before the hub stops.
    """

    def __init__(
        self,
        hub: Hub,
        store: SharedStore,
        *,
        resync_interval_s: float | None = None,
        concurrency: int = BACKPLANE_CONCURRENCY,
    ) -> None:
        self.hub = hub
        self.store = store
        #: Default: the server setting ``backplane_resync_s``.
        self.resync_interval_s = (
            hub.config.backplane_resync_s if resync_interval_s is None else resync_interval_s
        )
        self.counters = BackplaneCounters()
        # id -> the newest notice (None: unknown, look in the store).
        self._pending: dict[str, Notice | None] = {}
        self._wake = asyncio.Event()
        self._limit = asyncio.Semaphore(concurrency)
        self._background = Background()
        #: Drafts across replicas, when the store keeps them.
        self.drafts = DraftRelay(hub, store) if isinstance(store, SharedDrafts) else None
        #: Presence across replicas, when the store keeps it.
        self.presence = (
            PresenceBackplane(hub.presence, store, hub.config.presence_ttl_s)
            if isinstance(store, SharedPresence)
            else None
        )

    @classmethod
    def for_hub(cls, hub: Hub, *, resync_interval_s: float | None = None) -> Backplane | None:
        """A backplane for ``hub`` if its store is shared, else ``None``."""
        if not isinstance(hub.store, SharedStore):
            return None
        return cls(hub, hub.store, resync_interval_s=resync_interval_s)

    # The hub's ReplicaLink: the store announces what the hub holds, and the
    # draft relay publishes the hub's draft updates.
    @property
    def publish_draft(self) -> Callable[[wire.DraftFrame], None] | None:
        return None if self.drafts is None else self.drafts.publish

    async def start(self) -> None:
        self._background.attached(self.hub.attach(self))
        self.store.watch([live.id for live in self.hub.copies()])
        if self.drafts is not None:
            await self.drafts.start()
        if self.presence is not None:
            await self.presence.start()
        self._background.run(
            {
                "backplane-listen": self._listen(),
                "backplane-work": self._work(),
                "backplane-resync": self._safety_net(),
            }
        )

    async def stop(self) -> None:
        await self._background.stop()
        if self.drafts is not None:
            await self.drafts.stop()
        if self.presence is not None:
            await self.presence.stop()

    # --- what needs a sync --------------------------------------------------------

    def mark(self, transcript_id: str, notice: Notice | None) -> None:
        """Ask for a sync of ``transcript_id`` (``notice=None``: check the store)."""
        if transcript_id in self._pending:
            older = self._pending[transcript_id]
            if older is None or notice is None or older.epoch != notice.epoch:
                notice = None  # mixed news: look in the store
            elif older.revision > notice.revision:
                notice = older
        self._pending[transcript_id] = notice
        self._wake.set()

    def _held(self, transcript_id: str) -> bool:
        # Loading counts: the notice may be newer than what the load read.
        return self.hub.holds(transcript_id)

    def held(self, transcript_id: str) -> None:
        self.store.watch((transcript_id,))
        if self.drafts is not None:
            self.drafts.held(transcript_id)

    def released(self, transcript_id: str) -> None:
        self.store.unwatch((transcript_id,))
        if self.drafts is not None:
            self.drafts.released(transcript_id)

    async def _listen(self) -> None:
        drafts = self.drafts
        presence = self.presence
        async for notice in self.store.notices():
            if isinstance(notice, RelayedDraft):
                if drafts is not None:
                    drafts.received(notice)
                continue
            if isinstance(notice, RelayedPresence):
                if presence is not None:
                    presence.received(notice)
                continue
            if notice is None:
                # (Re)subscribed: anything published meanwhile is lost; check all.
                self.counters.resubscribed += 1
                for live in self.hub.copies():
                    self.mark(live.id, None)
                if drafts is not None:
                    drafts.resubscribed()
                if presence is not None:
                    presence.resubscribed()
                continue
            if isinstance(notice, Recheck):
                # Subscribed (again) to these: what came before was not announced.
                held = [tid for tid in notice.transcript_ids if self._held(tid)]
                for transcript_id in held:
                    self.counters.rechecks += 1
                    self.mark(transcript_id, None)
                if drafts is not None:
                    drafts.resubscribed(held)
                if presence is not None:
                    presence.resubscribed(held)
                continue
            self.counters.notices += 1
            if self._held(notice.transcript_id):
                self.mark(notice.transcript_id, notice)

    async def _safety_net(self) -> None:
        while True:
            await asyncio.sleep(self.resync_interval_s)
            lives = {live.id: live for live in self.hub.copies()}
            try:
                heads = await self.store.heads(lives)
            except StoreError as err:
                self.counters.errors += 1
                log.debug("backplane safety net: %s", err)
                continue
            for transcript_id, head in heads.items():
                notice = (
                    Notice(transcript_id, "", 0) if head is None else Notice(transcript_id, *head)
                )
                if not _covers(lives[transcript_id], notice):
                    self.mark(transcript_id, notice)

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, {}
            await asyncio.gather(*(self._sync(tid, notice) for tid, notice in batch.items()))
            if self.drafts is not None:
                self.drafts.flush_parked()

    # --- bringing one copy up to date -----------------------------------------------

    async def _sync(self, transcript_id: str, notice: Notice | None) -> None:
        async with self._limit:
            try:
                await self._sync_now(transcript_id, notice)
            except StoreError as err:
                # The safety net (or the next notice) tries again.
                self.counters.errors += 1
                log.warning("backplane: sync of %s failed: %s", transcript_id, err)
            except Exception:
                self.counters.errors += 1
                log.exception("backplane: sync of %s failed", transcript_id)

    async def _sync_now(self, transcript_id: str, notice: Notice | None) -> None:
        hub = self.hub
        while True:
            live = await hub.settled(transcript_id)
            if live is None or _covers(live, notice):
                return
            async with live.lock:
                if not hub.is_current(live):
                    continue  # reloaded or evicted while we waited: look again
                if not _covers(live, notice):
                    await self._mirror(live, notice)
                return

    async def _mirror(self, live: LiveTranscript, notice: Notice | None) -> None:
        """Bring ``live`` up to the store (under ``live.lock``) by the hub's
        one catch-up rule (``Hub.catch_up``); a notice of another epoch
        reloads at once."""
        if notice is None:
            head = (await self.store.heads([live.id]))[live.id]
            notice = Notice(live.id, "", 0) if head is None else Notice(live.id, *head)
        if notice.epoch != live.transcript.epoch:
            log.info("backplane: reloading %s (epoch)", live.id)
            self.counters.reloads += 1
            await self.hub.reload(live)
            return
        caught = await self.hub.catch_up(live)
        if caught.reloaded is not None:
            self.counters.reloads += 1
        elif caught.applied:
            self.counters.syncs += 1
            if self.drafts is not None:
                self.drafts.after_sync(live)


def _covers(live: LiveTranscript, notice: Notice | None) -> bool:
    """Whether ``live`` already holds what ``notice`` announces."""
    return (
        notice is not None
        and notice.epoch == live.transcript.epoch
        and notice.revision <= live.transcript.revision
    )
