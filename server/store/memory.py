"""``MemoryStore``: the ``Store`` interface kept in dicts of this process.

Nothing survives the process; use it for tests and ``--store memory``. Every
method runs to completion without awaiting anything, so on one event loop each
call is atomic with respect to every other call.

``SharedMemoryStore`` also implements the backplane's port (``SharedStore``:
change notices and heads), so several hubs of one process on one such store
behave like replicas on one Redis: the backplane's logic is tested without a
Redis server.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field

import msgspec

from protocol.summary import preview_of, title_of
from protocol.types import (
    Message,
    MessagesAppended,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
    View,
    ViewChanged,
)
from server.store.base import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    DEFAULT_IDEMPOTENCY_TTL_S,
    LOADED_KEYS,
    AppendResult,
    Head,
    NewTranscript,
    Notice,
    Receipt,
    RevisionMismatch,
    StoredRange,
    StoredState,
    StoredTranscript,
    StoreError,
    StoreUnavailable,
    TranscriptExists,
    TranscriptInfo,
    TranscriptNotFound,
    check_events_after_args,
    check_idempotency_args,
    check_list_args,
    check_range_args,
    digest_of_log,
    head_digest,
    messages_in,
    position_of,
    recent_start,
)
from server.store.options import MemoryOptions, validated

__all__ = ["MemoryStore", "SharedMemoryStore"]

_encode = msgspec.msgpack.Encoder().encode


@dataclass
class _Entry:
    """One transcript as this store holds it: its events, and what the other
    backends keep beside them (length, active start, closed segments, Views,
    the message index) so that every backend answers alike."""

    epoch: str
    created_at: int
    updated_at: int
    events: list[TranscriptEvent] = field(default_factory=list)
    length: int = 0
    active_start: int = 0
    closed: list[Segment] = field(default_factory=list)
    views: dict[str, View] = field(default_factory=dict)
    view_changes: int = 0
    #: msg_end of every append, and the position of that append in ``events``.
    ends: list[int] = field(default_factory=list)
    appends: list[int] = field(default_factory=list)
    # Insertion order is revision (and time) order: the oldest key is first.
    # Each key's receipt and when it was recorded (``clock()`` seconds).
    keys: dict[str, tuple[Receipt, float]] = field(default_factory=dict)
    title: str | None = None
    #: The messages of the last append: the preview is made from them when a
    #: listing asks for it, not on every append (it cost 12% of the server's
    #: CPU in the chatroom profile).
    last_messages: tuple[Message, ...] = ()

    @property
    def preview(self) -> str | None:
        return preview_of(self.last_messages)

    @property
    def revision(self) -> int:
        return self.events[-1].revision if self.events else 0

    def messages(self, start: int, end: int) -> tuple[Message, ...]:
        """Messages ``[start, end)`` from the appends that hold them."""
        if start >= end:
            return ()
        first = bisect.bisect_right(self.ends, start)
        last = bisect.bisect_left(self.ends, end, lo=first)
        held = (self.events[i] for i in self.appends[first : last + 1])
        return messages_in(held, start, end)


class MemoryStore:
    """A ``Store`` in process memory.

    ``idempotency_retention`` is how many idempotency keys are kept per
    transcript (the newest ones; 0 keeps none), each for
    ``idempotency_ttl_s`` seconds of ``clock``.
    """

    name = "memory"

    def __init__(
        self,
        options: MemoryOptions | None = None,
        *,
        idempotency_retention: int = DEFAULT_IDEMPOTENCY_RETENTION,
        idempotency_ttl_s: float = DEFAULT_IDEMPOTENCY_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_idempotency_args(idempotency_retention, idempotency_ttl_s)
        self.options = validated(options or MemoryOptions())
        self.idempotency_retention = idempotency_retention
        self.idempotency_ttl_s = idempotency_ttl_s
        self._clock = clock
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

    async def create(self, new: NewTranscript) -> None:
        self._check_open()
        if new.transcript_id in self._transcripts:
            raise TranscriptExists(new.transcript_id)
        entry = _Entry(epoch=new.epoch, created_at=new.created_at, updated_at=new.created_at)
        self._transcripts[new.transcript_id] = entry
        if new.first is not None:
            self._accept(entry, new.first, new.idempotency_key)
        self._changed(Notice(new.transcript_id, new.epoch, entry.revision))

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
            size=sum(len(_encode(event)) for event in entry.events),
            idempotency=self._loaded_keys(entry),
        )

    def _loaded_keys(self, entry: _Entry) -> dict[str, Receipt]:
        """The newest ``LOADED_KEYS`` keys not expired, oldest first."""
        cutoff = self._clock() - self.idempotency_ttl_s
        return {
            key: receipt
            for key, (receipt, at) in list(entry.keys.items())[-LOADED_KEYS:]
            if at >= cutoff
        }

    async def recorded(self, transcript_id: str, key: str) -> Receipt | None:
        self._check_open()
        entry = self._transcripts.get(transcript_id)
        return None if entry is None else self._receipt(entry, key)

    def _receipt(self, entry: _Entry, key: str) -> Receipt | None:
        kept = entry.keys.get(key)
        if kept is None or kept[1] < self._clock() - self.idempotency_ttl_s:
            return None
        return kept[0]

    async def append(
        self, event: TranscriptEvent, *, idempotency_key: str | None = None
    ) -> AppendResult:
        self._check_open()
        return self._append(event, idempotency_key)

    async def append_many(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> list[AppendResult | Exception]:
        """Each append in order (all in one step of the event loop); once
        one of a transcript is not stored, no later one of it is."""
        return self._append_many(items)

    def submit_appends(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> asyncio.Future[list[AppendResult | Exception]]:
        """``append_many`` done now (``SubmitsAppends``): a future already done."""
        future: asyncio.Future[list[AppendResult | Exception]]
        future = asyncio.get_running_loop().create_future()
        future.set_result(self._append_many(items))
        return future

    def _append_many(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> list[AppendResult | Exception]:
        self._check_open()
        outcomes: list[AppendResult | Exception] = []
        broken: set[str] = set()
        for event, key in items:
            tid = event.transcript_id
            try:
                if tid in broken:
                    raise self._not_attempted(event)
                result = self._append(event, key)
            except StoreError as exc:
                outcomes.append(exc)
                broken.add(tid)
            else:
                outcomes.append(result)
                if result.duplicate:
                    broken.add(tid)
        return outcomes

    def _not_attempted(self, event: TranscriptEvent) -> StoreError:
        """The refusal of an item planned on top of one that was not stored."""
        entry = self._transcripts.get(event.transcript_id)
        if entry is None:
            return TranscriptNotFound(event.transcript_id)
        return RevisionMismatch(event.transcript_id, event.revision - 1, entry.revision)

    def _append(self, event: TranscriptEvent, idempotency_key: str | None) -> AppendResult:
        entry = self._transcripts.get(event.transcript_id)
        if entry is None:
            raise TranscriptNotFound(event.transcript_id)
        if event.epoch != entry.epoch:
            raise RevisionMismatch(event.transcript_id, event.revision - 1, entry.revision)
        if idempotency_key is not None:
            ack = self._receipt(entry, idempotency_key)
            if ack is not None:
                return AppendResult(ack, duplicate=True)
        position = position_of(event)
        if event.revision != entry.revision + 1 or position not in (None, entry.length):
            raise RevisionMismatch(event.transcript_id, event.revision - 1, entry.revision)
        receipt = self._accept(entry, event, idempotency_key)
        self._changed(Notice(event.transcript_id, event.epoch, event.revision))
        return AppendResult(receipt)

    def _accept(self, entry: _Entry, event: TranscriptEvent, key: str | None) -> Receipt:
        entry.events.append(event)
        entry.updated_at = event.occurred_at
        change = event.change
        if isinstance(change, MessagesAppended):
            entry.length = change.end
            entry.ends.append(change.end)
            entry.appends.append(len(entry.events) - 1)
            if entry.title is None:
                entry.title = title_of(change.messages)
            entry.last_messages = change.messages
        elif isinstance(change, SegmentStarted):
            entry.closed.append(Segment(change.previous_start, change.end))
            entry.active_start = change.start
        else:
            if isinstance(change, ViewChanged):
                entry.views[change.name] = View(change.name, change.start, change.end)
            else:
                entry.views.pop(change.name, None)
            entry.view_changes += 1
        receipt = Receipt.for_event(event)
        if key is not None and self.idempotency_retention > 0:
            now = self._clock()
            entry.keys.pop(key, None)  # an expired one: the new one goes last
            entry.keys[key] = (receipt, now)
            keys = entry.keys
            cutoff = now - self.idempotency_ttl_s
            while len(keys) > self.idempotency_retention or keys[next(iter(keys))][1] < cutoff:
                del keys[next(iter(keys))]
        return receipt

    def _changed(self, notice: Notice) -> None:
        """A change was stored (``SharedMemoryStore`` tells its listeners)."""

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

    async def load_recent(
        self, transcript_id: str, *, messages: int | None = None
    ) -> StoredState | None:
        self._check_open()
        entry = self._transcripts.get(transcript_id)
        if entry is None:
            return None
        first = recent_start(entry.length, messages)
        snapshot = TranscriptSnapshot(
            transcript_id=transcript_id,
            epoch=entry.epoch,
            revision=entry.revision,
            start=first,
            messages=entry.messages(first, entry.length),
            active_start=entry.active_start,
            segments=(*entry.closed, Segment(entry.active_start, None)),
            length=entry.length,
            views=tuple(sorted(entry.views.values(), key=lambda view: view.name)),
            view_changes=entry.view_changes,
            digest=head_digest(transcript_id, entry.events[-1] if entry.events else None)
            or digest_of_log(transcript_id, entry.events),
        )
        return StoredState(snapshot, entry.created_at, self._loaded_keys(entry))

    async def read_messages(self, transcript_id: str, start: int, end: int) -> StoredRange:
        self._check_open()
        check_range_args(start, end)
        entry = self._transcripts.get(transcript_id)
        if entry is None:
            raise TranscriptNotFound(transcript_id)
        first, last = min(start, entry.length), min(end, entry.length)
        return StoredRange(
            entry.epoch, entry.revision, entry.length, first, entry.messages(first, last)
        )

    async def list(self, *, after: str | None = None, limit: int = 100) -> list[TranscriptInfo]:
        self._check_open()
        check_list_args(limit)
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
            title=entry.title,
            preview=entry.preview,
        )

    async def delete(self, transcript_id: str) -> bool:
        self._check_open()
        if self._transcripts.pop(transcript_id, None) is None:
            return False
        self._changed(Notice(transcript_id, "", 0))
        return True


class _Listener:
    """One ``notices()`` iteration: the notices not yet taken, bounded."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pending: deque[Notice | None] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False

    def put(self, notice: Notice | None) -> None:
        if len(self.pending) >= self.limit:
            # A listener that does not keep up loses the detail, not the news:
            # ``None`` tells it to check every copy, as after a reconnection.
            self.pending.clear()
            notice = None
        self.pending.append(notice)
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def get(self) -> Notice | None:
        while not self.pending:
            if self.closed:
                raise StoreUnavailable("memory store is closed")
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        return self.pending.popleft()


