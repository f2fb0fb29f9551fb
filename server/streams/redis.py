"""Durable Streams on Redis (one server or a Redis Cluster), shared by replicas.

Every replica answers from its own copy of the streams it is asked about, as
the memory registry does (``server.streams.memory.Registry``, whose rules
decide every request here too), but Redis holds the streams, not the copy:

- Before each request the copy of the stream (and of the sources a fork
  reads through) is brought up to date with one script (``_READ``): the
  messages past those it holds, the metadata, producers and forks.
- A change is decided on that copy by the registry's rules, then written by
  one script that checks the copy was current: the stream's incarnation
  (``gen``, made at each create) and its change count (``ver``). If another
  replica changed the stream in between, nothing is written (``Stale``) and
  the request is decided again on a fresh copy. So producer epochs and
  sequences, closure, ``Stream-Seq``, content types and offsets are decided
  exactly as on the memory store, and atomically across replicas.
- redis-py retries a command after a connection error or a timeout: each
  write carries a token of its call, kept with the stream (the last 32),
  and a retried script that already ran finds it and answers as it did
  instead of appending twice. A removal leaves its token for a minute.
- Every write publishes the stream's path on ``<prefix>streams``. A replica
  whose readers wait on that stream (long-poll, SSE) brings its copy up to
  date and wakes them. Pub/sub is only a wake-up: after every
  (re)subscription, and every ``backplane_resync_s``, each stream with
  waiting readers is read again.

Keys of one stream share the hash tag of its path's SHA-1, so a stream is
on one slot of a cluster and each script changes it atomically::

    <prefix>ds{<sha1>}:meta   hash: gen, ver, access (last access, for the
                              sliding TTL), s (the rest, msgpack), gc (ms:
                              when Redis may drop it), soft ("1": deleted,
                              kept for its forks)
    <prefix>ds{<sha1>}:msgs   list: its own messages (msgpack offset, data, values)
    <prefix>ds{<sha1>}:prod   hash: producer id -> msgpack epoch, last seq, updated
    <prefix>ds{<sha1>}:forks  set: the paths of the forks that read through it
    <prefix>ds{<sha1>}:calls  list: tokens of the last writes (retries)
    <prefix>ds{<sha1>}:gone   the token of the removal that deleted it (1 min)

A fork lives on its own slot: creating one first adds it to its source's
``forks`` (which keeps the source from expiring in Redis while a fork reads
through it), then creates it; removing one takes it out again, and removes
a source deleted or expired meanwhile once no fork is left. Streams with a
TTL or ``Expires-At`` carry a Redis expiry a minute past their deadline
(moved along by reads for a sliding TTL): the registry decides expiry, Redis
only collects what nobody asks about any more.

The limits (``max_streams``, ``max_stream_bytes``) count what this replica
holds in its copy: the streams it was asked about, each dropped once unused
for ``IDLE_COPY_S`` (Redis keeps it). A read or a create that would take the
copy past them first drops the least recently used copies nobody here reads
or waits on (``_make_room``): reads on one replica cannot make it hold more
than its limits allow, only what its live readers and forks need.

Why one module of over 600 lines: one backend of the streams' registry: the Lua scripts
that read a stream's copy and write a change only if that copy was current (text in this
module), the hooks of the memory registry they serve, and the notices that wake readers
on other replicas share one key layout and one retry rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any, Final

import msgspec

from server.store.base import StoreError
from server.store.redis.link import FAILURES, Script, StoreLink, resubscribed
from server.streams.memory import AppendResult, Limits, Registry, Stale, Wait
from server.streams.model import Message, Producer, Stream, StreamError, Update
from server.tasks import cancel_and_wait

__all__ = ["RedisRegistry"]

log = logging.getLogger("tsync.streams")

#: Redis drops a stream this long after the deadline its TTL or Expires-At
#: set (the registry has refused it since the deadline).
GC_GRACE_S: Final = 60.0
#: A copy of a stream that no request of this replica used for this long
#: (seconds) and no reader waits on is dropped (read again when asked for).
IDLE_COPY_S: Final = 300.0
#: Write tokens kept per stream (redis-py's retries of one call only).
CALLS_KEPT: Final = 32

# Shared head of every script that may move a stream's Redis expiry: KEYS
# meta, msgs, prod, forks, calls. A source with forks never expires in Redis.
_EXPIRE = """
local function expire_all(gc)
  local keep = redis.call('SCARD', KEYS[4]) > 0 or not gc or gc == ''
  for _, i in ipairs({1, 2, 3, 5}) do
    if keep then redis.call('PERSIST', KEYS[i]) else redis.call('PEXPIREAT', KEYS[i], gc) end
  end
