"""``MemoryStore``: the ``Store`` interface kept in dicts of this process.

Nothing survives the process; use it for tests and ``--store memory``. Every
method runs to completion without awaiting anything, so on one event loop each
call is atomic with respect to every other call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.types import MessagesAppended, TranscriptEvent
from server.store.base import (
    AppendAck,
    AppendResult,
    RevisionMismatch,
    StoredTranscript,
    StoreUnavailable,
    TranscriptExists,
    TranscriptInfo,
    TranscriptNotFound,
)

__all__ = ["MemoryStore"]


@dataclass
class _Entry:
    """One transcript as this store holds it."""

    epoch: str
    created_at: int
    updated_at: int
    events: list[TranscriptEvent] = field(default_factory=list)
    length: int = 0
    # Insertion order is revision order, so the oldest key is always first.
    keys: dict[str, AppendAck] = field(default_factory=dict)

    @property
    def revision(self) -> int:
        return self.events[-1].revision if self.events else 0


class MemoryStore:
    """A ``Store`` in process memory.

    ``idempotency_retention`` is how many idempotency keys are kept per
    transcript (the newest ones); 0 keeps none.
    """

    name = "memory"

    def __init__(self, idempotency_retention: int = 1000) -> None:
        if idempotency_retention < 0:
            raise ValueError("idempotency_retention must be >= 0")
        self._retention = idempotency_retention
        self._transcripts: dict[str, _Entry] = {}
        self._closed = False

    async def open(self) -> None:
        """Nothing to connect; a closed store is usable again after ``open``."""
        self._closed = False

    async def close(self) -> None:
        """Refuse further calls; the data stays in this object."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable("memory store is closed")

    async def create(
        self,
        transcript_id: str,
        epoch: str,
        created_at: int,
        first: TranscriptEvent | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> None:
        """Create a transcript, with its first event (revision 1) if given.

        ``idempotency_key`` is recorded with the first event's ack; without a
        first event there is no ack and the key is ignored.
        """
        self._check_open()
        check_first_event(transcript_id, epoch, first)
        if transcript_id in self._transcripts:
            raise TranscriptExists(transcript_id)
        entry = _Entry(epoch=epoch, created_at=created_at, updated_at=created_at)
        self._transcripts[transcript_id] = entry
        if first is not None:
            self._accept(entry, first, idempotency_key)

    async def load(self, transcript_id: str) -> StoredTranscript | None:
        self._check_open()
        entry = self._transcripts.get(transcript_id)
        if entry is None:
            return None
        return StoredTranscript(
            transcript_id=transcript_id,
            epoch=entry.epoch,
            created_at=entry.created_at,
            events=tuple(entry.events),
            idempotency=dict(entry.keys),
        )

    async def append(
        self, event: TranscriptEvent, *, idempotency_key: str | None = None
    ) -> AppendResult:
        self._check_open()
        entry = self._transcripts.get(event.transcript_id)
        if entry is None:
            raise TranscriptNotFound(event.transcript_id)
        if event.epoch != entry.epoch:
            raise RevisionMismatch(event.transcript_id, event.revision - 1, entry.revision)
        if idempotency_key is not None:
            ack = entry.keys.get(idempotency_key)
            if ack is not None:
                return AppendResult(ack, duplicate=True)
        if event.revision != entry.revision + 1:
            raise RevisionMismatch(event.transcript_id, event.revision - 1, entry.revision)
        return AppendResult(self._accept(entry, event, idempotency_key))

    def _accept(self, entry: _Entry, event: TranscriptEvent, key: str | None) -> AppendAck:
        entry.events.append(event)
        entry.updated_at = event.occurred_at
        if isinstance(event.change, MessagesAppended):
            entry.length = event.change.end
        ack = AppendAck.for_event(event)
        if key is not None and self._retention > 0:
            entry.keys[key] = ack
            while len(entry.keys) > self._retention:
                del entry.keys[next(iter(entry.keys))]
        return ack

    async def events_after(
        self, transcript_id: str, revision: int, *, limit: int | None = None
    ) -> list[TranscriptEvent] | None:
        """Events after ``revision``; ``None`` if ``revision`` is beyond the
        stored one (that history is not here). The whole log is kept."""
        self._check_open()
        entry = self._transcripts.get(transcript_id)
        if entry is None:
            raise TranscriptNotFound(transcript_id)
        check_events_after_args(revision, limit)
        if revision > entry.revision:
            return None
        # Revision r is at index r - 1: the log has no gaps.
        end = None if limit is None else revision + limit
        return entry.events[revision:end]

    async def list(self, *, after: str | None = None, limit: int = 100) -> list[TranscriptInfo]:
        self._check_open()
        if limit < 0:
            raise ValueError("limit must be >= 0")
        ids = sorted(i for i in self._transcripts if after is None or i > after)[:limit]
        return [self._info(i) for i in ids]

    def _info(self, transcript_id: str) -> TranscriptInfo:
        entry = self._transcripts[transcript_id]
        return TranscriptInfo(
            transcript_id=transcript_id,
            epoch=entry.epoch,
            revision=entry.revision,
            length=entry.length,
            created_at=entry.created_at,
            updated_at=entry.updated_at,
        )

    async def delete(self, transcript_id: str) -> bool:
        self._check_open()
        return self._transcripts.pop(transcript_id, None) is not None


def check_first_event(transcript_id: str, epoch: str, first: TranscriptEvent | None) -> None:
    """Refuse a first event that does not belong to the transcript being created.

    A first event must be revision 1 (else ``RevisionMismatch`` against 0); one
    of another id or epoch is a caller's bug (``ValueError``).
    """
    if first is None:
        return
    if first.transcript_id != transcript_id or first.epoch != epoch:
        raise ValueError(
            f"first event belongs to {first.transcript_id!r}/{first.epoch!r}, "
            f"not {transcript_id!r}/{epoch!r}"
        )
    if first.revision != 1:
        raise RevisionMismatch(transcript_id, first.revision - 1, 0)


def check_events_after_args(revision: int, limit: int | None) -> None:
    """``revision`` and ``limit`` of ``events_after`` must not be negative."""
    if revision < 0:
        raise ValueError("revision must be >= 0")
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
