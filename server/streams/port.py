"""``StreamPort``: what ``server.streams.registry.StreamRegistry`` needs of
the store its streams live in, and the port of a store that keeps them in a
``StreamLog`` (``LogPort``: the memory store, nothing; the SQLite store, its
file).

The registry decides every request on its copies of the streams (one class
for every store); the port brings a copy up to date before a request is
decided (``sync``), writes each change with a check that the copy was
current (a stale copy raises ``Stale``: the request is decided again),
removes, and, on a store shared by replicas, listens to their notices
(``server.streams.shared.SharedPort``). A port reads and changes the copies
only through ``Copies``, the registry's face for its port.

A request the registry decides first on the copy as it is, without reading
the store (an append or close on a shared store: ``Trust``), is passed to
the port explicitly: the port skips that read, and records whether the write
found the copy stale or wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from server.streams.fanout import MAX_TOTAL_QUEUED_BYTES
from server.streams.log import StreamLog
from server.streams.model import Stream, StreamMessage, Update

__all__ = ["Copies", "Limits", "LogPort", "Stale", "StreamPort", "Trust"]


@dataclass(frozen=True, slots=True)
class Limits:
    """What the streams of one process may hold (settings ``max_streams``,
    ``max_stream_bytes``, ``max_stream_producers``, ``max_producer_id_bytes``
    and ``max_fork_depth``), and the JSON values one append may bring
    (``max_stream_append_values``)."""

    max_streams: int = 10_000
    max_bytes: int = 256 * 1024 * 1024
    max_append_values: int = 10_000
    #: What all live SSE readers may have queued together (``Fanout``).
    max_sse_queued_bytes: int = MAX_TOTAL_QUEUED_BYTES
    #: Idempotent producers heard from within ``PRODUCER_TTL_S``, per stream.
    max_producers: int = 1024
    #: The longest ``Producer-Id``, in UTF-8 bytes.
    max_producer_id_bytes: int = 256
    #: How many sources a fork may read through (its source, theirs...).
    max_fork_depth: int = 64
    #: What the copies of a durable log's streams may hold in memory
    #: (setting ``max_live_bytes``, as for transcripts): past it the least
    #: recently used ones nobody reads, waits on or forks are let go.
    max_live_bytes: int = 1 << 30


class Stale(Exception):
    """A shared store's write found that the stream changed since this
    process's copy was read: nothing was written; decide again."""


class Trust:
    """A request decided on the copy of ``path`` as it is: ``stale`` once a
    write found that copy stale (it is read again from then on), ``wrote``
    once its change is written."""

    __slots__ = ("path", "stale", "wrote")

    def __init__(self, path: str) -> None:
        self.path = path
        self.stale = False
        self.wrote = False


class Copies(Protocol):
    """The registry as its port sees it: the copies of the streams and what
    they hold, and the readers waiting on them."""

    @property
    def limits(self) -> Limits: ...

    clock: Callable[[], float]
    #: Copies let go (tests, metrics).
    evicted: int

    @property
    def streams(self) -> dict[str, Stream]: ...

    @property
    def size(self) -> int: ...

    def grow(self, delta: int) -> None:
        """The streams hold ``delta`` bytes more (or less)."""
        ...

    def wake(self, path: str) -> None:
        """Wake the readers of ``path`` (long-polls and SSE)."""
        ...

    def watched(self, path: str) -> bool:
        """Whether readers here wait on or follow ``path``."""
        ...

    def pinned(self, path: str) -> bool:
        """Whether a request looks ``path`` up now (its copy is kept)."""
        ...

    def waited(self) -> set[str]:
        """The paths readers here wait on or follow."""
        ...

    def hold(self, path: str, read: Callable[[str], Stream | None]) -> None:
        """Hold ``path`` and the sources it reads through, each ``read`` when
        not held (a durable log's streams, loaded on demand)."""
        ...

    def drop_held(self, path: str, expired: bool, write: Callable[[Sequence[str]], None]) -> None:
        """Remove ``path`` and the deleted sources only it kept: ``write``
        their paths first (a refusal leaves them, unless ``expired``)."""
        ...


