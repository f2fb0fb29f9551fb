"""The consumer's continuity check (docs/protocol.md, "Guarantees a consumer can check").

Frames in, decisions out. Nothing here touches a socket, a clock or a task:
the Python client, the server's replica mirroring, the browser client's tests
and the load-test harness all feed the frames they receive and act on the
decision they get back.

Two machines:

``SeqTracker``
    one per connection. ``seq`` runs 1, 2, 3, ... over every frame the server
    sends on a connection. ``observe(seq)`` says ``ok``, ``gap`` (frames were
    lost: every subscription of the connection must resubscribe, see
    ``Continuity.on_seq_gap``) or ``repeat`` (ignore the frame).

``Continuity``
    one per subscribed transcript. It holds the ``revision`` and ``epoch`` of
    the consumer's copy (``None`` before the first baseline) and whether a
    resubscribe is outstanding (``resyncing``). Each ``on_*`` method returns one
    ``Decision``:

    ==============  ================================================================
    ``Apply``       apply this event to the copy (it is revision + 1, same epoch)
    ``Replace``     replace the copy with this snapshot
    ``Ignore``      do nothing (a repeat, a gap already being repaired, a stale baseline)
    ``Resubscribe`` send ``decision.op()`` (a ``Subscribe``): from the copy's
                    revision and epoch, or fresh when ``from_revision`` is ``None``
    ``Reject``      the frame is not about this transcript; the copy is unchanged
    ``Stop``        the subscription is over (``not-found``, ``forbidden``, ...)
    ==============  ================================================================

The rules, in the contract's words: after a baseline at revision R the
increments are R+1, R+2, ...; a repeat (revision <= own) is ignored; a gap, a
foreign ``transcriptId``, a ``lagged`` error or a new connection makes the
consumer resubscribe with ``fromRevision`` = its revision; a different epoch
makes it drop its copy and take a new baseline.

While a resubscribe is outstanding (``resyncing``) further gaps are not asked
about again (the answer is on its way), but an event that continues the copy
still applies and ends the resync. Lost connections, ``lagged`` errors and
``seq`` gaps always ask again: they may have swallowed the answer.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import ClassVar, Final, TypeAlias

from protocol.types import TranscriptEvent, TranscriptSnapshot
from protocol.wire import (
    FORBIDDEN,
    INVALID_VIEW,
    LAGGED,
    NOT_FOUND,
    TOO_MANY_SUBSCRIPTIONS,
    UNAUTHORIZED,
    Baseline,
    ErrorFrame,
    Increment,
    Ref,
    Subscribe,
)

__all__ = [
    "STOP_CODES",
    "Apply",
    "Continuity",
    "Counters",
    "Decision",
    "Ignore",
    "Reject",
    "Replace",
    "Resubscribe",
    "SeqCounters",
    "SeqTracker",
    "SeqVerdict",
    "Stop",
]

#: Error codes after which a subscription cannot go on by resubscribing
#: (``too-many-subscriptions`` only ever refuses a new subscription;
#: ``invalid-view``: its window names a View the transcript does not have).
STOP_CODES: Final = frozenset(
    {NOT_FOUND, FORBIDDEN, UNAUTHORIZED, TOO_MANY_SUBSCRIPTIONS, INVALID_VIEW}
)


# --- the connection's seq ----------------------------------------------------------


class SeqVerdict(enum.StrEnum):
    """What one frame's ``seq`` says about the connection."""

    OK = "ok"  #: the next one
    GAP = "gap"  #: frames were lost: every subscription must resubscribe
    REPEAT = "repeat"  #: seen before (or older): ignore the frame


@dataclass(frozen=True, slots=True)
class SeqCounters:
    """How many frames a ``SeqTracker`` judged, by verdict."""

    ok: int = 0
    gaps: int = 0
    repeats: int = 0
    missing: int = 0  #: frames skipped over by gaps, in total

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class SeqTracker:
    """Checks that a connection's ``seq`` runs 1, 2, 3, ... with no gap.

    After a gap the tracker follows the new seq (the frames in between are
    lost for good; resubscribing repairs the transcripts, not the seq), so a
    single loss is reported once.
    """

    def __init__(self) -> None:
        self.last = 0
        self._ok = 0
        self._gaps = 0
        self._repeats = 0
        self._missing = 0

    def observe(self, seq: int) -> SeqVerdict:
        """Judge the ``seq`` of one received frame (the first expected is 1)."""
        if seq <= self.last:
            self._repeats += 1
            return SeqVerdict.REPEAT
        if seq == self.last + 1:
            self.last = seq
            self._ok += 1
            return SeqVerdict.OK
        self._gaps += 1
        self._missing += seq - self.last - 1
        self.last = seq
        return SeqVerdict.GAP

    def reset(self) -> None:
        """Start over for a new connection (seq starts again at 1); counters stay."""
        self.last = 0

    @property
    def counters(self) -> SeqCounters:
        return SeqCounters(self._ok, self._gaps, self._repeats, self._missing)


# --- decisions ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Apply:
    """Apply ``event`` to the copy: it is the copy's revision + 1 in the same epoch."""

    kind: ClassVar[str] = "apply"
    event: TranscriptEvent