end
"""

# KEYS meta msgs prod forks; ARGV gen count ver -> {} (none) or
# {gen, ver, access, s, messages past count (all for another gen), producers, forks};
# s (nil), messages and producers are left out when gen and ver are the caller's
_READ = """
local m = redis.call('HMGET', KEYS[1], 'gen', 'ver', 'access', 's')
if not m[1] then return {} end
local forks = redis.call('SCARD', KEYS[4])
if m[1] == ARGV[1] and m[2] == ARGV[3] then return {m[1], m[2], m[3], false, {}, {}, forks} end
local from = 0
if m[1] == ARGV[1] then from = tonumber(ARGV[2]) end
return {m[1], m[2], m[3], m[4], redis.call('LRANGE', KEYS[2], from, -1),
        redis.call('HGETALL', KEYS[3]), forks}
"""

# KEYS meta msgs prod forks calls; ARGV token gen access s gc soft channel path
# messages... -> 1 made, 2 made by this call before (a retry), 0 exists
_CREATE = (
    _EXPIRE
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('LPOS', KEYS[5], ARGV[1]) then return 2 end
  return 0
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[5])
redis.call('HSET', KEYS[1], 'gen', ARGV[2], 'ver', 1, 'access', ARGV[3], 's', ARGV[4],
           'gc', ARGV[5], 'soft', ARGV[6])
for i = 9, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('LPUSH', KEYS[5], ARGV[1])
expire_all(ARGV[5])
redis.call('PUBLISH', ARGV[7], ARGV[8])
return 1
"""
)

# KEYS meta msgs prod forks calls; ARGV token gen ver access s gc soft channel
# path message producer-id producer -> 1 written, 2 written by this call
# before (a retry), 0 stale (another gen or ver)
_UPDATE = (
    _EXPIRE
    + f"""
local cur = redis.call('HMGET', KEYS[1], 'gen', 'ver')
if cur[1] ~= ARGV[2] or cur[2] ~= ARGV[3] then
  if cur[1] == ARGV[2] and redis.call('LPOS', KEYS[5], ARGV[1]) then return 2 end
  return 0
end
if ARGV[10] ~= '' then redis.call('RPUSH', KEYS[2], ARGV[10]) end
if ARGV[11] ~= '' then redis.call('HSET', KEYS[3], ARGV[11], ARGV[12]) end
redis.call('HSET', KEYS[1], 'ver', tonumber(ARGV[3]) + 1, 'access', ARGV[4], 's', ARGV[5],
           'gc', ARGV[6], 'soft', ARGV[7])
redis.call('LPUSH', KEYS[5], ARGV[1])
redis.call('LTRIM', KEYS[5], 0, {CALLS_KEPT - 1})
expire_all(ARGV[6])
redis.call('PUBLISH', ARGV[8], ARGV[9])
return 1
"""
)

# KEYS meta msgs prod forks calls; ARGV gen access gc -> 1 (0: not this gen)
_TOUCH = (
    _EXPIRE
    + """
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[1] then return 0 end
local cur = tonumber(redis.call('HGET', KEYS[1], 'access'))
if cur and cur >= tonumber(ARGV[2]) then return 1 end
redis.call('HSET', KEYS[1], 'access', ARGV[2], 'gc', ARGV[3])
expire_all(ARGV[3])
return 1
"""
)

