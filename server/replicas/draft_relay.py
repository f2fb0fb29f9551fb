"""Drafts across replicas: every local draft update goes out through the
shared store, every other replica's comes in and reaches the local
subscribers as if it had been written here.

Out (``DraftRelay.publish``, the hub's ``ReplicaLink.publish_draft``): each local
update and close (a ``draft`` op, a commit's ``final``, a ``cancelled``, an
``expired`` of this replica's sweep) is queued and relayed in order, all
that is pending in one pipelined round trip (``SharedDrafts.relay_drafts``).
The store keeps each open draft's text in an entry with a TTL and announces
the update on the transcript's notice channel, from the same script. A delta
the entry cannot take (an earlier relay failed, another replica wrote the
draft last), a failed relay and a queue that grew past
``server.tuning.DRAFT_RELAY_BACKLOG`` are repaired by relaying the draft's whole text
instead of what was pending. An update the entry is past (a writer that
moved here mid-draft, before this replica had read it back) renumbers the
copy here past the entry's update and relays its whole text. Keep-alives change no frame, so
every ``draft_ttl_s`` / 3 the drafts that were kept alive since their last
relay are relayed as keep-alives: the other replicas then do not expire them.
A reply with parts relays each update's ``chunks`` beside its ``delta`` or
``text``, and a whole resend its ``replay``; the store keeps the chunks
beside the text (``server.store.redis.drafts``).

In (``received``, from the backplane's listener): an update of another
replica is applied with ``DraftFanOut.apply_remote`` (never relayed again). A
gap (a delta that does not follow the local copy) means pub/sub dropped
something (or chunks that do not fold into the copy's reply): the
transcript's drafts are read from the store (``SharedDrafts.drafts_of``) and
applied as ``text`` frames (a reply's with its ``replay``); what arrives
for that transcript during the read is held and applied after it. The same
read seeds a transcript the hub starts holding (a late joiner here gets the
text of drafts written elsewhere) and repairs every held transcript after
the notices were (re)subscribed (pub/sub drops messages silently while
disconnected).

Commit: a ``final`` names the revision of its messages. The committing
replica relays it after the append's script published that revision's
notice, on the same channel, so it arrives here behind the notice; the
local copy may still be syncing, so a ``final`` whose revision the copy
does not hold yet is parked and applied right after the sync that brings
the revision (``after_sync``), in the same flush as its increment.

A replica that dies takes its drafts with it: nothing refreshes their
entries or copies, so the other replicas' sweeps expire their copies
(``REMOTE_DRAFT_GRACE_S`` after ``draft_ttl_s``) and the entries lapse with
their TTL. Committed messages are in the store and unaffected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol import wire
from server.store.base import RelayedDraft, SharedDrafts, StoredDraft, StoreError
from server.tasks import Background
from server.tuning import (
    DRAFT_RECOVERY_BUFFER,
    DRAFT_RELAY_BACKLOG,
    DRAFT_RELAY_BATCH,
    DRAFT_RELAY_RETRY_S,
    DRAFT_RELAY_STOP_FLUSH_S,
)

if TYPE_CHECKING:
    from server.live.hub import Hub
    from server.live.live_transcript import LiveTranscript

__all__ = ["DraftCounters", "DraftRelay"]

log = logging.getLogger("tsync.backplane")

DraftKey = tuple[str, str]


@dataclass
class DraftCounters:
    """What the draft relay did, for tests and logs."""

    relayed: int = 0  #: updates relayed (keep-alives and whole texts included)
    relay_failures: int = 0  #: relays the store refused (the drafts' texts go again)
    resent: int = 0  #: whole texts relayed instead of pending or refused updates
    keepalives: int = 0  #: keep-alives relayed
    received: int = 0  #: updates of other replicas received
    gaps: int = 0  #: updates that did not follow the local copy
    recoveries: int = 0  #: transcripts whose drafts were read back from the store
    parked: int = 0  #: finals that waited for their revision
    renumbered: int = 0  #: drafts written here renumbered past another replica's updates


def frame_of(update: RelayedDraft) -> wire.DraftFrame:
    """The draft frame (``seq`` 0) an update or stored entry stands for."""
    return wire.DraftFrame(
        seq=0,
        transcript_id=update.transcript_id,
        draft_id=update.draft_id,
        role=update.role,
        n=update.n,
        delta=update.delta,
        text=update.text,
        state=update.state,
        revision=update.revision,
        chunks=update.chunks,
        replay=update.replay,
    )


class DraftRelay:
    """Relays ``hub``'s draft updates through ``store`` and applies the other
    replicas'. The ``Backplane`` owns it: ``start``/``stop`` with it, feed it
    what its listener hears."""

    def __init__(self, hub: Hub, store: SharedDrafts) -> None:
        self.hub = hub
        self.store = store
        #: This replica's name in what it relays (its own come back to it).
        self.origin = uuid.uuid4().hex
        self.counters = DraftCounters()
        self._outbox: deque[wire.DraftFrame] = deque()
        #: Drafts whose whole text goes next, instead of their pending updates.
        self._resend: dict[DraftKey, None] = {}
        #: When each local open draft was last relayed (``time.monotonic``).
        self._relayed_at: dict[DraftKey, float] = {}
        self._ready = asyncio.Event()
        #: Set while nothing waits to be relayed.
        self._idle = asyncio.Event()
        self._idle.set()
        #: Transcripts whose drafts are read back next, and those being read
        #: (with what arrived for them meanwhile, applied after the read).
        self._to_recover: set[str] = set()
        self._recovering: dict[str, list[wire.DraftFrame]] = {}
        self._recover_wake = asyncio.Event()
        #: ``final``s waiting for their revision, by transcript and draft.
        self._parked: dict[str, dict[str, wire.DraftFrame]] = {}
        self._background = Background()

    @property
    def ttl(self) -> float:
        return self.hub.config.draft_ttl_s

    async def start(self) -> None:
        self._background.run(
            {
                "drafts-relay": self._relay_loop(),
                "drafts-recover": self._recover_loop(),
                "drafts-keepalive": self._keepalive_loop(),
            }
        )

    async def stop(self) -> None:
        """Stop relaying, after what is pending went out (a commit's ``final``
        of the last moments, say), waiting at most ``DRAFT_RELAY_STOP_FLUSH_S``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), DRAFT_RELAY_STOP_FLUSH_S)
        await self._background.stop()

    # --- out ----------------------------------------------------------------------

    def publish(self, frame: wire.DraftFrame) -> None:
        """Queue a local update or close for the other replicas (the hub's
        ``publish_draft``: returns at once)."""
        key = (frame.transcript_id, frame.draft_id)
        if frame.state == "open":
            self._relayed_at[key] = time.monotonic()
        else:
            self._relayed_at.pop(key, None)
        self._outbox.append(frame)
        if len(self._outbox) > DRAFT_RELAY_BACKLOG:
            self._collapse()
        self._wake()

    def _wake(self) -> None:
        self._idle.clear()
        self._ready.set()

    def _collapse(self) -> None:
        """Too much pending (Redis slow or away): keep the closes, relay the
        whole text of every other draft once instead of its updates."""
        closes: deque[wire.DraftFrame] = deque()
        for frame in self._outbox:
            if frame.state == "open":
                self._resend[(frame.transcript_id, frame.draft_id)] = None
            else:
                closes.append(frame)
        self._outbox = closes

    def _take(self) -> list[RelayedDraft]:
        """The next batch: whole texts first, then queued updates they do
        not cover."""
        covered: dict[DraftKey, int] = {}
        batch: list[RelayedDraft] = []
        for key in list(self._resend):
            if len(batch) >= DRAFT_RELAY_BATCH:
                break
            del self._resend[key]
            frame = self.hub.drafts.text(*key)
            if frame is None:
                continue  # closed since: its close is queued or relayed
            covered[key] = frame.n
            batch.append(self._relayed(frame))
            self.counters.resent += 1
        outbox = self._outbox
        while outbox and len(batch) < DRAFT_RELAY_BATCH:
            frame = outbox.popleft()
            n = covered.get((frame.transcript_id, frame.draft_id))
            if n is not None and frame.state == "open" and frame.n <= n:
                continue
            batch.append(self._relayed(frame))
        return batch

    def _relayed(self, frame: wire.DraftFrame) -> RelayedDraft:
        return RelayedDraft(
            transcript_id=frame.transcript_id,
            draft_id=frame.draft_id,
            role=frame.role,
            n=frame.n,
            delta=frame.delta,
            text=frame.text,
            state=frame.state,
            revision=frame.revision,
            origin=self.origin,
            chunks=frame.chunks,
            replay=frame.replay,
        )

    async def _relay_loop(self) -> None:
        delay = DRAFT_RELAY_RETRY_S
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch = self._take()
            if self._outbox or self._resend:
                self._ready.set()  # more than one batch
            if not batch:
                if not (self._outbox or self._resend):
                    self._idle.set()
                continue
            try:
                outcomes = await self.store.relay_drafts(batch, self.ttl)
            except StoreError as err:
                self.counters.relay_failures += 1
                log.log(
                    logging.WARNING if delay == DRAFT_RELAY_RETRY_S else logging.DEBUG,
                    "drafts: relaying %d updates failed (%s); their drafts' texts go again",
                    len(batch),
                    err,
                )
                self._refused(batch)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                self._ready.set()
                continue
            except Exception:
                log.exception("drafts: relaying failed")
                self._refused(batch)
                await asyncio.sleep(1.0)
                self._ready.set()
                continue
            delay = DRAFT_RELAY_RETRY_S
            self.counters.relayed += len(batch)
            for update, (outcome, stored_n) in zip(batch, outcomes, strict=True):
                if outcome == "stale":
                    self._resend[(update.transcript_id, update.draft_id)] = None
                    self._wake()
                elif outcome == "behind":
                    self._renumber(update, stored_n)
            if not (self._outbox or self._resend):
                self._idle.set()

    def _renumber(self, update: RelayedDraft, stored_n: int) -> None:
        """Another replica wrote this draft further than the copy here (a
        writer that moved here before this replica read the draft back):
        the copy's text is the writer's, numbered past the stored update
        ``stored_n`` (its subscribers get it as a ``text``), and relayed
        whole."""
        live = self.hub.live.get(update.transcript_id)
        draft = None if live is None else live.drafts.open_draft(update.draft_id)
        if draft is None:
            return  # closed since: its close goes as it is
        if draft.n <= stored_n:
            self.counters.renumbered += 1
            text = wire.DraftFrame(
                seq=0,
                transcript_id=update.transcript_id,
                draft_id=update.draft_id,
                role=update.role,
                n=stored_n + 1,
                text=draft.text,
                replay=None if draft.ui is None else draft.ui.chunks(),
            )
            self.hub.drafts.apply_remote(text)
        draft.remote = False  # written here: still this replica's to expire and relay
        self._resend[(update.transcript_id, update.draft_id)] = None
        self._wake()

    def _refused(self, batch: list[RelayedDraft]) -> None:
        """Relay again what Redis did not take: the closes as they were,
        every other draft as its whole text."""
        closes = [frame_of(u) for u in batch if u.state != "open"]
        for update in batch:
            if update.state == "open":
                self._resend[(update.transcript_id, update.draft_id)] = None
        self._outbox.extendleft(reversed(closes))

    async def _keepalive_loop(self) -> None:
        """Relay keep-alives of the local drafts kept alive since their last
        relay (their entries and the other replicas' copies then live on)."""
        while True:
            await asyncio.sleep(self.ttl / 3)
            now = time.monotonic()
            seen: set[DraftKey] = set()
            for live in list(self.hub.live.values()):
                for draft in live.drafts.open_drafts():
                    if draft.remote:
                        continue
                    key = (draft.transcript_id, draft.draft_id)
                    seen.add(key)
                    if draft.updated > self._relayed_at.get(key, 0.0):
                        self._relayed_at[key] = now
                        self._outbox.append(
                            wire.DraftFrame(
                                seq=0,
                                transcript_id=draft.transcript_id,
                                draft_id=draft.draft_id,
                                role=draft.role,  # type: ignore[arg-type]  # checked when opened
                                n=draft.n,
                            )
                        )
                        self.counters.keepalives += 1
                        self._wake()
            for key in [k for k in self._relayed_at if k not in seen]:
                del self._relayed_at[key]  # gone without a close (forgotten)
            self.flush_parked()

    # --- in -----------------------------------------------------------------------

    def received(self, update: RelayedDraft) -> None:
        """An update some replica relayed (the backplane's listener)."""
        if update.origin == self.origin:
            return
        self.counters.received += 1
        frame = frame_of(update)
        held = self._recovering.get(update.transcript_id)
        if held is not None:
            if len(held) < DRAFT_RECOVERY_BUFFER:
                held.append(frame)
            else:
                self.recover((update.transcript_id,))  # read again after this one
            return
        self._apply(frame)

    def _apply(self, frame: wire.DraftFrame, *, repair: bool = True) -> None:
        """Apply ``frame`` to the copy here; a gap is repaired by reading the
        transcript's drafts back (unless ``repair`` is false: it was read
        back, and reading it again would find the same)."""
        live = self.hub.live.get(frame.transcript_id)
        if live is None:
            return  # not held: its entry seeds the copy if it ever is
        if frame.state == "final" and frame.revision is not None:
            if frame.revision > live.transcript.revision:
                self._parked.setdefault(live.id, {})[frame.draft_id] = frame
                self.counters.parked += 1
                return
            live.deliver_pending()  # its increment leaves first
        if not self.hub.drafts.apply_remote(frame):
            self.counters.gaps += 1
            if repair:
                self.recover((frame.transcript_id,))
            else:
                log.warning(
                    "drafts: the stored draft %r of %r does not apply (its chunks do not fold)",
                    frame.draft_id,
                    frame.transcript_id,
                )

    def after_sync(self, live: LiveTranscript) -> None:
        """``live`` took changes from the store: the parked finals of the
        revisions it holds now close, right behind their increments."""
        parked = self._parked.get(live.id)
        if not parked:
            return
        revision = live.transcript.revision
        ready = [f for f in parked.values() if f.revision is not None and f.revision <= revision]
        if not ready:
            return
        live.deliver_pending()
        for frame in ready:
            del parked[frame.draft_id]
            self.hub.drafts.apply_remote(frame)
        if not parked:
            del self._parked[live.id]

    def flush_parked(self) -> None:
        """``after_sync`` of every transcript with parked finals (their
        revision may have come through another path than the backplane)."""
        for transcript_id in list(self._parked):
            live = self.hub.live.get(transcript_id)
            if live is None:
                del self._parked[transcript_id]
            else:
                self.after_sync(live)

    # --- reading back from the store ------------------------------------------------

    def held(self, transcript_id: str) -> None:
        """The hub starts holding ``transcript_id``: seed its drafts."""
        self.recover((transcript_id,))

    def released(self, transcript_id: str) -> None:
        self._parked.pop(transcript_id, None)
        self._recovering.pop(transcript_id, None)
        self._to_recover.discard(transcript_id)

    def resubscribed(self, transcript_ids: Iterable[str] | None = None) -> None:
        """Updates may have been dropped (the notices were (re)subscribed):
        read back the drafts of these transcripts (``None``: all held)."""
        self.recover(self.hub.live if transcript_ids is None else transcript_ids)

    def recover(self, transcript_ids: Iterable[str]) -> None:
        """Read these transcripts' drafts back from the store and apply them;
        what arrives for them until then waits."""
        for transcript_id in transcript_ids:
            self._to_recover.add(transcript_id)
            self._recovering.setdefault(transcript_id, [])
        self._recover_wake.set()

    async def _recover_loop(self) -> None:
        delay = DRAFT_RELAY_RETRY_S
        while True:
            await self._recover_wake.wait()
            self._recover_wake.clear()
            ids, self._to_recover = self._to_recover, set()
            if not ids:
                continue
            # A transcript being loaded is read once its copy is there.
            await asyncio.gather(*(self.hub.settled(tid) for tid in ids))
            try:
                drafts = await self.store.drafts_of(ids)
            except Exception as err:  # StoreError, or a bug: the loop goes on
                log.log(
                    logging.WARNING if delay == DRAFT_RELAY_RETRY_S else logging.DEBUG,
                    "drafts: reading back the drafts of %d transcripts failed: %s",
                    len(ids),
                    err,
                )
                self._to_recover |= ids
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                self._recover_wake.set()
                continue
            delay = DRAFT_RELAY_RETRY_S
            for transcript_id in ids:
                if transcript_id in self._to_recover:
                    continue  # asked again meanwhile: the next read applies all
                held = self._recovering.pop(transcript_id, [])
                self._restore(transcript_id, drafts.get(transcript_id, []))
                for frame in held:
                    self._apply(frame)

    def _restore(self, transcript_id: str, entries: list[StoredDraft]) -> None:
        """Apply the stored drafts of a transcript: the text of each open one
        this replica does not write itself, and the closes. A copy made from
        an entry is as old as the entry's last update (so that it expires
        with it, not ``draft_ttl_s`` after it was read)."""
        live = self.hub.live.get(transcript_id)
        if live is None:
            return
        self.counters.recoveries += 1
        now = time.monotonic()
        for entry, expires_in_s in entries:
            local = live.drafts.open_draft(entry.draft_id)
            if entry.state == "open" and local is not None and not local.remote:
                continue  # written here: this copy is the newest
            if entry.state == "open" and local is not None and local.n >= entry.n:
                continue
            self._apply(frame_of(entry), repair=False)
            copy = live.drafts.open_draft(entry.draft_id)
            if copy is not None and copy.remote and entry.state == "open":
                copy.updated = min(copy.updated, now - max(0.0, self.ttl - expires_in_s))