class SharedMemoryStore(MemoryStore):
    """A ``MemoryStore`` several hubs of this process share as replicas share
    Redis: it implements ``SharedStore`` (notices and heads).

    ``notice_backlog`` bounds the notices kept for a listener that does not
    take them; past it the listener gets ``None`` (check every copy).
    """

    def __init__(
        self,
        options: MemoryOptions | None = None,
        *,
        idempotency_retention: int = DEFAULT_IDEMPOTENCY_RETENTION,
        idempotency_ttl_s: float = DEFAULT_IDEMPOTENCY_TTL_S,
        notice_backlog: int = 10_000,
    ) -> None:
        super().__init__(
            options,
            idempotency_retention=idempotency_retention,
            idempotency_ttl_s=idempotency_ttl_s,
        )
        self._notice_backlog = notice_backlog
        self._listeners: list[_Listener] = []

    def _changed(self, notice: Notice) -> None:
        for listener in self._listeners:
            listener.put(notice)

    async def close(self) -> None:
        await super().close()
        for listener in self._listeners:
            listener.close()

    async def notices(self) -> AsyncIterator[Notice | None]:
        """Every change's notice for as long as the caller iterates; ``None``
        first. Ends with ``StoreUnavailable`` when the store is closed."""
        self._check_open()
        listener = _Listener(self._notice_backlog)
        self._listeners.append(listener)
        try:
            yield None
            while True:
                yield await listener.get()
        finally:
            self._listeners.remove(listener)

    def watch(self, transcript_ids: Iterable[str]) -> bool:
        """Every change is announced to every listener: nothing to do."""
        return False

    def unwatch(self, transcript_ids: Iterable[str]) -> None:
        """Every change is announced to every listener: nothing to do."""

    async def heads(self, transcript_ids: Iterable[str]) -> dict[str, Head | None]:
        self._check_open()
        heads: dict[str, Head | None] = {}
        for tid in transcript_ids:
            entry = self._transcripts.get(tid)
            heads[tid] = None if entry is None else Head(entry.epoch, entry.revision)
        return heads