@dataclass(frozen=True, slots=True)
class Replace:
    """Replace the copy with ``snapshot`` (a first baseline or a new one)."""

    kind: ClassVar[str] = "replace"
    snapshot: TranscriptSnapshot


@dataclass(frozen=True, slots=True)
class Ignore:
    """Do nothing with the frame; ``reason`` says why (``"repeat"``, ``"resyncing"``, ...)."""

    kind: ClassVar[str] = "ignore"
    reason: str


@dataclass(frozen=True, slots=True)
class Resubscribe:
    """Send ``op()``: resume after ``from_revision`` in ``epoch``, or fresh when ``None``.

    ``reason`` is one of ``gap``, ``seq-gap``, ``foreign``, ``lagged``,
    ``epoch``, ``connection``, ``no-copy``, ``mismatch`` (for logs and metrics).
    """

    kind: ClassVar[str] = "resubscribe"
    transcript_id: str
    from_revision: int | None
    epoch: str | None
    reason: str = ""

    def op(self, ref: Ref = None) -> Subscribe:
        """The ``subscribe`` op that carries out this decision."""
        return Subscribe(
            transcript_id=self.transcript_id,
            from_revision=self.from_revision,
            epoch=self.epoch,
            ref=ref,
        )


@dataclass(frozen=True, slots=True)
class Reject:
    """The frame is not about this transcript; nothing changes."""

    kind: ClassVar[str] = "reject"
    reason: str


@dataclass(frozen=True, slots=True)
class Stop:
    """The subscription is over: the server said ``code`` (``not-found``, ...)."""

    kind: ClassVar[str] = "stop"
    code: str
    reason: str


Decision: TypeAlias = Apply | Replace | Ignore | Resubscribe | Reject | Stop


@dataclass(frozen=True, slots=True)
class Counters:
    """What one ``Continuity`` has seen and done, as plain numbers.

    - ``applied``: events applied; ``repeats_ignored``: events at or below the
      copy's revision; ``gaps``: gaps detected that made it resubscribe
      (revision gaps, and ``seq`` gaps reported with ``on_seq_gap``);
      ``skipped``: events ignored while a resubscribe was outstanding.
    - ``resumes``: resubscribes from a revision after a lost or new connection.
    - ``baselines``: baselines taken; ``rebaselines``: those after the first;
      ``stale_baselines``: baselines ignored as older than the copy;
      ``dropped``: copies dropped because an event judged next (and counted
      in ``applied``) did not fit them.
    - ``epoch_changes``: copies dropped or replaced because the epoch differed.
    - ``foreign``: frames about another transcript; ``lagged``: ``lagged`` errors.
    - ``resubscribes``: ``Resubscribe`` decisions of any reason.
    """

    applied: int = 0
    repeats_ignored: int = 0
    gaps: int = 0
    skipped: int = 0
    resumes: int = 0
    baselines: int = 0
    rebaselines: int = 0
    stale_baselines: int = 0
    dropped: int = 0
    epoch_changes: int = 0
    foreign: int = 0
    lagged: int = 0
    resubscribes: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class _Tally:
    # The mutable twin of ``Counters``; ``Continuity.counters`` freezes it.
    applied: int = 0
    repeats_ignored: int = 0
    gaps: int = 0
    skipped: int = 0
    resumes: int = 0
    baselines: int = 0
    rebaselines: int = 0
    stale_baselines: int = 0
    dropped: int = 0
    epoch_changes: int = 0
    foreign: int = 0
    lagged: int = 0
    resubscribes: int = 0


# --- one subscribed transcript --------------------------------------------------------


