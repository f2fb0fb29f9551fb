"""The Durable Streams of the Redis store: ``RedisStreams``, the streams'
part of the store (built, as drafts and presence are, from its
``StoreLink``), which reads and writes each stream with one Lua script and
listens to the notices of the other replicas' writes. The registry that
decides the requests on copies of these streams is
``server.streams.registry.StreamRegistry``, through its port
``server.streams.shared.SharedPort``.

- A read (``read``) brings a copy up to date: the messages past those it
  holds, the metadata, producers and forks.
- A write (``update``, ``detach``) is made only if the copy it was decided
  on was current: the stream's incarnation (``gen``, made at each create)
  and its change count (``ver``); it answers ``False`` otherwise and writes
  nothing.
- redis-py retries a command after a connection error or a timeout: each
  write carries a token of its call, kept with the stream (the last 32),
  and a retried script that already ran finds it and answers as it did
  instead of appending twice. A removal leaves its token for a minute.
- Every write publishes the stream's path on ``<prefix>streams``
  (``notices``).

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
through it), then creates it; removing one takes it out again. Streams with
a TTL or ``Expires-At`` carry a Redis expiry a minute past their deadline
(moved along by reads for a sliding TTL): the registry decides expiry, Redis
only collects what nobody asks about any more.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from server.store.base import StoreError
from server.store.redis.link import FAILURES, RedisPart, StoreLink, resubscribed
from server.streams.model import Producer, Stream, StreamError, StreamMessage

__all__ = ["CopyRead", "RedisStreams"]

log = logging.getLogger("tsync.streams")

#: Redis drops a stream this long after the deadline its TTL or Expires-At
#: set (the registry has refused it since the deadline).
GC_GRACE_S: Final = 60.0
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

# Shared head of every script that writes one change of a stream decided on
# a copy (``ARGV[1]`` the call's token, ``ARGV[2]``/``ARGV[3]`` the copy's gen
# and ver): ``stale`` is nil when the copy is current, else the reply (2: this
# call wrote before, a retry, and left the stream at gen ``done_gen``; 0:
# stale); ``written`` remembers the call, moves the expiry and tells the replicas.
_CHECKED = (
    _EXPIRE
    + f"""
local function stale(done_gen)
  local cur = redis.call('HMGET', KEYS[1], 'gen', 'ver')
  if cur[1] == ARGV[2] and cur[2] == ARGV[3] then return nil end
  if cur[1] == done_gen and redis.call('LPOS', KEYS[5], ARGV[1]) then return 2 end
  return 0
end
local function written(gc, channel, path)
  redis.call('LPUSH', KEYS[5], ARGV[1])
  redis.call('LTRIM', KEYS[5], 0, {CALLS_KEPT - 1})
  expire_all(gc)
  redis.call('PUBLISH', channel, path)
  return 1
end
"""
)

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
    _CHECKED
    + """
local refused = stale(ARGV[2])
if refused then return refused end
if ARGV[10] ~= '' then redis.call('RPUSH', KEYS[2], ARGV[10]) end
if ARGV[11] ~= '' then redis.call('HSET', KEYS[3], ARGV[11], ARGV[12]) end
redis.call('HSET', KEYS[1], 'ver', tonumber(ARGV[3]) + 1, 'access', ARGV[4], 's', ARGV[5],
           'gc', ARGV[6], 'soft', ARGV[7])
