"""The ``Store`` interface: where transcripts live when no process holds them.

Every backend (``memory``, ``sqlite``, ``redis``) implements ``Store`` and
passes the one shared contract suite in ``tests/server/store_contract.py``.

The unit of storage is the event: a transcript is its creation record (id,
epoch, creation time) plus its events in revision order. ``append`` is one
atomic step that checks the revision, records the event and the idempotency
key together, so a retried append after a crash or a reconnect is recognised
and never applied twice.

Errors::

    StoreError
    ├── TranscriptNotFound   no transcript with that id
    ├── TranscriptExists     create() of an id that exists
    ├── RevisionMismatch     append() of an event whose revision is not stored+1;
    │                        ``current`` is the stored revision
    └── StoreUnavailable     the backend cannot be reached now; nothing was
                             applied, the caller may retry (same idempotency key)
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import msgspec

from protocol.types import MessagesAppended, TranscriptEvent


class StoreError(Exception):
    """Base class of store errors."""


class TranscriptNotFound(StoreError):
    def __init__(self, transcript_id: str) -> None:
        super().__init__(f"transcript {transcript_id!r} not found")
        self.transcript_id = transcript_id


class TranscriptExists(StoreError):
    def __init__(self, transcript_id: str) -> None:
        super().__init__(f"transcript {transcript_id!r} already exists")
        self.transcript_id = transcript_id


class RevisionMismatch(StoreError):
    def __init__(self, transcript_id: str, expected: int, current: int) -> None:
        super().__init__(
            f"transcript {transcript_id!r}: event for revision {expected + 1} "
            f"but the store is at {current}"
        )
        self.transcript_id = transcript_id
        self.expected = expected
        self.current = current


class StoreUnavailable(StoreError):
    """The backend is unreachable or timed out; nothing was applied."""


class AppendAck(msgspec.Struct, frozen=True):
    """What an accepted append answered; kept per idempotency key.

    For a segment start ``start`` is the new active start and ``count`` is 0.
    """

    revision: int
    start: int
    count: int

    @classmethod
    def for_event(cls, event: TranscriptEvent) -> AppendAck:
        """The ack that accepting ``event`` answers (the same in every backend)."""
        change = event.change
        if isinstance(change, MessagesAppended):
            return cls(event.revision, change.start, len(change.messages))
        return cls(event.revision, change.start, 0)


class StoredTranscript(msgspec.Struct, frozen=True):
    """Everything needed to bring a transcript back into memory.

    ``events`` is the complete event log, oldest first (revision 1..N), so that
    ``Transcript.restore`` rebuilds exactly the same transcript.
    ``idempotency`` holds the retained keys and their acks.
    """

    transcript_id: str
    epoch: str
    created_at: int
    events: tuple[TranscriptEvent, ...]
    idempotency: dict[str, AppendAck] = {}

    @property
    def revision(self) -> int:
        return self.events[-1].revision if self.events else 0


class TranscriptInfo(msgspec.Struct, frozen=True, rename="camel"):
    """A line of ``list()``: enough to show a transcript in a list."""

    transcript_id: str
    epoch: str
    revision: int
    length: int
    created_at: int
    updated_at: int


class AppendResult(msgspec.Struct, frozen=True):
    """The outcome of ``Store.append``.

    ``duplicate`` is true when the idempotency key was already recorded: then
    nothing was stored and ``ack`` is the first append's ack.
    """

    ack: AppendAck
    duplicate: bool = False


@runtime_checkable
class Store(Protocol):
    """Async storage of transcripts. Implementations must be safe to call from
    one event loop with many concurrent tasks."""

    #: A short name for logs and metrics: "memory", "sqlite", "redis".
    name: str

    async def open(self) -> None:
        """Connect / create files. Called once before any other method."""

    async def close(self) -> None:
        """Flush and release everything. Nothing acknowledged may be lost."""

    async def create(
        self,
        transcript_id: str,
        epoch: str,
        created_at: int,
        first: TranscriptEvent | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> None:
        """Create a transcript, atomically with its first event if given
        (initial messages are revision 1). Raises ``TranscriptExists``."""

    async def load(self, transcript_id: str) -> StoredTranscript | None:
        """The whole transcript, or ``None`` if there is no such id."""

    async def append(
        self, event: TranscriptEvent, *, idempotency_key: str | None = None
    ) -> AppendResult:
        """Atomically: if ``idempotency_key`` is recorded for this transcript,
        return its ack with ``duplicate=True`` and store nothing; else require
        ``event.revision == stored revision + 1`` (else ``RevisionMismatch``),
        store the event and the key with its ack. Raises ``TranscriptNotFound``.
        An event of another ``epoch`` (a stale copy of a transcript that was
        deleted and created again) is refused with ``RevisionMismatch`` too.
        """

    async def events_after(
        self, transcript_id: str, revision: int, *, limit: int | None = None
    ) -> list[TranscriptEvent] | None:
        """Events with revision > ``revision`` in order (at most ``limit``),
        ``[]`` when ``revision`` is current, or ``None`` when the store no
        longer holds all of them (trimmed history) or ``revision`` is beyond
        the stored one (a history this store does not have). Raises
        ``TranscriptNotFound``.
        """

    async def list(self, *, after: str | None = None, limit: int = 100) -> list[TranscriptInfo]:
        """Transcripts ordered by id, starting after ``after``."""

    async def delete(self, transcript_id: str) -> bool:
        """Remove a transcript and its history; ``False`` if it did not exist."""
