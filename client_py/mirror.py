"""``Mirror``: the client's live copy of one subscribed transcript.

The copy itself is the consumer core's (``protocol.consumer.Subscription``):
the client's reader task feeds every message to the core, which checks
continuity and applies events to the copy with the same checks the server's
entity makes. The mirror is the application's view of that copy: it reads it,
wakes whoever waits for a revision and feeds ``events()`` streams. Readers
see a consistent copy between awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeAlias

from client_py.errors import ClientClosed
from protocol.consumer import Subscription
from protocol.continuity import Continuity, Counters
from protocol.state import TranscriptState
from protocol.types import Message, Segment, TranscriptEvent, TranscriptSnapshot

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
    that ended the subscription, if any. When the core drops the copy (a new
    epoch, an event that did not fit) the mirror keeps showing the last one
    until the baseline that replaces it arrives.
    """

    def __init__(self, subscription: Subscription) -> None:
        self.transcript_id = subscription.transcript_id
        self.subscription = subscription
        self.failed: BaseException | None = None
        self._copy: TranscriptState | None = None
        self._frozen: tuple[Message, ...] = ()
        self._frozen_at: tuple[int, int] = (0, 0)  # (id of the copy, its length)
        self._ready = asyncio.get_running_loop().create_future()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._streams: list[EventStream] = []

    def __repr__(self) -> str:
        return (
            f"Mirror({self.transcript_id!r}, revision={self.revision}, "
            f"length={self.length}, epoch={self.epoch!r})"
        )

    # -- the copy --------------------------------------------------------------------

    @property
    def continuity(self) -> Continuity:
        return self.subscription.continuity

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages held, oldest first (from index ``start``)."""
        copy = self._copy
        if copy is None or copy.messages is None:
            return ()
        at = (id(copy), copy.length)
        if self._frozen_at != at:
            self._frozen, self._frozen_at = tuple(copy.messages), at
        return self._frozen

    @property
    def revision(self) -> int:
        """The copy's revision (``-1`` before the first baseline)."""
        return -1 if self._copy is None else self._copy.revision

    @property
    def epoch(self) -> str | None:
        return None if self._copy is None else self._copy.epoch

    @property
    def start(self) -> int:
        """Index of the first message held."""
        return 0 if self._copy is None else self._copy.start

    @property
    def length(self) -> int:
        """Index one past the last message held: the transcript's length."""
        return 0 if self._copy is None else self._copy.length

    @property
    def active_start(self) -> int:
        return 0 if self._copy is None else self._copy.active_start

    @property
    def segments(self) -> tuple[Segment, ...]:
        """Every segment started, oldest first; the open one has ``end=None``."""
        return (Segment(0, None),) if self._copy is None else self._copy.segments()

    @property
    def counters(self) -> Counters:
        return self.subscription.continuity.counters

    @property
    def ready(self) -> bool:
        """True once the first baseline arrived."""
        return self._copy is not None

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
        if self.revision >= revision:
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

    def _replaced(self, snapshot: TranscriptSnapshot) -> None:
        """The core replaced the copy with ``snapshot``'s."""
        first = self._copy is None
        # The core may have gone on with later frames of the same message:
        # its copy is that snapshot's, advanced; if it dropped it again, the
        # mirror shows the snapshot (it is valid: the core checked it).
        copy = self.subscription.copy
        self._copy = copy if copy is not None else TranscriptState.from_snapshot(snapshot)
        if not self._ready.done():
            self._ready.set_result(None)
        if not first:
            self._publish(snapshot)
        self._wake()

    def _applied(self, event: TranscriptEvent) -> None:
        """The core applied ``event`` to the copy."""
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
