"""The ports through which a ``Transcript`` reports its changes.

One accepted change of a transcript goes, in this order, through::

    persistence.commit(event)    before memory changes; if it raises, nothing changed
    (messages and revision updated)
    changes.capture(event)       hands the frozen event on; never runs a consumer
    observation.observe(record)  ids and ranges only, never message bodies

``ChangeCapture``, ``Observation`` and ``Persistence`` are the ports (typing
protocols); ``ChangeBuffer`` and ``RecordingObservation`` are the presets.

Errors raised after the change is committed (the transcript keeps it), defined
beside the entity in ``server.model.transcript`` (they carry it)::

    ChangeCaptureError              capture raised; ``events`` and ``cause`` say what and why
    ├── CaptureAndObservationError  both raised for one change: an ``ExceptionGroup`` too,
    │                               holding one of each, in that order
    ObservationError                observation raised; ``records`` and ``cause``

``except ChangeCaptureError`` (the seed's "stop" signal) catches a capture
failure whether or not observation failed with it. When the change was the
initial append of ``Transcript(messages, ...)``, the error's ``transcript``
holds the entity the constructor could not return.
"""

from __future__ import annotations

import asyncio
from typing import Literal, Protocol, runtime_checkable

from protocol.types import (
    MessagesAppended,
    SegmentStarted,
    TranscriptEvent,
    TranscriptRecord,
    ViewChanged,
)

__all__ = [
    "ChangeBuffer",
    "ChangeCapture",
    "Observation",
    "Persistence",
    "RecordingObservation",
    "record_of",
]


# --- ports -------------------------------------------------------------------


@runtime_checkable
class ChangeCapture(Protocol):
    """Takes each accepted event, synchronously, in revision order.

    ``capture`` either accepts the event fully or raises before accepting it,
    and it never runs a consumer: whoever reads the events does so later, in
    its own task.
    """

    def capture(self, event: TranscriptEvent) -> None: ...


@runtime_checkable
class Observation(Protocol):
    """Is told of each accepted change as a ``TranscriptRecord`` (no bodies)."""

    def observe(self, record: TranscriptRecord) -> None: ...


@runtime_checkable
class Persistence(Protocol):
    """Commits each event before the transcript's memory changes.

    ``commit`` is synchronous; if it raises, the event was not committed and
    the transcript does not change.
    """

    def commit(self, event: TranscriptEvent) -> None: ...


# --- errors --------------------------------------------------------------------


# --- presets -------------------------------------------------------------------


def record_of(event: TranscriptEvent, length: int = 0) -> TranscriptRecord:
    """The record of one event: for an append the appended range
    ``[start, start + count)``, for a segment start the new segment's
    ``[start, end)`` where ``end`` is the length at that moment, for a View
    change the View's name and range (``length``: the transcript's length
    after the event, which an open View's end is recorded as)."""
    change = event.change
    kind: Literal["messages-appended", "segment-started", "view-changed", "view-left"]
    name: str | None = None
    if isinstance(change, MessagesAppended):
        kind, start, end = "messages-appended", change.start, change.start + len(change.messages)
    elif isinstance(change, SegmentStarted):
        kind, start, end = "segment-started", change.start, change.end
    else:
        kind = "view-changed" if isinstance(change, ViewChanged) else "view-left"
        start, end = change.start, length if change.end is None else change.end
        name = change.name
    return TranscriptRecord(
        transcript_id=event.transcript_id,
        revision=event.revision,
        kind=kind,
        start=start,
        end=end,
        occurred_at=event.occurred_at,
        name=name,
    )


class RecordingObservation:
    """Keeps every record it is told of in ``records``, oldest first.

    A preset of the contract's API (``../shared/CONTRACT.md``) for in-process
    users and tests; the server observes nothing this way."""

    def __init__(self) -> None:
        self.records: list[TranscriptRecord] = []

    def observe(self, record: TranscriptRecord) -> None:
        self.records.append(record)


class ChangeBuffer:
    """Pending events waiting for one consumer task; a ``ChangeCapture``.

    ``capture`` appends and wakes the waiter, nothing more: the consumer runs
    in its own task, after ``await wait()``, and takes the whole pending batch
    with ``take()``. One buffer may be shared by several transcripts; events
    keep the order in which they were captured. It keeps no history and knows
    no acks: once taken, an event is the taker's.

    ``capture`` may be called with no event loop running; ``wait`` needs one.
    """

    def __init__(self) -> None:
        self._pending: list[TranscriptEvent] = []
        #: The waiters' futures (made when they wait, so a buffer can be made
        #: and filled before any loop runs) and whether a wake-up is due.
        self._waiters: list[asyncio.Future[None]] = []
        self._wake_due = False

    def capture(self, event: TranscriptEvent) -> None:
        """Add ``event`` to the pending batch and wake the waiter."""
        self._pending.append(event)
        # The wake-up is decided at the next turn of the loop, never here: a
        # taker that empties the buffer in this turn (the committer delivers
        # its own events) spares the waiter a wake-up for nothing.
        if self._waiters and not self._wake_due:
            self._wake_due = True
            self._waiters[0].get_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_due = False
        if not self._pending:
            return
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def take(self) -> tuple[TranscriptEvent, ...]:
        """The pending batch in capture order (an immutable tuple); the buffer
        is empty afterwards."""
        batch = tuple(self._pending)
        self._pending.clear()
        return batch

    async def wait(self) -> None:
        """Return at once if anything is pending, else when something is captured."""
        # A waiter woken by a capture whose events another task took first
        # waits again rather than returning to an empty buffer.
        while not self._pending:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def __len__(self) -> int:
        return len(self._pending)

    def __repr__(self) -> str:
        return f"<ChangeBuffer pending={len(self._pending)}>"
