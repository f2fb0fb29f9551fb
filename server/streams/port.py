"""``StreamPort``: what ``server.streams.registry.StreamRegistry`` needs of
the store its streams live in, and the port of a store that keeps them in a
``StreamLog`` (``LogPort``: the memory store, nothing; the SQLite store, its
file).

The registry decides every request on its copies of the streams (one class
for every store) and holds every policy over them (limits, which copies to
let go, when to sweep); the port is the store's verbs, nine in all:

- lifecycle: ``bind`` (serve a registry's ``Copies``; the store's totals),
  ``start`` and ``stop`` (what runs beside the requests: a shared store's
  notices), ``close``;
- ``load(path, trust)``: bring the copy of one stream (and of the sources
  its fork reads through) up to date before a request is decided on it;
- ``forks(stream)``: the paths of the forks that read through it;
- ``write(change, trust)``: one change (``Create``, ``Apply``,
  ``SoftDelete``, ``Touch``, ``Unfork``, ``Detach``: small frozen records),
  written with a check that the copy was current (a stale copy raises
  ``Stale``: the request is decided again);
- ``remove(path, expired)``: a stream gone for good (and the deleted sources
  only it kept);
- ``sweep(now)``: the expired streams the copies do not hold.

A port reads and changes the copies only through ``Copies``, the registry's
face for its port.

A request the registry decides on the copy as it is, without reading the
store (an append or close on a shared store), is passed to the port as a
``Trust``: the port skips that read, and records whether the write found the
copy stale or wrote. A ``Trust(path, if_current=True)`` asks the port to read
only if the copy may have missed a change (a live reader about to wait).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from server.streams.fanout import MAX_TOTAL_QUEUED_BYTES
from server.streams.log import NoLog, StreamLog
from server.streams.model import Stream, StreamMessage, Update

__all__ = [
    "Apply",
    "Change",
    "Copies",
    "Create",
    "Detach",
    "Limits",
    "LogPort",
    "SoftDelete",
    "Stale",
    "StreamPort",
    "Touch",
    "Trust",
    "Unfork",
]


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
    once its change is written. ``if_current``: the copy is trusted only
    while the port knows it current (it heard of no change since its read)."""

    __slots__ = ("if_current", "path", "stale", "wrote")

    def __init__(self, path: str, *, if_current: bool = False) -> None:
        self.path = path
        self.if_current = if_current
        self.stale = False
        self.wrote = False


# --- the changes a port writes ---------------------------------------------------------
# Named tuples: immutable, and cheap to make (one per append).


class Create(NamedTuple):
    """A new stream (a fork of ``source``: first counted among its forks)."""

    stream: Stream
    source: Stream | None = None


class Apply(NamedTuple):
    """An accepted append or close of ``stream`` (``Update``)."""

    stream: Stream
    update: Update


class SoftDelete(NamedTuple):
    """``stream`` deleted while forks still read through it."""

    stream: Stream


class Touch(NamedTuple):
    """A read moved ``stream``'s sliding TTL along to ``now``."""

    stream: Stream
    now: float


class Unfork(NamedTuple):
    """``fork_path`` reads through ``source`` no more (gone, or detached)."""

    source: Stream
    fork_path: str


class Detach(NamedTuple):
    """``fork`` holds ``inherited`` (what it read through ``source``) itself."""

    fork: Stream
    source: Stream
    inherited: tuple[StreamMessage, ...]


Change = Create | Apply | SoftDelete | Touch | Unfork | Detach


