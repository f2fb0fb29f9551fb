"""The Transcript entity: an append-only list of chat messages with a revision.

A ``Transcript`` lives in memory and does no I/O of its own. Each accepted
change (a non-empty append batch or a valid segment start) advances the
revision by one and goes through the ports of ``server.changes`` in the order
of contract section 2::

    validate -> build the frozen event -> persistence.commit(event)
             -> update messages and revision -> changes.capture(event)
             -> observation.observe(record)

Invalid input, an empty batch or a failing ``persistence`` change nothing.
Once memory is updated the change stays, whatever capture or observation
raise; see ``server.changes`` for the errors.

The async hub cannot await its store inside ``Persistence.commit``, so it
uses the two phases directly: ``prepare_append`` / ``prepare_segment`` build
the event without changing anything, the hub awaits its store, then
``apply(event)`` updates memory and reports the change.

Segments: ``active_start`` marks where the messages of the next model call
begin. A segment start moves it to ``start`` (``active_start < start <=
length``); the segment it closes keeps the range it had, ``[previous_start,
end)`` with ``end`` the length at that moment, so it may share messages with
the new one. Nothing is copied or deleted.
"""

from __future__ import annotations

import itertools
import operator
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import msgspec

from protocol.errors import InvalidMessage, InvalidSegment
from protocol.limits import MAX_MESSAGE_BYTES, MAX_MESSAGES_PER_BATCH
from protocol.types import (
    Message,
    MessageLocator,
    MessagesAppended,
    Origin,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
)
from protocol.validation import parse_message, parse_messages, validate_id
from server.changes import (
    ChangeCapture,
    ChangeCaptureError,
    Observation,
    ObservationError,
    Persistence,
    record_of,
)

if TYPE_CHECKING:
    from server.ranges import TranscriptRangeReader

__all__ = ["AppendedEntry", "Clock", "InvalidSegment", "MessageInput", "Transcript"]

#: Milliseconds since the Unix epoch; stamps ``occurredAt``.
Clock: TypeAlias = Callable[[], int]
#: What ``append`` accepts per message: a ``Message`` or its plain-data form.
MessageInput: TypeAlias = Message | Mapping[str, Any]

_encode = msgspec.json.Encoder().encode
_decode_message = msgspec.json.Decoder(Message).decode


class AppendedEntry(NamedTuple):
    """One appended message and where it now lives, forever."""

    transcript_id: str
    # The name is fixed by the contract; it shadows tuple.index on purpose.
    index: int  # type: ignore[assignment]
    message: Message


def _wall_clock() -> int:
    return time.time_ns() // 1_000_000


def _new_id() -> str:
    return uuid.uuid4().hex