class StreamPort(Protocol):
    """The store's side of the streams, as the registry uses it."""

    #: Other processes change the streams too: every request reads its copy
    #: again first (unless trusted), a write may be ``Stale``, and notices
    #: of the others' writes wake the readers here.
    shared: bool
    #: The store holds every stream: the registry holds copies of those
    #: asked about (``Copies.hold``) and counts the rest (``totals``).
    durable: bool

    def bind(self, copies: Copies) -> tuple[int, int]:
        """Serve ``copies`` from now on; how many streams the store holds,
        and what they hold (``StreamError``/``OSError`` if it cannot tell)."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def close(self) -> None: ...

    def load_one(self, path: str) -> Stream | None:
        """A durable store's stream, read at once (``None``: not there, or
        read only by ``sync``)."""
        ...

    async def sync(self, path: str, trust: Trust | None) -> None:
        """Bring the copy of ``path`` (and of its fork's sources) up to date."""
        ...

    def make_room(self, keep: str, streams: int, size: int) -> None:
        """Drop copies the store keeps anyway, for room within the limits."""
        ...

    async def fork_paths(self, stream: Stream) -> list[str]: ...

    async def create(self, stream: Stream, source: Stream | None) -> None: ...

    async def update(self, stream: Stream, update: Update, trust: Trust | None) -> bool:
        """Write ``update``; ``True`` if the copy is still to be changed."""
        ...

    async def soft_delete(self, stream: Stream, trust: Trust | None) -> None: ...

    async def touch(self, stream: Stream, now: float) -> None: ...

    async def unfork(self, source: Stream, fork_path: str) -> None: ...

    async def detach(self, fork: Stream, source: Stream, inherited: list[StreamMessage]) -> None:
        """``fork`` holds ``inherited`` itself and reads through ``source`` no more."""
        ...

    async def remove(self, path: str, expired: bool) -> None:
        """Delete ``path`` for good (and the deleted sources only it kept)."""
        ...

    async def sweep(self, now: float) -> None:
        """Expired (or idle) streams the copies do not hold, every sweep."""
        ...

    async def before_wait(self, stream: Stream) -> None:
        """A reader is about to wait on ``stream``."""
        ...

    def current(self, path: str) -> bool:
        """Whether the copy of ``path`` is known current (no read needed)."""
        ...


class LogPort:
    """The port of a store whose streams are this process's alone, each
    change written to ``log`` (``NoLog``: the memory store; a SQLite file)."""

    shared = False

    def __init__(self, log: StreamLog) -> None:
        self.log = log
        self.durable = log.durable
        self._copies: Copies | None = None

    @property
    def copies(self) -> Copies:
        assert self._copies is not None, "the port serves no registry yet"
        return self._copies

    def bind(self, copies: Copies) -> tuple[int, int]:
        try:
            totals = self.log.totals()
        except BaseException:
            self.log.close()
            raise
        self._copies = copies
        return totals

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def close(self) -> None:
        self.log.close()

    def load_one(self, path: str) -> Stream | None:
        return self.log.load_one(path)

    # Each is the log's synchronous write inside a coroutine that never
    # suspends: every operation of the registry stays one step of the loop.

    async def sync(self, path: str, trust: Trust | None) -> None:
        if self.durable:
            self.copies.hold(path, self.log.load_one)

    def make_room(self, keep: str, streams: int, size: int) -> None:
        pass  # the streams of a store of its own are all it holds

    async def fork_paths(self, stream: Stream) -> list[str]:
        if self.durable:
            return self.log.fork_paths(stream.path)
        return [p for p, s in self.copies.streams.items() if s.forked_from == stream.path]

    async def create(self, stream: Stream, source: Stream | None) -> None:
        self.log.create(stream)

    async def update(self, stream: Stream, update: Update, trust: Trust | None) -> bool:
        self.log.update(stream.path, update)
        return True

    async def soft_delete(self, stream: Stream, trust: Trust | None) -> None:
        self.log.soft_delete(stream.path)

    async def touch(self, stream: Stream, now: float) -> None:
        self.log.touch(stream.path, now)

    async def unfork(self, source: Stream, fork_path: str) -> None:
        pass

    async def detach(self, fork: Stream, source: Stream, inherited: list[StreamMessage]) -> None:
        self.log.detach(fork.path, inherited)

    async def remove(self, path: str, expired: bool) -> None:
        self.copies.drop_held(path, expired, self.log.remove)

    async def sweep(self, now: float) -> None:
        if not self.durable:
            return
        copies = self.copies
        for path in self.log.expired_paths(now):  # those not held
            copies.hold(path, self.log.load_one)
            stream = copies.streams.get(path)
            if stream is not None and stream.expired(now) and stream.refs == 0:
                copies.drop_held(path, True, self.log.remove)

    async def before_wait(self, stream: Stream) -> None:
        pass

    def current(self, path: str) -> bool:
        return True