# KEYS meta msgs prod forks calls gone; ARGV token gen channel path -> 1
# removed (now or by this call before), 0 not this gen, -1 it has forks
_REMOVE = """
if redis.call('GET', KEYS[6]) == ARGV[1] then return 1 end
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[2] then return 0 end
if redis.call('SCARD', KEYS[4]) > 0 then return -1 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[5])
redis.call('SET', KEYS[6], ARGV[1], 'PX', 60000)
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
"""

# On a source. KEYS meta msgs prod forks calls; ARGV gen fork -> 1 (0: not this gen)
_FORK = (
    _EXPIRE
    + """
if redis.call('HGET', KEYS[1], 'gen') ~= ARGV[1] then return 0 end
redis.call('SADD', KEYS[4], ARGV[2])
expire_all(redis.call('HGET', KEYS[1], 'gc'))
return 1
"""
)

# On a source. KEYS meta msgs prod forks calls; ARGV fork -> forks left
_UNFORK = (
    _EXPIRE
    + """
redis.call('SREM', KEYS[4], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then expire_all(redis.call('HGET', KEYS[1], 'gc')) end
return redis.call('SCARD', KEYS[4])
"""
)

# On a fork that takes what it read through its source. KEYS meta msgs prod forks
# calls; ARGV token gen ver newgen s gc channel path messages... -> 1 written,
# 2 written by this call before (a retry), 0 stale. A new gen: every replica's
# copy is read again whole (its messages moved).
_DETACH = (
    _EXPIRE
    + f"""
local cur = redis.call('HMGET', KEYS[1], 'gen', 'ver')
if cur[1] ~= ARGV[2] or cur[2] ~= ARGV[3] then
  if cur[1] == ARGV[4] and redis.call('LPOS', KEYS[5], ARGV[1]) then return 2 end
  return 0
end
for i = #ARGV, 9, -1 do redis.call('LPUSH', KEYS[2], ARGV[i]) end
redis.call('HSET', KEYS[1], 'gen', ARGV[4], 'ver', tonumber(ARGV[3]) + 1, 's', ARGV[5],
           'gc', ARGV[6])
redis.call('LPUSH', KEYS[5], ARGV[1])
redis.call('LTRIM', KEYS[5], 0, {CALLS_KEPT - 1})
expire_all(ARGV[6])
redis.call('PUBLISH', ARGV[7], ARGV[8])
return 1
"""
)

_KEY_NAMES: Final = ("meta", "msgs", "prod", "forks", "calls", "gone")

#: A stream's metadata in ``s``: the fields of ``Stream`` below, in order.
_STATE_FIELDS: Final = (
    "content_type", "created_at", "ttl_s", "expires_at", "expires_at_ts", "tail", "size",
    "closed", "closed_by", "stream_seq", "soft_deleted", "forked_from", "fork_offset",
    "fork_sub_offset",
)  # fmt: skip

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


def _wire(path: str) -> bytes:
    """A path as Redis keeps it (a lone surrogate survives the round trip)."""
    return path.encode("utf-8", "surrogatepass")


def _message_blob(message: Message) -> bytes:
    return _encode((message.offset, message.data, list(message.values)))


def _message_of(blob: bytes) -> Message:
    offset, data, values = _decode(blob)
    return Message(data, offset, tuple(values))


def _gc_ms(stream: Stream, last_access: float) -> str:
    """When Redis may drop the stream (ms since the epoch), ``""`` never."""
    if stream.expires_at_ts is not None:
        deadline = stream.expires_at_ts
    elif stream.ttl_s is not None:
        deadline = last_access + stream.ttl_s
    else:
        return ""
    return str(int((deadline + GC_GRACE_S) * 1000))


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


