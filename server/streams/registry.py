"""``StreamRegistry``: the Durable Streams every request is answered from,
and the readers waiting on them (named for what it is, not the memory
store: every backend's streams go through it).

Every operation is a coroutine that, on this registry, never suspends, so
each is atomic: producer validation and the append it allows happen in one
step of the event loop (the protocol's per-producer serialization), and a
reader woken by an append sees it. Readers of a live mode wait on their
stream's own appends: a fork's waiters are never woken by its source.

A shared store's registry (``server.streams.redis.RedisRegistry``) keeps
these rules and this code, and fills in the hooks: ``_sync`` brings its copy
of a stream up to date before a request is decided, the ``_write_*`` hooks
write with a check that the copy was current, and a write that finds it
stale raises ``Stale``: the request is decided again (``_decided``).

The registry is the index every request is answered from. Each change is
first decided without touching memory, then written to the registry's
``StreamLog`` (``server.streams.log``: nothing for the memory store, a SQLite
file for the SQLite store), and only then made in memory and answered: a
change the log cannot write is refused (503) and leaves the stream as it
was, and a change answered is in the log. A durable log (SQLite) holds every
stream and the registry copies of those asked about, read on demand and let go
past ``max_live_bytes`` (``_load``): ``attach`` only counts them.

Why one module of over 600 lines: the registry decides every request of the
protocol (create, append with its producer rules, read, close, fork, expiry,
delete) against one index, and the Redis registry reuses that code through
hooks; split by request, the invariants they share (offsets, closure, the
producers' sequences, the fork tree) would have to be checked across files.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from server.streams.fanout import MAX_TOTAL_QUEUED_BYTES, Fanout
from server.streams.log import NoLog, StreamLog
from server.streams.model import (
    PRODUCER_TTL_S,
    ZERO_OFFSET,
    Producer,
    ProducerOutcome,
    Stream,
    StreamError,
    StreamMessage,
    Update,
    media_type,
    producer_bytes,
)

__all__ = ["Limits", "Stale", "StreamAppend", "StreamRegistry", "Wait"]

#: How often expired streams nobody touches are looked for, in seconds.
SWEEP_EVERY_S: Final = 10.0
#: A read moves a stream's sliding TTL along in memory at once, and in the
#: log at most this often (seconds): reads do not each cost a write.
TOUCH_LOG_EVERY_S: Final = 1.0

#: How often a change is decided again when a shared store found the copy it
#: was decided on stale (other replicas kept changing the stream meanwhile).
STALE_ATTEMPTS: Final = 50

log = logging.getLogger("tsync.streams")

_T = TypeVar("_T")


class Stale(Exception):
    """A shared store's write found that the stream changed since this
    process's copy was read: nothing was written; decide again."""


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


@dataclass(frozen=True, slots=True)
class StreamAppend:
    """What an append (or close) did: ``message`` is ``None`` when nothing
    was appended (a close, a duplicate, a refusal of a closed stream)."""

    stream: Stream
    message: StreamMessage | None = None
    producer: ProducerOutcome | None = None
    closed_now: bool = False
    refused_closed: bool = False


@dataclass(frozen=True, slots=True)
class Wait:
    """What a live read waited for: messages, or none (``timed_out``, or the
    stream closed at the reader's offset)."""

    messages: list[StreamMessage]
    timed_out: bool = False
    closed: bool = False


