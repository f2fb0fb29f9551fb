"""Presence across replicas: the backplane's part for ``server.live.presence``
(through ``SharedPresence``, which the Redis store implements in
``store/redis/presence.py``).

- **Out**: the registry hands this replica's changes of a transcript to
  ``changed`` once per ``presence_interval_s``; a task writes them (with a
  version number per transcript, counting this replica's writes from a
  start taken from the clock, forgotten when it has no member there) and
  Redis announces them on the transcript's channel.
- **In**: ``received`` applies another replica's message (its version must
  follow the last one seen; a gap, or a message before anything was read,
  makes a read of that transcript's entries instead).
- **Alive**: every third of ``presence_ttl_s`` this replica renews its
  entries (one pipelined round trip) and reads back the entries of every
  transcript whose presence it holds: each replica's members, and how long
  its key still lives. A replica that stops renewing (it died) is dropped
  when its key lapses: ``expire`` runs at the earliest such deadline.
- After the notices were subscribed again (messages may have been lost),
  the transcripts concerned are read back.

Members leave on other replicas when the entry says so (a message, a
read), or when their replica's key lapses; never by a SCAN.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Iterable

from protocol.wire import Member
from server.live.presence import PresenceRegistry
from server.store.base import RelayedPresence, SharedPresence, StoreError
from server.tasks import Background

__all__ = ["PresenceBackplane"]

log = logging.getLogger("tsync.presence")


class PresenceBackplane:
    """Relays ``registry``'s local changes through ``store`` and applies the
    other replicas'. ``start`` it after the hub, ``stop`` it before."""

    def __init__(self, registry: PresenceRegistry, store: SharedPresence, ttl_s: float) -> None:
        self.registry = registry
        self.store = store
        self.ttl_s = ttl_s
        #: This replica's name in the entries (new at every start: a
        #: restarted replica never takes over a dead one's entries).
        self.replica = secrets.token_hex(6)
        self._versions: dict[str, int] = {}
        #: (transcript, replica) -> the version last applied.
        self._seen: dict[tuple[str, str], int] = {}
        #: (transcript, replica) -> when its entries lapse (loop time).
        self._deadlines: dict[tuple[str, str], float] = {}
        self._pending: dict[str, tuple[dict[str, Member], set[str]]] = {}
        self._to_read: set[str] = set()
        self._wake = asyncio.Event()
        self._background = Background()
        self._expiry: asyncio.TimerHandle | None = None
        #: Messages applied, reads made, members dropped with their replica.
        self.applied = 0
        self.reads = 0
        self.expired = 0

    async def start(self) -> None:
        self._background.attached(self.registry.attach(self))
        self._background.run(
            {"presence-relay": self._write_loop(), "presence-alive": self._alive_loop()}
        )

    async def stop(self) -> None:
        await self._background.stop()
        if self._expiry is not None:
            self._expiry.cancel()

    def _loop_time(self) -> float:
        return asyncio.get_running_loop().time()

    # --- out ------------------------------------------------------------------------------

    def changed(self, transcript_id: str, members: dict[str, Member], gone: list[str]) -> None:
        """The registry's ``PresenceRelay``: queue this replica's changes."""
        given, left = self._pending.setdefault(transcript_id, ({}, set()))
        for member_id in gone:
            given.pop(member_id, None)
            left.add(member_id)
        for member_id, member in members.items():
            left.discard(member_id)
            given[member_id] = member
        self._wake.set()

    def watching(self, transcript_id: str) -> None:
        """Someone here follows ``transcript_id``'s presence for the first
        time: read the other replicas' members."""
        self._to_read.add(transcript_id)
        self._wake.set()

    def _take(self) -> list[RelayedPresence]:
        pending, self._pending = self._pending, {}
        ttl_ms = max(1, int(self.ttl_s * 1000))
        updates = []
        for tid, (given, left) in pending.items():
            last = self._versions.get(tid)
            # A new run of versions starts at the clock (microseconds), past
            # any earlier run's: others never take it for an old message.
            version = time.time_ns() // 1000 if last is None else last + 1
            if self.registry.local_members(tid):
                self._versions[tid] = version
            else:
                self._versions.pop(tid, None)  # nothing left there: nothing to keep
            updates.append(
                RelayedPresence(
                    transcript_id=tid,
                    replica=self.replica,
                    version=version,
                    ttl_ms=ttl_ms,
                    members=list(given.values()),
                    gone=sorted(left),
                )
            )
        return updates

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            updates = self._take()
            try:
                if updates:
                    await self.store.relay_presence(updates)
            except StoreError as err:
                log.warning("presence: relaying failed (%s); writing them again", err)
                for update in updates:  # whole, on the next turn
                    self._rewrite(update.transcript_id)
                await asyncio.sleep(min(1.0, self.ttl_s / 3))
                self._wake.set()
            if self._to_read:
                ids, self._to_read = self._to_read, set()
                await self._read(ids)

    def _rewrite(self, transcript_id: str) -> None:
        """Write this replica's whole membership of ``transcript_id`` again."""
        members = self.registry.local_members(transcript_id)
        given, _left = self._pending.setdefault(transcript_id, ({}, set()))
        given.update(members)
        self._wake.set()

    # --- in -------------------------------------------------------------------------------

    def received(self, update: RelayedPresence) -> None:
        """Another replica's changes (this replica's own come back too: ignored)."""
        if update.replica == self.replica:
            return
        tid = update.transcript_id
        if tid not in self.registry.transcripts:
            return  # nobody here follows it: a read brings it when someone does
        key = (tid, update.replica)
        seen = self._seen.get(key)
        if seen is not None and update.version <= seen:
            return
        if (seen is None and update.version != 1) or (
            seen is not None and update.version > seen + 1
        ):
            self._to_read.add(tid)  # missed some: read it all
            self._wake.set()
            return
        self._seen[key] = update.version
        self.applied += 1
        self._deadline(key, update.ttl_ms / 1000)
        self.registry.apply_remote(tid, update.replica, update.members, update.gone)

    def resubscribed(self, transcript_ids: Iterable[str] | None = None) -> None:
        """Messages may have been lost: read these transcripts (all) back."""
        ids = self.registry.watched() if transcript_ids is None else transcript_ids
        self._to_read.update(tid for tid in ids if tid in self.registry.transcripts)
        self._wake.set()

    async def _read(self, transcript_ids: Iterable[str]) -> None:
        ids = [tid for tid in transcript_ids if tid in self.registry.transcripts]
        if not ids:
            return
        try:
            stored = await self.store.presence_of(ids)
        except StoreError as err:
            log.warning("presence: reading the other replicas' members failed: %s", err)
            return
        self.reads += 1
        for tid, replicas in stored.items():
            present = set()
            for entry in replicas:
                if entry.replica == self.replica:
                    continue
                key = (tid, entry.replica)
                present.add(entry.replica)
                if self._seen.get(key, 0) > entry.version:
                    continue  # a newer message was applied meanwhile
                self._seen[key] = entry.version
                self._deadline(key, entry.expires_in_s)
                self.registry.apply_remote(tid, entry.replica, entry.members, whole=True)
            for key in [k for k in self._deadlines if k[0] == tid and k[1] not in present]:
                self._drop(key)

    # --- alive ---------------------------------------------------------------------------

    async def _alive_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            local = self.registry.local_transcripts()
            try:
                lapsed = await self.store.renew_presence(local, self.replica, self.ttl_s)
            except StoreError as err:
                log.warning("presence: renewing failed: %s", err)
                lapsed = []
            for tid in lapsed:
                self._rewrite(tid)
            await self._read(self.registry.watched())

    def _deadline(self, key: tuple[str, str], seconds: float) -> None:
        self._deadlines[key] = self._loop_time() + seconds
        self._arm()

    def _arm(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        if self._deadlines:
            when = min(self._deadlines.values())
            self._expiry = asyncio.get_running_loop().call_at(when, self._expire)

    def _expire(self) -> None:
        self._expiry = None
        now = self._loop_time()
        for key in [k for k, when in self._deadlines.items() if when <= now]:
            self._drop(key)
        self._arm()

    def _drop(self, key: tuple[str, str]) -> None:
        """The entries of replica ``key[1]`` on ``key[0]`` lapsed: its members there leave."""
        self._deadlines.pop(key, None)
        self._seen.pop(key, None)
        self.expired += 1
        self.registry.expire_remote(key[1], key[0])
