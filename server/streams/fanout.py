"""Live SSE readers of a Durable Stream: each append encoded once, written
to every reader at once.

A reader that has caught up with its stream follows it here (``follow``).
When an append is made (``Registry._apply``), ``deliver`` encodes its event
once per kind of reader (the SSE bytes differ only by the reader's request
cursor, which the control event carries) and frames it once as an HTTP/1.1
chunk; then, as the hub does for WebSockets (``server.outbound``), each
reader whose connection takes data now gets those shared bytes written
straight to its transport, in the appender's own step: no task woken, no
ASGI ``send``, nothing encoded per reader. ``server.web.http_guard.RawBody`` is
that raw write.

A reader that cannot be written to now (its transport is paused: the
client reads slower than we write; or no raw write is offered: another ASGI
server, HTTP/1.0) gets the event queued and its own task woken, which sends
what is queued through ASGI, in order, coalesced. The queue is bounded
(``max_queued_bytes``): a reader past it is cut (``cut``), its response is
ended, and, the protocol being resumable, it reads again from the last
offset it got. Nothing else waits for it.

Everything here runs on the event loop without awaiting: a follower sees
every append after the offset it followed from, exactly once, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final, Protocol

from server.streams.model import Message, Stream

__all__ = ["Fanout", "Follower", "RawWrite"]

#: Bytes of events a reader that does not keep up may have queued before
#: its response is ended (it reads again from its offset).
MAX_QUEUED_BYTES: Final = 4 * 1024 * 1024


class RawWrite(Protocol):
    """``server.web.http_guard.RawBody``: a response's chunked body, written raw."""

    def raw_ready(self) -> bool: ...

    def raw_write(self, data: bytes) -> None: ...


#: ``(stream, message, cursor) -> event bytes`` for one reader's kind.
Encode = Callable[[Stream, Message, str | None], bytes]


class Follower:
    """One live reader of one stream, from ``offset`` on."""

    __slots__ = (
        "closed_sent",
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

    def __init__(self, raw: RawWrite | None, cursor: str | None, encode: Encode, offset: str):
        self.raw = raw
        self.cursor = cursor
        self.encode = encode
        #: The offset after the last event given to this reader (sent or queued).
        self.offset = offset
        #: Events (unframed) waiting for the reader's task to send them.
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
    """The live SSE readers of every stream of one ``Registry``."""

    def __init__(self, max_queued_bytes: int = MAX_QUEUED_BYTES) -> None:
        self.max_queued_bytes = max_queued_bytes
        self._followers: dict[str, set[Follower]] = {}
        #: Since the start (for metrics and tests): events written raw, events
        #: queued for a reader's task, readers cut for falling behind.
        self.raw_count = 0
        self.queued_count = 0
        self.cut_count = 0

    def __len__(self) -> int:
        return sum(len(group) for group in self._followers.values())

    def follow(self, path: str, follower: Follower) -> None:
        self._followers.setdefault(path, set()).add(follower)

    def unfollow(self, path: str, follower: Follower) -> None:
        group = self._followers.get(path)
        if group is not None:
            group.discard(follower)
            if not group:
                del self._followers[path]

    def follows(self, path: str) -> bool:
        """Whether a reader follows the stream at ``path``."""
        return path in self._followers

    def count(self, path: str) -> int:
        """How many readers follow the stream at ``path``."""
        return len(self._followers.get(path, ()))

    def paths(self) -> list[str]:
        """The streams readers follow."""
        return list(self._followers)

    def deliver(self, stream: Stream, message: Message, after: str) -> None:
        """``message`` was just appended to ``stream`` after offset
        ``after``: give it to every follower of the stream that is there
        (``stream`` is already updated: a closing append's control event
        says so). A follower still before ``after`` (a shared store's copy
        learnt of another replica's appends without a delivery) is only
        woken: its task reads what it missed, this message with it."""
        group = self._followers.get(stream.path)
        if not group:
            return
        events: dict[tuple[Encode, str | None], tuple[bytes, bytes]] = {}
        closed = stream.closed
        cut: list[Follower] = []
        raw_writes = queued = 0
        for follower in group:
            if follower.offset != after:
                follower.wake.set()
                continue
            key = (follower.encode, follower.cursor)
            event = events.get(key)
            if event is None:
                payload = follower.encode(stream, message, follower.cursor)
                event = events[key] = (payload, b"%x\r\n%b\r\n" % (len(payload), payload))
            follower.offset = message.offset
            follower.closed_sent = closed
            raw = follower.raw
            if not follower.pending and raw is not None and raw.raw_ready():
                raw.raw_write(event[1])
                raw_writes += 1
                if closed:
                    follower.wake.set()  # its task ends the response
                continue
            follower.pending.append(event[0])
            follower.pending_bytes += len(event[0])
            queued += 1
            if follower.pending_bytes > self.max_queued_bytes:
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
