"""The Transcript entity: an append-only list of chat messages with a revision.

A ``Transcript`` lives in memory and does no I/O of its own. Each accepted
change (a non-empty append batch or a valid segment start) advances the
revision by one and goes through the ports of ``server.model.changes`` in the order
of docs/protocol.md, section 1 (Model)::

    validate -> build the frozen event -> persistence.commit(event)
             -> update messages and revision -> changes.capture(event)
             -> observation.observe(record)

Invalid input, an empty batch or a failing ``persistence`` change nothing.
Once memory is updated the change stays, whatever capture or observation
raise; see ``server.model.changes`` for the errors.

The async hub cannot await its store inside ``Persistence.commit``, so it
uses the two phases directly: ``prepare_append`` / ``prepare_segment`` build
the event without changing anything, the hub awaits its store, then
``apply(event)`` updates memory and reports the change.

Views (``protocol.views``): named ranges over the transcript, changed by
``set_view`` and ``leave_view``. A View change is a change like any other: it
advances the revision by one and goes through the same ports, but it never
changes a message or a segment bound, and leaving a View deletes nothing.
Setting a View to the range it has, or leaving one that does not exist,
changes nothing (no revision, no event).

A window: an entity rebuilt with ``restore_window`` (or trimmed with
``forget_before``) holds only its newest messages ``[held_start, length)``.
Reading an older message raises as reading past the end does; every change
works exactly as on a whole one (a change needs only the length, the active
start, the segments and the Views, which are always whole). The server's hub
holds its live transcripts so and reads older messages from its store.

Segments: ``active_start`` marks where the messages of the next model call
begin. A segment start moves it to ``start`` (``active_start < start <=
length``); the segment it closes keeps the range it had, ``[previous_start,
end)`` with ``end`` the length at that moment, so it may share messages with
the new one. Nothing is copied or deleted.

Why one module of over 600 lines: it is the entity of the contract, its whole public API
in one class (about half of the lines are its documentation), with the capture errors
that carry it; its ports are in ``server.model.changes``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypeAlias, TypedDict, Unpack

import msgspec

from protocol.digest import next_digest
from protocol.errors import InvalidMessage, InvalidSegment
from protocol.limits import DEFAULT_LIMITS, MessageLimits
from protocol.state import TranscriptState
from protocol.types import (
    Change,
    Message,
    MessageLocator,
    MessagesAppended,
    Origin,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptRecord,
    TranscriptSnapshot,
    View,
    ViewChanged,
    ViewLeft,
)
from protocol.usage import MessageUsage, UsageRange, message_usage, named_ranges
from protocol.validation import (
    ValidatedBatch,
    check_message_values,
    parse_message,
    parse_messages,
    validate_id,
)
from protocol.views import check_view
from server.model.changes import ChangeCapture, Observation, Persistence, record_of

__all__ = [
    "AppendedEntry",
    "CaptureAndObservationError",
    "ChangeCaptureError",
    "Clock",
    "FixedMessages",
    "InvalidSegment",
    "MessageInput",
    "ObservationError",
    "Ports",
    "Transcript",
]


class FixedMessages(Protocol):
    """What ``Transcript.append_from`` reads: a fixed run of messages
    (``server.model.ranges.TranscriptRangeReader`` is one)."""

    def messages(self) -> tuple[Message, ...]: ...


#: Milliseconds since the Unix epoch; stamps ``occurredAt``.
Clock: TypeAlias = Callable[[], int]
#: What ``append`` accepts per message: a ``Message`` or its plain-data form.
MessageInput: TypeAlias = Message | Mapping[str, Any]


class Ports(TypedDict, total=False):
    """The ports and settings a transcript is built with, as keywords of
    ``Transcript(...)``, ``restore`` and ``restore_window`` (each optional)."""

    changes: ChangeCapture | None
    observation: Observation | None
    persistence: Persistence | None
    clock: Clock | None
    limits: MessageLimits


_encode = msgspec.json.Encoder().encode
_decode_message = msgspec.json.Decoder(Message).decode


class _FailedAfterCommit(Exception):
    """A port (``what``) raised ``cause`` (also ``__cause__``) for the
    changes of these revisions, which the transcript kept nonetheless."""

    transcript: Transcript | None = None

    def __init__(self, what: str, revisions: list[int], cause: BaseException) -> None:
        super().__init__(
            f"{what} failed for revision {', '.join(map(str, revisions))}"
            f" (the change is committed): {cause!r}"
        )
        self.cause = cause
        self.__cause__ = cause


class ChangeCaptureError(_FailedAfterCommit):
    """Capture refused events of changes that are committed nonetheless.

    ``events`` are the events the capture port did not take, ``cause`` is what
    it raised (also ``__cause__``). The transcript kept the change: a caller
    that must not lose the event can hand ``events`` on itself.
    ``transcript`` is the entity when its constructor raised (else ``None``).
    """

    def __init__(self, events: tuple[TranscriptEvent, ...], cause: BaseException) -> None:
        super().__init__("change capture", [e.revision for e in events], cause)
        self.events = events


class ObservationError(_FailedAfterCommit):
    """Observation failed for changes that are committed nonetheless.

    ``records`` are the records it was given, ``cause`` is what it raised
    (also ``__cause__``). ``transcript`` as for ``ChangeCaptureError``.
    """

    def __init__(self, records: tuple[TranscriptRecord, ...], cause: BaseException) -> None:
        super().__init__("observation", [r.revision for r in records], cause)
        self.records = records


class CaptureAndObservationError(ExceptionGroup[Exception], ChangeCaptureError):
    """Capture and observation both failed for one committed change.

    An ``ExceptionGroup`` of the ``ChangeCaptureError`` and the
    ``ObservationError`` (in that order) that is itself a
    ``ChangeCaptureError``: ``except ChangeCaptureError`` catches it, and its
    ``events``/``cause`` are the capture error's, ``records`` the
    observation's.
    """

    def __new__(cls, message: str, exceptions: Sequence[Exception]) -> CaptureAndObservationError:
        group: CaptureAndObservationError = super().__new__(cls, message, exceptions)
        return group

    def __init__(self, message: str, exceptions: Sequence[Exception]) -> None:
        capture, observation = exceptions
        assert isinstance(capture, ChangeCaptureError)
        assert isinstance(observation, ObservationError)
        ExceptionGroup.__init__(self, message, exceptions)
        self.events = capture.events
        self.cause = capture.cause
        self.records = observation.records

    def derive(self, excs: Sequence[Exception]) -> ExceptionGroup[Exception]:  # type: ignore[override]
        # A split-off part (``except*``) is an ordinary group.
        return ExceptionGroup(self.message, excs)


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

    # The state (``protocol.state``) is the one implementation of "apply an
    # event" that every consumer's copy uses too; messages only ever grow at
    # the end, so index i is the same object forever.
    __slots__ = (
        "_changes",
        "_clock",
        "_limits",
        "_observation",
        "_persistence",
        "_prepared",
        "_state",
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
        limits: MessageLimits = DEFAULT_LIMITS,
    ) -> None:
        self._limits = limits
        self._state = TranscriptState(
            _new_id() if id is None else validate_id(id),
            _new_id() if epoch is None else _check_epoch(epoch),
        )
        self._changes = changes
        self._observation = observation
        self._persistence = persistence
        self._clock: Clock = _wall_clock if clock is None else clock
        #: The events of the latest prepare: ``apply`` takes their digests as
        #: computed (from this state, which only they can follow).
        self._prepared: tuple[TranscriptEvent, ...] = ()
        if messages:
            try:
                self.append(messages)
            except (ChangeCaptureError, ObservationError) as exc:
                # Committed nonetheless: the caller gets the transcript on the error.
                exc.transcript = self
                raise

    # --- reading ---------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._state.transcript_id

    @property
    def epoch(self) -> str:
        return self._state.epoch

    @property
    def revision(self) -> int:
        """The number of accepted changes (0 for a new, empty transcript)."""
        return self._state.revision

    @property
    def digest(self) -> str | None:
        """The rolling digest at ``revision`` (``protocol.digest``)."""
        return self._state.digest

    @property
    def state(self) -> TranscriptState:
        """The state itself (read only: change it through this entity)."""
        return self._state

    @property
    def length(self) -> int:
        """The number of messages."""
        return self._state.length

    @property
    def held_start(self) -> int:
        """Index of the first message held (0 unless rebuilt from a window or trimmed)."""
        return self._state.start

    def __len__(self) -> int:
        return self._state.length

    @property
    def active_start(self) -> int:
        """Index of the first message of the open segment."""
        return self._state.active_start

    def get(self, index: int) -> Message:
        """The message at ``index`` (always the same object).

        Raises ``IndexError`` unless ``0 <= index < length``; negative indices
        do not count from the end. ``TypeError`` for a non-integer (a bool too).
        """
        return self._state.get(index)

    def ref(self, index: int) -> MessageLocator:
        """A locator of the message at ``index`` (errors as for ``get``)."""
        self._state.get(index)
        return MessageLocator(transcript_id=self.id, index=int(index))

    def messages(self, start: int = 0, end: int | None = None) -> tuple[Message, ...]:
        """Messages ``[start, end)`` (``end`` defaults to ``length``), the same objects.

        Raises ``ValueError`` unless ``0 <= start <= end <= length``.
        """
        return self._state.slice(start, end)

    def segments(self) -> tuple[Segment, ...]:
        """Every segment ever started, oldest first; the open one ends in ``None``."""
        return self._state.segments()

    def active(self) -> tuple[Message, ...]:
        """The messages of the open segment: ``[active_start, length)``."""
        return self._state.slice(self._state.active_start)

    def views(self) -> tuple[View, ...]:
        """The Views, ordered by name."""
        return self._state.sorted_views()

    def view(self, name: str) -> View | None:
        """The View ``name``, ``None`` if there is none."""
        return self._state.views.get(name)

    def usage(
        self,
        ranges: Iterable[UsageRange] | None = None,
        *,
        segments: str | Iterable[int] | None = "all",
        views: Iterable[str] | None = None,
    ) -> MessageUsage:
        """How ``ranges`` use this transcript's messages, each message counted
        once by identity (``protocol.usage.message_usage``). Without
        ``ranges``: the segments and Views chosen as for
        ``protocol.usage.named_ranges`` (default every segment and every
        View). Raises ``ValueError`` for a range not within the messages held."""
        chosen = (
            list(ranges)
            if ranges is not None
            else named_ranges(self._state, segments=segments, views=views)
        )
        state = self._state
        low = min((r.start for r in chosen), default=state.start)
        high = max((r.end for r in chosen), default=low)
        return message_usage(chosen, state.slice(low, high), low)

    def snapshot(self, end: int | None = None, *, start: int = 0) -> TranscriptSnapshot:
        """The transcript now, with messages ``[start, end)``.

        ``revision`` is the current one; ``segments``, ``active_start`` and
        ``length`` are always the whole transcript's, so a range says it is
        partial (``snapshot.whole``). Raises ``ValueError`` unless
        ``0 <= start <= end <= length``.
        """
        return self._state.snapshot(start, end)

    def __repr__(self) -> str:
        state = self._state
        return (
            f"<Transcript {state.transcript_id!r} revision={state.revision} "
            f"length={state.length} active_start={state.active_start}>"
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
        committed (see ``server.model.changes``).
        """
        event = self.prepare_append(messages, origin=origin)
        if event is None:
            return []
        return self._commit_append(event)

    def append_from(
        self, reader: FixedMessages, *, origin: Origin | None = None
    ) -> list[AppendedEntry]:
        """Append the messages of another transcript's fixed range, as one
        change, reusing the same message objects (they were validated when
        first appended). An empty range changes nothing.

        Part of the contract's API (``../shared/CONTRACT.md``, with
        ``server.model.ranges``) for in-process users; the server does not
        use it."""
        batch = reader.messages()
        if not batch:
            return []
        limit = self._limits.max_messages_per_batch
        if len(batch) > limit:
            raise InvalidMessage("messages", f"too many messages: {len(batch)} > {limit}")
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

    def set_view(
        self, name: str, start: int, end: int | None = None, *, origin: Origin | None = None
    ) -> TranscriptEvent | None:
        """Create the View ``name`` or move it to ``[start, end)`` (``end``
        ``None``: open) as one change. Raises ``InvalidView`` unless
        ``0 <= start <= length`` and ``start <= end <= length``; returns the
        event, ``None`` when the View already has that range (nothing changed)."""
        event = self.prepare_view(name, start, end, origin=origin)
        if event is not None:
            self._commit(event)
            self.apply(event)
        return event

    def leave_view(self, name: str, *, origin: Origin | None = None) -> TranscriptEvent | None:
        """Leave the View ``name`` as one change (no message and no segment is
        touched); ``None`` when there is no such View (nothing changed)."""
        event = self.prepare_leave_view(name, origin=origin)
        if event is not None:
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
        batch = _validate_batch(messages, self._limits)
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
        state = self._state
        revision, length, digest = state.revision, state.length, state.digest
        for messages, origin in batches:
            batch = _validate_batch(messages, self._limits)
            if not batch:
                raise ValueError("prepare_appends: an empty batch takes no revision")
            revision += 1
            change = MessagesAppended(start=length, messages=batch)
            digest = None if digest is None else next_digest(digest, change)
            events.append(
                TranscriptEvent(
                    transcript_id=state.transcript_id,
                    epoch=state.epoch,
                    revision=revision,
                    occurred_at=self._clock(),
                    change=change,
                    origin=_check_origin(origin),
                    digest=digest,
                )
            )
            length += len(batch)
        self._prepared = tuple(events)
        return events

    def prepare_segment(
        self, start: int | None = None, *, origin: Origin | None = None
    ) -> TranscriptEvent:
        """Build the segment-start event for revision + 1, changing nothing.

        Raises ``InvalidSegment`` unless ``active_start < start <= length``
        (``start`` defaults to ``length``).
        """
        state = self._state
        length, active_start = state.length, state.active_start
        if start is None:
            new_start = length
        elif isinstance(start, int) and not isinstance(start, bool):
            new_start = start
        else:
            raise InvalidSegment(f"segment start must be an integer, got {start!r:.40}")
        if not active_start < new_start <= length:
            raise InvalidSegment(
                f"segment start {new_start} is invalid for transcript {state.transcript_id!r}: "
                f"it must satisfy active_start ({active_start}) < start <= length ({length})"
            )
        return self._next_event(
            SegmentStarted(previous_start=active_start, start=new_start, end=length), origin
        )

    def prepare_view(
        self, name: str, start: int, end: int | None = None, *, origin: Origin | None = None
    ) -> TranscriptEvent | None:
        """Build the ``view-changed`` event for revision + 1, changing nothing;
        ``None`` when the View already has that range. Raises ``InvalidView``."""
        state = self._state
        view = check_view(name, start, end, length=state.length)
        if state.views.get(name) == view:
            return None
        return self._next_event(ViewChanged(name=view.name, start=view.start, end=view.end), origin)

    def prepare_leave_view(
        self, name: str, *, origin: Origin | None = None
    ) -> TranscriptEvent | None:
        """Build the ``view-left`` event for revision + 1, changing nothing;
        ``None`` when there is no View ``name``."""
        view = self._state.views.get(name)
        if view is None:
            return None
        return self._next_event(ViewLeft(name=view.name, start=view.start, end=view.end), origin)

    def _next_event(self, change: Change, origin: Origin | None) -> TranscriptEvent:
        """The event of ``change`` at revision + 1, stamped now, with the
        digest that follows (``protocol.digest``)."""
        state = self._state
        digest = state.digest
        event = TranscriptEvent(
            transcript_id=state.transcript_id,
            epoch=state.epoch,
            revision=state.revision + 1,
            occurred_at=self._clock(),
            change=change,
            origin=_check_origin(origin),
            digest=None if digest is None else next_digest(digest, change),
        )
        self._prepared = (event,)
        return event

    def forget_before(self, index: int) -> int:
        """Stop holding the messages before ``index`` (they stay what they
        are; reading them here raises from now on). Returns how many were let
        go. Changes nothing else: not the revision, not a port."""
        return self._state.trim(index)

    def apply(self, event: TranscriptEvent) -> None:
        """Make a prepared (and already persisted) event the current state,
        then capture and observe it. Does not call ``persistence``.

        Raises ``InvalidChange`` (a ``ValueError``) and changes nothing unless
        the event is this transcript's (id and epoch) next change (revision +
        1, starting at the current length / active start): the very check a
        consumer's copy makes (``protocol.state.TranscriptState.apply``).
        After memory is updated: raises ``ChangeCaptureError`` if capture
        failed (observation is still tried), ``ObservationError`` if only
        observation failed, or a ``CaptureAndObservationError`` (an
        ``ExceptionGroup`` that is also a ``ChangeCaptureError``) holding both.
        """
        prepared = self._prepared
        own = any(event is one for one in prepared)
        self._state.apply(event, own_digest=own)
        if own:  # (hold no message longer than the state does)
            self._prepared = tuple(one for one in prepared if one is not event)
        self._report(event)

    # --- rebuilding --------------------------------------------------------------

    @classmethod
    def restore(
        cls,
        source: TranscriptSnapshot | Iterable[TranscriptEvent],
        *,
        id: str | None = None,
        epoch: str | None = None,
        **ports: Unpack[Ports],
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
                transcript._state.apply(event)
            except ValueError as exc:
                raise ValueError(f"events[{position}]: {exc}") from None
        return transcript

    @classmethod
    def restore_window(
        cls,
        snapshot: TranscriptSnapshot,
        **ports: Unpack[Ports],
    ) -> Transcript:
        """Rebuild a transcript from a snapshot that may hold only its newest
        messages (``[start, length)``: a server's store reads no more). It
        holds that window (see the module docstring); calls no port. Raises
        ``ValueError`` for an inconsistent snapshot or one whose messages do
        not reach its length."""
        state = TranscriptState.from_snapshot(snapshot)  # InvalidSnapshot is a ValueError
        transcript = cls(id=snapshot.transcript_id, epoch=snapshot.epoch, **ports)
        transcript._state = state
        return transcript

    @classmethod
    def _from_snapshot(
        cls,
        snapshot: TranscriptSnapshot,
        *,
        id: str | None,
        epoch: str | None,
        **ports: Unpack[Ports],
    ) -> Transcript:
        if not snapshot.whole:
            raise ValueError(
                f"cannot restore from a partial snapshot (messages [{snapshot.start}, "
                f"{snapshot.end}) of {snapshot.length}); a whole one holds them all"
            )
        _agree("id", id, snapshot.transcript_id)
        _agree("epoch", epoch, snapshot.epoch)
        state = TranscriptState.from_snapshot(snapshot)  # InvalidSnapshot is a ValueError
        transcript = cls(id=snapshot.transcript_id, epoch=snapshot.epoch, **ports)
        transcript._state = state
        return transcript

    # --- inside one change -------------------------------------------------------

    def _append_event(self, batch: tuple[Message, ...], origin: Origin | None) -> TranscriptEvent:
        return self._next_event(MessagesAppended(start=self._state.length, messages=batch), origin)

    def _commit_append(self, event: TranscriptEvent) -> list[AppendedEntry]:
        change = event.change
        assert isinstance(change, MessagesAppended)
        self._commit(event)
        entries = [
            AppendedEntry(self.id, change.start + k, message)
            for k, message in enumerate(change.messages)
        ]
        self.apply(event)
        return entries

    def _commit(self, event: TranscriptEvent) -> None:
        if self._persistence is not None:
            self._persistence.commit(event)

    def _report(self, event: TranscriptEvent) -> None:
        capture_error: ChangeCaptureError | None = None
        observation_error: ObservationError | None = None
        if self._changes is not None:
            try:
                self._changes.capture(event)
            except Exception as exc:
                capture_error = ChangeCaptureError((event,), exc)
        if self._observation is not None:
            record = record_of(event, self._state.length)
            try:
                self._observation.observe(record)
            except Exception as exc:
                observation_error = ObservationError((record,), exc)
        if capture_error is not None and observation_error is not None:
            raise CaptureAndObservationError(
                f"revision {event.revision} of transcript {self.id!r} is committed, "
                "but both change capture and observation failed",
                [capture_error, observation_error],
            )
        if capture_error is not None:
            raise capture_error
        if observation_error is not None:
            raise observation_error


# --- validation --------------------------------------------------------------------


def _validate_batch(messages: Iterable[MessageInput], limits: MessageLimits) -> tuple[Message, ...]:
    """The batch as validated ``Message`` structs (within ``limits``), or
    ``InvalidMessage``."""
    if type(messages) is ValidatedBatch and messages.within(limits):
        return messages  # checked by parse_messages against limits as tight
    if isinstance(messages, str | bytes | bytearray | Mapping | Message):
        raise InvalidMessage("messages", "expected a list of messages")
    items = messages if isinstance(messages, list | tuple) else list(messages)
    if not items:
        return ()
    if len(items) > limits.max_messages_per_batch:
        raise InvalidMessage(
            "messages", f"too many messages: {len(items)} > {limits.max_messages_per_batch}"
        )
    try:
        if not any(isinstance(item, Message) for item in items):
            return parse_messages(
                items,
                max_messages=limits.max_messages_per_batch,
                max_message_bytes=limits.max_message_bytes,
                max_depth=limits.max_depth,
            )
        return tuple(
            _check_struct(item, f"messages[{i}]", limits.max_message_bytes)
            if isinstance(item, Message)
            else parse_message(
                item,
                path=f"messages[{i}]",
                max_message_bytes=limits.max_message_bytes,
                max_depth=limits.max_depth,
            )
            for i, item in enumerate(items)
        )
    except (TypeError, OverflowError, msgspec.EncodeError) as exc:
        # metadata may hold values JSON cannot carry (sets, objects, huge ints).
        raise InvalidMessage("messages", f"cannot be encoded as JSON: {exc}") from None


def _check_struct(message: Message, path: str, max_bytes: int) -> Message:
    """Check a ``Message`` built in Python: its size, and its fields, which a
    Struct does not check when constructed directly. The message itself is
    kept when it is what decoding its JSON gives (it is frozen on
    construction); one holding plain dicts where parts belong is replaced by
    the decoded, canonical one."""
    check_message_values(message, path)
    encoded = _encode(message)
    if len(encoded) > max_bytes:
        raise InvalidMessage(
            path, f"message is {len(encoded)} bytes, more than the limit of {max_bytes}"
        )
    try:
        decoded = _decode_message(encoded)
    except msgspec.ValidationError as exc:
        raise InvalidMessage(path, str(exc).replace("$", path, 1)) from None
    return message if decoded == message else decoded


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
