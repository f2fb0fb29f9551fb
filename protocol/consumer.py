"""The whole consumer of one connection, sans I/O: bytes in; updates and ops out.

Following websockets' split, everything a consumer of ``/v1/ws`` must get
right lives here once, with no socket, task or clock: splitting messages into
frames, validating each (``accept_transcript_update``), the connection's
``seq`` (``SeqTracker``), each transcript's continuity (``Continuity``), its
copy (``TranscriptState``: events applied with the very checks the server's
entity makes), resubscribing, and the barrier that tells when a resubscribe
was answered. The Python client, the load-test subscribers, the test
followers of the replica tests and the server's backplane are drivers: they
move bytes in and ops out and act on the updates. ``client_js/consumer.js``
is the same machine in JavaScript; the shared frame-sequence cases
(``tests/cases/consumer``) run against both.

A driver's loop::

    consumer = Consumer()
    consumer.subscribe("t1")
    # on every new connection:
    consumer.connection_made()
    send(consumer.ops_to_send())
    # on every message received:
    consumer.receive_data(message)
    send(consumer.ops_to_send())           # resubscribes and barrier pings
    for update in consumer.updates_received():
        ...                                 # Applied, Replaced, Stopped, Answered, ...
    # when the connection is gone:
    consumer.connection_lost()

Updates, in the order the frames caused them::

    ==========================  ==============================================================
    ``Applied``                 an event was applied to the transcript's copy
    ``Replaced``                a baseline replaced the copy (the first one too)
    ``Resubscribed``            a subscribe op was queued (a gap, lagged, a new epoch, a
                                copy an event did not fit, a new connection, ...); with
                                ``from_revision`` ``None`` the copy was dropped
    ``Stopped``                 the subscription is over (``not-found``, ...); it is removed
    ``Answered``                an ack, pong or error with a ``ref`` the driver chose
    ``ErrorReceived``           an error frame nothing here acts on (log it)
    ``InvalidFrameReceived``    a frame that does not validate (it was skipped)
    ``FramesLost``              ``seq`` skipped frames: every subscription resubscribed, and
                                answers to the driver's own ops may be lost too
    ``Synced``                  the server has handled every op sent before the latest barrier
    ``DraftUpdated``            a draft's text grew (``delta``) or was replaced (``text``);
                                the first one opens the draft (``protocol.drafts``)
    ``DraftClosed``             a draft ended: ``final`` right after the update that put its
                                message into the copy, ``cancelled``, ``expired``, ``gone``
    ``PresenceChanged``         a ``presence`` frame changed the subscription's
                                ``presence`` copy (``protocol.presence``)
    ==========================  ==============================================================

The barrier: after the subscribe ops that one input caused, the consumer
sends ``{"op": "ping", "ref": "sync:<n>"}``. The server handles ops in order
and queues a resubscribe's increments before that pong, so when it arrives
each transcript resubscribed before it is answered: a resume from the
current revision gets no frame at all, and from then on a revision gap is a
gap again (``Continuity.on_resubscribe_answered``). Refs starting with
``sync:`` are the consumer's; a driver uses any other refs for its own ops.

Why one module of over 600 lines: the consumer core is one sans-I/O state machine whose
invariants (``seq``, each subscription's continuity and copy, the barrier pings) hold
across all of its inputs; split by input, a reader would have to hold several files to
check one rule. The continuity machine and the copy live in ``protocol.continuity`` and
``protocol.state``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, TypeAlias

import msgspec

from protocol.continuity import (
    Apply,
    Continuity,
    Replace,
    Resubscribe,
    SeqTracker,
    SeqVerdict,
    Stop,
)
from protocol.drafts import GONE, ClosedAs, DraftClosed, DraftCopy, DraftUpdated
from protocol.errors import InvalidFrame
from protocol.presence import PresenceCopy
from protocol.state import DigestMismatch, InvalidChange, InvalidSnapshot, TranscriptState
from protocol.types import TranscriptEvent, TranscriptSnapshot
from protocol.views import Window
from protocol.wire import (
    LAGGED,
    Ack,
    Baseline,
    ClientOp,
    DraftFrame,
    ErrorFrame,
    Increment,
    Ping,
    Pong,
    Presence,
    PresenceFrame,
    ServerFrame,
    Subscribe,
    Unsubscribe,
    accept_transcript_update,
    split_frames,
)

__all__ = [
    "BARRIER_PREFIX",
    "Answered",
    "Applied",
    "Consumer",
    "DraftClosed",
    "DraftUpdated",
    "ErrorReceived",
    "FramesLost",
    "InvalidFrameReceived",
    "PresenceChanged",
    "Replaced",
    "Resubscribed",
    "Stopped",
    "Subscription",
    "Synced",
    "Update",
]

#: Refs of the consumer's barrier pings (``sync:1``, ``sync:2``, ...).
BARRIER_PREFIX: Final = "sync:"


# --- updates ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Applied:
    """``event`` was applied to the copy of ``transcript_id``."""

    kind: ClassVar[str] = "applied"
    transcript_id: str
    event: TranscriptEvent


@dataclass(frozen=True, slots=True)
class Replaced:
    """A baseline replaced the copy. ``previous_revision`` is the copy's
    revision before (``None``: there was none, or it had been dropped);
    ``epoch_changed``: the last copy held was of another epoch (the
    transcript was created again)."""

    kind: ClassVar[str] = "replaced"
    transcript_id: str
    snapshot: TranscriptSnapshot
    previous_revision: int | None
    epoch_changed: bool


@dataclass(frozen=True, slots=True)
class Resubscribed:
    """A subscribe op was queued for ``reason`` (``gap``, ``seq-gap``,
    ``lagged``, ``epoch``, ``foreign``, ``no-copy``, ``mismatch``,
    ``digest``, ``connection``). It resumes after ``from_revision`` in
    ``epoch``, or asks for a fresh baseline when ``from_revision`` is
    ``None``: then the copy was dropped (``mismatch``: an event the copy
    could not take; ``digest``: an event whose digest is not the one the
    copy computes, so the copy's history differs from the server's)."""

    kind: ClassVar[str] = "resubscribed"
    transcript_id: str
    reason: str
    from_revision: int | None
    epoch: str | None


@dataclass(frozen=True, slots=True)
class Stopped:
    """The subscription ended: the server said ``code``, one of
    ``protocol.continuity.STOP_CODES`` (``not-found``, ``forbidden``,
    ``unauthorized``, ``too-many-subscriptions``, ``invalid-view``)."""

    kind: ClassVar[str] = "stopped"
    transcript_id: str
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Answered:
    """The answer to one of the driver's ops, matched by its ``ref``."""

    kind: ClassVar[str] = "answered"
    frame: Ack | Pong | ErrorFrame


