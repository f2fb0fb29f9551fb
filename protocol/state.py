"""One transcript's state, and the one way an event changes it.

``TranscriptState`` is what the server's ``Transcript`` entity holds and what
every consumer's copy holds (``protocol.consumer``): id, epoch, revision, the
segments, the Views, the length, and the messages ``[start, length)``. An
entity made from its whole history keeps them all (``start == 0``); a live
transcript on a server keeps its newest messages (``trim``); a copy made from
a partial baseline keeps a window and may widen it backwards (``prepend``);
a copy made with ``keep_messages=False`` keeps none and still checks every
event exactly as the entity does. There is one implementation of "apply an
event" (``check_next`` + ``advance``) and one set of snapshot invariants
(``check_snapshot``), used by ``accept_transcript_update``,
``Transcript.restore`` and every copy alike.

The state also keeps the rolling digest at its revision (``digest``,
``protocol.digest``): a new state starts from the transcript id's, a state
made from a snapshot from the snapshot's, and ``apply`` computes the next one
from the change and checks it against the one the event carries.

Errors (all are ``ProtocolError``, hence ``ValueError``)::

    InvalidSnapshot   a snapshot no sequence of changes could have produced
    InvalidChange     an event that is not the state's next change
    └── DigestMismatch  it is, but its digest is not the one this state computes:
                        one of the two histories differs (a broken copy)
"""

from __future__ import annotations

import itertools
import operator

from protocol.digest import genesis_digest, next_digest
from protocol.errors import ProtocolError
from protocol.types import (
    Message,
    MessagesAppended,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
    View,
    ViewChanged,
    ViewLeft,
)

__all__ = [
    "DigestMismatch",
    "InvalidChange",
    "InvalidSnapshot",
    "TranscriptState",
    "check_baseline",
    "check_event",
    "check_snapshot",
]


class InvalidSnapshot(ProtocolError):
    """A snapshot breaks the model's invariants (see ``check_snapshot``)."""


class InvalidChange(ProtocolError):
    """An event that cannot be applied: malformed, or not the next change."""


class DigestMismatch(InvalidChange):
    """An event that fits the state but carries another digest than the
    state computes for it: the copy and the sender hold different histories."""

    def __init__(self, transcript_id: str, revision: int, carried: str, computed: str) -> None:
        super().__init__(
            f"transcript {transcript_id!r} revision {revision}: the event carries digest "
            f"{carried}, this copy computes {computed}"
        )
        self.transcript_id = transcript_id
        self.revision = revision
        self.carried = carried
        self.computed = computed


# --- invariants -----------------------------------------------------------------------


def check_event(event: TranscriptEvent) -> None:
    """Raise ``InvalidChange`` unless the event's change is well formed on its
    own: an append carries a message, a segment start has
    ``previousStart < start <= end``, a View's range has ``start <= end``."""
    change = event.change
    if isinstance(change, SegmentStarted):
        if not change.previous_start < change.start <= change.end:
            raise InvalidChange("event.change: a segment start needs previousStart < start <= end")
    elif isinstance(change, MessagesAppended):
        if not change.messages:
            raise InvalidChange("event.change: an append carries at least one message")
    elif change.end is not None and change.end < change.start:
        raise InvalidChange("event.change: a View's range needs start <= end")


def check_snapshot(snapshot: TranscriptSnapshot) -> None:
    """Raise ``InvalidSnapshot`` unless some sequence of changes could have
    produced ``snapshot``:

    - its messages ``[start, end)`` lie within ``[0, length]``;
    - segments: the first starts at 0, only the last is open and it starts at
      ``activeStart``; each later one starts inside its predecessor
      (``older.start < newer.start <= older.end``), closed ends never go
      down and never pass ``length``;
    - Views: names unique, each within ``[0, length]`` with ``start <= end``,
      and ``viewChanges`` at least their number;
    - the revision counts the changes: every segment start is one, every
      View change is one (``viewChanges``), and the appends are at least one
      (if there are messages) and at most one per message, so
      ``starts + viewChanges + (length > 0) <= revision <= starts +
      viewChanges + length``.
    """
    problem = _snapshot_problem(snapshot)
    if problem is not None:
        raise InvalidSnapshot(
            f"inconsistent snapshot of transcript {snapshot.transcript_id!r}: {problem}"
        )