class RedisRegistry(Registry):
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
        self.channel = link.prefix + "streams"
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
        #: Copies dropped to stay within the limits (``_make_room``).
        self.evicted = 0
        self._read = Script(_READ)
        self._create_script = Script(_CREATE)
        self._update = Script(_UPDATE)
        self._touch = Script(_TOUCH)
        self._remove_script = Script(_REMOVE)
        self._fork = Script(_FORK)
        self._unfork = Script(_UNFORK)
        self._detach = Script(_DETACH)

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
        tag = hashlib.sha1(_wire(path)).hexdigest()
        return [f"{self.link.prefix}ds{{{tag}}}:{name}" for name in _KEY_NAMES]

    async def _call(self, script: Script, path: str, args: Sequence[Any], keys: int = 5) -> Any:
        try:
            return await script(self.link.client(), self._keys(path)[:keys], args)
        except StoreError as err:
            raise StreamError(503, str(err), {"retry-after": "1"}) from None
        except FAILURES as err:
            reason = str(self.link.unavailable(err))
            raise StreamError(503, reason, {"retry-after": "1"}) from None

    def _state(self, stream: Stream, **changed: Any) -> bytes:
        values = [changed.get(name, getattr(stream, name)) for name in _STATE_FIELDS]
        return _encode(values)

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
        known = [cached.gen, count, cached.version] if cached else ["", 0, 0]
        reply = await self._call(self._read, path, known, keys=4)
        # Another read may have moved the copy meanwhile: messages past ``count``
        # it holds already are not pushed twice.
        cached = self._streams.get(path)
        if not reply:
            if cached is None:
                return False
            self._forget(path)
            return True
        gen, ver, access, state, blobs, producers, forks = reply
        gen, ver = _text(gen), int(ver)
        if state is None:  # unchanged since the copy's version was read
            if cached is not None and cached.gen == gen:
                self._moved(cached, access, forks)
            return False
        if cached is not None and cached.gen == gen:
            if ver < cached.version:
                return False  # read before a change the copy already holds
            changed = ver != cached.version
            for blob in blobs[max(0, len(cached.messages) - count) :]:
                message = _message_of(blob)
                cached.push(message)
                self._bytes += message.held
            stream = cached
        else:
            if cached is not None:
                self._forget(path)
            stream = Stream(path=path, content_type=None, created_at=0.0, last_access=0.0)
            for blob in blobs:
                stream.push(_message_of(blob))
            self._streams[path] = stream
            self._bytes += stream.size
            changed = True
            self._make_room(path)
        for name, value in zip(_STATE_FIELDS, _decode(state), strict=True):
            setattr(stream, name, value)
        if stream.closed_by is not None:
            stream.closed_by = tuple(stream.closed_by)  # type: ignore[assignment]
        stream.gen, stream.version = gen, ver
        self._moved(stream, access, forks)
        held = stream.producer_bytes
        stream.producers, stream.producer_bytes = {}, 0
        for i in range(0, len(producers), 2):
            stream.put_producer(_text(producers[i]), Producer(*_decode(producers[i + 1])))
        self._bytes += stream.producer_bytes - held
        if changed:
            self._wake(path)
        return changed

    @staticmethod
    def _moved(stream: Stream, access: bytes, forks: int) -> None:
        """What changes without a new version: reads (the sliding TTL) and forks."""
        # What Redis holds is what was written (a local read may be newer).
        stream.logged_access = float(access)
        stream.last_access = max(stream.last_access, stream.logged_access)
        stream.refs = int(forks)

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
    ) -> AppendResult:
        return await self._optimistic(
            path,
            lambda: Registry.append(
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

    async def close(self, path: str, producer: tuple[str, int, int] | None) -> AppendResult:
        return await self._optimistic(path, lambda: Registry.close(self, path, producer))

    async def _optimistic(
        self, path: str, attempt: Callable[[], Awaitable[AppendResult]]
    ) -> AppendResult:
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
        if source is not None:
            added = await self._call(self._fork, source.path, [source.gen, _wire(stream.path)])
            if not added:
                raise Stale
        stream.gen, stream.version = uuid.uuid4().hex, 1
        args = [
            uuid.uuid4().hex,
            stream.gen,
            repr(stream.last_access),
            self._state(stream),
            _gc_ms(stream, stream.last_access),
            "0",
            self.channel,
            _wire(stream.path),
            *(_message_blob(m) for m in stream.messages),
        ]
        made = 0
        try:
            made = await self._call(self._create_script, stream.path, args)
        finally:
            if not made and source is not None:
                with contextlib.suppress(StreamError):
                    await self._call(self._unfork, source.path, [_wire(stream.path)])
        if not made:
            raise Stale
        if stream.path in self._streams:  # a read found it first: this copy replaces it
            self._forget(stream.path)

    async def _cas(
        self,
        stream: Stream,
        *,
        state: bytes,
        last_access: float,
        soft: bool,
        message: Message | None = None,
        producer: tuple[str, Producer] | None = None,
    ) -> bool:
        """Write one change of ``stream`` if its copy is current (``Stale``
        otherwise); ``True`` if the copy is still to be changed."""
        expected = stream.version
        args = [
            uuid.uuid4().hex,
            stream.gen,
            expected,
            repr(last_access),
            state,
            _gc_ms(stream, last_access),
            "1" if soft else "0",
            self.channel,
            _wire(stream.path),
            b"" if message is None else _message_blob(message),
            "" if producer is None else producer[0],
            b""
            if producer is None
            else _encode((producer[1].epoch, producer[1].last_seq, producer[1].updated)),
        ]
        trusted = _TRUSTED.get()
        if not await self._call(self._update, stream.path, args):
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
        state = self._state(
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
        state = self._state(stream, soft_deleted=True)
        await self._cas(stream, state=state, last_access=stream.last_access, soft=True)

    async def _fork_paths(self, stream: Stream) -> list[str]:
        try:
            members = await self.link.client().smembers(self._keys(stream.path)[3])
        except FAILURES as err:
            reason = str(self.link.unavailable(err))
            raise StreamError(503, reason, {"retry-after": "1"}) from None
        return [_text(member) for member in members]

    async def _write_unfork(self, source: Stream, fork_path: str) -> None:
        await self._call(self._unfork, source.path, [_wire(fork_path)])

    async def _write_detach(self, fork: Stream, source: Stream, inherited: list[Message]) -> None:
        new_gen = uuid.uuid4().hex
        size = fork.size + sum(len(m.data) for m in inherited)
        args = [
            uuid.uuid4().hex,
            fork.gen,
            fork.version,
            new_gen,
            self._state(fork, forked_from=None, size=size),
            _gc_ms(fork, fork.last_access),
            self.channel,
            _wire(fork.path),
            *(_message_blob(m) for m in inherited),
        ]
        if not await self._call(self._detach, fork.path, args):
            raise Stale
        fork.gen, fork.version = new_gen, fork.version + 1
        await self._call(self._unfork, source.path, [_wire(fork.path)])

    async def _write_touch(self, stream: Stream, now: float) -> None:
        await self._call(self._touch, stream.path, [stream.gen, repr(now), _gc_ms(stream, now)])

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
            args = [uuid.uuid4().hex, stream.gen, self.channel, _wire(stream.path)]
            removed = await self._call(self._remove_script, stream.path, args, keys=6)
            if removed == -1:  # a fork came meanwhile
                if expired or stream.path != path:
                    return
                raise Stale
            self._forget(stream.path)
            if removed == 0 or stream.forked_from is None:
                return  # another replica removed it (and did what follows)
            source_path = stream.forked_from
            left = await self._call(self._unfork, source_path, [_wire(stream.path)])
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

    def _watched(self, path: str) -> bool:
        """Whether readers here wait on the stream at ``path`` (long-polls)
        or follow it (SSE, through the fan-out): its copy is kept current."""
        return path in self._waiters or self.fanout.follows(path)

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
            resubscribed(
                self.link.redis.subscriber,
                self._subscription,
                what=f"streams: notices of {self.where}",
                delay=reconnect_delay,
                logger=log,
            )
        ) as subscriptions:
            async for _ in subscriptions:
                pass

    async def _subscription(self, pubsub: Any) -> AsyncGenerator[None, None]:
        """One subscription to the notices: every copy waited on is read
        again once it stands (anything published before was missed)."""
        try:
            await pubsub.subscribe(self.channel)
            self.subscribed += 1
            self._listening = True
            self._recheck_waited()
            yield None
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is not None and message.get("type") == "message":
                    self._noticed_change(_text(message["data"]))
        finally:
            self._listening = False