@dataclass(frozen=True, slots=True)
class ErrorReceived:
    """An error frame that nothing here acts on (no ref; a code that neither
    resubscribes nor stops, or about a transcript not followed)."""

    kind: ClassVar[str] = "error"
    frame: ErrorFrame


@dataclass(frozen=True, slots=True)
class InvalidFrameReceived:
    """A frame that ``accept_transcript_update`` refused; it was skipped."""

    kind: ClassVar[str] = "invalid"
    reason: str


@dataclass(frozen=True, slots=True)
class FramesLost:
    """``seq`` skipped ``missing`` frames on this connection."""

    kind: ClassVar[str] = "frames-lost"
    missing: int


@dataclass(frozen=True, slots=True)
class Synced:
    """The pong of the latest barrier ping arrived."""

    kind: ClassVar[str] = "synced"
    barrier: int


@dataclass(frozen=True, slots=True)
class PresenceChanged:
    """A ``presence`` frame was applied to ``presence`` (the subscription's
    copy: its ``members``, ``None`` when only counted, and ``counts``);
    ``frame`` says what changed."""

    kind: ClassVar[str] = "presence"
    transcript_id: str
    presence: PresenceCopy
    frame: PresenceFrame


Update: TypeAlias = (
    Applied
    | Replaced
    | Resubscribed
    | Stopped
    | Answered
    | ErrorReceived
    | InvalidFrameReceived
    | FramesLost
    | Synced
    | DraftUpdated
    | DraftClosed
    | PresenceChanged
)