def check_baseline(snapshot: TranscriptSnapshot) -> None:
    """``check_snapshot``, and the messages reach the length: a snapshot that
    a copy continues with the next events (a baseline) may leave out messages
    at the start (a window), never at the end."""
    check_snapshot(snapshot)
    if snapshot.end != snapshot.length:
        raise InvalidSnapshot(
            f"snapshot of transcript {snapshot.transcript_id!r} holds [{snapshot.start}, "
            f"{snapshot.end}) of {snapshot.length} messages: a baseline's messages reach "
            "the length"
        )


def _snapshot_problem(snapshot: TranscriptSnapshot) -> str | None:
    length = snapshot.length
    end = snapshot.start + len(snapshot.messages)
    if end > length:
        return f"its messages end at {end}, past its length {length}"
    segments = snapshot.segments
    if not segments:
        return "no segments (there is always an open one)"
    if segments[0].start != 0:
        return "the first segment does not start at 0"
    for i, segment in enumerate(segments[:-1]):
        if segment.end is None:
            return f"segments[{i}] is open, but only the last segment may be open"
    open_segment = segments[-1]
    if open_segment.end is not None:
        return "the last segment is closed: it must be the open one"
    if open_segment.start != snapshot.active_start:
        return (
            f"activeStart {snapshot.active_start} is not the start of the open segment "
            f"({open_segment.start})"
        )
    if snapshot.active_start > length:
        return f"activeStart {snapshot.active_start} is past the length {length}"
    for i, (older, newer) in enumerate(itertools.pairwise(segments)):
        older_end = older.end
        assert older_end is not None  # checked above: only the last is open
        if older_end > length:
            return f"segments[{i}] ends at {older_end}, past the length {length}"
        if not older.start < newer.start <= older_end:
            return f"segments[{i + 1}] does not start inside segments[{i}]"
        if newer.end is not None and newer.end < older_end:
            return f"segments[{i + 1}] ends before segments[{i}]"
    problem = _views_problem(snapshot.views, snapshot.view_changes, length)
    if problem is not None:
        return problem
    starts = len(segments) - 1
    changes = starts + snapshot.view_changes
    low, high = changes + (1 if length else 0), changes + length
    if not low <= snapshot.revision <= high:
        return (
            f"revision {snapshot.revision} cannot follow from {length} messages, "
            f"{starts} segment starts and {snapshot.view_changes} View changes (it must be "
            f"within {low}..{high})"
        )
    return None


def _views_problem(views: tuple[View, ...], view_changes: int, length: int) -> str | None:
    names: set[str] = set()
    for i, view in enumerate(views):
        if view.name in names:
            return f"views[{i}]: a second View named {view.name!r}"
        names.add(view.name)
        end = length if view.end is None else view.end
        if not view.start <= end <= length:
            return f"views[{i}] ({view.name!r}) is not within [0, {length}] with start <= end"
    if view_changes < len(views):
        return f"{len(views)} Views but only {view_changes} View changes"
    return None


# --- the state ------------------------------------------------------------------------


