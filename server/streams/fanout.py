"""Live SSE readers of a Durable Stream: each append encoded once, written
to every reader at once.

A reader that has caught up with its stream follows it here (``follow``).
When an append is made (``Registry._apply``), ``deliver`` encodes its data
event once per kind of reader, whatever the readers' cursors: the cursor is
in the small control event that follows it, made once per cursor. Then, as
the hub does for WebSockets (``server.outbound``), each reader whose
connection takes data now gets those bytes, framed as an HTTP/1.1 chunk,
written straight to its transport, in the appender's own step: no task
woken, no ASGI ``send``, nothing encoded per reader.
``server.web.http_guard.RawBody`` is that raw write.

A reader that cannot be written to now (its transport is paused: the
client reads slower than we write; or no raw write is offered: another ASGI
server, HTTP/1.0) gets the event queued and its own task woken, which sends
what is queued through ASGI, in order, coalesced into writes of at most
``SEND_BYTES``. A queue holds the shared data event (not a copy of its
own) and its own control event. The queues are bounded, each and all
together: a reader past its share is cut (``cut``), its response is ended,
and, the protocol being resumable, it reads again from the last offset it
got. Its share is ``max_queued_bytes``, or less when many readers queue:
``max_total_queued_bytes`` (setting ``max_sse_queued_bytes``) over the
number of readers, as the WebSocket hub bounds its slow consumers. Nothing
else waits for it.

Everything here runs on the event loop without awaiting: a follower sees
every append after the offset it followed from, exactly once, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final, Generic, Protocol, TypeVar

__all__ = ["Fanout", "Follower", "Item", "RawWrite", "Source"]

#: Bytes of events a reader that does not keep up may have queued before
#: its response is ended (it reads again from its offset).
MAX_QUEUED_BYTES: Final = 4 * 1024 * 1024
#: Bytes of events all the readers of a process may have queued together
#: (counting an event shared by several readers once per reader): a reader
#: past its share of it is cut. Setting ``max_sse_queued_bytes``.
MAX_TOTAL_QUEUED_BYTES: Final = 64 * 1024 * 1024
#: A reader's task sends its queue in writes of at most this many bytes
#: (an event larger than it alone): each write is a copy the transport may
#: hold while the reader does not read.
SEND_BYTES: Final = 64 * 1024


class RawWrite(Protocol):
    """``server.web.http_guard.RawBody``: a response's chunked body, written raw."""

    def raw_ready(self) -> bool: ...

    def raw_write(self, data: bytes) -> None: ...


class Source(Protocol):
    """What is followed: a Durable Stream (``server.streams.model.Stream``),
    or a transcript's (``server.streams.transcripts``)."""

    @property
    def path(self) -> str: ...

    @property
    def closed(self) -> bool: ...


class Item(Protocol):
    """What is delivered: a message, or a transcript's page of events; the
    offset after it."""

    @property
    def offset(self) -> str: ...


S = TypeVar("S", bound=Source)
M = TypeVar("M", bound=Item)
#: ``(stream, message) -> data event bytes`` for one reader's kind (no cursor).
Encode = Callable[[Any, Any], bytes]
#: ``(stream, offset, cursor) -> control event bytes`` after a data event.
Control = Callable[[Any, str, str | None], bytes]


class Follower(Generic[S, M]):
    """One live reader of one stream, from ``offset`` on; ``encode`` and
    ``control`` take the ``S`` and ``M`` that its stream delivers."""

    __slots__ = (
        "closed_sent",
        "control",
        "cursor",
        "cut",
        "encode",
        "gone",
        "offset",
        "pending",
        "pending_bytes",
        "raw",
        "wake",
    )

    def __init__(
        self,
        raw: RawWrite | None,
        cursor: str | None,
        encode: Callable[[S, M], bytes],
        control: Callable[[S, str, str | None], bytes],
        offset: str,
    ):
        self.raw = raw
        self.cursor = cursor
        self.encode = encode
        self.control = control
        #: The offset after the last event given to this reader (sent or queued).
        self.offset = offset
        #: Events (unframed) waiting for the reader's task to send them: a
        #: data event (shared with the other readers) and its control event.
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        #: Set whenever the reader's task has something to do.
        self.wake = asyncio.Event()
        #: Ended for falling behind by more than the queue holds.
        self.cut = False
        #: The client went away.
        self.gone = False
        #: The last event given carried ``streamClosed``.
        self.closed_sent = False

    def over(self) -> bool:
        """Whether the response ends now (cut, or the client went away)."""
        return self.cut or self.gone