class Continuity:
    """The continuity state of one subscribed transcript (see the module docstring).

    ``revision`` and ``epoch`` are those of the consumer's copy, ``None``
    before any baseline or after the copy was dropped for a new epoch.
    ``resyncing`` is true while a resubscribe is outstanding. Create one when
    subscribing and send ``resubscribe_request()``.
    """

    __slots__ = ("_resume_counted", "_tally", "epoch", "resyncing", "revision", "transcript_id")

    def __init__(self, transcript_id: str) -> None:
        self.transcript_id = transcript_id
        self.revision: int | None = None
        self.epoch: str | None = None
        self.resyncing = False
        self._tally = _Tally()
        self._resume_counted = False

    def __repr__(self) -> str:
        return (
            f"Continuity({self.transcript_id!r}, revision={self.revision!r}, "
            f"epoch={self.epoch!r}, resyncing={self.resyncing!r})"
        )

    # -- frames ------------------------------------------------------------------

    def on_frame(self, frame: Baseline | Increment | ErrorFrame) -> Decision:
        """Dispatch a transcript update (what ``accept_transcript_update`` returned)."""
        if isinstance(frame, Baseline):
            return self.on_baseline(frame.snapshot)
        if isinstance(frame, Increment):
            return self.on_event(frame.event)
        return self.on_error(frame)

    def on_baseline(self, snapshot: TranscriptSnapshot) -> Replace | Resubscribe | Ignore:
        """A baseline replaces the copy, unless it is older than the copy in
        the same epoch (a stale one, queued before a newer answer): that is
        ignored, or the copy would go back in time. A foreign one resubscribes."""
        if snapshot.transcript_id != self.transcript_id:
            self._tally.foreign += 1
            return self._resubscribe("foreign", fresh=False)
        tally = self._tally
        if (
            self.revision is not None
            and snapshot.epoch == self.epoch
            and snapshot.revision < self.revision
        ):
            tally.stale_baselines += 1
            return Ignore("stale baseline")
        if tally.baselines:
            tally.rebaselines += 1
        tally.baselines += 1
        if self.epoch is not None and snapshot.epoch != self.epoch:
            tally.epoch_changes += 1
        self.revision = snapshot.revision
        self.epoch = snapshot.epoch
        self.resyncing = False
        return Replace(snapshot)

    def on_event(self, event: TranscriptEvent) -> Decision:
        """Apply the next event; ignore repeats; resubscribe on a gap or a new epoch."""
        tally = self._tally
        if event.transcript_id != self.transcript_id:
            tally.foreign += 1
            return self._resubscribe("foreign", fresh=False)
        if self.revision is None:
            # No copy to apply it to: ask for a baseline once, then wait for it.
            if self.resyncing:
                tally.skipped += 1
                return Ignore("no copy yet")
            return self._resubscribe("no-copy", fresh=True)
        if event.epoch != self.epoch:
            tally.epoch_changes += 1
            self.revision = None
            self.epoch = None
            return self._resubscribe("epoch", fresh=True)
        if event.revision <= self.revision:
            tally.repeats_ignored += 1
            return Ignore("repeat")
        if event.revision == self.revision + 1:
            tally.applied += 1
            self.revision = event.revision
            self.resyncing = False
            return Apply(event)
        if self.resyncing:
            tally.skipped += 1
            return Ignore("resyncing")
        tally.gaps += 1
        return self._resubscribe("gap", fresh=False)

    def on_error(self, frame: ErrorFrame) -> Decision:
        """``lagged`` resubscribes; the ``STOP_CODES`` (``not-found``,
        ``forbidden``, ``unauthorized``, ``too-many-subscriptions``,
        ``invalid-view``) stop."""
        if frame.transcript_id is not None and frame.transcript_id != self.transcript_id:
            return Reject(f"error about transcript {frame.transcript_id!r}")
        if frame.code == LAGGED:
            self._tally.lagged += 1
            return self._resubscribe("lagged", fresh=False)
        if frame.code in STOP_CODES:
            self.resyncing = False
            return Stop(frame.code, frame.message)
        return Ignore(f"error {frame.code}")

    # -- the connection ---------------------------------------------------------------

    def drop(self, reason: str) -> Resubscribe:
        """The copy is gone (an applied event did not fit it: one side broke
        the model): forget revision and epoch and ask for a fresh baseline."""
        self._tally.dropped += 1
        self.revision = None
        self.epoch = None
        return self._resubscribe(reason, fresh=True)

    def on_seq_gap(self) -> Resubscribe:
        """The connection lost frames (``SeqTracker`` said ``gap``): resubscribe."""
        self._tally.gaps += 1
        return self._resubscribe("seq-gap", fresh=False)

    def on_connection_lost(self) -> Resubscribe:
        """The connection is gone: the returned decision is what to send on the next one."""
        decision = self._resubscribe("connection", fresh=False)
        if self.revision is not None:
            self._tally.resumes += 1
            self._resume_counted = True
        return decision

    def on_new_connection(self) -> Resubscribe:
        """A new connection is up: resubscribe (a resume is counted once per reconnect)."""
        decision = self._resubscribe("connection", fresh=False)
        if self.revision is not None and not self._resume_counted:
            self._tally.resumes += 1
        self._resume_counted = False
        return decision

    def on_resubscribe_answered(self) -> None:
        """The server has handled the last resubscribe: call it when the pong of
        a ``ping`` sent right after the ``subscribe`` op arrives. The server
        handles ops in order and queues the resumed increments before that
        pong, so from here on a revision gap is a real gap again (a resume
        from the current revision is otherwise never answered, and
        ``resyncing`` would stay true until the next event)."""
        if self.revision is not None:
            self.resyncing = False

    def resubscribe_request(self, ref: Ref = None) -> Subscribe:
        """The ``subscribe`` op for the current state (resume if there is a copy)."""
        if self.revision is None:
            return Subscribe(transcript_id=self.transcript_id, ref=ref)
        return Subscribe(
            transcript_id=self.transcript_id,
            from_revision=self.revision,
            epoch=self.epoch,
            ref=ref,
        )

    @property
    def counters(self) -> Counters:
        """A frozen snapshot of the counters."""
        return Counters(**dataclasses.asdict(self._tally))

    # -- internals ----------------------------------------------------------------------

    def _resubscribe(self, reason: str, *, fresh: bool) -> Resubscribe:
        self._tally.resubscribes += 1
        self.resyncing = True
        if fresh or self.revision is None:
            return Resubscribe(self.transcript_id, None, None, reason)
        return Resubscribe(self.transcript_id, self.revision, self.epoch, reason)
