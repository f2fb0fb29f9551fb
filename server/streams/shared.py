"""``SharedPort``: the port of Durable Streams on a store shared by replicas
(Redis: one server or a Redis Cluster).

Every replica answers from its own copy of the streams it is asked about, in
the one registry class (``server.streams.registry.StreamRegistry``, whose
rules decide every request), but Redis holds the streams, not the copy; this
port keeps the copy:

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
module keeps the copies, and reads and changes them only through the
registry's ``server.streams.port.Copies`` face.

Streams are read on demand: nothing is loaded at startup. Which copies to
keep is the registry's policy, not the port's: as on a durable log, copies
past ``max_live_bytes`` are let go (the least recently used that nobody
here reads, waits on or forks; Redis keeps them), and the limits
(``max_streams``, ``max_stream_bytes``), which count what this replica holds
in its copy, first drop the least recently used idle copies to make room: a
read of one replica cannot make it hold more than its limits allow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from server.store.redis.streams import RedisStreams
from server.streams import port
from server.streams.model import Stream, StreamError, Update
from server.tasks import cancel_and_wait

__all__ = ["SharedPort"]

log = logging.getLogger("tsync.streams")


class SharedPort:
    """The port of a store shared by replicas (Redis: ``RedisStreams``, the
    store's streams part): the copies of the streams asked about, brought up
    to date before each request, written with a check, dropped when idle.

    ``resync_s``: how often the streams with waiting readers are read again
    (the safety net for lost notices). ``start()`` listens to the other
    replicas' changes; ``stop()`` before the store closes.
    """

    shared = True

    def __init__(self, store: RedisStreams, *, resync_s: float = 1.0) -> None:
        #: The store's streams part: every read and write of the store.
        self.store = store
        self.where = store.where
        self.resync_s = resync_s
        self._copies: port.Copies | None = None
        #: Notices received per path held or being read.
        self._noticed: dict[str, int] = {}
        #: Per path held: (subscriptions, notices) when its last read began;
        #: equal to the present ones, the copy holds every change announced.
        self._synced: dict[str, tuple[int, int]] = {}
        #: Subscribed to the notices now.
        self._listening = False
        #: Paths whose waiting readers need a fresh copy (the worker reads them).
        self._pending: set[str] = set()
        self._work_ready = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        #: Confirmed (re)subscriptions to the notices (tests wait on it).
        self.subscribed = 0
        #: Reads of a stream from the store (tests count them).
        self.reads = 0

    @property
    def copies(self) -> port.Copies:
        assert self._copies is not None, "the port serves no registry yet"
        return self._copies

    def bind(self, copies: port.Copies) -> tuple[int, int]:
        """The copies are the registry's; the store's streams are counted
        only as this replica copies them (its limits bound its copy)."""
        self._copies = copies
        return 0, 0

    def close(self) -> None:
        pass  # the store's connection is the store's

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

    # --- bringing the copy up to date -----------------------------------------------

    async def load(self, path: str, trust: port.Trust | None) -> None:
        if trust is not None and trust.if_current:
            await self._until_current(path)
            return
        if trust is not None and trust.path == path and not trust.stale:
            return
        await self._sync(path)

    async def _until_current(self, path: str) -> None:
        """Read the copy of ``path`` until it holds every change announced
        (the readers woken by one read share it: none reads again on its
        own), or until no notice came during a read (the safety net reads
        it again)."""
        while not self._current(path):
            seen = self._noticed.get(path, 0)
            await self._sync(path)
            if not self._listening or self._noticed.get(path, 0) == seen:
                break

    async def _sync(self, path: str) -> None:
        copies = self.copies
        seen = [path]
        try:
            await self._sync_one(path)
            stream = copies.streams.get(path)
            cap: str | None = None
            # A fork reads through its sources: their copies too, each read
            # only when it lacks messages up to the offset read from it (what
            # a source holds before a fork's offset never changes): a read of
            # a deep chain costs one script, not one per source, once copied.
            while stream is not None and stream.forked_from and stream.forked_from not in seen:
                source_path = stream.forked_from
                seen.append(source_path)
                copies.pin([source_path])
                if stream.fork_offset is not None:
                    cap = stream.fork_offset if cap is None else min(cap, stream.fork_offset)
                source = copies.streams.get(source_path)
                if source is None or cap is None or source.tail < cap:
                    await self._sync_one(source_path)
                    source = copies.streams.get(source_path)
                stream = source
        finally:
            copies.unpin(seen[1:])

    async def _sync_one(self, path: str) -> bool:
        """Read the stream at ``path`` into the copy; wake its readers if it
        changed (``True``)."""
        mark = (self.subscribed, self._noticed.get(path, 0))
        self.copies.pin([path])
        try:
            changed = await self._read_copy(path)
        finally:
            self.copies.unpin([path])
        if path in self.copies.streams:
            self._synced[path] = mark
        return changed

    def _current(self, path: str) -> bool:
        """Whether the copy holds every change announced so far: read since
        the last notice of it, and the notices subscribed all along since."""
        mark = (self.subscribed, self._noticed.get(path, 0))
        return self._listening and self._synced.get(path) == mark and path in self.copies.streams

    async def _read_copy(self, path: str) -> bool:
        self.reads += 1
        copies = self.copies
        cached = copies.streams.get(path)
        count = len(cached.messages) if cached is not None else 0
        found = await self.store.read(path, cached)
        # Another read may have moved the copy meanwhile: messages past ``count``
        # it holds already are not pushed twice.
        cached = copies.streams.get(path)
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
                copies.grow(message.held)
            stream = cached
        else:
            if cached is not None:
                self._forget(path)
            stream = Stream(path=path, content_type=None, created_at=0.0, last_access=0.0)
            for message in found.messages:
                stream.push(message)
            copies.streams[path] = stream
            copies.grow(stream.size)
            changed = True
            copies.make_room(path)
        for name, value in found.state.items():
            setattr(stream, name, value)
        stream.gen, stream.version = gen, ver
        self._moved(stream, found.access, found.forks)
        held = stream.producer_bytes
        stream.producers, stream.producer_bytes = {}, 0
        for producer_id, state in found.producers:
            stream.put_producer(producer_id, state)
        copies.grow(stream.producer_bytes - held)
        if changed:
            copies.wake(path)
        return changed

    @staticmethod
    def _moved(stream: Stream, access: float, forks: int) -> None:
        """What changes without a new version: reads (the sliding TTL) and forks."""
        # What the store holds is what was written (a local read may be newer).
        stream.logged_access = access
        stream.last_access = max(stream.last_access, stream.logged_access)
        stream.refs = forks

    async def sweep(self, now: float) -> None:
        # The registry lets copies go (past ``max_live_bytes`` or its limits):
        # their marks go too, and the next read of one starts afresh.
        copies = self.copies
        for path in [p for p in self._synced if p not in copies.streams]:
            del self._synced[path]
        for path in [p for p in self._noticed if p not in copies.streams]:
            if not copies.pinned(path):
                del self._noticed[path]

    def _forget(self, path: str) -> None:
        """Drop the copy of a stream that is gone (or another incarnation)."""
        copies = self.copies
        stream = copies.streams.pop(path, None)
        if stream is not None:
            copies.grow(-stream.held)
            copies.wake(path)
        self._noticed.pop(path, None)
        self._synced.pop(path, None)

    # --- writes -------------------------------------------------------------------------

    async def write(self, change: port.Change, trust: port.Trust | None) -> bool:
        match change:
            case port.Create(stream, source):
                if not await self.store.create(stream, source):
                    raise port.Stale
                if stream.path in self.copies.streams:  # a read found it first: replaced
                    self._forget(stream.path)
            case port.Apply(stream, update):
                return await self._apply(stream, update, trust)
            case port.SoftDelete(stream):
                state = self.store.state(stream, soft_deleted=True)
                await self._cas(
                    stream, trust, state=state, last_access=stream.last_access, soft=True
                )
            case port.Touch(stream, now):
                await self.store.touch(stream, now)
            case port.Unfork(source, fork_path):
                await self.store.unfork(source.path, fork_path)
            case port.Detach(fork, source, inherited):
                size = fork.size + sum(len(m.data) for m in inherited)
                new_gen = await self.store.detach(fork, size, inherited)
                if new_gen is None:
                    raise port.Stale
                fork.gen, fork.version = new_gen, fork.version + 1
                await self.store.unfork(source.path, fork.path)
        return True

    async def _cas(self, stream: Stream, trust: port.Trust | None, **change: Any) -> bool:
        """Write one change of ``stream`` (``RedisStreams.update``'s
        arguments) if its copy is current (``Stale`` otherwise); ``True`` if
        the copy is still to be changed."""
        expected = stream.version
        written = await self.store.update(stream, **change)
        if not written:
            if trust is not None:
                trust.stale = True  # decided again on a fresh copy
            raise port.Stale
        if trust is not None:
            trust.wrote = True
        if self.copies.streams.get(stream.path) is not stream or stream.version != expected:
            return False  # a read brought this change into the copy already
        stream.version = expected + 1
        return True

    async def _apply(self, stream: Stream, update: Update, trust: port.Trust | None) -> bool:
        size = stream.size + (update.message.held if update.message else 0)
        state = self.store.state(
            stream,
            tail=update.tail,
            size=size,
            closed=update.closed,
            closed_by=update.closed_by,
            stream_seq=update.stream_seq,
        )
        return await self._cas(
            stream,
            trust,
            state=state,
            last_access=update.last_access,
            soft=stream.soft_deleted,
            message=update.message,
            producer=update.producer,
        )

    async def forks(self, stream: Stream) -> list[str]:
        return await self.store.fork_paths(stream.path)

    async def remove(self, path: str, expired: bool) -> None:
        """Delete the stream for good, then take it out of its source's forks,
        and remove the source too if it was deleted or expired and has no
        fork left (and so on up)."""
        try:
            await self._remove_chain(path, expired=expired)
        except StreamError:
            if not expired:
                raise

    async def _remove_chain(self, path: str, *, expired: bool) -> None:
        copies = self.copies
        stream = copies.streams.get(path)
        while stream is not None:
            removed = await self.store.remove(stream)
            if removed == -1:  # a fork came meanwhile
                if expired or stream.path != path:
                    return
                raise port.Stale
            self._forget(stream.path)
            if removed == 0 or stream.forked_from is None:
                return  # another replica removed it (and did what follows)
            source_path = stream.forked_from
            left = await self.store.unfork(source_path, stream.path)
            await self._sync_one(source_path)
            source = copies.streams.get(source_path)
            if (
                source is None
                or left
                or not (source.soft_deleted or source.expired(copies.clock()))
            ):
                return
            stream = source

    # --- live readers -------------------------------------------------------------------

    def _noticed_change(self, path: str) -> None:
        copies = self.copies
        if path in copies.streams or copies.pinned(path):
            self._noticed[path] = self._noticed.get(path, 0) + 1
        if copies.watched(path):
            self._pending.add(path)
            self._work_ready.set()

    def _recheck_waited(self) -> None:
        self._pending.update(self.copies.waited())
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
            self.store.notices(lost=self._lost, reconnect_delay=reconnect_delay)
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
