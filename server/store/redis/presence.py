"""Presence on Redis: each replica's members of each transcript, kept alive
by that replica, and their changes on the transcript's notice channel.

Keys (the transcript's hash tag, so one script changes them on one slot)::

    <prefix>{<id>}:presence            sorted set: replica -> until (ms, Redis's
                                       clock): the replicas with members there
    <prefix>{<id>}:presence:<replica>  hash: member id -> the member (JSON), and
                                       ``~v`` -> the replica's version of it;
                                       expires ``ttl`` after its last renewal

A replica writes its changes of one transcript with one script
(``_WRITE``): the members that joined or changed, the ids that left, its
version number, the renewed TTL, and the message announcing them on the
transcript's channel (``<prefix>changes``, or ``<prefix>{<id>}:changes`` with
``SPUBLISH`` on a Cluster), published by the script that stored them. It
renews its keys every third of the TTL (``_RENEW``, one per transcript,
pipelined); a replica that stops renewing is gone when its key expires, and
other replicas, which read the keys back every third of the TTL too
(``_READ``: the live replicas from the sorted set, then their hashes; never
a SCAN), drop its members then: each read tells them how long each
replica's key still lives.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec

from protocol.wire import Member
from server.store.base import PRESENCE_MARK, RelayedPresence, StoredPresence
from server.store.redis.link import RedisPart, StoreLink

__all__ = ["RedisPresence"]


_VERSION_FIELD: Final = "~v"


# KEYS: the sorted set, the replica's hash. ARGV: replica, version, ttl ms,
# publish command, channel, message, n (members set), then n pairs (id,
# JSON), then the ids gone.
_WRITE: Final = """
local replica, version, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local n = tonumber(ARGV[7])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 0, n - 1 do
  redis.call('HSET', KEYS[2], ARGV[8 + 2 * i], ARGV[9 + 2 * i])
end
for i = 8 + 2 * n, #ARGV do
  redis.call('HDEL', KEYS[2], ARGV[i])
end
redis.call('HSET', KEYS[2], '~v', version)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('HLEN', KEYS[2]) <= 1 then
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[1], replica)
else
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('ZADD', KEYS[1], now + ttl, replica)
end
if redis.call('ZCARD', KEYS[1]) > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
redis.call(ARGV[4], ARGV[5], ARGV[6])
return 1
"""

# KEYS: the sorted set, the replica's hash. ARGV: replica, ttl ms -> 1
# renewed, 0 nothing to renew (the key lapsed: write it again).
_RENEW: Final = """
local ttl = tonumber(ARGV[2])
if redis.call('PEXPIRE', KEYS[2], ttl) == 0 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
"""

# KEYS: the sorted set. ARGV: the hash keys' prefix -> {replica, ms left,
# HGETALL of its hash, ...} of the replicas not past their time.
_READ: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local out = {}
for _, replica in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local key = ARGV[1] .. replica
  local left = redis.call('PTTL', key)
  if left > 0 then
    out[#out + 1] = replica
    out[#out + 1] = left
    out[#out + 1] = redis.call('HGETALL', key)
  end
end
return out
"""


class RedisPresence(RedisPart):
    """The presence keys and relay of a ``RedisStore`` (its
    ``relay_presence``, ``renew_presence``, ``presence_of``), reaching Redis
    through ``link``."""

    def __init__(self, link: StoreLink) -> None:
        super().__init__(link)
        self._write = link.script(_WRITE)
        self._renew = link.script(_RENEW)
        self._read = link.script(_READ)
        self._member = msgspec.json.Decoder(Member)

    def _keys(self, transcript_id: str, replica: str) -> list[str]:
        base = f"{self.prefix}{{{transcript_id}}}:presence"
        return [base, f"{base}:{replica}"]

    async def relay(self, updates: Sequence[RelayedPresence]) -> None:
        """Store and announce each replica's changes, pipelined."""
        calls = []
        for update in updates:
            args: list[Any] = [
                update.replica,
                update.version,
                update.ttl_ms,
                self._publish,
                self._channel_of(update.transcript_id),
                PRESENCE_MARK + self._encode(update),
                len(update.members),
            ]
            for member in update.members:
                args += [member.id, self._encode(member)]
            args += update.gone
            calls.append((self._keys(update.transcript_id, update.replica), args))
        if calls:
            await self._many(self._write, calls, "presence on Redis")

    async def renew(self, transcript_ids: Iterable[str], replica: str, ttl_ms: int) -> list[str]:
        """Renew ``replica``'s keys of ``transcript_ids``; the ones that had
        lapsed (to write again whole)."""
        ids = list(transcript_ids)
        calls = [(self._keys(tid, replica), [replica, ttl_ms]) for tid in ids]
        replies = await self._many(self._renew, calls, "presence on Redis") if calls else []
        return [tid for tid, reply in zip(ids, replies, strict=True) if not int(reply)]

    async def read(self, transcript_ids: Iterable[str]) -> dict[str, list[StoredPresence]]:
        """Every live replica's members of each transcript."""
        ids = list(transcript_ids)
        calls = [([self._keys(tid, "")[0]], [self._keys(tid, "")[1]]) for tid in ids]
        replies = await self._many(self._read, calls, "presence on Redis") if calls else []
        out: dict[str, list[StoredPresence]] = {}
        for tid, reply in zip(ids, replies, strict=True):
            stored = out[tid] = []
            for i in range(0, len(reply), 3):
                replica = reply[i].decode() if isinstance(reply[i], bytes) else str(reply[i])
                fields = reply[i + 2]
                version = 0
                members = []
                for j in range(0, len(fields), 2):
                    name = fields[j].decode() if isinstance(fields[j], bytes) else fields[j]
                    if name == _VERSION_FIELD:
                        version = int(fields[j + 1])
                        continue
                    try:
                        members.append(self._member.decode(fields[j + 1]))
                    except msgspec.DecodeError:
                        continue  # not ours to judge: left out
                stored.append(StoredPresence(replica, version, int(reply[i + 1]) / 1000, members))
        return out
