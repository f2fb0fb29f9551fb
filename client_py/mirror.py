"""``Mirror``: the client's live copy of one subscribed transcript.

The client's reader task is the only writer: it feeds every frame about the
transcript to the mirror's ``Continuity`` and calls ``_apply``/``_replace``/
``_fail`` with what it decided. Readers see a consistent copy between awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeAlias

from client_py.errors import ClientClosed
from protocol.continuity import Continuity, Counters
from protocol.types import (
    Message,
    MessagesAppended,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
)

__all__ = ["EventStream", "Mirror", "MirrorUpdate"]

#: What ``Mirror.events()`` yields: an applied event, or the snapshot that
#: replaced the copy (the first baseline is not yielded; a later one is, e.g.
#: after a long disconnect or when the transcript was re-created).
MirrorUpdate: TypeAlias = TranscriptEvent | TranscriptSnapshot

_END = object()


class Mirror:
    """A live copy of one transcript, kept up to date by the client.

    ``messages`` are those from index ``start`` on (``start`` is 0 unless the
    server sent a partial baseline); ``revision`` and ``epoch`` are the
    copy's; ``counters`` are its continuity counters. ``failed`` is the error
    that ended the subscription, if any.
    """

    def __init__(self, transcript_id: str) -> None:
        self.transcript_id = transcript_id
        self.continuity = Continuity(transcript_id)
        self.start = 0
        self.active_start = 0
        self.failed: BaseException | None = None
        self._messages: list[Message] = []
        self._frozen: tuple[Message, ...] | None = ()
        self._segments: list[Segment] = [Segment(0, None)]
        self._revision: int | None = None
        self._epoch: str | None = None
        self._ready = asyncio.get_running_loop().create_future()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._streams: list[EventStream] = []

    def __repr__(self) -> str:
        return (
            f"Mirror({self.transcript_id!r}, revision={self._revision}, "
            f"length={self.length}, epoch={self._epoch!r})"
        )

    # -- the copy --------------------------------------------------------------------

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages held, oldest first (from index ``start``)."""
        if self._frozen is None:
            self._frozen = tuple(self._messages)
        return self._frozen

    @property
    def revision(self) -> int:
        """The copy's revision (``-1`` before the first baseline)."""
        return -1 if self._revision is None else self._revision

    @property
    def epoch(self) -> str | None:
        return self._epoch

    @property
    def length(self) -> int:
        """Index one past the last message held."""
        return self.start + len(self._messages)

    @property
    def segments(self) -> tuple[Segment, ...]:
        """Every segment started, oldest first; the open one has ``end=None``."""
        return tuple(self._segments)

    @property
    def counters(self) -> Counters:
        return self.continuity.counters

    @property
    def ready(self) -> bool:
        """True once the first baseline arrived."""
        return self._revision is not None

    # -- waiting ------------------------------------------------------------------------

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait for the first baseline; raises the subscription's error if it failed."""
        async with asyncio.timeout(timeout):
            await asyncio.shield(self._ready)

    async def wait_for_revision(self, revision: int, timeout: float | None = 10.0) -> None:
        """Return once the copy is at ``revision`` or later.

        Raises ``TimeoutError`` after ``timeout`` seconds, or the error that
        ended the subscription (``NotFound``, ``ClientClosed``, ...).
        """
        if self.failed is not None:
            raise self.failed
        if self._revision is not None and self._revision >= revision:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (revision, future)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            raise TimeoutError(
                f"{self.transcript_id}: revision {revision} not reached in {timeout} s "
                f"(mirror at {self.revision})"
            ) from None
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    def events(self) -> EventStream:
        """An async iterator of every update applied from now on.

        It registers at once (not at the first ``__anext__``), so reading
        ``messages`` right after calling this and then iterating misses
        nothing. It ends when the client closes and raises the error that
        ended the subscription.
        """
        stream = EventStream(self)
        self._streams.append(stream)
        return stream

    # -- the reader's side ----------------------------------------------------------------

    def _replace(self, snapshot: TranscriptSnapshot) -> None:
        first = self._revision is None
        self._messages = list(snapshot.messages)
        self._frozen = None
        self.start = snapshot.start
        self.active_start = snapshot.active_start
        self._segments = list(snapshot.segments) or [Segment(0, None)]
        self._revision = snapshot.revision
        self._epoch = snapshot.epoch
        if not self._ready.done():
            self._ready.set_result(None)
        if not first:
            self._publish(snapshot)
        self._wake()

    def _apply(self, event: TranscriptEvent) -> None:
        change = event.change
        if isinstance(change, MessagesAppended):
            if change.start != self.length:
                # Continuity vouched for the revision; a start that does not
                # join up means the server broke the model. Keep the copy and
                # let the caller see it rather than guess.
                raise ValueError(
                    f"{self.transcript_id}: event {event.revision} appends at {change.start}, "
                    f"the copy ends at {self.length}"
                )
            self._messages.extend(change.messages)
            self._frozen = None
        elif isinstance(change, SegmentStarted):
            self.active_start = change.start
            if self._segments and self._segments[-1].end is None:
                self._segments[-1] = Segment(self._segments[-1].start, change.start)
            self._segments.append(Segment(change.start, None))
        self._revision = event.revision
        self._epoch = event.epoch
        self._publish(event)
        self._wake()

    def _fail(self, error: BaseException) -> None:
        if self.failed is not None:
            return
        self.failed = error
        if not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved: no "never retrieved" warning
        for _, future in self._waiters:
            if not future.done():
                future.set_exception(error)
        self._waiters.clear()
        for stream in self._streams:
            stream._push(_END)
        self._streams.clear()

    def _close(self) -> None:
        self._fail(ClientClosed(f"the client was closed ({self.transcript_id})"))

    def _publish(self, update: MirrorUpdate) -> None:
        for stream in self._streams:
            stream._push(update)

    def _wake(self) -> None:
        revision = self.revision
        keep: list[tuple[int, asyncio.Future[None]]] = []
        for wanted, future in self._waiters:
            if future.done():
                continue
            if revision >= wanted:
                future.set_result(None)
            else:
                keep.append((wanted, future))
        self._waiters = keep


class EventStream(AsyncIterator[MirrorUpdate]):
    """The updates of one mirror, in the order they were applied (unbounded)."""

    def __init__(self, mirror: Mirror) -> None:
        self._mirror = mirror
        self._queue: asyncio.Queue[object] = asyncio.Queue()

    def _push(self, item: object) -> None:
        self._queue.put_nowait(item)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> MirrorUpdate:
        item = await self._queue.get()
        if item is _END:
            self._queue.put_nowait(_END)  # later calls end too
            failed = self._mirror.failed
            if failed is None or isinstance(failed, ClientClosed):
                raise StopAsyncIteration
            raise failed
        assert isinstance(item, TranscriptEvent | TranscriptSnapshot)
        return item

    def close(self) -> None:
        """Stop receiving updates."""
        if self in self._mirror._streams:
            self._mirror._streams.remove(self)
