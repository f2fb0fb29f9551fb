"""Durable Streams on Redis (one server or a Redis Cluster), shared by replicas.

Every replica answers from its own copy of the streams it is asked about, as
the memory registry does (``server.streams.registry.StreamRegistry``, whose rules
decide every request here too), but Redis holds the streams, not the copy:

- Before each request the copy of the stream (and of the sources a fork
  reads through) is brought up to date with one script (``RedisStreams.read``): the
  messages past those it holds, the metadata, producers and forks.
- A change is decided on that copy by the registry's rules, then written by
  one script that checks the copy was current: the stream's incarnation
  (``gen``, made at each create) and its change count (``ver``). If another
  replica changed the stream in between, nothing is written (``Stale``) and
  the request is decided again on a fresh copy. So producer epochs and
  sequences, closure, ``Stream-Seq``, content types and offsets are decided
  exactly as on the memory store, and atomically across replicas.
- Every write publishes the stream's path on ``<prefix>streams``. A replica
  whose readers wait on that stream (long-poll, SSE) brings its copy up to
  date and wakes them. Pub/sub is only a wake-up: after every
  (re)subscription, and every ``backplane_resync_s``, each stream with
  waiting readers is read again.

Every read and write of Redis (each retried call answered once), the
scripts, the keys and the subscription to the notices are the store's
streams part, ``server.store.redis.streams`` (``RedisStreams``, built from
the store's ``StoreLink`` as its drafts and presence parts are); this
module decides on the copies.

The limits (``max_streams``, ``max_stream_bytes``) count what this replica
holds in its copy: the streams it was asked about, each dropped once unused
for ``IDLE_COPY_S`` (Redis keeps it). A read or a create that would take the
copy past them first drops the least recently used copies nobody here reads
or waits on (``_make_room``): reads on one replica cannot make it hold more
than its limits allow, only what its live readers and forks need.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Final

from server.store.redis.link import StoreLink
from server.store.redis.streams import RedisStreams
from server.streams.model import Stream, StreamError, StreamMessage, Update
from server.streams.registry import Limits, Stale, StreamAppend, StreamRegistry, Wait
from server.tasks import cancel_and_wait

__all__ = ["RedisRegistry"]

log = logging.getLogger("tsync.streams")

#: A copy of a stream that no request of this replica used for this long
#: (seconds) and no reader waits on is dropped (read again when asked for).
IDLE_COPY_S: Final = 300.0


class _Trusted:
    """A request decided on the copy of ``path`` as it is: ``stale`` once a
    write found that copy stale (it is read again from then on), ``wrote``
    once its change is written."""

    __slots__ = ("path", "stale", "wrote")

    def __init__(self, path: str) -> None:
        self.path = path
        self.stale = False
        self.wrote = False


#: The request of this task that trusts its copy, if any (``_optimistic``).
_TRUSTED: ContextVar[_Trusted | None] = ContextVar("trusted_copy", default=None)


class RedisRegistry(StreamRegistry):
    """The streams of a ``RedisStore``, shared by every replica on it.

    ``resync_s``: how often the streams with waiting readers are read again
    (the safety net for lost notices). ``start()`` listens to the other
    replicas' changes; ``stop()`` before the store closes.
    """

    def __init__(
        self,
        link: StoreLink,
        limits: Limits | None = None,
        clock: Callable[[], float] | None = None,
        *,
        resync_s: float = 1.0,
    ) -> None:
        super().__init__(limits, clock)
        #: The Redis store's link (``server.store.redis.link``), as its parts get it.
        self.link = link
        self.where = link.redis.where
        self.resync_s = resync_s
        #: Notices received per path held or being read.
        self._noticed: dict[str, int] = {}
        #: Per path held: (subscriptions, notices) when its last read began;
        #: equal to the present ones, the copy holds every change announced.
        self._synced: dict[str, tuple[int, int]] = {}
        self._syncing: dict[str, int] = {}
        #: Paths a request is looking up now: their copies are not dropped.
        self._pinned: dict[str, int] = {}
        #: Subscribed to the notices now.
        self._listening = False
        #: Paths whose waiting readers need a fresh copy (the worker reads them).
        self._pending: set[str] = set()
        self._work_ready = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        #: Confirmed (re)subscriptions to the notices (tests wait on it).
        self.subscribed = 0
        #: Reads of a stream from Redis (tests count them).
        self.reads = 0
        #: The store's streams part: every read and write of Redis.
        self.redis = RedisStreams(link)

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._listen(), name="streams-listen"),
            asyncio.create_task(self._work(), name="streams-work"),
            asyncio.create_task(self._safety_net(), name="streams-resync"),
        ]

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []

    # --- Redis ------------------------------------------------------------------------

    def _keys(self, path: str) -> list[str]:
        return self.redis.keys(path)

    # --- bringing the copy up to date -----------------------------------------------

    async def _sync(self, path: str) -> None:
        trusted = _TRUSTED.get()
        if trusted is not None and trusted.path == path and not trusted.stale:
            return
        seen = [path]
        self._pin(seen)
        try:
            await self._sync_one(path)
            stream = self._streams.get(path)
            cap: str | None = None
            # A fork reads through its sources: their copies too, each read
            # only when it lacks messages up to the offset read from it (what
            # a source holds before a fork's offset never changes): a read of
            # a deep chain costs one script, not one per source, once copied.
            while stream is not None and stream.forked_from and stream.forked_from not in seen:
                source_path = stream.forked_from
                seen.append(source_path)
                self._pin([source_path])
                if stream.fork_offset is not None:
                    cap = stream.fork_offset if cap is None else min(cap, stream.fork_offset)
                source = self._streams.get(source_path)
                if source is None or cap is None or source.tail < cap:
                    await self._sync_one(source_path)
                    source = self._streams.get(source_path)
                stream = source
        finally:
            self._unpin(seen)

    async def get(self, path: str) -> Stream | None:
        self._pin([path])
        try:
            return await super().get(path)
        finally:
            self._unpin([path])

    def _pin(self, paths: list[str]) -> None:
        for path in paths:
            self._pinned[path] = self._pinned.get(path, 0) + 1

    def _unpin(self, paths: list[str]) -> None:
        for path in paths:
            left = self._pinned.pop(path) - 1
            if left:
                self._pinned[path] = left

    def _make_room(self, keep: str, streams: int = 0, size: int = 0) -> None:
        """Drop the least recently used copies that nobody here needs now
        (no request looks them up, no reader waits on them, no fork reads
        through them) until the copy is within this replica's limits, with
        room for ``streams`` more and ``size`` more bytes. Redis keeps them:
        a later read brings one back."""
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
            and path not in self._pinned
            and path not in self._syncing
            and not self._watched(path)
        )
        for _, path in idle:
            if within():
                return
            self.evicted += 1
            self._forget(path)

    async def _sync_one(self, path: str) -> bool:
        """Read the stream at ``path`` into the copy; wake its readers if it
        changed (``True``)."""
        mark = (self.subscribed, self._noticed.get(path, 0))
        self._syncing[path] = self._syncing.get(path, 0) + 1
        try:
            changed = await self._read_copy(path)
        finally:
            left = self._syncing.pop(path) - 1
            if left:
                self._syncing[path] = left
        if path in self._streams:
            self._synced[path] = mark
        return changed

    def _notice_current(self, path: str) -> bool:
        """Whether the copy holds every change announced so far: read since
        the last notice of it, and the notices subscribed all along since."""
        mark = (self.subscribed, self._noticed.get(path, 0))
        return self._listening and self._synced.get(path) == mark

    async def _read_copy(self, path: str) -> bool:
        self.reads += 1
        cached = self._streams.get(path)
        count = len(cached.messages) if cached is not None else 0
        found = await self.redis.read(path, cached)
        # Another read may have moved the copy meanwhile: messages past ``count``
        # it holds already are not pushed twice.
        cached = self._streams.get(path)
        if found is None:
            if cached is None:
                return False
            self._forget(path)
            return True
        gen, ver = found.gen, found.version
        if found.state is None:  # unchanged since the copy's version was read
            if cached is not None and cached.gen == gen:
                self._moved(cached, found.access, found.forks)
            return False
        if cached is not None and cached.gen == gen:
            if ver < cached.version:
                return False  # read before a change the copy already holds
            changed = ver != cached.version
            for message in found.messages[max(0, len(cached.messages) - count) :]:
                cached.push(message)
                self._bytes += message.held
            stream = cached
        else:
            if cached is not None:
                self._forget(path)
            stream = Stream(path=path, content_type=None, created_at=0.0, last_access=0.0)
            for message in found.messages:
                stream.push(message)
            self._streams[path] = stream
            self._bytes += stream.size
            changed = True
            self._make_room(path)
        for name, value in found.state.items():
            setattr(stream, name, value)
        stream.gen, stream.version = gen, ver
        self._moved(stream, found.access, found.forks)
        held = stream.producer_bytes
        stream.producers, stream.producer_bytes = {}, 0
        for producer_id, state in found.producers:
            stream.put_producer(producer_id, state)
        self._bytes += stream.producer_bytes - held
        if changed:
            self._wake(path)
        return changed

    @staticmethod
    def _moved(stream: Stream, access: float, forks: int) -> None:
        """What changes without a new version: reads (the sliding TTL) and forks."""
        # What Redis holds is what was written (a local read may be newer).
        stream.logged_access = access
        stream.last_access = max(stream.last_access, stream.logged_access)
        stream.refs = forks

    async def _sweep(self, now: float) -> None:
        swept = self._swept
        await super()._sweep(now)
        if self._swept == swept:
            return
        # Copies nobody here read or waited on for a while: Redis has them.
        for path, stream in list(self._streams.items()):
            if self._watched(path):
                continue
            if now - stream.last_access > IDLE_COPY_S:
                self._forget(path)

    def _forget(self, path: str) -> None:
        """Drop the copy of a stream that is gone (or another incarnation)."""
        stream = self._streams.pop(path, None)
        if stream is not None:
            self._bytes -= stream.held
            self._wake(path)
        self._noticed.pop(path, None)
        self._synced.pop(path, None)

    # --- writes -------------------------------------------------------------------------

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
        return await self._optimistic(
            path,
            lambda: StreamRegistry.append(
                self,
                path,
                body,
                content_type=content_type,
                stream_seq=stream_seq,
                producer=producer,
                close=close,
                values=values,
            ),
        )

    async def close(self, path: str, producer: tuple[str, int, int] | None) -> StreamAppend:
        return await self._optimistic(path, lambda: StreamRegistry.close(self, path, producer))

    async def _optimistic(
        self, path: str, attempt: Callable[[], Awaitable[StreamAppend]]
    ) -> StreamAppend:
        """An append or close decided first on the copy as it is, without
        reading Redis: the write's check refuses it if the copy was stale,
        and then it is decided again on a fresh copy. So a replica that
        writes a stream alone pays one round trip per append, not two. A
        decision that writes nothing (a refusal, a duplicate) is only
        trusted once made on a fresh copy; so is any on a stream whose
        expiry moves with other replicas' reads (a sliding TTL)."""
        stream = self._streams.get(path)
        if stream is None or stream.ttl_s is not None or stream.soft_deleted:
            return await attempt()
        trusted = _Trusted(path)
        token = _TRUSTED.set(trusted)
        try:
            result = await attempt()
        except StreamError as error:
            if error.status == 503:
                raise  # Redis failed: whether it wrote is not known, so no second try
            result = None
        finally:
            _TRUSTED.reset(token)
        if result is not None and (trusted.wrote or trusted.stale):
            return result  # written, or decided on a fresh copy after a stale one
        return await attempt()

    async def _write_create(self, stream: Stream, source: Stream | None) -> None:
        if not await self.redis.create(stream, source):
            raise Stale
        if stream.path in self._streams:  # a read found it first: this copy replaces it
            self._forget(stream.path)

    async def _cas(self, stream: Stream, **change: Any) -> bool:
        """Write one change of ``stream`` (``RedisStreams.update``'s
        arguments) if its copy is current (``Stale`` otherwise); ``True`` if
        the copy is still to be changed."""
        expected = stream.version
        trusted = _TRUSTED.get()
        written = await self.redis.update(stream, **change)
        if not written:
            if trusted is not None:
                trusted.stale = True  # decided again on a fresh copy
            raise Stale
        if trusted is not None:
            trusted.wrote = True
        if self._streams.get(stream.path) is not stream or stream.version != expected:
            return False  # a read brought this change into the copy already
        stream.version = expected + 1
        return True

    async def _write_update(self, stream: Stream, update: Update) -> bool:
        size = stream.size + (update.message.held if update.message else 0)
        state = self.redis.state(
            stream,
            tail=update.tail,
            size=size,
            closed=update.closed,
            closed_by=update.closed_by,
            stream_seq=update.stream_seq,
        )
        return await self._cas(
            stream,
            state=state,
            last_access=update.last_access,
            soft=stream.soft_deleted,
            message=update.message,
            producer=update.producer,
        )

    async def _write_soft_delete(self, stream: Stream) -> None:
        state = self.redis.state(stream, soft_deleted=True)
        await self._cas(stream, state=state, last_access=stream.last_access, soft=True)

    async def _fork_paths(self, stream: Stream) -> list[str]:
        return await self.redis.fork_paths(stream.path)

    async def _write_unfork(self, source: Stream, fork_path: str) -> None:
        await self.redis.unfork(source.path, fork_path)

    async def _write_detach(
        self, fork: Stream, source: Stream, inherited: list[StreamMessage]
    ) -> None:
        size = fork.size + sum(len(m.data) for m in inherited)
        new_gen = await self.redis.detach(fork, size, inherited)
        if new_gen is None:
            raise Stale
        fork.gen, fork.version = new_gen, fork.version + 1
        await self.redis.unfork(source.path, fork.path)

    async def _write_touch(self, stream: Stream, now: float) -> None:
        await self.redis.touch(stream, now)

    async def _remove(self, path: str, *, expired: bool = False) -> None:
        """Delete the stream for good, then take it out of its source's forks,
        and remove the source too if it was deleted or expired and has no
        fork left (and so on up)."""
        try:
            await self._remove_chain(path, expired=expired)
        except StreamError:
            if not expired:
                raise

    async def _remove_chain(self, path: str, *, expired: bool) -> None:
        stream = self._streams.get(path)
        while stream is not None:
            removed = await self.redis.remove(stream)
            if removed == -1:  # a fork came meanwhile
                if expired or stream.path != path:
                    return
                raise Stale
            self._forget(stream.path)
            if removed == 0 or stream.forked_from is None:
                return  # another replica removed it (and did what follows)
            source_path = stream.forked_from
            left = await self.redis.unfork(source_path, stream.path)
            await self._sync_one(source_path)
            source = self._streams.get(source_path)
            if source is None or left or not (source.soft_deleted or source.expired(self.clock())):
                return
            stream = source

    # --- live readers -------------------------------------------------------------------

    async def wait(self, stream: Stream, offset: str, timeout: float) -> Wait:
        # A notice that came before the reader waits found no reader to wake:
        # the copy is read again unless it holds every change announced (the
        # readers woken by one read share it: none reads again on its own).
        while not self._notice_current(stream.path):
            seen = self._noticed.get(stream.path, 0)
            try:
                await self._sync(stream.path)
            except StreamError as err:
                log.warning("a reader of %s waits on its copy: %s", stream.path, err)
                break
            if not self._listening or self._noticed.get(stream.path, 0) == seen:
                break  # no notices now: the safety net reads it again
        return await super().wait(stream, offset, timeout)

    async def still(self, stream: Stream) -> bool:
        if not self._notice_current(stream.path):
            return await super().still(stream)
        token = _TRUSTED.set(_Trusted(stream.path))  # current: no read
        try:
            return await super().still(stream)
        finally:
            _TRUSTED.reset(token)

    def _noticed_change(self, path: str) -> None:
        if path in self._streams or path in self._syncing:
            self._noticed[path] = self._noticed.get(path, 0) + 1
        if self._watched(path):
            self._pending.add(path)
            self._work_ready.set()

    def _recheck_waited(self) -> None:
        self._pending.update(self._waiters)
        self._pending.update(self.fanout.paths())
        self._work_ready.set()

    async def _work(self) -> None:
        while True:
            await self._work_ready.wait()
            self._work_ready.clear()
            paths, self._pending = self._pending, set()
            await asyncio.gather(*(self._sync_quietly(path) for path in paths))

    async def _sync_quietly(self, path: str) -> None:
        """A copy read again for its readers; a failure waits for the next
        notice or the safety net."""
        try:
            await self._sync_one(path)
        except StreamError as err:
            log.debug("streams: cannot read %s now: %s", path, err)

    async def _safety_net(self) -> None:
        while True:
            await asyncio.sleep(self.resync_s)
            self._recheck_waited()

    async def _listen(self, reconnect_delay: float = 0.1) -> None:
        async with contextlib.aclosing(
            self.redis.notices(lost=self._lost, reconnect_delay=reconnect_delay)
        ) as notices:
            async for path in notices:
                if path is not None:
                    self._noticed_change(path)
                    continue
                self.subscribed += 1
                self._listening = True
                self._recheck_waited()  # anything published before was missed

    def _lost(self) -> None:
        self._listening = False
