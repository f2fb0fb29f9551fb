"""Presence: who is on each transcript now (``docs/protocol.md``, Presence).

A member is one connection that stated its presence (``presence`` op) on a
transcript it subscribes to. ``PresenceRegistry`` holds every transcript's
members (this replica's, and other replicas' as the relay reports them),
the connections that follow each transcript's presence (``watch``), and
sends them frames:

- right behind a baseline or resume, the members as of the last frame sent
  (``watch``: one encoding per transcript per interval, shared by every
  watcher that joins meanwhile);
- then the changes (joined, updated, left) at most once a
  ``presence_interval_s`` per transcript: the first change after a quiet
  interval goes out on the next loop turn, the ones that follow within the
  interval wait for its end and leave together, encoded once and pushed to
  every watcher's outbound queue (``OutboundQueue.push_shared``: never an
  await per watcher). A member that joins and leaves within one interval
  costs nothing;
- over ``presence_max_members`` members, counts only (viewers, writers,
  agents), so a crowd costs one small frame per interval; the whole list
  again when it thins out.

A member leaves when it says so, when its connection unsubscribes or
closes (``forget``), and, for other replicas' members, when their replica
stops renewing them (``expire_remote``, from the relay).

The port to other replicas is ``PresenceRelay``
(``server.replicas.presence_relay``, linked with ``attach``): the registry
hands it this replica's changes of each transcript once per interval
(``changed``), and takes theirs with ``apply_remote``. Standalone there is
none.

No I/O here but the loop's timers; the clock is ``loop.time()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from protocol import wire
from protocol.presence import changes, count
from protocol.wire import Member, PresenceCounts, PresenceFrame
from server.errors import Refused
from server.live.frames import SharedFrame
from server.live.outbound import OutboundQueue
from server.tuning import PRESENCE_MEMBER_COST

__all__ = ["PresenceRegistry", "PresenceRelay", "TranscriptPresence"]

log = logging.getLogger("tsync.presence")


class PresenceRelay(Protocol):
    """Where this replica's presence changes go (other replicas)."""

    def changed(self, transcript_id: str, members: dict[str, Member], gone: list[str]) -> None:
        """This replica's members of ``transcript_id`` that joined or changed
        (``members``) and left (``gone``) since the last call; returns at once."""
        ...

    def watching(self, transcript_id: str) -> None:
        """Someone here follows ``transcript_id``'s presence now, and nobody
        did: learn the other replicas' members of it; returns at once."""
        ...


class TranscriptPresence:
    """One transcript's presence: its members, what its watchers were last
    sent, and the changes since."""

    __slots__ = (
        "_snapshot",
        "costs",
        "crowd",
        "dirty",
        "last_flush",
        "local",
        "members",
        "owners",
        "published",
        "timer",
        "transcript_id",
        "watchers",
    )

    def __init__(self, transcript_id: str) -> None:
        self.transcript_id = transcript_id
        #: Every member now, by id (this replica's and others').
        self.members: dict[str, Member] = {}
        #: This replica's members: id -> the connection that stated it.
        self.local: dict[str, OutboundQueue] = {}
        #: What each of them counts against its connection's budget.
        self.costs: dict[str, int] = {}
        #: Other replicas' members: id -> the replica that holds it.
        self.owners: dict[str, str] = {}
        #: The members as the watchers know them (as of the last frame).
        self.published: dict[str, Member] = {}
        #: Whether the last frame was counts only.
        self.crowd = False
        #: Ids that changed since the last frame.
        self.dirty: set[str] = set()
        self.watchers: set[OutboundQueue] = set()
        self.last_flush = float("-inf")
        self.timer: asyncio.TimerHandle | None = None
        self._snapshot: SharedFrame | None = None

    @property
    def idle(self) -> bool:
        """Nothing to keep: no member, no watcher, nothing pending."""
        return not (self.members or self.watchers or self.dirty or self.published)

    def counts(self) -> PresenceCounts:
        return count(self.members.values())

    def snapshot(self) -> SharedFrame:
        """The frame a new watcher gets: the members as of the last frame
        (the changes since follow with everyone's next one), encoded once
        per interval."""
        frame = self._snapshot
        if frame is None:
            counts = count(self.published.values())
            members = None if self.crowd else sorted(self.published.values(), key=_order)
            frame = self._snapshot = SharedFrame(
                PresenceFrame(
                    seq=0, transcript_id=self.transcript_id, counts=counts, members=members
                )
            )
        return frame

    def take_changes(self, max_members: int) -> PresenceFrame | None:
        """The frame of the changes since the last one (``None``: nothing
        the watchers would see), and make it the last one."""
        dirty, self.dirty = self.dirty, set()
        current = self.members
        crowd = len(current) > max_members
        counts = count(current.values())
        frame: PresenceFrame | None
        if crowd:
            if self.crowd and counts == count(self.published.values()):
                frame = None
            else:
                frame = PresenceFrame(seq=0, transcript_id=self.transcript_id, counts=counts)
        elif self.crowd:
            members = sorted(current.values(), key=_order)
            frame = PresenceFrame(
                seq=0, transcript_id=self.transcript_id, counts=counts, members=members
            )
        else:
            joined, updated, left = changes(self.published, current, dirty)
            frame = (
                PresenceFrame(
                    seq=0,
                    transcript_id=self.transcript_id,
                    counts=counts,
                    joined=joined or None,
                    updated=updated or None,
                    left=left or None,
                )
                if joined or updated or left
                else None
            )
        if crowd or self.crowd:
            self.published = dict(current)
        else:
            for member_id in dirty:
                member = current.get(member_id)
                if member is None:
                    self.published.pop(member_id, None)
                else:
                    self.published[member_id] = member
        self.crowd = crowd
        if frame is not None:
            self._snapshot = None
        return frame


