"""One transcript's state, and the one way an event changes it.

``TranscriptState`` is what the server's ``Transcript`` entity holds and what
every consumer's copy holds (``protocol.consumer``): id, epoch, revision, the
segments, the length, and the messages ``[start, length)``. The entity keeps
them all (``start == 0``); a copy made from a partial baseline keeps a window;
a copy made with ``keep_messages=False`` keeps none and still checks every
event exactly as the entity does. There is one implementation of "apply an
event" (``check_next`` + ``advance``) and one set of snapshot invariants
(``check_snapshot``), used by ``accept_transcript_update``,
``Transcript.restore`` and every copy alike.

Errors (both are ``ProtocolError``, hence ``ValueError``)::

    InvalidSnapshot   a snapshot no sequence of changes could have produced
    InvalidChange     an event that is not the state's next change
"""

from __future__ import annotations

import itertools
import operator

from protocol.errors import ProtocolError
from protocol.types import (
    Message,
    MessagesAppended,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
)

__all__ = [
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


# --- invariants -----------------------------------------------------------------------


def check_event(event: TranscriptEvent) -> None:
    """Raise ``InvalidChange`` unless the event's change is well formed on its
    own: an append carries a message, a segment start has
    ``previousStart < start <= end``."""
    change = event.change
    if isinstance(change, SegmentStarted):
        if not change.previous_start < change.start <= change.end:
            raise InvalidChange("event.change: a segment start needs previousStart < start <= end")
    elif not change.messages:
        raise InvalidChange("event.change: an append carries at least one message")


def check_snapshot(snapshot: TranscriptSnapshot) -> None:
    """Raise ``InvalidSnapshot`` unless some sequence of changes could have
    produced ``snapshot``:

    - its messages ``[start, end)`` lie within ``[0, length]``;
    - segments: the first starts at 0, only the last is open and it starts at
      ``activeStart``; each later one starts inside its predecessor
      (``older.start < newer.start <= older.end``), closed ends never go
      down and never pass ``length``;
    - the revision counts the changes: every segment start is one, and the
      appends are at least one (if there are messages) and at most one per
      message, so ``starts + (length > 0) <= revision <= starts + length``.
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
    starts = len(segments) - 1
    low, high = starts + (1 if length else 0), starts + length
    if not low <= snapshot.revision <= high:
        return (
            f"revision {snapshot.revision} cannot follow from {length} messages and "
            f"{starts} segment starts (it must be within {low}..{high})"
        )
    return None


# --- the state ------------------------------------------------------------------------


class TranscriptState:
    """The state of one transcript at ``revision``, changed only by ``apply``.

    ``messages`` holds the messages ``[start, length)`` in order, or is
    ``None`` when the state keeps none (``keep_messages=False``: a copy that
    only follows; its window is always empty, ``start == length``). Segments
    and ``active_start`` are always whole. Not thread-safe; the fields are
    public for reading and owned by ``apply``.
    """

    __slots__ = (
        "active_start",
        "closed_segments",
        "epoch",
        "length",
        "messages",
        "revision",
        "start",
        "transcript_id",
    )

    def __init__(self, transcript_id: str, epoch: str, *, keep_messages: bool = True) -> None:
        """An empty transcript at revision 0."""
        self.transcript_id = transcript_id
        self.epoch = epoch
        self.revision = 0
        self.start = 0
        self.length = 0
        self.active_start = 0
        #: Every segment but the open one, oldest first.
        self.closed_segments: list[Segment] = []
        self.messages: list[Message] | None = [] if keep_messages else None

    @classmethod
    def from_snapshot(
        cls, snapshot: TranscriptSnapshot, *, keep_messages: bool = True
    ) -> TranscriptState:
        """The state a snapshot shows, holding its messages (a window
        ``[start, length)`` if it is partial). Raises ``InvalidSnapshot`` if
        it breaks the invariants or if its messages stop short of the length
        (a head range cannot be continued: see ``check_baseline``)."""
        check_baseline(snapshot)
        state = cls(snapshot.transcript_id, snapshot.epoch, keep_messages=keep_messages)
        state.revision = snapshot.revision
        state.length = snapshot.length
        state.active_start = snapshot.active_start
        state.closed_segments.extend(snapshot.segments[:-1])
        if state.messages is None:
            state.start = snapshot.length
        else:
            state.start = snapshot.start
            state.messages.extend(snapshot.messages)
        return state

    def following(self) -> TranscriptState:
        """A state at the same point that keeps no messages: to check the
        events that continue this one without holding a second copy."""
        state = TranscriptState(self.transcript_id, self.epoch, keep_messages=False)
        state.revision = self.revision
        state.start = state.length = self.length
        state.active_start = self.active_start
        state.closed_segments.extend(self.closed_segments)
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
        return TranscriptSnapshot(
            transcript_id=self.transcript_id,
            epoch=self.epoch,
            revision=self.revision,
            start=first,
            messages=self.slice(first, end),
            active_start=self.active_start,
            segments=self.segments(),
            length=self.length,
        )

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

    def advance(self, event: TranscriptEvent) -> None:
        """Make a checked event (``check_next``) the current state. Cannot
        fail halfway; call ``apply`` unless the check was just made."""
        change = event.change
        if isinstance(change, MessagesAppended):
            self.length += len(change.messages)
            messages = self.messages
            if messages is None:
                self.start = self.length
            else:
                messages.extend(change.messages)
        else:
            self.closed_segments.append(Segment(start=change.previous_start, end=change.end))
            self.active_start = change.start
        self.revision = event.revision

    def apply(self, event: TranscriptEvent) -> None:
        """Check ``event`` and make it the current state; ``InvalidChange``
        and nothing changes if it is not the next change."""
        self.check_next(event)
        self.advance(event)

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
