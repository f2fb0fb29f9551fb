"""``StreamRegistry``: the Durable Streams every request is answered from,
and the readers waiting on them (named for what it is, not the memory
store: every backend's streams go through it).

Every operation is a coroutine that, on this registry, never suspends, so
each is atomic: producer validation and the append it allows happen in one
step of the event loop (the protocol's per-producer serialization), and a
reader woken by an append sees it. Readers of a live mode wait on their
stream's own appends: a fork's waiters are never woken by its source.

The registry holds a ``StreamPort`` (``server.streams.port``) of the store
its streams live in, and no subclass: every store's streams are decided by
this code. Each change is first decided without touching memory, then
written through the port (``LogPort``: nothing for the memory store, the
SQLite file of the SQLite store; ``server.streams.shared.SharedPort``: a
shared store, Redis), and only then made in memory and answered: a change
the store cannot write is refused (503) and leaves the stream as it was, and
a change answered is in the store. The port is only the store's verbs
(``load``, ``forks``, ``write`` of one change record, ``remove``, ``sweep``);
every policy over the copies is here. A durable store holds every stream and
the registry copies of those asked about, read on demand and let go past
``max_live_bytes`` (``hold``, ``_let_go``): ``attach`` only counts them; a
shared store's copies are let go the same way, and make room within the
limits, which count them (``_make_room``). Before a request is decided the
port brings the copy of its stream up to date (``load``); it writes with a
check that the copy was current: a write that finds it stale raises
``Stale``, and the request is decided again (``_decided``); an append or
close is first decided on the copy as it is, passed to the port as a
``Trust`` (``_optimistic``).

Why one module of over 600 lines: the registry decides every request of the
protocol (create, append with its producer rules, read, close, fork, expiry,
delete) against one index, whatever store holds the streams; split by
request, the invariants they share (offsets, closure, the producers'
sequences, the fork tree) would have to be checked across files.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar, cast

from server.streams.fanout import Fanout
from server.streams.log import StreamLog
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
from server.streams.port import (
    Apply,
    Create,
    Detach,
    Limits,
    LogPort,
    SoftDelete,
    Stale,
    StreamPort,
    Touch,
    Trust,
    Unfork,
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


@dataclass(frozen=True, slots=True)
class StreamAppend:
    """What an append (or close) did: ``message`` is ``None`` when nothing
    was appended (a close, a duplicate, a refusal of a closed stream)."""

    stream: Stream
    message: StreamMessage | None = None
    producer: ProducerOutcome | None = None
    closed_now: bool = False
    refused_closed: bool = False


#: What an append sends: its body, content type, ``Stream-Seq`` and (JSON)
#: values; a plain tuple (one per append).
_Sent = tuple[bytes, str | None, str | None, tuple[str, ...] | None]


@dataclass(frozen=True, slots=True)
class _Asked:
    """What a create asks for that a fork may fill in from its source."""

    content_type: str | None
    ttl_s: int | None
    expires_at: str | None
    expires_at_ts: float | None
    fork_offset: str | None
    values: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class Wait:
    """What a live read waited for: messages, or none (``timed_out``, or the
    stream closed at the reader's offset)."""

    messages: list[StreamMessage]
    timed_out: bool = False
    closed: bool = False


class StreamRegistry:
    """Every stream of the process by path, with expiry, forks and waiters,
    kept in the store its ``StreamPort`` writes to (``server.streams.port``)."""

    def __init__(
        self,
        limits: Limits | None = None,
        clock: Callable[[], float] | None = None,
        log: StreamLog | None = None,
        *,
        port: StreamPort | None = None,
    ):
        import time

        self.limits = limits or Limits()
        self.clock = clock or time.time
        self.port: StreamPort = LogPort()
        self._streams: dict[str, Stream] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        #: Live SSE readers, written to on each append (``server.streams.fanout``).
        self.fanout = Fanout(max_total_queued_bytes=self.limits.max_sse_queued_bytes)
        self._bytes = 0
        #: A durable store holds the streams and ``_streams`` holds copies,
        #: each read with ``_read`` on demand (``hold``): ``_count`` and
        #: ``_bytes`` count them all, ``_copy_bytes`` the copies.
        self._read: Callable[[str], Stream | None] | None = None
        self._lazy = False
        self._count = 0
        self._copy_bytes = 0
        #: Paths a request is looking up now: their copies are not dropped.
        self._pinned: dict[str, int] = {}
        #: Streams read from the log, and copies let go (tests, metrics).
        self.loads = 0
        self.evicted = 0
        self._letting_go = False
        self._swept = self.clock()
        self.port.bind(self)
        if port is not None:
            self.attach(port)
        elif log is not None:
            self.attach(log)

    def attach(self, port: StreamPort | StreamLog) -> None:
        """Keep the streams in ``port`` from now on (a ``StreamLog``: through
        a ``LogPort``), and answer from what it holds (instead of anything
        held before): a durable store's streams are counted now and read one
        at a time when asked for. The port is the registry's from now on:
        closed if it cannot be read (its error is raised). A log given to a
        registry on a shared store is closed: the store keeps its streams."""
        given = cast(StreamPort, port) if hasattr(port, "bind") else LogPort(port)
        if self.port.shared and not given.shared:
            given.close()  # the streams of a shared store are in the store
            given = self.port
        previous, self._read = self._read, None
        try:
            count, held = given.bind(self)
        except BaseException:
            self._read = previous
            raise
        self._streams = {}
        self._lazy = self._read is not None
        self._count, self._bytes, self._copy_bytes = count, held, 0
        self.port = given

    def detach(self) -> None:
        """Close the port (shutdown); the registry writes nowhere after this."""
        port, self.port = self.port, LogPort()
        self._read = None
        self._lazy = False
        self.port.bind(self)
        port.close()

    async def start(self) -> None:
        """Begin what runs beside the requests (on a shared store, listening
        to the other replicas' changes)."""
        await self.port.start()

    async def stop(self) -> None:
        """End what ``start`` began."""
        await self.port.stop()

    # --- the copies, as the port sees them (``server.streams.port.Copies``) ----------

    @property
    def streams(self) -> dict[str, Stream]:
        """The copies held, by path."""
        return self._streams

    def read_from(self, read: Callable[[str], Stream | None]) -> None:
        """The port's store holds every stream: copies are read with ``read``
        one at a time, when asked for (``hold``)."""
        self._read = read

    def hold(self, path: str) -> None:
        """Hold the stream at ``path`` and the sources it reads through,
        each read from the store when not held. Past ``max_live_bytes`` the
        least recently used other copies are let go, once this step of the
        event loop is over (``_let_go``): an operation never loses a copy it
        is deciding on."""
        read = self._read
        if read is None:
            return
        current: str | None = path
        chain: set[str] = set()
        while current is not None and current not in chain:
            chain.add(current)
            stream = self._streams.get(current)
            if stream is None:
                stream = read(current)
                if stream is None:
                    return
                self._streams[current] = stream
                self._copy_bytes += stream.held
                self.loads += 1
            current = stream.forked_from
        self._let_go_soon()

    def _let_go_soon(self) -> None:
        """Past ``max_live_bytes``, let copies go once this step of the event
        loop is over (``_let_go``); only copies the store keeps anyway (a
        durable log, a shared store): the memory store's are the streams."""
        if self._copy_bytes <= self.limits.max_live_bytes or self._letting_go:
            return
        if not (self._lazy or self.port.shared):
            return
        self._letting_go = True
        try:
            asyncio.get_running_loop().call_soon(self._let_go)
        except RuntimeError:  # no loop (a script): at once
            self._let_go()

    def _let_go(self) -> None:
        """Let the least recently used copies go until they hold at most
        ``max_live_bytes``: not those readers wait on or follow, nor those a
        read is bringing up to date, nor the sources of a fork held (the
        store keeps them all). A shared store's limits count the copies:
        those let go no longer count."""
        self._letting_go = False
        sources = {s.forked_from for s in self._streams.values() if s.forked_from}
        idle = sorted(
            (stream.last_access, path)
            for path, stream in self._streams.items()
            if path not in sources and not self.watched(path) and not self.pinned(path)
        )
        for _, path in idle:
            if self._copy_bytes <= self.limits.max_live_bytes:
                return
            held = self._streams.pop(path).held
            self._copy_bytes -= held
            if not self._lazy:
                self._bytes -= held
            self.evicted += 1

    def watched(self, path: str) -> bool:
        """Whether readers here wait on the stream at ``path`` (long-polls)
        or follow it (SSE, through the fan-out): its copy is kept."""
        return path in self._waiters or self.fanout.follows(path)

    def waited(self) -> set[str]:
        """The paths readers here wait on or follow."""
        return set(self._waiters) | set(self.fanout.paths())

    def pinned(self, path: str) -> bool:
        """Whether a request looks ``path`` up now."""
        return path in self._pinned

    def pin(self, paths: Sequence[str]) -> None:
        """Keep the copies of ``paths`` (a request or the port reads them now)."""
        for path in paths:
            self._pinned[path] = self._pinned.get(path, 0) + 1

    def unpin(self, paths: Sequence[str]) -> None:
        """End one ``pin`` of each of ``paths``."""
        for path in paths:
            left = self._pinned.pop(path) - 1
            if left:
                self._pinned[path] = left

    def grow(self, delta: int) -> None:
        """The streams hold ``delta`` bytes more (or less)."""
        self._bytes += delta
        self._copy_bytes += delta

    async def _load(self, path: str, trust: Trust | None = None) -> None:
        """Bring this process's copy of ``path`` up to date (the port's
        ``load``), the path kept meanwhile."""
        self.pin([path])
        try:
            await self.port.load(path, trust)
        finally:
            self.unpin([path])

    def make_room(self, keep: str) -> None:
        """A copy was added (``keep``): on a shared store, let others go if
        the copies are past the limits or ``max_live_bytes``."""
        self._make_room(keep, 0, 0)
        self._let_go_soon()

    def _make_room(self, keep: str, streams: int, size: int) -> None:
        """On a shared store the limits (``max_streams``, ``max_stream_bytes``)
        count this replica's copies: drop the least recently used ones that
        nobody here needs now (no request or read looks them up, no reader
        waits on them, no fork reads through them) until there is room for
        ``streams`` more and ``size`` more bytes. The store keeps them: a
        later read brings one back. A store of the process's own counts every
        stream: nothing to drop."""
        if not self.port.shared:
            return
        limits = self.limits

        def within() -> bool:
            return (
                len(self._streams) + streams <= limits.max_streams
                and self._bytes + size <= limits.max_bytes
            )

        if within():
            return
        idle = sorted(
            (stream.last_access, path)
            for path, stream in self._streams.items()
            if path != keep
            and stream.refs == 0
            and not self.pinned(path)
            and not self.watched(path)
        )
        for _, path in idle:
            if within():
                return
            self.grow(-self._streams.pop(path).held)
            self.evicted += 1

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
        return await self._get(path, None)

    async def _get(self, path: str, trust: Trust | None) -> Stream | None:
        self.pin([path])
        try:
            await self._load(path, trust)
            now = self.clock()
            await self._sweep(now)
            stream = self._streams.get(path)
            if stream is None or not stream.expired(now):
                return stream
            if stream.refs > 0:
                stream.soft_deleted = True
                return stream
            await self.port.remove(path, True)
            return None
        finally:
            self.unpin([path])

    async def still(self, stream: Stream) -> bool:
        """Whether ``stream`` is still the one at its path, not deleted or
        expired (a live reader goes on reading it); a copy the port knows
        current is not read again."""
        current = await self._get(stream.path, Trust(stream.path, if_current=True))
        return current is stream and not stream.soft_deleted

    async def live(self, path: str) -> Stream:
        """The stream a client may use: ``StreamError`` 404 or 410 otherwise."""
        return await self._live(path, None)

    async def _live(self, path: str, trust: Trust | None) -> Stream:
        stream = await self._get(path, trust)
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
        asked = _Asked(content_type, ttl_s, expires_at, expires_at_ts, fork_offset, values)
        new = (path, body, closed, forked_from, fork_sub_offset, asked)
        return await self._decided(lambda _: self._create(*new))

    async def _create(
        self,
        path: str,
        body: bytes,
        closed: bool,
        forked_from: str | None,
        fork_sub_offset: int,
        asked: _Asked,
    ) -> tuple[Stream, bool]:
        # Each attempt starts from what was asked (a fork fills in the rest).
        content_type, ttl_s, expires_at = asked.content_type, asked.ttl_s, asked.expires_at
        expires_at_ts, fork_offset = asked.expires_at_ts, asked.fork_offset
        await self._load(path)
        if forked_from is not None:
            await self._load(forked_from)
        now = self.clock()
        existing = self._streams.get(path)
        if existing is not None:
            if existing.expired(now) and existing.refs == 0:
                await self.port.remove(path, True)
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
        self._make_room(path, 1, 0)
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
                body, create=True, values=asked.values, max_values=self.limits.max_append_values
            )
            if message is not None:
                self._check_room(path, message.held)
                stream.push(message)
        stream.closed = closed
        await self.port.write(Create(stream, source), None)  # in no index yet
        if source is not None:
            source.refs += 1
        self._streams[path] = stream
        self.grow(stream.held)
        if self._lazy:
            self._count += 1
        self._let_go_soon()
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

    async def _decided(
        self, attempt: Callable[[Trust | None], Awaitable[_T]], trust: Trust | None = None
    ) -> _T:
        """``attempt``, decided again on a fresh copy while a shared store
        finds the copy it was decided on stale."""
        for _ in range(STALE_ATTEMPTS):
            try:
                return await attempt(trust)
            except Stale:
                continue
        raise StreamError(
            503, "the stream changed under every attempt: retry", {"retry-after": "1"}
        )

    async def _optimistic(
        self, path: str, attempt: Callable[[Trust | None], Awaitable[StreamAppend]]
    ) -> StreamAppend:
        """An append or close; on a shared store decided first on the copy
        as it is, without reading the store: the write's check refuses it if
        the copy was stale, and then it is decided again on a fresh copy. So
        a replica that writes a stream alone pays one round trip per append,
        not two. A decision that writes nothing (a refusal, a duplicate) is
        only trusted once made on a fresh copy; so is any on a stream whose
        expiry moves with other replicas' reads (a sliding TTL)."""
        stream = self._streams.get(path)
        if (
            not self.port.shared
            or stream is None
            or stream.ttl_s is not None
            or stream.soft_deleted
        ):
            return await self._decided(attempt)
        trust = Trust(path)
        result: StreamAppend | None
        try:
            result = await self._decided(attempt, trust)
        except StreamError as error:
            if error.status == 503:
                raise  # the store failed: whether it wrote is not known, so no second try
            result = None
        if result is not None and (trust.wrote or trust.stale):
            return result  # written, or decided on a fresh copy after a stale one
        return await self._decided(attempt)

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
        sent: _Sent = (body, content_type, stream_seq, values)
        return await self._optimistic(
            path, lambda trust: self._append(path, sent, producer, close, trust)
        )

    async def _append(
        self,
        path: str,
        sent: _Sent,
        producer: tuple[str, int, int] | None,
        close: bool,
        trust: Trust | None,
    ) -> StreamAppend:
        body, content_type, stream_seq, values = sent
        self._check_producer_id(producer)
        stream = await self._live(path, trust)
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
        await self._apply(stream, update, trust)
        return StreamAppend(stream, message=message, producer=outcome, closed_now=close)

    async def _apply(self, stream: Stream, update: Update, trust: Trust | None) -> None:
        """Write ``update`` to the log, then make it in memory and wake the
        stream's readers."""
        if not await self.port.write(Apply(stream, update), trust):
            return
        before, after = stream.held, stream.tail
        stream.apply(update)
        self.grow(stream.held - before)
        self._wake_waiters(stream.path)
        if update.message is not None:
            self.fanout.deliver(stream, update.message, after)
        else:
            self.fanout.wake(stream.path)

    async def close(self, path: str, producer: tuple[str, int, int] | None) -> StreamAppend:
        """A close-only request: idempotent; with producer headers, part of
        the producer's sequence."""
        return await self._optimistic(path, lambda trust: self._close(path, producer, trust))

    async def _close(
        self, path: str, producer: tuple[str, int, int] | None, trust: Trust | None
    ) -> StreamAppend:
        self._check_producer_id(producer)
        stream = await self._live(path, trust)
        now = self.clock()
        if producer is None:
            await self._apply(
                stream,
                Update(
                    stream.tail, now, True, stream.closed_by, stream.stream_seq, held=stream.held
                ),
                trust,
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
        await self._apply(stream, update, trust)
        return StreamAppend(stream, producer=outcome, closed_now=True)

    async def delete(self, path: str, *, detach_forks: bool = False) -> None:
        """Delete the stream at ``path``: soft-deleted while forks read
        through it (the protocol's rule), or, with ``detach_forks``, at once
        (a soft-deleted one too) after each fork got a copy of what it read
        through it: the path is free for a new stream."""
        if detach_forks:
            await self._decided(lambda _: self._detach_and_delete(path))
            return
        await self._decided(lambda _: self._delete(path))

    async def _detach_and_delete(self, path: str) -> None:
        stream = await self.get(path)
        if stream is None:
            raise StreamError(404, "Stream not found")
        for fork_path in await self.port.forks(stream):
            await self._load(fork_path)
            fork = self._streams.get(fork_path)
            if fork is None or fork.forked_from != stream.path:
                await self.port.write(Unfork(stream, fork_path), None)  # detached or gone
                continue
            inherited = tuple(
                m for s, cap in reversed(self._sources(fork, None)) for m in s.own_after(None, cap)
            )
            await self.port.write(Detach(fork, stream, inherited), None)
            fork.messages[:0] = inherited
            fork.offsets[:0] = [m.offset for m in inherited]
            added = sum(len(m.data) for m in inherited)
            fork.size += added
            self.grow(added)
            fork.forked_from = None
            stream.refs = max(0, stream.refs - 1)
        await self.port.remove(path, False)

    async def _delete(self, path: str) -> None:
        stream = await self.live(path)
        if stream.refs > 0:
            await self.port.write(SoftDelete(stream), None)
            stream.soft_deleted = True
            self.wake(path)
            return
        await self.port.remove(path, False)

    def drop_held(self, path: str, expired: bool, write: Callable[[Sequence[str]], None]) -> None:
        """Delete for good, and the soft-deleted (or expired) sources only
        this one kept, their paths given to ``write`` first (a store of the
        process's own: ``LogPort.remove``). A deletion the log cannot write is refused; a removal
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
            write([s.path for s in doomed])
        except StreamError:
            if not expired:
                raise
        for gone in doomed:
            del self._streams[gone.path]
            self.grow(-gone.held)
            if self._lazy:
                self._count -= 1
            self.wake(gone.path)
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
                    self.grow(stream.producer_bytes - before)
            if len(stream.producers) >= limit:
                raise StreamError(
                    409, f"this stream has {limit} idempotent producers (max_stream_producers)"
                )
        return producer_bytes(producer_id)

    def _check_room(self, path: str, size: int) -> None:
        self._make_room(path, 0, size)
        if self._bytes + size > self.limits.max_bytes:
            raise StreamError(
                507, f"the streams of this server hold {self._bytes} bytes (max_stream_bytes)"
            )

    async def _sweep(self, now: float) -> None:
        if now - self._swept < SWEEP_EVERY_S:
            return
        self._swept = now
        for path in [p for p, s in self._streams.items() if s.expired(now) and s.refs == 0]:
            await self.port.remove(path, True)
        await self.port.sweep(now)  # those not held, or idle

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
                self.hold(source_path)  # let go since the fork was looked up
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
            await self.port.write(Touch(stream, now), None)
        except StreamError as error:
            log.warning("a read of %s did not extend its TTL on disk: %s", stream.path, error)
            return
        stream.logged_access = now

    async def wait(self, stream: Stream, offset: str, timeout: float) -> Wait:
        """Messages after ``offset``, waiting up to ``timeout`` seconds for
        this stream's own next append (or its close)."""
        # A notice that came before the reader waits found no reader to
        # wake: the copy is read again unless the port knows it current.
        try:
            await self.port.load(stream.path, Trust(stream.path, if_current=True))
        except StreamError as err:
            log.warning("a reader of %s waits on its copy: %s", stream.path, err)
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

    def wake(self, path: str) -> None:
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