def member_cost(member: Member) -> int:
    """What ``member`` counts against ``max_connection_presence_bytes``."""
    return wire.presence_state_bytes(member.state) + PRESENCE_MEMBER_COST


def _order(member: Member) -> tuple[str, str]:
    return (member.who, member.id)


class PresenceRegistry:
    """Every transcript's presence on this replica (see the module)."""

    def __init__(
        self,
        *,
        interval_s: float,
        max_members: int,
        max_connection_bytes: int = 64 << 10,
        clock: Callable[[], float] | None = None,
        frames_made: Callable[[], None] | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.max_members = max_members
        #: ``max_connection_presence_bytes``.
        self.max_connection_bytes = max_connection_bytes
        #: Per connection, what its members hold (``member_cost``), and in all.
        self._held: dict[OutboundQueue, int] = {}
        self.held_bytes = 0
        #: The link to other replicas (``attach``), ``None`` standalone.
        self.relay: PresenceRelay | None = None
        self._clock = clock
        self.transcripts: dict[str, TranscriptPresence] = {}
        #: Per connection, the transcripts where it is a member or a watcher.
        self._by_queue: dict[OutboundQueue, set[str]] = {}
        #: This replica's changes not yet handed to the relay, per transcript.
        self._unrelayed: dict[str, set[str]] = {}
        #: Change frames made (one per transcript per flush), for tests.
        self.frames = 0
        self._frames_made = frames_made

    def attach(self, relay: PresenceRelay) -> Callable[[], None]:
        """Link the relay to other replicas (one at most); returns the call
        that detaches it."""
        if self.relay is not None:
            raise RuntimeError("the presence registry is linked to a relay already")
        self.relay = relay

        def detach() -> None:
            if self.relay is relay:
                self.relay = None

        return detach

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def _of(self, transcript_id: str) -> TranscriptPresence:
        presence = self.transcripts.get(transcript_id)
        if presence is None:
            presence = self.transcripts[transcript_id] = TranscriptPresence(transcript_id)
        return presence

    def _tie(self, queue: OutboundQueue, transcript_id: str) -> None:
        self._by_queue.setdefault(queue, set()).add(transcript_id)

    # --- members ---------------------------------------------------------------------

    def member(self, queue: OutboundQueue, transcript_id: str) -> Member | None:
        """The member ``queue`` is on ``transcript_id`` now, if any."""
        presence = self.transcripts.get(transcript_id)
        if presence is None or presence.local.get(queue.id) is not queue:
            return None
        return presence.members.get(queue.id)

    def state(self, queue: OutboundQueue, transcript_id: str, new: Member) -> Member:
        """Join, or change the member of ``queue`` on ``transcript_id``: it
        is now ``new`` (``protocol.presence.presence_change`` made it from
        the op, which checked that the connection subscribes to the
        transcript and the state's size). Raises ``Refused``
        (``too-large``) when the connection's members would hold more than
        ``max_connection_presence_bytes``."""
        presence = self._of(transcript_id)
        member_id = new.id
        old = presence.members.get(member_id) if member_id in presence.local else None
        if new != old:
            cost = member_cost(new)
            held = self._held.get(queue, 0) - presence.costs.get(member_id, 0) + cost
            if held > self.max_connection_bytes:
                self._drop_if_idle(presence)
                raise Refused(
                    wire.TOO_LARGE,
                    f"this connection's presence would hold {held} bytes, over "
                    f"max_connection_presence_bytes ({self.max_connection_bytes}); leave "
                    "the presence of a transcript or state less",
                )
            self._hold(queue, presence, member_id, cost)
            presence.members[member_id] = new
            presence.local[member_id] = queue
            presence.owners.pop(member_id, None)
            self._tie(queue, transcript_id)
            self._changed(presence, member_id, local=True)
        return new

    def _hold(
        self, queue: OutboundQueue, presence: TranscriptPresence, member_id: str, cost: int
    ) -> None:
        """Count ``cost`` (0: none) for ``queue``'s member of ``presence``."""
        delta = cost - presence.costs.pop(member_id, 0)
        if cost:
            presence.costs[member_id] = cost
        held = self._held.get(queue, 0) + delta
        if held:
            self._held[queue] = held
        else:
            self._held.pop(queue, None)
        self.held_bytes += delta

    def held(self, queue: OutboundQueue) -> int:
        """What the members of ``queue`` hold (``max_connection_presence_bytes``)."""
        return self._held.get(queue, 0)

    def leave(self, queue: OutboundQueue, transcript_id: str) -> bool:
        """The member of ``queue`` leaves ``transcript_id``; False if it was none."""
        presence = self.transcripts.get(transcript_id)
        if presence is None or presence.local.get(queue.id) is not queue:
            return False
        del presence.local[queue.id]
        del presence.members[queue.id]
        self._hold(queue, presence, queue.id, 0)
        self._changed(presence, queue.id, local=True)
        return True

    def forget(self, queue: OutboundQueue, transcript_id: str | None = None) -> None:
        """``queue`` unsubscribed from ``transcript_id`` (``None``: it closed,
        from every transcript): its member leaves and it watches no more."""
        ids = self._by_queue.get(queue)
        if not ids:
            return
        for tid in list(ids) if transcript_id is None else [transcript_id]:
            if tid not in ids:
                continue
            ids.discard(tid)
            self.leave(queue, tid)
            presence = self.transcripts.get(tid)
            if presence is not None:
                presence.watchers.discard(queue)
                self._drop_if_idle(presence)
        if not ids:
            del self._by_queue[queue]

    def member_count(self) -> int:
        """Members of every transcript (``tsync_presence_members``)."""
        return sum(len(presence.members) for presence in self.transcripts.values())

    def members(self, transcript_id: str) -> tuple[list[Member] | None, PresenceCounts]:
        """The members now (``None`` over ``presence_max_members``) and the counts."""
        presence = self.transcripts.get(transcript_id)
        if presence is None:
            return [], PresenceCounts()
        counts = presence.counts()
        if len(presence.members) > self.max_members:
            return None, counts
        return sorted(presence.members.values(), key=_order), counts

    # --- watchers ----------------------------------------------------------------------

    def watch(self, queue: OutboundQueue, transcript_id: str) -> None:
        """``queue`` follows the presence of ``transcript_id`` (it was just
        sent a baseline or resume of it): queue the members now, and the
        changes from the next frame on."""
        presence = self._of(transcript_id)
        if not presence.watchers and self.relay is not None:
            self.relay.watching(transcript_id)
        presence.watchers.add(queue)
        self._tie(queue, transcript_id)
        queue.push_shared(presence.snapshot())

    def unwatch(self, queue: OutboundQueue, transcript_id: str) -> None:
        """``queue`` subscribed again without presence: no more frames."""
        presence = self.transcripts.get(transcript_id)
        if presence is not None and queue in presence.watchers:
            presence.watchers.discard(queue)
            self._drop_if_idle(presence)

    # --- other replicas -----------------------------------------------------------------

    def apply_remote(
        self,
        transcript_id: str,
        replica: str,
        members: Iterable[Member],
        gone: Iterable[str] = (),
        *,
        whole: bool = False,
    ) -> None:
        """Another replica's members of ``transcript_id``: joined or changed
        (``members``), left (``gone``); ``whole``: ``members`` is all it
        has there (its others left)."""
        presence = self._of(transcript_id)
        given = {member.id: member for member in members}
        gone = set(gone)
        if whole:
            gone |= {mid for mid, owner in presence.owners.items() if owner == replica} - set(given)
        for member_id in gone:
            if presence.owners.get(member_id) == replica:
                del presence.owners[member_id]
                del presence.members[member_id]
                self._changed(presence, member_id, local=False)
        for member_id, member in given.items():
            if member_id in presence.local:
                continue  # ours (an id is a connection's: never both)
            if presence.members.get(member_id) != member:
                presence.members[member_id] = member
                presence.owners[member_id] = replica
                self._changed(presence, member_id, local=False)
        self._drop_if_idle(presence)

    def expire_remote(self, replica: str, transcript_id: str | None = None) -> None:
        """``replica`` stopped renewing its members (of ``transcript_id``, or
        of every transcript): they leave."""
        targets = (
            list(self.transcripts.values())
            if transcript_id is None
            else [p for p in (self.transcripts.get(transcript_id),) if p is not None]
        )
        for presence in targets:
            self.apply_remote(presence.transcript_id, replica, (), whole=True)

    def local_members(self, transcript_id: str) -> dict[str, Member]:
        """This replica's members of ``transcript_id`` (for the relay)."""
        presence = self.transcripts.get(transcript_id)
        if presence is None:
            return {}
        return {mid: presence.members[mid] for mid in presence.local}

    def local_transcripts(self) -> list[str]:
        """The transcripts where this replica has members."""
        return [tid for tid, presence in self.transcripts.items() if presence.local]

    def watched(self) -> list[str]:
        """The transcripts whose presence someone here follows or holds."""
        return list(self.transcripts)

    # --- frames ----------------------------------------------------------------------------

    def _changed(self, presence: TranscriptPresence, member_id: str, *, local: bool) -> None:
        presence.dirty.add(member_id)
        if local and self.relay is not None:
            self._unrelayed.setdefault(presence.transcript_id, set()).add(member_id)
        if presence.timer is None:
            delay = max(0.0, presence.last_flush + self.interval_s - self._now())
            presence.timer = asyncio.get_running_loop().call_later(
                delay, self._flush, presence.transcript_id
            )

    def _flush(self, transcript_id: str) -> None:
        presence = self.transcripts.get(transcript_id)
        if presence is None:
            return
        presence.timer = None
        presence.last_flush = self._now()
        unrelayed = self._unrelayed.pop(transcript_id, None)
        if unrelayed and self.relay is not None:
            given = {mid: presence.members[mid] for mid in unrelayed if mid in presence.local}
            try:
                self.relay.changed(transcript_id, given, sorted(unrelayed - set(given)))
            except Exception:  # a relay fault never stops the local frames
                log.exception("presence relay failed", extra={"transcript": transcript_id})
        frame = presence.take_changes(self.max_members)
        if frame is not None and presence.watchers:
            item = SharedFrame(frame)
            self.frames += 1
            if self._frames_made is not None:
                self._frames_made()
            for queue in presence.watchers:
                queue.push_shared(item)
        self._drop_if_idle(presence)

    def _drop_if_idle(self, presence: TranscriptPresence) -> None:
        if presence.timer is None and not presence.members and not presence.watchers:
            presence.dirty.clear()
            presence.published.clear()
            self.transcripts.pop(presence.transcript_id, None)

    def close(self) -> None:
        """Cancel the timers (the server stops)."""
        for presence in self.transcripts.values():
            if presence.timer is not None:
                presence.timer.cancel()
                presence.timer = None