class StreamRegistry:
    """Every stream of the process by path, with expiry, forks and waiters."""

    def __init__(
        self,
        limits: Limits | None = None,
        clock: Callable[[], float] | None = None,
        log: StreamLog | None = None,
    ):
        import time

        self.limits = limits or Limits()
        self.clock = clock or time.time
        self._log: StreamLog = NoLog()
        self._streams: dict[str, Stream] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        #: Live SSE readers, written to on each append (``server.streams.fanout``).
        self.fanout = Fanout(max_total_queued_bytes=self.limits.max_sse_queued_bytes)
        self._bytes = 0
        #: A durable log holds the streams and ``_streams`` holds copies,
        #: loaded on demand (``_load``): ``_count`` and ``_bytes`` count them
        #: all, ``_copy_bytes`` the copies.
        self._lazy = False
        self._count = 0
        self._copy_bytes = 0
        #: Streams read from the log, and copies let go (tests, metrics).
        self.loads = 0
        self.evicted = 0
        self._letting_go = False
        self._swept = self.clock()
        if log is not None:
            self.attach(log)

    def attach(self, log: StreamLog) -> None:
        """Write every change to ``log`` from now on, and answer from what it
        holds (instead of anything held before): a durable log's streams are
        counted now and read one at a time when asked for. The log is the
        registry's from now on: closed if it cannot be read (its error is
        raised)."""
        try:
            count, held = log.totals()
        except BaseException:
            log.close()
            raise
        self._streams = {}
        self._lazy = log.durable
        self._count, self._bytes, self._copy_bytes = count, held, 0
        self._log = log

    def detach(self) -> None:
        """Close the log (shutdown); the registry writes nowhere after this."""
        log, self._log = self._log, NoLog()
        log.close()

    async def start(self) -> None:
        """Begin what runs beside the requests (nothing here; a shared store's
        registry listens to the other replicas' changes)."""

    async def stop(self) -> None:
        """End what ``start`` began."""

    # --- the hooks of a shared store (``server.streams.redis``) -------------------------
    #
    # Here each is the log's synchronous write inside a coroutine that never
    # suspends: every operation stays one step of the event loop. A shared
    # store's registry answers from its copy, brought up to date first
    # (``_sync``), and writes with a check that the copy was current (a
    # ``Stale`` write is decided again on a fresh copy).

    async def _sync(self, path: str) -> None:
        """Bring this process's copy of the stream at ``path`` up to date: on
        a durable log, read it (and the sources it reads through) if it is
        not held."""
        if self._lazy:
            self._load(path)

    def _load(self, path: str) -> None:
        """Hold the stream at ``path`` and the sources it reads through,
        each read from the log when not held. Past ``max_live_bytes`` the
        least recently used other copies are let go, once this step of the
        event loop is over (``_let_go``): an operation never loses a copy it
        is deciding on."""
        current: str | None = path
        chain: set[str] = set()
        while current is not None and current not in chain:
            chain.add(current)
            stream = self._streams.get(current)
            if stream is None:
                stream = self._log.load_one(current)
                if stream is None:
                    return
                self._streams[current] = stream
                self._copy_bytes += stream.held
                self.loads += 1
            current = stream.forked_from
        if self._copy_bytes > self.limits.max_live_bytes and not self._letting_go:
            self._letting_go = True
            try:
                asyncio.get_running_loop().call_soon(self._let_go)
            except RuntimeError:  # no loop (a script): at once
                self._let_go()

    def _let_go(self) -> None:
        """Let the least recently used copies go until they hold at most
        ``max_live_bytes``: not those readers wait on or follow, nor the
        sources of a fork held (the log keeps them all)."""
        self._letting_go = False
        sources = {s.forked_from for s in self._streams.values() if s.forked_from}
        idle = sorted(
            (stream.last_access, path)
            for path, stream in self._streams.items()
            if path not in sources and not self._watched(path)
        )
        for _, path in idle:
            if self._copy_bytes <= self.limits.max_live_bytes:
                return
            self._copy_bytes -= self._streams.pop(path).held
            self.evicted += 1

    def _watched(self, path: str) -> bool:
        """Whether readers here wait on the stream at ``path`` (long-polls)
        or follow it (SSE, through the fan-out): its copy is kept."""
        return path in self._waiters or self.fanout.follows(path)

    def _grow(self, delta: int) -> None:
        """The streams hold ``delta`` bytes more (or less)."""
        self._bytes += delta
        self._copy_bytes += delta

    async def _write_create(self, stream: Stream, source: Stream | None) -> None:
        self._log.create(stream)

    async def _write_update(self, stream: Stream, update: Update) -> bool:
        """Write ``update``; ``True`` if it is still to be made in this
        process's copy (``False``: the copy has it already)."""
        self._log.update(stream.path, update)
        return True

    async def _write_soft_delete(self, stream: Stream) -> None:
        self._log.soft_delete(stream.path)

    async def _write_touch(self, stream: Stream, now: float) -> None:
        self._log.touch(stream.path, now)

    def _make_room(self, keep: str, streams: int = 0, size: int = 0) -> None:
        """Drop what this process's copy need not hold (a shared store's
        copies of streams nobody here uses) until it has room for
        ``streams`` more and ``size`` more bytes within the limits; the
        streams of a store of its own are all it holds: nothing to drop."""

    async def _fork_paths(self, stream: Stream) -> list[str]:
        """The paths of the forks that read through ``stream`` directly."""
        if self._lazy:
            return self._log.fork_paths(stream.path)
        return [p for p, s in self._streams.items() if s.forked_from == stream.path]

    async def _write_unfork(self, source: Stream, fork_path: str) -> None:
        """Write that the fork at ``fork_path`` reads through ``source`` no
        more (a shared store keeps its sources' forks: nothing here)."""

    async def _write_detach(
        self, fork: Stream, source: Stream, inherited: list[StreamMessage]
    ) -> None:
        """Write that ``fork`` holds ``inherited`` itself and reads through
        ``source`` no more."""
        self._log.detach(fork.path, inherited)

    # --- looking up ------------------------------------------------------------------

    def __len__(self) -> int:
        """How many streams there are (held or not)."""
        return self._count if self._lazy else len(self._streams)

    @property
    def size(self) -> int:
        """The bytes every stream holds together."""
        return self._bytes

    async def get(self, path: str) -> Stream | None:
        """The stream at ``path`` (soft-deleted ones too; the caller answers
        410), or ``None``; an expired one is deleted (soft-deleted while
        forks read through it)."""
        await self._sync(path)
        now = self.clock()
        await self._sweep(now)
        stream = self._streams.get(path)
        if stream is None or not stream.expired(now):
            return stream
        if stream.refs > 0:
            stream.soft_deleted = True
            return stream
        await self._remove(path, expired=True)
        return None

    async def still(self, stream: Stream) -> bool:
        """Whether ``stream`` is still the one at its path, not deleted or
        expired (a live reader goes on reading it)."""
        current = await self.get(stream.path)
        return current is stream and not stream.soft_deleted

    async def live(self, path: str) -> Stream:
        """The stream a client may use: ``StreamError`` 404 or 410 otherwise."""
        stream = await self.get(path)
        if stream is None:
            raise StreamError(404, "Stream not found")
        if stream.soft_deleted:
            raise StreamError(410, "Stream is gone")
        return stream

    # --- creating ----------------------------------------------------------------------

    async def create(
        self,
        path: str,
        *,
        content_type: str | None,
        ttl_s: int | None,
        expires_at: str | None,
        expires_at_ts: float | None,
        body: bytes,
        closed: bool,
        forked_from: str | None,
        fork_offset: str | None,
        fork_sub_offset: int,
        values: tuple[str, ...] | None = None,
    ) -> tuple[Stream, bool]:
        """The stream at ``path``, made now (``True``) or already there with
        this configuration (``False``); ``StreamError`` 409 for another one.
        ``values``: a JSON body's values, parsed already (off the loop)."""
        args = (content_type, ttl_s, expires_at, expires_at_ts, body, closed)
        fork = (forked_from, fork_offset, fork_sub_offset)
        return await self._decided(lambda: self._create(path, *args, *fork, values))

    async def _create(
        self,
        path: str,
        content_type: str | None,
        ttl_s: int | None,
        expires_at: str | None,
        expires_at_ts: float | None,
        body: bytes,
        closed: bool,
        forked_from: str | None,
        fork_offset: str | None,
        fork_sub_offset: int,
        values: tuple[str, ...] | None = None,
    ) -> tuple[Stream, bool]:
        await self._sync(path)
        if forked_from is not None:
            await self._sync(forked_from)
        now = self.clock()
        existing = self._streams.get(path)
        if existing is not None:
            if existing.expired(now) and existing.refs == 0:
                await self._remove(path, expired=True)
            elif existing.soft_deleted or existing.expired(now):
                existing.soft_deleted = True
                raise StreamError(
                    409,
                    "stream was deleted but still has active forks: the path cannot be "
                    "reused until all forks are removed",
                )
            else:
                same = (
                    (media_type(content_type) or "application/octet-stream")
                    == (media_type(existing.content_type) or "application/octet-stream")
                    if forked_from is None or content_type
                    else True
                )
                same = (
                    same
                    and ttl_s == existing.ttl_s
                    and expires_at == existing.expires_at
                    and closed == existing.closed
                    and forked_from == existing.forked_from
                    and (fork_offset is None or fork_offset == existing.fork_offset)
                    and fork_sub_offset == existing.fork_sub_offset
                )
                if not same:
                    raise StreamError(409, "Stream already exists with different configuration")
                return existing, False
        self._make_room(path, streams=1)
        if len(self) >= self.limits.max_streams:
            raise StreamError(
                429,
                f"this server holds {self.limits.max_streams} streams (max_streams)",
                {"retry-after": "1"},
            )
        source: Stream | None = None
        prefix: StreamMessage | None = None
        if forked_from is not None:
            source = self._streams.get(forked_from)
            if source is None or (source.expired(now) and source.refs == 0):
                raise StreamError(404, "Source stream not found")
            if source.soft_deleted:
                raise StreamError(409, "source stream was deleted but still has active forks")
            if content_type and media_type(content_type) != media_type(source.content_type):
                raise StreamError(409, "Content type mismatch with source stream")
            if self.fork_depth(source) + 1 > self.limits.max_fork_depth:
                raise StreamError(
                    400,
                    f"a fork reads through at most {self.limits.max_fork_depth} sources"
                    " (max_fork_depth): fork a stream nearer the root",
                )
            fork_offset = fork_offset or source.tail
            if not (ZERO_OFFSET <= fork_offset <= source.tail):
                raise StreamError(400, "Fork offset beyond source stream length")
            if fork_sub_offset:
                prefix = self._sub_offset_prefix(source, fork_offset, fork_sub_offset)
            content_type = content_type or source.content_type
            if ttl_s is None and expires_at is None:
                ttl_s, expires_at, expires_at_ts = (
                    source.ttl_s,
                    source.expires_at,
                    source.expires_at_ts,
                )
        stream = Stream(
            path=path,
            content_type=content_type,
            created_at=now,
            last_access=now,
            logged_access=now,
            ttl_s=ttl_s,
            expires_at=expires_at,
            expires_at_ts=expires_at_ts,
            forked_from=forked_from,
            fork_offset=fork_offset if forked_from is not None else None,
            tail=fork_offset if forked_from is not None and fork_offset else ZERO_OFFSET,
        )
        if prefix is not None:
            stream.add_raw(prefix.data, prefix.values)
            stream.fork_sub_offset = fork_sub_offset
        if body:
            message = stream.encode(
                body, create=True, values=values, max_values=self.limits.max_append_values
            )
            if message is not None:
                self._check_room(path, message.held)
                stream.push(message)
        stream.closed = closed
        await self._write_create(stream, source)  # the new stream is in no index yet
        if source is not None:
            source.refs += 1
        self._streams[path] = stream
        self._grow(stream.held)
        if self._lazy:
            self._count += 1
        return stream, True

    def _sub_offset_prefix(self, source: Stream, offset: str, sub: int) -> StreamMessage:
        after = self.read(source, offset)
        if not after:
            raise StreamError(400, "Invalid fork sub-offset: no data past the fork offset")
        first = after[0]
        if source.json:
            if sub > len(first.values):
                raise StreamError(400, "Invalid fork sub-offset: past the message's values")
            values = first.values[:sub]
            return StreamMessage((",".join(values) + ",").encode(), "", values)
        if sub > len(first.data):
            raise StreamError(400, "Invalid fork sub-offset: past the message's bytes")
        return StreamMessage(first.data[:sub], "")

    # --- writing -----------------------------------------------------------------------

    async def _decided(self, attempt: Callable[[], Awaitable[_T]]) -> _T:
        """``attempt``, decided again on a fresh copy while a shared store
        finds the copy it was decided on stale."""
        for _ in range(STALE_ATTEMPTS):
            try:
                return await attempt()
            except Stale:
                continue
        raise StreamError(
            503, "the stream changed under every attempt: retry", {"retry-after": "1"}
        )

    async def append(
        self,
        path: str,
        body: bytes,
        *,
        content_type: str | None,
        stream_seq: str | None,
        producer: tuple[str, int, int] | None,
        close: bool,
        values: tuple[str, ...] | None = None,
    ) -> StreamAppend:
        """Append ``body`` (``values``: a JSON body's values, parsed already
        off the loop), or close, or both."""
        return await self._decided(
            lambda: self._append(path, body, content_type, stream_seq, producer, close, values)
        )

    async def _append(
        self,
        path: str,
        body: bytes,
        content_type: str | None,
        stream_seq: str | None,
        producer: tuple[str, int, int] | None,
        close: bool,
        values: tuple[str, ...] | None = None,
    ) -> StreamAppend:
        self._check_producer_id(producer)
        stream = await self.live(path)
        now = self.clock()
        if stream.closed:
            if producer is not None and stream.closed_by == producer:
                repeat = ProducerOutcome("duplicate", producer[1], producer[2])
                return StreamAppend(stream, producer=repeat)
            return StreamAppend(stream, refused_closed=True)
        if body and media_type(content_type) != media_type(stream.content_type):
            raise StreamError(409, "Content-type mismatch")
        outcome: ProducerOutcome | None = None
        new_state = 0
        if producer is not None:
            outcome = stream.check_producer(producer[0], producer[1], producer[2], now)
            if outcome.status != "accepted":
                return StreamAppend(stream, producer=outcome)
            new_state = self._admit_producer(stream, producer[0], now)
        if (
            stream_seq is not None
            and stream.stream_seq is not None
            and (stream_seq <= stream.stream_seq)
        ):
            raise StreamError(409, "Sequence conflict")
        message: StreamMessage | None = None
        if body:
            message = stream.encode(body, values=values, max_values=self.limits.max_append_values)
        if message is not None or new_state:
            self._check_room(path, (message.held if message else 0) + new_state)
        update = Update(
            tail=stream.tail if message is None else message.offset,
            last_access=now,
            closed=stream.closed or close,
            closed_by=producer if close and producer is not None else stream.closed_by,
            stream_seq=stream.stream_seq if stream_seq is None else stream_seq,
            message=message,
            producer=_producer_state(producer, outcome, now),
            held=stream.held + (message.held if message else 0) + new_state,
        )
        await self._apply(stream, update)
        return StreamAppend(stream, message=message, producer=outcome, closed_now=close)

    async def _apply(self, stream: Stream, update: Update) -> None:
        """Write ``update`` to the log, then make it in memory and wake the
        stream's readers."""
        if not await self._write_update(stream, update):
            return
        before, after = stream.held, stream.tail
        stream.apply(update)
        self._grow(stream.held - before)
        self._wake_waiters(stream.path)
        if update.message is not None:
            self.fanout.deliver(stream, update.message, after)
        else:
            self.fanout.wake(stream.path)

    async def close(self, path: str, producer: tuple[str, int, int] | None) -> StreamAppend:
        """A close-only request: idempotent; with producer headers, part of
        the producer's sequence."""
        return await self._decided(lambda: self._close(path, producer))

    async def _close(self, path: str, producer: tuple[str, int, int] | None) -> StreamAppend:
        self._check_producer_id(producer)
        stream = await self.live(path)
        now = self.clock()
        if producer is None:
            await self._apply(
                stream,
                Update(
                    stream.tail, now, True, stream.closed_by, stream.stream_seq, held=stream.held
                ),
            )
            return StreamAppend(stream, closed_now=True)
        if stream.closed:
            if stream.closed_by == producer:
                return StreamAppend(stream, producer=ProducerOutcome("duplicate", *producer[1:]))
            return StreamAppend(stream, refused_closed=True)
        outcome = stream.check_producer(producer[0], producer[1], producer[2], now)
        if outcome.status != "accepted":
            return StreamAppend(stream, producer=outcome)
        new_state = self._admit_producer(stream, producer[0], now)
        if new_state:
            self._check_room(path, new_state)
        update = Update(
            stream.tail,
            now,
            closed=True,
            closed_by=producer,
            stream_seq=stream.stream_seq,
            producer=_producer_state(producer, outcome, now),
            held=stream.held + new_state,
        )
        await self._apply(stream, update)
        return StreamAppend(stream, producer=outcome, closed_now=True)

    async def delete(self, path: str, *, detach_forks: bool = False) -> None:
        """Delete the stream at ``path``: soft-deleted while forks read
        through it (the protocol's rule), or, with ``detach_forks``, at once
        (a soft-deleted one too) after each fork got a copy of what it read
        through it: the path is free for a new stream."""
        if detach_forks:
            await self._decided(lambda: self._detach_and_delete(path))
            return
        await self._decided(lambda: self._delete(path))

    async def _detach_and_delete(self, path: str) -> None:
        stream = await self.get(path)
        if stream is None:
            raise StreamError(404, "Stream not found")
        for fork_path in await self._fork_paths(stream):
            await self._sync(fork_path)
            fork = self._streams.get(fork_path)
            if fork is None or fork.forked_from != stream.path:
                await self._write_unfork(stream, fork_path)  # detached or gone already
                continue
            inherited = [
                m for s, cap in reversed(self._sources(fork, None)) for m in s.own_after(None, cap)
            ]
            await self._write_detach(fork, stream, inherited)
            fork.messages[:0] = inherited
            fork.offsets[:0] = [m.offset for m in inherited]
            added = sum(len(m.data) for m in inherited)
            fork.size += added
            self._grow(added)
            fork.forked_from = None
            stream.refs = max(0, stream.refs - 1)
        await self._remove(path)

    async def _delete(self, path: str) -> None:
        stream = await self.live(path)
        if stream.refs > 0:
            await self._write_soft_delete(stream)
            stream.soft_deleted = True
            self._wake(path)
            return
        await self._remove(path)

    async def _remove(self, path: str, *, expired: bool = False) -> None:
        """Delete for good, and the soft-deleted (or expired) sources only
        this one kept. A deletion the log cannot write is refused; a removal
        of an ``expired`` stream is made in memory all the same (the log's
        copy is expired too: it is removed when loaded again)."""
        stream = self._streams.get(path)
        if stream is None:
            return
        now = self.clock()
        doomed = [stream]
        while doomed[-1].forked_from is not None:
            source = self._streams.get(doomed[-1].forked_from or "")
            if source is None or source.refs > 1:
                break
            if not (source.soft_deleted or source.expired(now)):
                break
            doomed.append(source)
        try:
            self._log.remove([s.path for s in doomed])
        except StreamError:
            if not expired:
                raise
        for gone in doomed:
            del self._streams[gone.path]
            self._grow(-gone.held)
            if self._lazy:
                self._count -= 1
            self._wake(gone.path)
            if gone.forked_from is not None:
                source = self._streams.get(gone.forked_from)
                if source is not None:
                    source.refs = max(0, source.refs - 1)

    def _check_producer_id(self, producer: tuple[str, int, int] | None) -> None:
        limit = self.limits.max_producer_id_bytes
        if producer is not None and len(producer[0].encode("utf-8", "surrogatepass")) > limit:
            raise StreamError(
                400, f"Invalid Producer-Id: longer than {limit} bytes (max_producer_id_bytes)"
            )

    def _admit_producer(self, stream: Stream, producer_id: str, now: float) -> int:
        """The bytes the state of ``producer_id`` adds to ``stream`` (0 when
        the stream has it already); ``StreamError`` 409 when the stream has
        ``max_producers`` others heard from within ``PRODUCER_TTL_S``. Those
        not heard from for longer are dropped from this copy here (only
        when the stream is full: no request scans its producers otherwise)."""
        if producer_id in stream.producers:
            return 0
        limit = self.limits.max_producers
        if len(stream.producers) >= limit:
            for key, state in list(stream.producers.items()):
                if now - state.updated > PRODUCER_TTL_S:
                    before = stream.producer_bytes
                    stream.drop_producer(key)
                    self._grow(stream.producer_bytes - before)
            if len(stream.producers) >= limit:
                raise StreamError(
                    409, f"this stream has {limit} idempotent producers (max_stream_producers)"
                )
        return producer_bytes(producer_id)

    def _check_room(self, path: str, size: int) -> None:
        self._make_room(path, size=size)
        if self._bytes + size > self.limits.max_bytes:
            raise StreamError(
                507, f"the streams of this server hold {self._bytes} bytes (max_stream_bytes)"
            )

    async def _sweep(self, now: float) -> None:
        if now - self._swept < SWEEP_EVERY_S:
            return
        self._swept = now
        for path in [p for p, s in self._streams.items() if s.expired(now) and s.refs == 0]:
            await self._remove(path, expired=True)
        if not self._lazy:
            return
        for path in self._log.expired_paths(now):  # those not held
            self._load(path)
            stream = self._streams.get(path)
            if stream is not None and stream.expired(now) and stream.refs == 0:
                await self._remove(path, expired=True)

    # --- reading -----------------------------------------------------------------------

    def read(self, stream: Stream, offset: str | None) -> list[StreamMessage]:
        """The messages after ``offset`` (``None``: from the start), the
        inherited ones of a fork first (its sources' up to its fork offset,
        theirs up to theirs...: a loop, not a recursion, over at most
        ``max_fork_depth`` sources, more only if a log held a deeper chain)."""
        if stream.forked_from is None or stream.fork_offset is None:
            return stream.own_after(offset)
        found: list[StreamMessage] = []
        for source, cap in reversed(self._sources(stream, offset)):
            found += source.own_after(offset, cap)
        found += stream.own_after(offset)
        return found

    def _sources(self, stream: Stream, offset: str | None) -> list[tuple[Stream, str]]:
        """The sources a read of ``stream`` after ``offset`` reads through,
        nearest first, each with the last offset read from it."""
        chain: list[tuple[Stream, str]] = []
        current: Stream | None = stream
        cap: str | None = None
        seen = {stream.path}
        while current is not None:
            fork_offset, source_path = current.fork_offset, current.forked_from
            if source_path is None or fork_offset is None:
                break
            if offset is not None and offset >= fork_offset:
                break
            cap = fork_offset if cap is None else min(cap, fork_offset)
            if self._lazy and source_path not in self._streams:
                self._load(source_path)  # let go since the fork was looked up
            current = self._streams.get(source_path)
            if current is None or current.path in seen:
                break
            seen.add(current.path)
            chain.append((current, cap))
        return chain

    def fork_depth(self, stream: Stream) -> int:
        """How many sources ``stream`` reads through (0: it is no fork)."""
        return len(self._sources(stream, None))

    async def touch(self, stream: Stream) -> None:
        """A read: the stream's sliding TTL starts again (written to the log
        at most every ``TOUCH_LOG_EVERY_S``; a write that fails is logged,
        and the read answered all the same)."""
        now = self.clock()
        stream.touch(now)
        if stream.ttl_s is None or now - stream.logged_access < TOUCH_LOG_EVERY_S:
            return
        if self._streams.get(stream.path) is not stream:
            return
        try:
            await self._write_touch(stream, now)
        except StreamError as error:
            log.warning("a read of %s did not extend its TTL on disk: %s", stream.path, error)
            return
        stream.logged_access = now

    async def wait(self, stream: Stream, offset: str, timeout: float) -> Wait:
        """Messages after ``offset``, waiting up to ``timeout`` seconds for
        this stream's own next append (or its close)."""
        if stream.fork_offset is not None and offset < stream.fork_offset:
            return Wait(self.read(stream, offset))
        found = self.read(stream, offset)
        if found:
            return Wait(found)
        if stream.closed and offset == stream.tail:
            return Wait([], closed=True)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(stream.path, set())
        waiters.add(future)
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            current = self._streams.get(stream.path)
            return Wait([], timed_out=True, closed=current is not None and current.closed)
        finally:
            waiters.discard(future)
            if not waiters:
                self._waiters.pop(stream.path, None)
        current = self._streams.get(stream.path)
        if current is not stream or stream.soft_deleted:
            return Wait([], timed_out=True)
        found = self.read(stream, offset)
        return Wait(
            found, timed_out=not found and not stream.closed, closed=not found and stream.closed
        )

    def _wake(self, path: str) -> None:
        self._wake_waiters(path)
        self.fanout.wake(path)

    def _wake_waiters(self, path: str) -> None:
        for future in self._waiters.get(path, ()):
            if not future.done():
                future.set_result(None)

    def cancel_waits(self) -> None:
        """Wake every waiting reader (shutdown): each answers as on a
        timeout; every SSE response ends."""
        for waiters in self._waiters.values():
            for future in waiters:
                if not future.done():
                    future.set_result(None)
        self.fanout.end_all()


def _producer_state(
    producer: tuple[str, int, int] | None, outcome: ProducerOutcome | None, now: float
) -> tuple[str, Producer] | None:
    """The state an accepted producer request leaves its producer in."""
    if producer is None or outcome is None:
        return None
    return producer[0], Producer(outcome.epoch, outcome.seq, now)