return written(ARGV[6], ARGV[8], ARGV[9])
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
    _CHECKED
    + """
local refused = stale(ARGV[4])
if refused then return refused end
for i = #ARGV, 9, -1 do redis.call('LPUSH', KEYS[2], ARGV[i]) end
redis.call('HSET', KEYS[1], 'gen', ARGV[4], 'ver', tonumber(ARGV[3]) + 1, 's', ARGV[5],
           'gc', ARGV[6])
return written(ARGV[6], ARGV[7], ARGV[8])
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


def _message_blob(message: StreamMessage) -> bytes:
    return _encode((message.offset, message.data, list(message.values)))


def _message_of(blob: bytes) -> StreamMessage:
    offset, data, values = _decode(blob)
    return StreamMessage(data, offset, tuple(values))


def _gc_ms(stream: Stream, last_access: float) -> str:
    """When Redis may drop the stream (ms since the epoch), ``""`` never."""
    if stream.expires_at_ts is not None:
        deadline = stream.expires_at_ts
    elif stream.ttl_s is not None:
        deadline = last_access + stream.ttl_s
    else:
        return ""
    return str(int((deadline + GC_GRACE_S) * 1000))


@dataclass(frozen=True, slots=True)
class CopyRead:
    """What ``RedisStreams.read`` found of a stream: its incarnation and
    change count, its last access as written and its forks (always);
    ``state`` (the fields of ``Stream`` in ``s``), the messages past those
    the copy holds and every producer, unless the copy is current
    (``state`` is ``None``)."""

    gen: str
    version: int
    access: float
    forks: int
    state: dict[str, Any] | None
    messages: list[StreamMessage]
    producers: list[tuple[str, Producer]]


class RedisStreams(RedisPart):
    """The streams' part of a Redis store: every read and write of a stream,
    and the notices of every replica's writes. Errors are ``StreamError``
    503 (Redis cannot serve now: nothing known to be written)."""

    def __init__(self, link: StoreLink) -> None:
        super().__init__(link)
        self.link = link
        self.where = link.redis.where
        #: The channel every write publishes its stream's path on.
        self.channel = link.prefix + "streams"
        self._read = link.script(_READ)
        self._create = link.script(_CREATE)
        self._update = link.script(_UPDATE)
        self._touch = link.script(_TOUCH)
        self._remove = link.script(_REMOVE)
        self._fork = link.script(_FORK)
        self._unfork = link.script(_UNFORK)
        self._detach = link.script(_DETACH)

    def keys(self, path: str) -> list[str]:
        tag = hashlib.sha1(_wire(path)).hexdigest()
        return [f"{self.prefix}ds{{{tag}}}:{name}" for name in _KEY_NAMES]

    async def _call(self, script: Any, path: str, args: Sequence[Any], keys: int = 5) -> Any:
        try:
            return await script(self._client(), self.keys(path)[:keys], args)
        except StoreError as err:
            raise StreamError(503, str(err), {"retry-after": "1"}) from None
        except FAILURES as err:
            reason = str(self._unavailable(err))
            raise StreamError(503, reason, {"retry-after": "1"}) from None

    def state(self, stream: Stream, **changed: Any) -> bytes:
        """The stream's metadata as ``s`` holds it, with ``changed`` fields."""
        return _encode([changed.get(name, getattr(stream, name)) for name in _STATE_FIELDS])

    # --- reading --------------------------------------------------------------------

    async def read(self, path: str, copy: Stream | None) -> CopyRead | None:
        """The stream at ``path`` past what ``copy`` holds (``None``: there is
        no stream there)."""
        count = len(copy.messages) if copy is not None else 0
        known = [copy.gen, count, copy.version] if copy is not None else ["", 0, 0]
        reply = await self._call(self._read, path, known, keys=4)
        if not reply:
            return None
        gen, ver, access, state, blobs, producers, forks = reply
        if state is None:  # unchanged since the copy's version was read
            return CopyRead(_text(gen), int(ver), float(access), int(forks), None, [], [])
        fields = dict(zip(_STATE_FIELDS, _decode(state), strict=True))
        if fields["closed_by"] is not None:
            fields["closed_by"] = tuple(fields["closed_by"])
        return CopyRead(
            gen=_text(gen),
            version=int(ver),
            access=float(access),
            forks=int(forks),
            state=fields,
            messages=[_message_of(blob) for blob in blobs],
            producers=[
                (_text(producers[i]), Producer(*_decode(producers[i + 1])))
                for i in range(0, len(producers), 2)
            ],
        )

    async def fork_paths(self, path: str) -> list[str]:
        """The paths of the forks that read through the stream at ``path``."""
        try:
            members = await self._client().smembers(self.keys(path)[3])
        except FAILURES as err:
            reason = str(self._unavailable(err))
            raise StreamError(503, reason, {"retry-after": "1"}) from None
        return [_text(member) for member in members]

    # --- writing --------------------------------------------------------------------

    async def create(self, stream: Stream, source: Stream | None) -> bool:
        """Create ``stream`` (a new incarnation: its ``gen`` and ``version``
        are set), first in its ``source``'s forks; ``False`` when a stream
        is there already or the source changed incarnation (nothing left
        written)."""
        if source is not None:
            added = await self._call(self._fork, source.path, [source.gen, _wire(stream.path)])
            if not added:
                return False
        stream.gen, stream.version = uuid.uuid4().hex, 1
        args = [
            uuid.uuid4().hex,
            stream.gen,
            repr(stream.last_access),
            self.state(stream),
            _gc_ms(stream, stream.last_access),
            "0",
            self.channel,
            _wire(stream.path),
            *(_message_blob(m) for m in stream.messages),
        ]
        made = 0
        try:
            made = await self._call(self._create, stream.path, args)
        finally:
            if not made and source is not None:
                with contextlib.suppress(StreamError):
                    await self.unfork(source.path, stream.path)
        return bool(made)

    async def update(
        self,
        stream: Stream,
        *,
        state: bytes,
        last_access: float,
        soft: bool,
        message: StreamMessage | None = None,
        producer: tuple[str, Producer] | None = None,
    ) -> bool:
        """Write one change of ``stream`` if Redis holds the version its
        copy has (``False`` otherwise: nothing written)."""
        args = [
            uuid.uuid4().hex,
            stream.gen,
            stream.version,
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
        return bool(await self._call(self._update, stream.path, args))

    async def touch(self, stream: Stream, now: float) -> None:
        """A read moved the stream's sliding TTL (and its Redis expiry) along."""
        await self._call(self._touch, stream.path, [stream.gen, repr(now), _gc_ms(stream, now)])

    async def unfork(self, source_path: str, fork_path: str) -> int:
        """Take ``fork_path`` out of its source's forks; the forks left."""
        left: int = await self._call(self._unfork, source_path, [_wire(fork_path)])
        return left

    async def detach(
        self, fork: Stream, size: int, inherited: Sequence[StreamMessage]
    ) -> str | None:
        """Write that ``fork`` holds ``inherited`` itself (``size`` bytes in
        all) and reads through no source, if its copy is current: its new
        incarnation (every replica reads it again whole), or ``None``."""
        new_gen = uuid.uuid4().hex
        args = [
            uuid.uuid4().hex,
            fork.gen,
            fork.version,
            new_gen,
            self.state(fork, forked_from=None, size=size),
            _gc_ms(fork, fork.last_access),
            self.channel,
            _wire(fork.path),
            *(_message_blob(m) for m in inherited),
        ]
        return new_gen if await self._call(self._detach, fork.path, args) else None

    async def remove(self, stream: Stream) -> int:
        """Delete this incarnation of the stream for good: 1 removed (now or
        by this call before), 0 not this incarnation, -1 it has forks."""
        args = [uuid.uuid4().hex, stream.gen, self.channel, _wire(stream.path)]
        removed: int = await self._call(self._remove, stream.path, args, keys=6)
        return removed

    # --- notices --------------------------------------------------------------------

    async def notices(
        self, *, lost: Callable[[], None], reconnect_delay: float = 0.1
    ) -> AsyncGenerator[str | None, None]:
        """The path of every stream a replica wrote, for as long as the
        caller iterates; ``None`` after each (re)subscription (anything
        published before was missed); ``lost()`` when a subscription ends."""
        async with contextlib.aclosing(
            resubscribed(
                self.link.redis.subscriber,
                lambda pubsub: self._subscription(pubsub, lost),
                what=f"streams: notices of {self.where}",
                delay=reconnect_delay,
                logger=log,
            )
        ) as paths:
            async for path in paths:
                yield path

    async def _subscription(
        self, pubsub: Any, lost: Callable[[], None]
    ) -> AsyncGenerator[str | None, None]:
        try:
            await pubsub.subscribe(self.channel)
            yield None
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is not None and message.get("type") == "message":
                    yield _text(message["data"])
        finally:
            lost()