class Copies(Protocol):
    """The registry as its port sees it: the copies of the streams and what
    they hold, and the readers waiting on them."""

    @property
    def limits(self) -> Limits: ...

    clock: Callable[[], float]

    @property
    def streams(self) -> dict[str, Stream]: ...

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
        """Whether a request (or the port) reads ``path`` now (its copy is kept)."""
        ...

    def pin(self, paths: Sequence[str]) -> None:
        """Keep the copies of ``paths`` until ``unpin`` (a read in flight)."""
        ...

    def unpin(self, paths: Sequence[str]) -> None: ...

    def waited(self) -> set[str]:
        """The paths readers here wait on or follow."""
        ...

    def make_room(self, keep: str) -> None:
        """A copy was added: let others go if the registry's limits say so."""
        ...

    def read_from(self, read: Callable[[str], Stream | None]) -> None:
        """The store holds every stream: copies are read one at a time with
        ``read`` when asked for (``hold``), and let go past ``max_live_bytes``."""
        ...

    def hold(self, path: str) -> None:
        """Hold ``path`` and the sources it reads through (``read_from``)."""
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

    def bind(self, copies: Copies) -> tuple[int, int]:
        """Serve ``copies`` from now on (a log is opened now); how many
        streams the store holds, and what they hold, as the registry's limits
        count them (``StreamError``/``OSError`` if it cannot tell)."""
        ...

    async def start(self) -> None:
        """Begin what runs beside the requests."""
        ...

    async def stop(self) -> None:
        """End what ``start`` began (before the store closes)."""
        ...

    def close(self) -> None:
        """Close what ``bind`` opened."""
        ...

    async def load(self, path: str, trust: Trust | None) -> None:
        """Bring the copy of ``path`` (and of its fork's sources) up to date:
        read from the store unless ``trust`` says the copy will do."""
        ...

    async def forks(self, stream: Stream) -> list[str]:
        """The paths of the forks that read through ``stream`` directly."""
        ...

    async def write(self, change: Change, trust: Trust | None) -> bool:
        """Write ``change`` if the copy it was decided on is current (else
        ``Stale``: nothing written); ``True`` if the copy is still to be
        changed (``False``: a read brought the change into it already)."""
        ...

    async def remove(self, path: str, expired: bool) -> None:
        """Delete ``path`` for good (and the deleted sources only it kept)."""
        ...

    async def sweep(self, now: float) -> None:
        """Expired streams the copies do not hold, every sweep."""
        ...


class LogPort:
    """The port of a store whose streams are this process's alone, each
    change written to a ``StreamLog`` (``NoLog``: the memory store; a SQLite
    file), opened by ``open_log`` when bound."""

    shared = False

    def __init__(self, open_log: Callable[[], StreamLog] | StreamLog | None = None) -> None:
        if open_log is None:
            open_log = NoLog
        self._open: Callable[[], StreamLog] = open_log if callable(open_log) else lambda: open_log
        self._log: StreamLog | None = None
        self._durable = False
        self._copies: Copies | None = None

    @property
    def log(self) -> StreamLog:
        assert self._log is not None, "the port is not bound yet"
        return self._log

    def bind(self, copies: Copies) -> tuple[int, int]:
        if self._log is None:
            self._log = self._open()
        log = self._log
        try:
            totals = log.totals()
        except BaseException:
            log.close()
            raise
        self._copies = copies
        self._durable = log.durable
        if log.durable:
            copies.read_from(log.load_one)
        return totals

    @property
    def copies(self) -> Copies:
        assert self._copies is not None, "the port serves no registry yet"
        return self._copies

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def close(self) -> None:
        if self._log is not None:
            self._log.close()

    # Each is the log's synchronous write inside a coroutine that never
    # suspends: every operation of the registry stays one step of the loop.

    async def load(self, path: str, trust: Trust | None) -> None:
        if self._durable:
            self.copies.hold(path)

    async def forks(self, stream: Stream) -> list[str]:
        if self.log.durable:
            return self.log.fork_paths(stream.path)
        return [p for p, s in self.copies.streams.items() if s.forked_from == stream.path]

    async def write(self, change: Change, trust: Trust | None) -> bool:
        log = self._log
        assert log is not None, "the port is not bound yet"
        if type(change) is Apply:  # every append and close: no pattern to match
            log.update(change.stream.path, change.update)
            return True
        match change:
            case Create(stream):
                log.create(stream)
            case SoftDelete(stream):
                log.soft_delete(stream.path)
            case Touch(stream, now):
                log.touch(stream.path, now)
            case Detach(fork, _, inherited):
                log.detach(fork.path, inherited)
            case Unfork():
                pass  # a log finds a stream's forks by their source
        return True

    async def remove(self, path: str, expired: bool) -> None:
        self.copies.drop_held(path, expired, self.log.remove)

    async def sweep(self, now: float) -> None:
        if not self.log.durable:
            return
        copies = self.copies
        for path in self.log.expired_paths(now):  # those not held
            copies.hold(path)
            stream = copies.streams.get(path)
            if stream is not None and stream.expired(now) and stream.refs == 0:
                copies.drop_held(path, True, self.log.remove)