class TranscriptState:
    """The state of one transcript at ``revision``, changed only by ``apply``.

    ``messages`` holds the messages ``[start, length)`` in order, or is
    ``None`` when the state keeps none (``keep_messages=False``: a copy that
    only follows; its window is always empty, ``start == length``). Segments,
    ``active_start`` and the Views are always whole. Not thread-safe; the
    fields are public for reading and owned by ``apply`` (and ``prepend``,
    ``trim``, which only move ``start``).
    """

    __slots__ = (
        "active_start",
        "check_digests",
        "closed_segments",
        "digest",
        "epoch",
        "length",
        "messages",
        "revision",
        "start",
        "transcript_id",
        "view_changes",
        "views",
    )

    def __init__(
        self,
        transcript_id: str,
        epoch: str,
        *,
        keep_messages: bool = True,
        check_digests: bool = True,
    ) -> None:
        """An empty transcript at revision 0. ``check_digests=False``: take
        each event's digest as it comes, without computing it (a load
        generator's many copies in one process sample the check)."""
        self.transcript_id = transcript_id
        self.epoch = epoch
        self.revision = 0
        self.start = 0
        self.length = 0
        self.active_start = 0
        #: Every segment but the open one, oldest first.
        self.closed_segments: list[Segment] = []
        self.messages: list[Message] | None = [] if keep_messages else None
        #: The Views by name, and how many View changes the revision counts.
        self.views: dict[str, View] = {}
        self.view_changes = 0
        #: The rolling digest at ``revision`` (``protocol.digest``); ``None``
        #: when unknown (a snapshot of an older peer left it out): then the
        #: next event's digest is taken as it comes, and checked from there on.
        self.digest: str | None = genesis_digest(transcript_id)
        self.check_digests = check_digests

    @classmethod
    def from_snapshot(
        cls,
        snapshot: TranscriptSnapshot,
        *,
        keep_messages: bool = True,
        check_digests: bool = True,
    ) -> TranscriptState:
        """The state a snapshot shows, holding its messages (a window
        ``[start, length)`` if it is partial). Raises ``InvalidSnapshot`` if
        it breaks the invariants or if its messages stop short of the length
        (a head range cannot be continued: see ``check_baseline``)."""
        check_baseline(snapshot)
        state = cls(
            snapshot.transcript_id,
            snapshot.epoch,
            keep_messages=keep_messages,
            check_digests=check_digests,
        )
        state.revision = snapshot.revision
        state.length = snapshot.length
        state.active_start = snapshot.active_start
        state.closed_segments.extend(snapshot.segments[:-1])
        state.views.update((view.name, view) for view in snapshot.views)
        state.view_changes = snapshot.view_changes
        state.digest = snapshot.digest
        if state.messages is None:
            state.start = snapshot.length
        else:
            state.start = snapshot.start
            state.messages.extend(snapshot.messages)
        return state

    def following(self) -> TranscriptState:
        """A state at the same point that keeps no messages: to check the
        events that continue this one without holding a second copy."""
        state = TranscriptState(
            self.transcript_id, self.epoch, keep_messages=False, check_digests=self.check_digests
        )
        state.revision = self.revision
        state.start = state.length = self.length
        state.active_start = self.active_start
        state.closed_segments.extend(self.closed_segments)
        state.views.update(self.views)
        state.view_changes = self.view_changes
        state.digest = self.digest
        return state

    # --- reading ---------------------------------------------------------------------

    @property
    def whole(self) -> bool:
        """Whether every message is held."""
        return self.start == 0 and self.messages is not None

    def segments(self) -> tuple[Segment, ...]:
        """Every segment ever started, oldest first; the open one ends in ``None``."""
        return (*self.closed_segments, Segment(start=self.active_start, end=None))

    def get(self, index: int) -> Message:
        """The message at ``index``. ``TypeError`` for a non-integer (a bool
        too); ``IndexError`` unless ``start <= index < length`` and held."""
        if isinstance(index, bool):
            raise TypeError("a message index must be an integer, not a bool")
        i = operator.index(index)
        messages = self.messages
        if messages is None or not self.start <= i < self.length:
            raise IndexError(self._out_of_range(i))
        return messages[i - self.start]

    def slice(self, start: int, end: int | None = None) -> tuple[Message, ...]:
        """Messages ``[start, end)`` (``end`` defaults to ``length``). Raises
        ``ValueError`` unless the range lies within the held window."""
        stop = self.length if end is None else end
        messages = self.messages
        if messages is None or not self.start <= start <= stop <= self.length:
            raise ValueError(
                f"range [{start}, {stop}) is not within the messages "
                f"[{self.start}, {self.length}) held of transcript {self.transcript_id!r}"
            )
        return tuple(messages[start - self.start : stop - self.start])

    def snapshot(self, start: int | None = None, end: int | None = None) -> TranscriptSnapshot:
        """The state as a snapshot of messages ``[start, end)`` (default: all
        held), with ``length`` the whole transcript's. ``ValueError`` as for
        ``slice``."""
        first = self.start if start is None else start
        return self.snapshot_of(first, self.slice(first, end))

    def snapshot_of(self, start: int, messages: tuple[Message, ...]) -> TranscriptSnapshot:
        """A snapshot of this state at its revision holding ``messages`` as
        ``[start, start + len(messages))``: for a range partly read elsewhere
        (a server's store holds what a trimmed state no longer does). The
        caller vouches that they are this transcript's messages there."""
        return TranscriptSnapshot(
            transcript_id=self.transcript_id,
            epoch=self.epoch,
            revision=self.revision,
            start=start,
            messages=messages,
            active_start=self.active_start,
            segments=self.segments(),
            length=self.length,
            views=self.sorted_views(),
            view_changes=self.view_changes,
            digest=self.digest,
        )

    def sorted_views(self) -> tuple[View, ...]:
        """The Views, ordered by name."""
        return tuple(sorted(self.views.values(), key=lambda view: view.name))

    # --- the window ----------------------------------------------------------------------

    def prepend(self, start: int, messages: tuple[Message, ...] | list[Message]) -> None:
        """Widen the window backwards: ``messages`` are ``[start, self.start)``
        (read from elsewhere, e.g. ``load_earlier``; the caller checked that
        they belong to this epoch). ``ValueError`` unless they end exactly
        where the window begins and this state keeps messages."""
        held = self.messages
        if held is None:
            raise ValueError(f"this copy of {self.transcript_id!r} keeps no messages")
        if start < 0 or start + len(messages) != self.start:
            raise ValueError(
                f"messages [{start}, {start + len(messages)}) do not end where the window "
                f"[{self.start}, {self.length}) of {self.transcript_id!r} begins"
            )
        held[:0] = messages
        self.start = start

    def trim(self, start: int) -> int:
        """Forget the messages before ``start`` (nothing if the window begins
        there or later; at most up to ``length``). Returns how many were
        forgotten. Messages are never changed, so what is forgotten can be
        read again elsewhere (a server reads its store)."""
        held = self.messages
        drop = min(start, self.length) - self.start
        if held is None or drop <= 0:
            return 0
        del held[:drop]
        self.start += drop
        return drop

    # --- changing ----------------------------------------------------------------------

    def check_next(self, event: TranscriptEvent) -> None:
        """Raise ``InvalidChange`` unless ``event`` is exactly this state's next
        change: same id and epoch, revision + 1, an append at ``length``, a
        segment start from ``active_start`` ending at ``length`` with
        ``active_start < start <= length``."""
        name = self.transcript_id
        if event.transcript_id != name:
            raise InvalidChange(f"event of transcript {event.transcript_id!r} applied to {name!r}")
        if event.epoch != self.epoch:
            raise InvalidChange(
                f"event of epoch {event.epoch!r} applied to transcript {name!r} "
                f"of epoch {self.epoch!r}"
            )
        if event.revision != self.revision + 1:
            raise InvalidChange(
                f"event for revision {event.revision} applied to transcript {name!r} "
                f"at revision {self.revision} (expected {self.revision + 1})"
            )
        change = event.change
        length = self.length
        if isinstance(change, MessagesAppended):
            if not change.messages:
                raise InvalidChange("event.change: an append carries at least one message")
            if change.start != length:
                raise InvalidChange(
                    f"append at index {change.start} applied to transcript {name!r} "
                    f"of length {length}"
                )
        elif isinstance(change, ViewChanged | ViewLeft):
            self._check_view_change(change)
        # (This also makes the change well formed: previous_start < start <= end.)
        elif (
            change.previous_start != self.active_start
            or change.end != length
            or not self.active_start < change.start <= length
        ):
            raise InvalidChange(
                f"segment start (previous {change.previous_start}, start {change.start}, "
                f"end {change.end}) applied to transcript {name!r} with active_start "
                f"{self.active_start} and length {length}"
            )

    def _check_view_change(self, change: ViewChanged | ViewLeft) -> None:
        name, length = self.transcript_id, self.length
        end = length if change.end is None else change.end
        if isinstance(change, ViewLeft):
            view = self.views.get(change.name)
            if view is None or (view.start, view.end) != (change.start, change.end):
                raise InvalidChange(
                    f"View {change.name!r} [{change.start}, {change.end}) left in transcript "
                    f"{name!r}, which has {view!r}"
                )
        elif not 0 <= change.start <= end <= length:
            raise InvalidChange(
                f"View {change.name!r} [{change.start}, {change.end}) set in transcript "
                f"{name!r} of length {length}"
            )

    def digest_after(self, event: TranscriptEvent) -> str | None:
        """The digest at ``event``'s revision: computed from this state's and
        the change. Raises ``DigestMismatch`` if the event carries another
        one. An event without a digest (an older peer) gets the computed
        one; a state that does not know its own takes the event's."""
        own = self.digest
        if own is None or not self.check_digests:
            return event.digest
        computed = next_digest(own, event.change)
        carried = event.digest
        if carried is not None and carried != computed:
            raise DigestMismatch(self.transcript_id, event.revision, carried, computed)
        return computed

    def advance(self, event: TranscriptEvent, digest: str | None = None) -> None:
        """Make a checked event (``check_next``) the current state, with
        ``digest`` (``digest_after``) as the digest at its revision. Cannot
        fail halfway; call ``apply`` unless the check was just made."""
        change = event.change
        if isinstance(change, MessagesAppended):
            self.length += len(change.messages)
            messages = self.messages
            if messages is None:
                self.start = self.length
            else:
                messages.extend(change.messages)
        elif isinstance(change, SegmentStarted):
            self.closed_segments.append(Segment(start=change.previous_start, end=change.end))
            self.active_start = change.start
        else:
            if isinstance(change, ViewChanged):
                self.views[change.name] = View(change.name, change.start, change.end)
            else:
                del self.views[change.name]
            self.view_changes += 1
        self.revision = event.revision
        self.digest = digest

    def apply(self, event: TranscriptEvent, *, own_digest: bool = False) -> None:
        """Check ``event`` and make it the current state; ``InvalidChange``
        and nothing changes if it is not the next change, ``DigestMismatch``
        (an ``InvalidChange``) if its digest is not the one that follows.
        ``own_digest``: the event's digest was computed from this state by
        its owner (``Transcript.prepare_*``): taken as it is, not again."""
        self.check_next(event)
        digest = event.digest
        if not own_digest or digest is None or self.digest is None:
            digest = self.digest_after(event)
        self.advance(event, digest)

    def __repr__(self) -> str:
        held = "none" if self.messages is None else f"[{self.start}, {self.length})"
        return (
            f"<TranscriptState {self.transcript_id!r} revision={self.revision} "
            f"length={self.length} held={held} active_start={self.active_start}>"
        )

    def _out_of_range(self, index: int) -> str:
        name = self.transcript_id
        if self.messages is None:
            return f"message index {index}: this copy of {name!r} keeps no messages"
        if self.start == self.length:
            held = "no messages"
        else:
            held = f"indices {self.start}..{self.length - 1}"
        return f"message index {index} is out of range: transcript {name!r} has {held}"