class Fanout:
    """The live SSE readers of every stream of one ``StreamRegistry``."""

    def __init__(
        self,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        max_total_queued_bytes: int = MAX_TOTAL_QUEUED_BYTES,
    ) -> None:
        self.max_queued_bytes = max_queued_bytes
        self.max_total_queued_bytes = max_total_queued_bytes
        self._followers: dict[str, set[Follower[Any, Any]]] = {}
        self._count = 0
        #: The bytes queued for every reader together (an event queued for
        #: several counts for each).
        self.queued_bytes = 0
        #: Since the start (for metrics and tests): events written raw, events
        #: queued for a reader's task, readers cut for falling behind, data
        #: events encoded.
        self.raw_count = 0
        self.queued_count = 0
        self.cut_count = 0
        self.encoded_count = 0

    def __len__(self) -> int:
        return self._count

    def share(self) -> int:
        """The bytes one reader may have queued now."""
        return min(self.max_queued_bytes, self.max_total_queued_bytes // max(1, self._count))

    def follow(self, path: str, follower: Follower[Any, Any]) -> None:
        group = self._followers.setdefault(path, set())
        if follower not in group:
            group.add(follower)
            self._count += 1
            self.queued_bytes += follower.pending_bytes

    def unfollow(self, path: str, follower: Follower[Any, Any]) -> None:
        group = self._followers.get(path)
        if group is not None and follower in group:
            group.discard(follower)
            self._count -= 1
            self.queued_bytes -= follower.pending_bytes
            if not group:
                del self._followers[path]

    def queue(self, path: str, follower: Follower[Any, Any], events: list[bytes]) -> None:
        """Queue ``events`` for ``follower``'s task (events it read itself)."""
        size = sum(len(event) for event in events)
        follower.pending += events
        follower.pending_bytes += size
        if follower in self._followers.get(path, ()):
            self.queued_bytes += size

    def sent(self, path: str, follower: Follower[Any, Any], count: int) -> None:
        """The first ``count`` events queued for ``follower`` were sent."""
        size = sum(len(event) for event in follower.pending[:count])
        del follower.pending[:count]
        follower.pending_bytes -= size
        if follower in self._followers.get(path, ()):
            self.queued_bytes -= size

    def follows(self, path: str) -> bool:
        """Whether a reader follows the stream at ``path``."""
        return path in self._followers

    def count(self, path: str) -> int:
        """How many readers follow the stream at ``path``."""
        return len(self._followers.get(path, ()))

    def paths(self) -> list[str]:
        """The streams readers follow."""
        return list(self._followers)

    def deliver(self, stream: Source, message: Item, after: str) -> None:
        """``message`` was just appended to ``stream`` after offset
        ``after``: give it to every follower of the stream that is there
        (``stream`` is already updated: a closing append's control event
        says so). A follower still before ``after`` (a shared store's copy
        learnt of another replica's appends without a delivery) is only
        woken: its task reads what it missed, this message with it."""
        group = self._followers.get(stream.path)
        if not group:
            return
        datas: dict[Encode, bytes] = {}
        controls: dict[tuple[Control, str | None], bytes] = {}
        frames: dict[tuple[Encode, Control, str | None], bytes] = {}
        closed = stream.closed
        cut: list[Follower[Any, Any]] = []
        raw_writes = queued = 0
        share = self.share()
        for follower in group:
            if follower.offset != after:
                follower.wake.set()
                continue
            data = datas.get(follower.encode)
            if data is None:
                data = datas[follower.encode] = follower.encode(stream, message)
                self.encoded_count += 1
            key = (follower.control, follower.cursor)
            control = controls.get(key)
            if control is None:
                control = controls[key] = follower.control(stream, message.offset, follower.cursor)
            follower.offset = message.offset
            follower.closed_sent = closed
            raw = follower.raw
            if not follower.pending and raw is not None and raw.raw_ready():
                frame_key = (follower.encode, follower.control, follower.cursor)
                frame = frames.get(frame_key)
                if frame is None:
                    size = len(data) + len(control)
                    frame = frames[frame_key] = b"%x\r\n%b%b\r\n" % (size, data, control)
                raw.raw_write(frame)
                raw_writes += 1
                if closed:
                    follower.wake.set()  # its task ends the response
                continue
            follower.pending += (data, control)
            size = len(data) + len(control)
            follower.pending_bytes += size
            self.queued_bytes += size
            queued += 1
            if follower.pending_bytes > share:
                follower.cut = True
                cut.append(follower)
            follower.wake.set()
        self.raw_count += raw_writes
        self.queued_count += queued
        for follower in cut:
            self.cut_count += 1
            self.unfollow(stream.path, follower)

    def wake(self, path: str) -> None:
        """Something other than an append happened to the stream at
        ``path`` (closed, deleted, expired): its readers look."""
        for follower in self._followers.get(path, ()):
            follower.wake.set()

    def end_all(self) -> None:
        """Shutdown: every reader's response ends now."""
        for group in self._followers.values():
            for follower in group:
                follower.cut = True
                follower.wake.set()
        self._followers.clear()
        self._count = 0
        self.queued_bytes = 0