# --- one transcript ------------------------------------------------------------------------


class Subscription:
    """One followed transcript: its ``Continuity`` and its ``copy``.

    ``copy`` is ``None`` before the first baseline and after the copy was
    dropped (a new epoch, an event it could not take); with
    ``keep_messages=False`` it holds no messages but checks every event all
    the same. ``window`` (``protocol.views.Window``) goes with every
    subscribe op: a baseline then holds only that part of the transcript,
    and a later baseline of the same epoch that begins inside the copy's
    messages keeps the older ones the copy had (messages never change, so
    what was loaded earlier stays valid). Each ``on_*`` method takes one
    input and returns the update it causes, or ``None``. ``Consumer`` drives
    these for a connection; a driver with events from elsewhere (the
    backplane reads a store) may drive one directly.

    ``drafts`` are the transcript's open drafts (``protocol.drafts``), by id:
    ``on_draft`` takes their frames; ``settle_drafts`` closes those whose
    commit the copy holds now (the driver calls it after ``Replaced``, and
    after ``Applied`` while ``finals`` is not 0).
    """

    __slots__ = (
        "_check",
        "_drafts_epoch",
        "_keep",
        "_last_epoch",
        "barrier",
        "continuity",
        "copy",
        "drafts",
        "finals",
        "presence",
        "stated",
        "transcript_id",
        "window",
    )

    def __init__(
        self,
        transcript_id: str,
        *,
        keep_messages: bool = True,
        window: Window | None = None,
        check_digests: bool = True,
    ) -> None:
        self.transcript_id = transcript_id
        self._check = check_digests
        self.continuity = Continuity(transcript_id)
        self.copy: TranscriptState | None = None
        self.window = window
        #: The barrier ping that follows this subscription's latest resubscribe (0: none).
        self.barrier = 0
        self._keep = keep_messages
        self._last_epoch: str | None = None
        #: The open drafts, by id, and how many of them wait for their commit.
        self.drafts: dict[str, DraftCopy] = {}
        self.finals = 0
        self._drafts_epoch: str | None = None
        #: The transcript's presence, when followed (``subscribe(presence=True)``).
        self.presence: PresenceCopy | None = None
        #: This consumer's own presence there (sent again on a new connection).
        self.stated: Presence | None = None

    @classmethod
    def following(cls, state: TranscriptState) -> Subscription:
        """A subscription whose copy is at ``state``'s point (keeping no
        messages): the events that continue ``state`` apply, others are
        judged as for any copy."""
        subscription = cls(state.transcript_id, keep_messages=False)
        subscription.copy = state.following()
        subscription.continuity.revision = state.revision
        subscription.continuity.epoch = subscription._last_epoch = state.epoch
        return subscription

    def __repr__(self) -> str:
        return f"<Subscription {self.transcript_id!r} copy={self.copy!r}>"

    @property
    def revision(self) -> int | None:
        """The copy's revision (``None``: no copy)."""
        return self.continuity.revision

    def request(self) -> Subscribe:
        """The subscribe op for the copy held (a resume, or fresh without one)."""
        op = self.continuity.resubscribe_request()
        if self.window is None and self.presence is None:
            return op
        return msgspec.structs.replace(op, window=self.window, presence=self.presence is not None)

    # --- inputs ------------------------------------------------------------------------

    def on_baseline(self, snapshot: TranscriptSnapshot) -> Replaced | Resubscribed | None:
        previous = self.continuity.revision
        decision = self.continuity.on_baseline(snapshot)
        if isinstance(decision, Resubscribe):
            return self._resubscribed(decision)
        if not isinstance(decision, Replace):
            return None  # a stale baseline
        try:
            copy = TranscriptState.from_snapshot(
                snapshot, keep_messages=self._keep, check_digests=self._check
            )
        except InvalidSnapshot:
            # accept_transcript_update checks the same invariants: only a
            # snapshot built in Python without them gets here.
            return self._drop("mismatch")
        old = self.copy
        if (
            old is not None
            and old.messages is not None
            and copy.messages is not None
            and old.epoch == copy.epoch
            and old.start < copy.start <= old.length
        ):
            # A window of the same history that begins inside what the copy
            # held (a resume answered with a baseline): keep the older messages.
            copy.prepend(old.start, old.messages[: copy.start - old.start])
        self.copy = copy
        changed = self._last_epoch is not None and self._last_epoch != snapshot.epoch
        self._last_epoch = snapshot.epoch
        return Replaced(self.transcript_id, snapshot, previous, changed)

    def on_event(self, event: TranscriptEvent) -> Applied | Resubscribed | None:
        decision = self.continuity.on_event(event)
        if type(decision) is not Apply:
            if isinstance(decision, Resubscribe):
                return self._resubscribed(decision)
            return None  # a repeat, or a gap already being repaired
        copy = self.copy
        try:
            if copy is None:
                raise InvalidChange("no copy to apply the event to")
            copy.apply(event)
        except DigestMismatch:
            # The copy is broken: its history is not the server's.
            return self._drop("digest")
        except InvalidChange:
            # Its revision continued the copy, its change did not: one side
            # broke the model. Trust neither; start over from a baseline.
            return self._drop("mismatch")
        return Applied(self.transcript_id, event)

    def on_error(self, frame: ErrorFrame) -> Resubscribed | Stopped | ErrorReceived:
        decision = self.continuity.on_error(frame)
        if isinstance(decision, Resubscribe):
            return self._resubscribed(decision)
        if isinstance(decision, Stop):
            return Stopped(self.transcript_id, decision.code, decision.reason)
        return ErrorReceived(frame)

    def on_draft(self, frame: DraftFrame) -> DraftUpdated | DraftClosed | None:
        """Take a draft frame (see ``protocol.drafts`` for the rules)."""
        draft = self.drafts.get(frame.draft_id)
        state = frame.state
        if state == "open":
            if draft is None:
                if frame.text is None and frame.n != 1:
                    return None  # its start was missed: wait for a text
                if not self.drafts and self.copy is not None:
                    self._drafts_epoch = self.copy.epoch
                draft = self.drafts[frame.draft_id] = DraftCopy(frame.draft_id, frame.role)
            if draft.final_revision is not None or not draft.take(frame):
                return None
            return DraftUpdated(
                self.transcript_id, draft.draft_id, draft.role, frame.n, frame.delta, frame.text
            )
        if draft is None:
            return None
        if state != "final":
            return self._close(draft, state, None)
        revision = frame.revision
        assert revision is not None  # accept_transcript_update checked the shape
        copy = self.copy
        if copy is not None and copy.revision >= revision:
            return self._close(draft, "final", revision)
        # Its message is not in the copy yet: close it when it is.
        if draft.final_revision is None:
            self.finals += 1
        draft.final_revision = revision
        return None

    def settle_drafts(self) -> list[DraftClosed]:
        """Close the drafts the copy holds the commit of now, and every draft
        when the copy is of another epoch than they were opened in."""
        copy = self.copy
        if copy is None or not self.drafts:
            return []
        if self._drafts_epoch is not None and copy.epoch != self._drafts_epoch:
            return [self._close(draft, GONE, None) for draft in list(self.drafts.values())]
        if not self.finals:
            return []
        revision = copy.revision
        return [
            self._close(draft, "final", draft.final_revision)
            for draft in list(self.drafts.values())
            if draft.final_revision is not None and draft.final_revision <= revision
        ]

    def _close(self, draft: DraftCopy, state: ClosedAs, revision: int | None) -> DraftClosed:
        del self.drafts[draft.draft_id]
        if draft.final_revision is not None:
            self.finals -= 1
        return DraftClosed(
            self.transcript_id, draft.draft_id, draft.role, state, revision, draft.text
        )

    def on_seq_gap(self) -> Resubscribed:
        return self._resubscribed(self.continuity.on_seq_gap())

    def on_new_connection(self) -> Resubscribed:
        return self._resubscribed(self.continuity.on_new_connection())

    def on_connection_lost(self) -> None:
        self.continuity.on_connection_lost()
        self.barrier = 0

    def on_resubscribe_answered(self) -> list[DraftClosed]:
        """The resubscribe was answered; the drafts no ``text`` refreshed
        since are no longer open on the server: they close as ``gone``
        (those waiting for their commit go on waiting)."""
        self.barrier = 0
        self.continuity.on_resubscribe_answered()
        if not self.drafts:
            return []
        return [
            self._close(draft, GONE, None)
            for draft in list(self.drafts.values())
            if draft.stale and draft.final_revision is None
        ]

    # --- internals ---------------------------------------------------------------------

    def _resubscribed(self, decision: Resubscribe) -> Resubscribed:
        for draft in self.drafts.values():
            draft.stale = True  # until the answer's text says the server still has it
        if decision.from_revision is None:
            self.copy = None
        return Resubscribed(
            self.transcript_id, decision.reason, decision.from_revision, decision.epoch
        )

    def _drop(self, reason: str) -> Resubscribed:
        return self._resubscribed(self.continuity.drop(reason))