class Transcript:
    """An append-only list of chat messages with an id, an epoch and a revision.

    ``messages`` (``Message`` structs or plain dicts) become revision 1, one
    append through every port; no messages leave the transcript at revision 0.
    ``id`` and ``epoch`` are generated (uuid4 hex) when ``None``. ``clock``
    returns milliseconds since the Unix epoch for ``occurredAt``.

    Not thread-safe and not re-entrant: one caller changes it at a time (the
    hub holds a lock per transcript). Reads never block and never copy more
    than they return.
    """

    __slots__ = (
        "_active_start",
        "_changes",
        "_clock",
        "_closed_segments",
        "_epoch",
        "_id",
        "_messages",
        "_observation",
        "_persistence",
        "_revision",
    )

    def __init__(
        self,
        messages: Iterable[MessageInput] = (),
        *,
        id: str | None = None,
        epoch: str | None = None,
        changes: ChangeCapture | None = None,
        observation: Observation | None = None,
        persistence: Persistence | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._id = _new_id() if id is None else validate_id(id)
        self._epoch = _new_id() if epoch is None else _check_epoch(epoch)
        self._changes = changes
        self._observation = observation
        self._persistence = persistence
        self._clock: Clock = _wall_clock if clock is None else clock
        # Messages only ever grow at the end, so index i is the same object forever.
        self._messages: list[Message] = []
        self._revision = 0
        self._active_start = 0
        self._closed_segments: list[Segment] = []
        if messages:
            self.append(messages)

    # --- reading ---------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._id

    @property
    def epoch(self) -> str:
        return self._epoch

    @property
    def revision(self) -> int:
        """The number of accepted changes (0 for a new, empty transcript)."""
        return self._revision

    @property
    def length(self) -> int:
        """The number of messages."""
        return len(self._messages)

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def active_start(self) -> int:
        """Index of the first message of the open segment."""
        return self._active_start

    def get(self, index: int) -> Message:
        """The message at ``index`` (always the same object).

        Raises ``IndexError`` unless ``0 <= index < length``; negative indices
        do not count from the end.
        """
        i = operator.index(index)
        if not 0 <= i < len(self._messages):
            raise IndexError(self._out_of_range(i))
        return self._messages[i]

    def ref(self, index: int) -> MessageLocator:
        """A locator of the message at ``index`` (``IndexError`` as for ``get``)."""
        i = operator.index(index)
        if not 0 <= i < len(self._messages):
            raise IndexError(self._out_of_range(i))
        return MessageLocator(transcript_id=self._id, index=i)

    def messages(self, start: int = 0, end: int | None = None) -> tuple[Message, ...]:
        """Messages ``[start, end)`` (``end`` defaults to ``length``), the same objects.

        Raises ``ValueError`` unless ``0 <= start <= end <= length``.
        """
        stop = self._check_range(start, end)
        return tuple(self._messages[start:stop])

    def segments(self) -> tuple[Segment, ...]:
        """Every segment ever started, oldest first; the open one ends in ``None``."""
        return (*self._closed_segments, Segment(start=self._active_start, end=None))

    def active(self) -> tuple[Message, ...]:
        """The messages of the open segment: ``[active_start, length)``."""
        return tuple(self._messages[self._active_start :])

    def snapshot(self, end: int | None = None, *, start: int = 0) -> TranscriptSnapshot:
        """The transcript now, with messages ``[start, end)``.

        ``revision`` is the current one; ``segments`` and ``active_start`` are
        always whole. Raises ``ValueError`` unless ``0 <= start <= end <= length``.
        """
        stop = self._check_range(start, end)
        return TranscriptSnapshot(
            transcript_id=self._id,
            epoch=self._epoch,
            revision=self._revision,
            start=start,
            messages=tuple(self._messages[start:stop]),
            active_start=self._active_start,
            segments=self.segments(),
        )

    def __repr__(self) -> str:
        return (
            f"<Transcript {self._id!r} revision={self._revision} length={len(self._messages)} "
            f"active_start={self._active_start}>"
        )

    # --- changing: one call ----------------------------------------------------

    def append(
        self, messages: Iterable[MessageInput], *, origin: Origin | None = None
    ) -> list[AppendedEntry]:
        """Append a batch of messages as one change, all or nothing.

        Raises ``InvalidMessage`` (naming the path) and changes nothing if any
        message is invalid; an empty batch returns ``[]`` and changes nothing.
        If ``persistence`` raises, nothing changed and the error propagates.
        Capture and observation failures are raised after the change is
        committed (see ``server.changes``).
        """
        event = self.prepare_append(messages, origin=origin)
        if event is None:
            return []
        return self._commit_append(event)

    def append_from(
        self, reader: TranscriptRangeReader, *, origin: Origin | None = None
    ) -> list[AppendedEntry]:
        """Append the messages of another transcript's fixed range, as one
        change, reusing the same message objects (they were validated when
        first appended). An empty range changes nothing."""
        batch = reader.messages()
        if not batch:
            return []
        return self._commit_append(self._append_event(batch, origin))

    def start_segment(
        self, start: int | None = None, *, origin: Origin | None = None
    ) -> TranscriptEvent:
        """Move ``active_start`` to ``start`` (default: ``length``) as one change.

        Raises ``InvalidSegment`` and changes nothing unless
        ``active_start < start <= length``. Returns the event.
        """
        event = self.prepare_segment(start, origin=origin)
        self._commit(event)
        self.apply(event)
        return event

    # --- changing: two phases (the hub awaits its store in between) -------------

    def prepare_append(
        self, messages: Iterable[MessageInput], *, origin: Origin | None = None
    ) -> TranscriptEvent | None:
        """Validate a batch and build the event for revision + 1, changing nothing.

        ``None`` for an empty batch. Raises ``InvalidMessage``.
        """
        batch = _validate_batch(messages)
        if not batch:
            return None
        return self._append_event(batch, origin)

    def prepare_appends(
        self, batches: Sequence[tuple[Iterable[MessageInput], Origin | None]]
    ) -> list[TranscriptEvent]:
        """The events of several non-empty appends applied one after the other
        (revision + 1, + 2, ...), changing nothing. Raises ``InvalidMessage``
        and ``ValueError`` for an empty batch. The hub commits them to its
        store together, then ``apply``s them in order."""
        events: list[TranscriptEvent] = []
        revision = self._revision
        length = len(self._messages)
        for messages, origin in batches:
            batch = _validate_batch(messages)
            if not batch:
                raise ValueError("prepare_appends: an empty batch takes no revision")
            revision += 1
            events.append(
                TranscriptEvent(
                    transcript_id=self._id,
                    epoch=self._epoch,
                    revision=revision,
                    occurred_at=self._clock(),
                    change=MessagesAppended(start=length, messages=batch),
                    origin=_check_origin(origin),
                )
            )
            length += len(batch)
        return events

    def prepare_segment(
        self, start: int | None = None, *, origin: Origin | None = None
    ) -> TranscriptEvent:
        """Build the segment-start event for revision + 1, changing nothing.

        Raises ``InvalidSegment`` unless ``active_start < start <= length``
        (``start`` defaults to ``length``).
        """
        length = len(self._messages)
        if start is None:
            new_start = length
        elif isinstance(start, int) and not isinstance(start, bool):
            new_start = start
        else:
            raise InvalidSegment(f"segment start must be an integer, got {start!r:.40}")
        if not self._active_start < new_start <= length:
            raise InvalidSegment(
                f"segment start {new_start} is invalid for transcript {self._id!r}: "
                f"it must satisfy active_start ({self._active_start}) < start <= "
                f"length ({length})"
            )
        return TranscriptEvent(
            transcript_id=self._id,
            epoch=self._epoch,
            revision=self._revision + 1,
            occurred_at=self._clock(),
            change=SegmentStarted(previous_start=self._active_start, start=new_start, end=length),
            origin=_check_origin(origin),
        )

    def apply(self, event: TranscriptEvent) -> None:
        """Make a prepared (and already persisted) event the current state,
        then capture and observe it. Does not call ``persistence``.

        Raises ``ValueError`` and changes nothing unless the event is this
        transcript's (id and epoch) next change (revision + 1, starting at the
        current length / active start). After memory is updated: raises
        ``ChangeCaptureError`` if capture failed (observation is still tried),
        ``ObservationError`` if only observation failed, or an
        ``ExceptionGroup`` holding both.
        """
        self._check_next(event)
        self._advance(event)
        self._report(event)

    # --- rebuilding --------------------------------------------------------------

    @classmethod
    def restore(
        cls,
        source: TranscriptSnapshot | Iterable[TranscriptEvent],
        *,
        id: str | None = None,
        epoch: str | None = None,
        changes: ChangeCapture | None = None,
        observation: Observation | None = None,
        persistence: Persistence | None = None,
        clock: Clock | None = None,
    ) -> Transcript:
        """Rebuild a transcript from a whole snapshot or its complete event log.

        Calls no port and emits nothing; the ports given serve later changes.
        Events must be revisions 1..N in order; their id and epoch are the
        transcript's (``id``/``epoch``, when given, must agree; for an empty
        log they name the transcript, generated when ``None``). A snapshot
        must be whole (``start == 0``); it gives the same messages, revision,
        epoch and segments but not the per-revision history. Raises
        ``ValueError`` on a gap, a mismatch or an inconsistent source.
        """
        ports: dict[str, Any] = {
            "changes": changes,
            "observation": observation,
            "persistence": persistence,
            "clock": clock,
        }
        if isinstance(source, TranscriptSnapshot):
            return cls._from_snapshot(source, id=id, epoch=epoch, **ports)
        events = list(source)
        if events:
            first = events[0]
            _agree("id", id, first.transcript_id)
            _agree("epoch", epoch, first.epoch)
            id, epoch = first.transcript_id, first.epoch
        transcript = cls(id=id, epoch=epoch, **ports)
        for position, event in enumerate(events):
            if not isinstance(event, TranscriptEvent):
                raise ValueError(
                    f"events[{position}]: expected a TranscriptEvent, got {event!r:.60}"
                )
            try:
                transcript._check_next(event)
            except ValueError as exc:
                raise ValueError(f"events[{position}]: {exc}") from None
            transcript._advance(event)
        return transcript

    @classmethod
    def _from_snapshot(
        cls,
        snapshot: TranscriptSnapshot,
        *,
        id: str | None,
        epoch: str | None,
        **ports: Any,
    ) -> Transcript:
        if snapshot.start != 0:
            raise ValueError(
                f"cannot restore from a partial snapshot (start={snapshot.start}); "
                "a whole one starts at 0"
            )
        _agree("id", id, snapshot.transcript_id)
        _agree("epoch", epoch, snapshot.epoch)
        _check_segments(snapshot)
        transcript = cls(id=snapshot.transcript_id, epoch=snapshot.epoch, **ports)
        transcript._messages.extend(snapshot.messages)
        transcript._revision = snapshot.revision
        transcript._active_start = snapshot.active_start
        transcript._closed_segments.extend(snapshot.segments[:-1])
        return transcript

    # --- inside one change -------------------------------------------------------

    def _append_event(self, batch: tuple[Message, ...], origin: Origin | None) -> TranscriptEvent:
        return TranscriptEvent(
            transcript_id=self._id,
            epoch=self._epoch,
            revision=self._revision + 1,
            occurred_at=self._clock(),
            change=MessagesAppended(start=len(self._messages), messages=batch),
            origin=_check_origin(origin),
        )

    def _commit_append(self, event: TranscriptEvent) -> list[AppendedEntry]:
        change = event.change
        assert isinstance(change, MessagesAppended)
        self._commit(event)
        entries = [
            AppendedEntry(self._id, change.start + k, message)
            for k, message in enumerate(change.messages)
        ]
        self.apply(event)
        return entries

    def _commit(self, event: TranscriptEvent) -> None:
        if self._persistence is not None:
            self._persistence.commit(event)

    def _check_next(self, event: TranscriptEvent) -> None:
        """Raise ``ValueError`` unless ``event`` is exactly this transcript's next change."""
        if event.transcript_id != self._id:
            raise ValueError(f"event of transcript {event.transcript_id!r} applied to {self._id!r}")
        if event.epoch != self._epoch:
            raise ValueError(
                f"event of epoch {event.epoch!r} applied to transcript {self._id!r} "
                f"of epoch {self._epoch!r}"
            )
        if event.revision != self._revision + 1:
            raise ValueError(
                f"event for revision {event.revision} applied to transcript {self._id!r} "
                f"at revision {self._revision} (expected {self._revision + 1})"
            )
        change = event.change
        length = len(self._messages)
        if isinstance(change, MessagesAppended):
            if change.start != length:
                raise ValueError(
                    f"append at index {change.start} applied to transcript {self._id!r} "
                    f"of length {length}"
                )
            if not change.messages:
                raise ValueError("an append event must carry at least one message")
        elif (
            change.previous_start != self._active_start
            or change.end != length
            or not self._active_start < change.start <= length
        ):
            raise ValueError(
                f"segment start (previous {change.previous_start}, start {change.start}, "
                f"end {change.end}) applied to transcript {self._id!r} with active_start "
                f"{self._active_start} and length {length}"
            )

    def _advance(self, event: TranscriptEvent) -> None:
        """Update memory for a checked event. Cannot fail halfway."""
        change = event.change
        if isinstance(change, MessagesAppended):
            self._messages.extend(change.messages)
        else:
            self._closed_segments.append(Segment(start=change.previous_start, end=change.end))
            self._active_start = change.start
        self._revision = event.revision

    def _report(self, event: TranscriptEvent) -> None:
        capture_error: ChangeCaptureError | None = None
        observation_error: ObservationError | None = None
        if self._changes is not None:
            try:
                self._changes.capture(event)
            except Exception as exc:
                capture_error = ChangeCaptureError((event,), exc)
        if self._observation is not None:
            record = record_of(event)
            try:
                self._observation.observe(record)
            except Exception as exc:
                observation_error = ObservationError((record,), exc)
        if capture_error is not None and observation_error is not None:
            raise ExceptionGroup(
                f"revision {event.revision} of transcript {self._id!r} is committed, "
                "but both change capture and observation failed",
                [capture_error, observation_error],
            )
        if capture_error is not None:
            raise capture_error
        if observation_error is not None:
            raise observation_error

    def _check_range(self, start: int, end: int | None) -> int:
        length = len(self._messages)
        stop = length if end is None else end
        if not 0 <= start <= stop <= length:
            raise ValueError(
                f"range [{start}, {stop}) is not within transcript {self._id!r} of length {length}"
            )
        return stop

    def _out_of_range(self, index: int) -> str:
        n = len(self._messages)
        held = f"indices 0..{n - 1}" if n else "no messages"
        return f"message index {index} is out of range: transcript {self._id!r} has {held}"


# --- validation --------------------------------------------------------------------


def _validate_batch(messages: Iterable[MessageInput]) -> tuple[Message, ...]:
    """The batch as validated ``Message`` structs, or ``InvalidMessage``."""
    if isinstance(messages, str | bytes | bytearray | Mapping | Message):
        raise InvalidMessage("messages", "expected a list of messages")
    items = messages if isinstance(messages, list | tuple) else list(messages)
    if not items:
        return ()
    if len(items) > MAX_MESSAGES_PER_BATCH:
        raise InvalidMessage(
            "messages", f"too many messages: {len(items)} > {MAX_MESSAGES_PER_BATCH}"
        )
    try:
        if not any(isinstance(item, Message) for item in items):
            return parse_messages(items)
        return tuple(
            _check_struct(item, f"messages[{i}]")
            if isinstance(item, Message)
            else parse_message(item, path=f"messages[{i}]")
            for i, item in enumerate(items)
        )
    except (TypeError, OverflowError, msgspec.EncodeError) as exc:
        # metadata may hold values JSON cannot carry (sets, objects, huge ints).
        raise InvalidMessage("messages", f"cannot be encoded as JSON: {exc}") from None


def _check_struct(message: Message, path: str) -> Message:
    """Check a ``Message`` built in Python: its size, and its fields, which a
    Struct does not check when constructed directly."""
    encoded = _encode(message)
    if len(encoded) > MAX_MESSAGE_BYTES:
        raise InvalidMessage(
            path, f"message is {len(encoded)} bytes, more than the limit of {MAX_MESSAGE_BYTES}"
        )
    try:
        _decode_message(encoded)
    except msgspec.ValidationError as exc:
        raise InvalidMessage(path, str(exc).replace("$", path, 1)) from None
    return message


def _check_epoch(epoch: object) -> str:
    if not isinstance(epoch, str) or not epoch:
        raise ValueError(f"epoch must be a non-empty string, got {epoch!r:.60}")
    return epoch


def _check_origin(origin: object) -> Origin | None:
    if origin is not None and not isinstance(origin, Origin):
        raise TypeError(f"origin must be an Origin or None, got {type(origin).__name__}")
    return origin


def _agree(what: str, given: str | None, found: str) -> None:
    if given is not None and given != found:
        raise ValueError(f"{what} {given!r} does not match the source's {what} {found!r}")


def _check_segments(snapshot: TranscriptSnapshot) -> None:
    """Raise ``ValueError`` unless the snapshot's segments could have been made
    by segment starts: the first starts at 0, each later one starts inside
    its predecessor, only the last is open and it starts at ``active_start``."""
    segments, length = snapshot.segments, len(snapshot.messages)
    problem = None
    if not segments:
        problem = "no segments"
    elif segments[0].start != 0:
        problem = "the first segment does not start at 0"
    elif segments[-1].end is not None or segments[-1].start != snapshot.active_start:
        problem = "the last segment is not the open one at active_start"
    elif not snapshot.active_start <= length:
        problem = "active_start is beyond the end"
    elif snapshot.revision < len(segments) - 1 + (1 if length else 0):
        problem = "the revision is lower than the changes it shows"
    else:
        for older, newer in itertools.pairwise(segments):
            end = older.end
            if end is None or end > length or not older.start < newer.start <= end:
                problem = f"segment {older} cannot precede {newer}"
                break
    if problem is not None:
        raise ValueError(
            f"inconsistent snapshot of transcript {snapshot.transcript_id!r}: {problem}"
        )
