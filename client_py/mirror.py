"""``Mirror``: the client's live copy of one subscribed transcript.

The copy itself is the consumer core's (``protocol.consumer.Subscription``):
the client's reader task feeds every message to the core, which checks
continuity and applies events to the copy with the same checks the server's
entity makes. The mirror is the application's view of that copy: it reads it,
wakes whoever waits for a revision and feeds ``events()`` streams. Readers
see a consistent copy between awaits.

``drafts`` are the transcript's drafts as the copy holds them (messages being
written, ``docs/protocol.md`` "Drafts"); ``events(drafts=True)`` delivers
their updates too, in order with the events: a committed draft's
``DraftClosed`` (``state == "final"``) comes right after the event that
appended its message, so a reader that follows the stream never shows both
or neither.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Generic, Literal, TypeAlias, TypeVar, overload

from client_py.drafts import DraftView
from client_py.errors import ClientClosed, ClientError, EpochChanged
from protocol.api import MessageRange
from protocol.consumer import Subscription
from protocol.continuity import Continuity, Counters
from protocol.drafts import DraftClosed, DraftUpdated
from protocol.limits import MAX_READ_MESSAGES
from protocol.presence import PresenceCopy
from protocol.state import TranscriptState
from protocol.types import Message, Segment, TranscriptEvent, TranscriptSnapshot, View
from protocol.wire import PresenceFrame

__all__ = ["DraftEvent", "EventStream", "Mirror", "MirrorUpdate"]

#: What ``Mirror.events()`` yields: an applied event, or the snapshot that
#: replaced the copy (the first baseline is not yielded; a later one is, e.g.
#: after a long disconnect or when the transcript was re-created).
MirrorUpdate: TypeAlias = TranscriptEvent | TranscriptSnapshot

#: What ``Mirror.events(drafts=True)`` yields besides: a draft's text grew
#: (``DraftUpdated.delta``) or was replaced (``DraftUpdated.text``; the first
#: update of a draft opens it), or it ended (``DraftClosed``: ``final``,
#: ``cancelled``, ``expired``, or ``gone`` when it closed while the client
#: was away). The whole text after an update is ``mirror.drafts[id].text``
#: at that moment, or the previous text plus ``delta``.
DraftEvent: TypeAlias = DraftUpdated | DraftClosed

_T = TypeVar("_T")

_END = object()

#: Reads messages ``[start, end)`` of the transcript of ``epoch`` (the HTTP API's
#: ``GET .../messages``); ``EpochChanged`` when it is of another epoch now.
RangeReader: TypeAlias = Callable[[int, int, str], Awaitable[MessageRange]]


class Mirror:
    """A live copy of one transcript, kept up to date by the client.

    ``messages`` are those from index ``start`` on (``start`` is 0 unless it
    subscribed with a window: then ``[start, length)``, widened backwards by
    ``load_earlier``); ``revision`` and ``epoch`` are the copy's;
    ``counters`` are its continuity counters. ``failed`` is the error that
    ended the subscription, if any. When the core drops the copy (a new
    epoch, an event that did not fit) the mirror keeps showing the last one
    until the baseline that replaces it arrives.
    """

    def __init__(self, subscription: Subscription, reader: RangeReader | None = None) -> None:
        self.transcript_id = subscription.transcript_id
        self.subscription = subscription
        self.failed: BaseException | None = None
        #: How many times an increment's digest differed from the one the
        #: copy computed (each time the copy was replaced by a fresh baseline).
        self.digest_mismatches = 0
        self._reader = reader
        self._copy: TranscriptState | None = None
        self._frozen: tuple[Message, ...] = ()
        self._frozen_at: tuple[int, int, int] = (0, 0, 0)  # (id of the copy, start, length)
        self._ready = asyncio.get_running_loop().create_future()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._streams: list[EventStream[MirrorUpdate]] = []
        self._draft_streams: list[EventStream[MirrorUpdate | DraftEvent]] = []
        self._presence_waiters: list[asyncio.Future[None]] = []
        self._presence_streams: list[EventStream[PresenceFrame]] = []

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
        at = (id(copy), copy.start, copy.length)
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
    def digest(self) -> str | None:
        """The copy's rolling digest at ``revision`` (``protocol.digest``),
        checked against every increment's; ``None`` before the first baseline."""
        return None if self._copy is None else self._copy.digest

    @property
    def start(self) -> int:
        """Index of the first message held."""
        return 0 if self._copy is None else self._copy.start

    @property
    def length(self) -> int:
        """Index one past the last message held: the transcript's length."""
        return 0 if self._copy is None else self._copy.length

    @property
    def views(self) -> tuple[View, ...]:
        """The transcript's Views, ordered by name."""
        return () if self._copy is None else self._copy.sorted_views()

    @property
    def active_start(self) -> int:
        return 0 if self._copy is None else self._copy.active_start

    @property
    def segments(self) -> tuple[Segment, ...]:
        """Every segment started, oldest first; the open one has ``end=None``."""
        return (Segment(0, None),) if self._copy is None else self._copy.segments()

    @property
    def drafts(self) -> Mapping[str, DraftView]:
        """The open drafts of the transcript by id, as of now (a new mapping
        each time: read it again for later text). A committed draft stays
        here until the copy holds its message, then both change at once."""
        return {
            draft_id: DraftView(draft_id, draft.role, draft.text, draft.n)
            for draft_id, draft in self.subscription.drafts.items()
        }

    @property
    def presence(self) -> PresenceCopy | None:
        """Who is on the transcript (subscribed with ``presence=True``; else
        ``None``): ``presence.listed()`` the members (``members`` is ``None``
        while the server sends counts only), ``presence.counts`` by kind.
        The core's copy: read it, never change it."""
        return self.subscription.presence

    async def wait_presence(
        self, condition: Callable[[PresenceCopy], bool], timeout: float | None = 10.0
    ) -> PresenceCopy:
        """Wait until ``condition(mirror.presence)`` holds (checked now and
        after every presence frame); ``TimeoutError`` after ``timeout``."""
        presence = self.subscription.presence
        if presence is None:
            raise ValueError(f"{self.transcript_id!r} was subscribed without presence")
        async with asyncio.timeout(timeout):
            while not condition(presence):
                if self.failed is not None:
                    raise self.failed
                changed = asyncio.get_running_loop().create_future()
                self._presence_waiters.append(changed)
                await changed
        return presence

    def presence_frames(self) -> EventStream[PresenceFrame]:
        """An async iterator of every ``presence`` frame applied to
        ``presence`` from now on (what each changed: ``joined``, ``updated``,
        ``left``; ``members`` when it replaced the list). Registers at once,
        like ``events``."""
        stream: EventStream[PresenceFrame] = EventStream(self)
        self._presence_streams.append(stream)
        return stream

    @property
    def counters(self) -> Counters:
        return self.subscription.continuity.counters

    @property
    def ready(self) -> bool:
        """True once the first baseline arrived."""
        return self._copy is not None

    # -- the window ---------------------------------------------------------------------

    async def load_earlier(self, count: int) -> int:
        """Widen the window backwards by up to ``count`` messages, read by
        fixed range from the server (1000 per request). Returns how many were
        added (0 once ``start`` is 0).

        Raises ``EpochChanged`` when the transcript was deleted and created
        again since this copy was made (before or during the call): older
        messages of another history are never joined to it; the new
        baseline is on its way. ``ClientError`` before the first baseline.
        """
        if self._reader is None:
            raise ClientError(
                f"{self.transcript_id}: this mirror has no way to read older messages"
            )
        copy = self._copy
        if copy is None or copy.messages is None:
            raise ClientError(f"{self.transcript_id}: no copy yet to widen")
        epoch = copy.epoch
        added = 0
        while added < count:
            copy = self._copy
            assert copy is not None
            if copy.epoch != epoch:
                raise EpochChanged(
                    "epoch-changed",
                    f"{self.transcript_id} was created again (epoch {copy.epoch})",
                    transcript_id=self.transcript_id,
                )
            end = copy.start
            if end == 0:
                break
            start = max(0, end - min(count - added, MAX_READ_MESSAGES))
            found = await self._reader(start, end, epoch)
            if found.epoch != epoch:  # an older server that does not check
                raise EpochChanged(
                    "epoch-changed", f"{self.transcript_id} is of epoch {found.epoch} now"
                )
            if self._copy is not copy or copy.start != end:
                continue  # a new baseline replaced the copy meanwhile: look again
            if found.start != start or len(found.messages) != end - start:
                raise ClientError(
                    f"{self.transcript_id}: asked for messages [{start}, {end}), "
                    f"got [{found.start}, {found.end})"
                )
            copy.prepend(start, found.messages)
            added += len(found.messages)
        return added

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

    @overload
    def events(self, *, drafts: Literal[False] = False) -> EventStream[MirrorUpdate]: ...

    @overload
    def events(self, *, drafts: Literal[True]) -> EventStream[MirrorUpdate | DraftEvent]: ...

    def events(
        self, *, drafts: bool = False
    ) -> EventStream[MirrorUpdate] | EventStream[MirrorUpdate | DraftEvent]:
        """An async iterator of every update applied from now on; with
        ``drafts``, the drafts' updates too (``DraftEvent``).

        It registers at once (not at the first ``__anext__``), so reading
        ``messages`` (and ``drafts``) right after calling this and then
        iterating misses nothing. It ends when the client closes and raises
        the error that ended the subscription.
        """
        if drafts:
            with_drafts: EventStream[MirrorUpdate | DraftEvent] = EventStream(self)
            self._draft_streams.append(with_drafts)
            return with_drafts
        stream: EventStream[MirrorUpdate] = EventStream(self)
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
        for with_drafts in self._draft_streams:
            with_drafts._push(_END)
        for presence_stream in self._presence_streams:
            presence_stream._push(_END)
        self._streams.clear()
        self._draft_streams.clear()
        self._presence_streams.clear()
        self._presence_changed()  # its waiters see ``failed``

    def _close(self) -> None:
        self._fail(ClientClosed(f"the client was closed ({self.transcript_id})"))

    def _presence_changed(self, frame: PresenceFrame | None = None) -> None:
        """The core applied a presence frame (``None``: the mirror ended)."""
        if frame is not None:
            for stream in self._presence_streams:
                stream._push(frame)
        waiters, self._presence_waiters = self._presence_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _draft(self, update: DraftEvent) -> None:
        """The core changed a draft of the copy."""
        for stream in self._draft_streams:
            stream._push(update)

    def _publish(self, update: MirrorUpdate) -> None:
        for stream in self._streams:
            stream._push(update)
        for with_drafts in self._draft_streams:
            with_drafts._push(update)

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