# --- one connection --------------------------------------------------------------------------


class Consumer:
    """Everything one connection's consumer decides (see the module docstring).

    ``keep_messages=False`` makes copies that hold no messages (a load-test
    subscriber that only checks). ``subscriptions`` maps transcript ids to
    their ``Subscription``; ``seq`` is the connection's ``SeqTracker``;
    ``frames`` counts the frames taken, ``invalid_frames`` those that did not
    validate, ``repeated_frames`` those ignored as ``seq`` repeats.
    """

    def __init__(self, *, keep_messages: bool = True, check_digests: bool = True) -> None:
        self.keep_messages = keep_messages
        #: Whether copies compute every event's digest and check it (the
        #: default; see ``TranscriptState``), or take it as it comes.
        self.check_digests = check_digests
        self.subscriptions: dict[str, Subscription] = {}
        self.seq = SeqTracker()
        self.connected = False
        #: Frames taken (valid or not), frames refused, frames ignored as seq repeats.
        self.frames = 0
        self.invalid_frames = 0
        self.repeated_frames = 0
        self._ops: list[ClientOp] = []
        self._updates: list[Update] = []
        self._barrier = 0
        # Resubscribed since the last barrier ping (a dict: ordered, O(1) membership).
        self._unmarked: dict[Subscription, None] = {}
        self._barrier_due = False

    def __repr__(self) -> str:
        return (
            f"<Consumer connected={self.connected} subscriptions={len(self.subscriptions)} "
            f"seq={self.seq.last}>"
        )

    # --- what the application asks ---------------------------------------------------

    def subscribe(
        self, transcript_id: str, *, window: Window | None = None, presence: bool = False
    ) -> Subscription:
        """Follow a transcript, or only a window of it (``protocol.views.Window``:
        its baselines hold only that part), and with ``presence`` who is on it
        (``Subscription.presence``). The same subscription, with the window
        it was made with, if the transcript is followed already."""
        subscription = self.subscriptions.get(transcript_id)
        if subscription is not None:
            return subscription
        subscription = Subscription(
            transcript_id,
            keep_messages=self.keep_messages,
            window=window,
            check_digests=self.check_digests,
        )
        if presence:
            subscription.presence = PresenceCopy()
        self.subscriptions[transcript_id] = subscription
        # The answer (a baseline) is on its way: an event before it is not a
        # reason to ask again.
        subscription.continuity.resyncing = True
        if self.connected:
            self._queue_subscribe(subscription, subscription.request())
            self._flush_barrier()
        return subscription

    def unsubscribe(self, transcript_id: str) -> bool:
        """Stop following a transcript; False if it was not followed."""
        subscription = self.subscriptions.pop(transcript_id, None)
        if subscription is None:
            return False
        self._unmarked.pop(subscription, None)
        if self.connected:
            self._ops.append(Unsubscribe(transcript_id=transcript_id))
        return True

    def state_presence(self, op: Presence) -> None:
        """State (or with ``leave`` end) this consumer's presence on a
        followed transcript; it is stated again on every new connection
        (what ``op`` leaves out keeps what earlier ones said)."""
        subscription = self.subscriptions.get(op.transcript_id)
        if subscription is None:
            raise ValueError(f"presence on {op.transcript_id!r}, which is not followed")
        old = subscription.stated
        if op.leave:
            subscription.stated = None
        elif old is None:
            subscription.stated = msgspec.structs.replace(op, ref=None)
        else:
            subscription.stated = msgspec.structs.replace(
                old,
                kind=op.kind if op.kind is not None else old.kind,
                state=op.state if op.state is not msgspec.UNSET else old.state,
                name=op.name if op.name is not None else old.name,
            )
        if self.connected:
            self._ops.append(op)

    # --- the transport ---------------------------------------------------------------

    def connection_made(self) -> None:
        """A new connection is up: ``seq`` starts over and every subscription
        resubscribes (resuming from its copy's revision); then a barrier."""
        self.connected = True
        self.seq.reset()
        self._ops.clear()
        self._unmarked.clear()
        for subscription in list(self.subscriptions.values()):
            self._resubscribe(subscription, subscription.on_new_connection())
        for subscription in self.subscriptions.values():
            if subscription.stated is not None:
                self._ops.append(subscription.stated)
        self._barrier_due = True
        self._flush_barrier()

    def connection_lost(self) -> None:
        """The connection is gone; ops not yet taken are dropped (the next
        ``connection_made`` sends what is still needed)."""
        self.connected = False
        self._ops.clear()
        self._unmarked.clear()
        for subscription in self.subscriptions.values():
            subscription.on_connection_lost()

    def receive_data(self, data: bytes | str) -> None:
        """Take one WebSocket message: every frame in it, in order."""
        for raw in split_frames(data):
            self.frames += 1
            try:
                frame = accept_transcript_update(raw)
            except InvalidFrame as exc:
                self.invalid_frames += 1
                self._updates.append(InvalidFrameReceived(str(exc)))
                continue
            self._receive(frame)
        self._flush_barrier()

    def receive_frame(self, frame: ServerFrame) -> None:
        """Take one frame that was decoded and validated already."""
        self.frames += 1
        self._receive(frame)
        self._flush_barrier()

    # --- outputs -----------------------------------------------------------------------

    def ops_to_send(self) -> list[ClientOp]:
        """The ops to send now, in order (the list is then empty)."""
        ops, self._ops = self._ops, []
        return ops

    def updates_received(self) -> list[Update]:
        """The updates since the last call, in order (the list is then empty)."""
        updates, self._updates = self._updates, []
        return updates

    # --- internals ---------------------------------------------------------------------

    def _receive(self, frame: ServerFrame) -> None:
        seq = self.seq
        last = seq.last
        verdict = seq.observe(frame.seq)
        if verdict is not SeqVerdict.OK:
            if verdict is SeqVerdict.REPEAT:
                self.repeated_frames += 1
                return
            # Frames were lost: any subscription may have missed events.
            self._updates.append(FramesLost(frame.seq - last - 1))
            for each in list(self.subscriptions.values()):
                self._resubscribe(each, each.on_seq_gap())
        subscriptions = self.subscriptions
        subscription: Subscription | None
        if isinstance(frame, Increment):
            subscription = subscriptions.get(frame.event.transcript_id)
            if subscription is not None:  # else: a late frame of an unsubscribed one
                update = subscription.on_event(frame.event)
                if type(update) is Applied:  # the hot path
                    self._updates.append(update)
                    if subscription.finals:
                        # A committed draft closes right behind its message.
                        self._updates.extend(subscription.settle_drafts())
                else:
                    self._take(subscription, update)
        elif isinstance(frame, DraftFrame):
            subscription = subscriptions.get(frame.transcript_id)
            if subscription is not None:
                draft_update = subscription.on_draft(frame)
                if draft_update is not None:
                    self._updates.append(draft_update)
        elif isinstance(frame, PresenceFrame):
            subscription = subscriptions.get(frame.transcript_id)
            if subscription is not None and subscription.presence is not None:
                subscription.presence.take(frame)
                self._updates.append(
                    PresenceChanged(frame.transcript_id, subscription.presence, frame)
                )
        elif isinstance(frame, Baseline):
            subscription = subscriptions.get(frame.snapshot.transcript_id)
            if subscription is not None:
                answer = subscription.on_baseline(frame.snapshot)
                self._take(subscription, answer)
                if isinstance(answer, Replaced):
                    self._updates.extend(subscription.settle_drafts())
        elif isinstance(frame, Pong):
            ref = frame.ref
            number = _barrier_number(ref)
            if number is None:
                self._updates.append(Answered(frame))
            else:
                self._on_barrier(number)
        elif isinstance(frame, Ack):
            self._updates.append(Answered(frame))
        else:
            self._on_error(frame)

    def _on_error(self, frame: ErrorFrame) -> None:
        ref = frame.ref
        if ref is not None and _barrier_number(ref) is None:
            self._updates.append(Answered(frame))
            return
        about = frame.transcript_id
        subscription: Subscription | None
        if about is None:
            if frame.code == LAGGED:
                # Lagged without a transcript: every subscription may be behind.
                for each in list(self.subscriptions.values()):
                    self._take(each, each.on_error(frame))
                return
            self._updates.append(ErrorReceived(frame))
            return
        subscription = self.subscriptions.get(about)
        if subscription is None:
            self._updates.append(ErrorReceived(frame))
        else:
            self._take(subscription, subscription.on_error(frame))

    def _take(self, subscription: Subscription, update: Update | None) -> None:
        if update is None:
            return
        if isinstance(update, Resubscribed):
            self._resubscribe(subscription, update)
            return
        if isinstance(update, Stopped):
            if self.subscriptions.get(subscription.transcript_id) is subscription:
                del self.subscriptions[subscription.transcript_id]
            self._unmarked.pop(subscription, None)
        self._updates.append(update)

    def _resubscribe(self, subscription: Subscription, update: Resubscribed) -> None:
        self._updates.append(update)
        if self.connected:
            self._queue_subscribe(
                subscription,
                Subscribe(
                    transcript_id=update.transcript_id,
                    from_revision=update.from_revision,
                    epoch=update.epoch,
                    window=subscription.window,
                    presence=subscription.presence is not None,
                ),
            )

    def _queue_subscribe(self, subscription: Subscription, op: Subscribe) -> None:
        self._ops.append(op)
        # An earlier barrier's pong does not answer this subscribe: the next one does.
        subscription.barrier = 0
        self._unmarked[subscription] = None

    def _flush_barrier(self) -> None:
        if not self.connected or not (self._unmarked or self._barrier_due):
            return
        self._barrier += 1
        self._barrier_due = False
        self._ops.append(Ping(ref=f"{BARRIER_PREFIX}{self._barrier}"))
        for subscription in self._unmarked:
            subscription.barrier = self._barrier
        self._unmarked.clear()

    def _on_barrier(self, number: int) -> None:
        for subscription in self.subscriptions.values():
            if 0 < subscription.barrier <= number:
                self._updates.extend(subscription.on_resubscribe_answered())
        if number == self._barrier:
            self._updates.append(Synced(number))


def _barrier_number(ref: object) -> int | None:
    """The number of a barrier ping's ref (``sync:<n>``), else ``None``."""
    if isinstance(ref, str) and ref.startswith(BARRIER_PREFIX):
        digits = ref[len(BARRIER_PREFIX) :]
        if digits.isascii() and digits.isdigit():
            return int(digits)
    return None