class EventStream(AsyncIterator[_T], Generic[_T]):
    """The updates of one mirror, in the order they were applied (unbounded)."""

    def __init__(self, mirror: Mirror) -> None:
        self._mirror = mirror
        self._queue: asyncio.Queue[object] = asyncio.Queue()

    def _push(self, item: object) -> None:
        self._queue.put_nowait(item)

    def __aiter__(self) -> EventStream[_T]:
        return self

    async def __anext__(self) -> _T:
        item = await self._queue.get()
        if item is _END:
            self._queue.put_nowait(_END)  # later calls end too
            failed = self._mirror.failed
            if failed is None or isinstance(failed, ClientClosed):
                raise StopAsyncIteration
            raise failed
        assert isinstance(
            item, TranscriptEvent | TranscriptSnapshot | DraftUpdated | DraftClosed | PresenceFrame
        )
        return item  # type: ignore[return-value]  # the mirror pushes only what _T allows

    @property
    def pending(self) -> int:
        """How many updates wait to be read (a reader that shows them can
        draw once the ones that arrived together are all taken)."""
        return self._queue.qsize()

    def close(self) -> None:
        """Stop receiving updates."""
        for streams in (self._mirror._streams, self._mirror._draft_streams):
            if self in streams:
                streams.remove(self)  # type: ignore[arg-type]
