"""``RedisStore``: the ``Store`` interface on Redis, shared by several replicas.

Keys of one transcript all carry the hash tag ``{<id>}`` so that they live on
one Redis Cluster slot and one Lua script can change them atomically::

    <prefix>{<id>}:meta     hash: epoch, created, updated, rev, len, active, ctoken,
                            vchanges (View changes), title, preview, ix ("1": the
                            three keys below hold the whole history)
    <prefix>{<id>}:log      list: every event (msgpack), revision r at index r-1;
                            the authoritative history, never trimmed
    <prefix>{<id>}:stream   stream: the same events with ids ``0-<revision>``,
                            trimmed to about ``stream_maxlen``; catch-up reads it
    <prefix>{<id>}:keys     hash: caller's idempotency key -> ack ("rev:start:count:call")
    <prefix>{<id>}:korder   zset: those keys by the time they were recorded (ms;
                            pruned after ``idempotency_ttl_s`` and past
                            ``idempotency_retention``, oldest first)
    <prefix>{<id>}:ikeys    hash/zset pair for the keys this store generates
    <prefix>{<id>}:iorder   itself when the caller gave none (see ``append``)
    <prefix>{<id>}:ends     zset: each append's revision, scored by one past its
                            last message: the appends holding messages [a, b) are
                            the revisions from the first scored > a to the first
                            scored >= b, read with one LRANGE of the log
    <prefix>{<id>}:segs     list: every closed segment, "start:end", oldest first
    <prefix>{<id>}:views    hash: View name -> "start:end" ("start:" when open)
    <prefix>ids             zset of ids (score 0) for ``list``; kept outside the
                            scripts (another slot), see ``create``/``delete``
    <prefix>changes         pub/sub channel: ``[id, epoch, revision]`` per change,
                            and every draft update relayed (a JSON object)
    <prefix>{<id>}:changes  on a Redis Cluster instead: the transcript's own
                            sharded channel (``SPUBLISH``), on its node only
    <prefix>{<id>}:drafts   the open and recently closed drafts, and their
    <prefix>{<id>}:draft:*  texts (``server.store.redis_drafts``)

Every change is one script (``create``, ``append``, ``delete``): it checks the
idempotency key, the epoch, the revision and the position (an append's start
must be the stored length), stores the event in the log and the stream,
records the key with its ack, and publishes a notice, all or nothing. The
appends of one transcript that ``append_many`` gets (the committer's run) are
ONE script: each is stored only where it was planned, and once one is not,
none after it is, so another replica's append landing in between can never
put a later one at a place computed for a history that did not happen.
redis-py retries a command after a connection error or a timeout, so an
append always carries an idempotency key (a generated one when the caller
gave none) and records it with an ack holding a token of the call: a retried
script that had already run finds its own token and answers as it did.

``events_after`` reads the stream: when it no longer holds the range (trimmed)
it returns ``None`` and the caller loads the whole transcript from the log.
``load_recent`` and ``read_messages`` are one script each that reads the
meta, ``segs``, ``views`` and, through ``ends``, only the events holding the
messages asked for. A transcript stored before ``ends`` existed (no ``ix``)
is indexed once, by a script that decodes its log with Redis's ``cmsgpack``,
the first time it is read so.

Errors: a connection error, a timeout, or a Redis still loading its data after
a restart raise ``StoreUnavailable``. After a timeout the outcome is unknown
(the command may still run once Redis answers again); a retry with the same
idempotency key then answers the first ack instead of appending twice.

URL: ``redis://[user:pass@]host:port/db`` or ``rediss://`` (TLS); its query
parameters are the options (``server.store.options.RedisOptions``: ``prefix``,
``stream_maxlen``, ``socket_timeout``...). An unknown one is refused.

Redis Cluster: ``redis+cluster://host:port,host:port`` (``rediss+cluster://``
with TLS; any nodes, the client learns the rest) uses redis-py's cluster
client. Every script touches one transcript's keys, all on its slot, and
publishes on the transcript's sharded channel (``server.store.redis_shards``
subscribes to it while this replica holds the transcript). A node that is
down makes its transcripts ``StoreUnavailable``; the others keep working.
``create``, ``delete`` and ``list`` also need the node of the ``ids`` index.

Why one module of over 600 lines: one backend for one Redis or a Redis Cluster; the Lua
scripts that make a run of appends atomic and a retried call idempotent are text in this
module, beside the code that calls and decodes them. The sharded notices and the drafts
are modules of their own.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import logging
import uuid
from collections.abc import AsyncGenerator, Iterable, Sequence
from typing import Any, Final

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import (
    ClusterError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from protocol.summary import preview_of, title_of
from protocol.types import (
    MessagesAppended,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
    View,
    ViewChanged,
)
from server.store.base import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    DEFAULT_IDEMPOTENCY_TTL_S,
    LOADED_KEYS,
    PRESENCE_MARK,
    AppendResult,
    Head,
    Notice,
    Receipt,
    Recheck,
    RelayedDraft,
    RelayedOutcome,
    RelayedPresence,
    RevisionMismatch,
    StoredDraft,
    StoredPresence,
    StoredRange,
    StoredState,
    StoredTranscript,
    StoreError,
    StoreUnavailable,
    TranscriptExists,
    TranscriptInfo,
    TranscriptNotFound,
    check_events_after_args,
    check_first_event,
    check_list_args,
    check_range_args,
    digest_of_log,
    head_digest,
    messages_in,
    position_of,
)
from server.store.options import RedisOptions, parse_query, redis_address, validated
from server.store.redis_drafts import RedisDrafts
from server.store.redis_parts import StoreLink
from server.store.redis_presence import RedisPresence
from server.store.redis_shards import ShardChannels

__all__ = ["RedisStore"]

log = logging.getLogger("tsync.store.redis")

#: What redis-py raises when Redis cannot serve (its cluster client's own
#: exceptions, e.g. a slot no node covers, are not ``RedisError``s).
_FAILURES: Final = (RedisError, RedisClusterException)

#: Keys generated for appends without one, kept per transcript: they only
#: have to outlive redis-py's retries of one call.
INTERNAL_KEY_RETENTION: Final = 64

# --- the scripts -----------------------------------------------------------------------

# KEYS: meta, log, stream, keys, korder, ikeys, iorder, ends, segs, views
# Shared body: store one event (ARGV from index 4 on, see _event_args) and publish.
_ACCEPT = """
local function accept(rev, a)
  local event, key, internal, ack = a[1], a[2], a[3], a[4]
  local updated, length, active = a[5], a[6], a[7]
  local retention, maxlen, channel = tonumber(a[8]), tonumber(a[9]), a[10]
  local tid, epoch, publish, ttl_ms = a[11], a[12], a[13], tonumber(a[14])
  local kind, item, vname, title, preview = a[15], a[16], a[17], a[18], a[19]
  redis.call('RPUSH', KEYS[2], event)
  if maxlen > 0 then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '0-' .. rev, 'e', event)
  end
  redis.call('HSET', KEYS[1], 'rev', rev, 'updated', updated)
  if length ~= '' then redis.call('HSET', KEYS[1], 'len', length) end
  if active ~= '' then redis.call('HSET', KEYS[1], 'active', active) end
  if kind == 'a' then
    redis.call('ZADD', KEYS[8], length, rev)
    -- A transcript stored before titles were kept gets its own when indexed.
    if title ~= '' and redis.call('HGET', KEYS[1], 'ix') == '1' then
      redis.call('HSETNX', KEYS[1], 'title', title)
    end
    redis.call('HSET', KEYS[1], 'preview', preview)
  elseif kind == 's' then
    redis.call('RPUSH', KEYS[9], item)
  elseif kind == 'v' then
    redis.call('HSET', KEYS[10], vname, item)
    redis.call('HINCRBY', KEYS[1], 'vchanges', 1)
  elseif kind == 'l' then
    redis.call('HDEL', KEYS[10], vname)
    redis.call('HINCRBY', KEYS[1], 'vchanges', 1)
  end
  if key ~= '' and retention > 0 then
    local h, z = KEYS[4], KEYS[5]
    if internal == '1' then h, z = KEYS[6], KEYS[7] end
    redis.call('HSET', h, key, ack)
    redis.call('ZADD', z, updated, key)
    local extra = redis.call('ZCARD', z) - retention
    if extra > 0 then
      local old = redis.call('ZPOPMIN', z, extra)
      for i = 1, #old, 2 do redis.call('HDEL', h, old[i]) end
    end
    -- Keys older than the ttl, a bounded number per change.
    local expired = redis.call('ZRANGEBYSCORE', z, '-inf', '(' .. (tonumber(updated) - ttl_ms),
                               'LIMIT', 0, 100)
    for i = 1, #expired do
      redis.call('HDEL', h, expired[i])
      redis.call('ZREM', z, expired[i])
    end
  end
  redis.call(publish, channel, cjson.encode({tid, epoch, rev}))
end
"""

#: ARGV per append of a run: epoch, revision, position ('' for none), then
#: the 19 accept arguments (``_event_args``).
_PER_APPEND: Final = 22

# A run of appends of one transcript, in order, in one atomic step: ARGV is
# ``_PER_APPEND`` arguments per append. -> one answer per append:
# {'ok'} | {'dup', ack} | {'mismatch', current} | {'missing'}
# An append is stored only at the revision AND the position (the length) it
# was planned for; once one is not stored, none after it is (each was planned
# on top of the ones before it): they answer 'mismatch'. Every append carries
# a key (generated when the caller gave none) and the ack to record with it,
# which holds a token of the call: a key recorded with this very ack was
# stored by this call's first attempt (redis-py retried the call after a
# connection error or a timeout), so it answers 'ok' again, not 'dup'; so
# does an append whose key is no longer kept and whose very event (the same
# bytes) is stored at its revision.
_APPEND_SCRIPT = (
    _ACCEPT
    + f"local per = {_PER_APPEND}\n"
    + """
local n = #ARGV / per
local answers = {}
local m = redis.call('HMGET', KEYS[1], 'epoch', 'rev', 'len')
if not m[1] then
  for i = 1, n do answers[i] = {'missing'} end
  return answers
end
local current, len = tonumber(m[2]), tonumber(m[3])
local broken = false
for i = 1, n do
  local o = (i - 1) * per
  local rev, pos = tonumber(ARGV[o + 2]), ARGV[o + 3]
  local a = {unpack(ARGV, o + 4, o + per)}
  local key, internal = a[2], a[3]
  local answer = nil
  if broken or ARGV[o + 1] ~= m[1] then
    answer = {'mismatch', current}
  else
    if key ~= '' then
      local h = KEYS[4]
      if internal == '1' then h = KEYS[6] end
      local ack = redis.call('HGET', h, key)
      -- The very ack this call records (its token in it): its first attempt ran.
      if ack == a[4] then answer = {'ok'}
      elseif ack then answer = {'dup', ack} end
    end
    if not answer and rev <= current and redis.call('LINDEX', KEYS[2], rev - 1) == a[1] then
      -- Stored as this very event, its key pruned since (a resent run longer
      -- than the generated keys kept): the first attempt stored it.
      answer = {'ok'}
    end
    if not answer then
      if rev ~= current + 1 or (pos ~= '' and tonumber(pos) ~= len) then
        answer = {'mismatch', current}
      else
        accept(rev, a)
        current = rev
        if a[6] ~= '' then len = tonumber(a[6]) end
        answer = {'ok'}
      end
    end
  end
  if answer[1] ~= 'ok' then broken = true end
  answers[i] = answer
end
return answers
"""
)

# ARGV: epoch, created, ctoken, then the accept arguments (event '' for none).
# -> {'ok'} | {'exists'}
_CREATE_SCRIPT = (
    _ACCEPT
    + """
local token = redis.call('HGET', KEYS[1], 'ctoken')
if token then
  -- The same create() retried by redis-py after its first attempt ran.
  if token == ARGV[3] then return {'ok'} end
  return {'exists'}
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9],
           KEYS[10])
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'created', ARGV[2], 'updated', ARGV[2],
           'rev', 0, 'len', 0, 'active', 0, 'ctoken', ARGV[3], 'vchanges', 0, 'ix', 1)
local a = {unpack(ARGV, 4)}
if a[1] ~= '' then
  accept(1, a)
else
  redis.call(a[13], a[10], cjson.encode({a[11], ARGV[1], 0}))
end
return {'ok'}
"""
)

# ARGV: channel, id, publish command -> 1 if it existed
_DELETE_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8],
           KEYS[9], KEYS[10])
redis.call(ARGV[3], ARGV[1], cjson.encode({ARGV[2], '', 0}))
return 1
"""

# The revisions of the appends holding messages [s, e) of a transcript of len
# messages, as the log's index range: {first - 1, last - 1}, or nil (none).
_SPAN = """
local function span(s, e)
  if s >= e then return nil end
  local a = redis.call('ZRANGEBYSCORE', KEYS[8], '(' .. s, '+inf', 'LIMIT', 0, 1)
  local b = redis.call('ZRANGEBYSCORE', KEYS[8], e, '+inf', 'LIMIT', 0, 1)
  if #a == 0 or #b == 0 then return nil end
  return {tonumber(a[1]) - 1, tonumber(b[1]) - 1}
end
"""

# ARGV: keep (-1: every message), loaded keys -> {'missing'} | {'unindexed'} |
# {'ok', epoch, created, rev, len, active, vchanges, segs, views, first, blobs, acks, order,
#  last} (the newest ``loaded keys`` idempotency keys, oldest first, and their acks; the
# newest event, whose digest is the transcript's, '' at revision 0)
_STATE_SCRIPT = (
    _SPAN
    + """
local m = redis.call('HMGET', KEYS[1], 'epoch', 'created', 'rev', 'len', 'active', 'vchanges',
                     'ix')
if not m[1] then return {'missing'} end
if m[7] ~= '1' then return {'unindexed'} end
local len, keep = tonumber(m[4]), tonumber(ARGV[1])
local first = 0
if keep >= 0 and len > keep then first = len - keep end
local blobs = {}
local r = span(first, len)
if r then blobs = redis.call('LRANGE', KEYS[2], r[1], r[2]) end
local order = redis.call('ZRANGE', KEYS[5], -tonumber(ARGV[2]), -1)
local acks = {}
if #order > 0 then acks = redis.call('HMGET', KEYS[4], unpack(order)) end
local last = ''
if tonumber(m[3]) > 0 then last = redis.call('LINDEX', KEYS[2], tonumber(m[3]) - 1) or '' end
return {'ok', m[1], m[2], m[3], m[4], m[5], m[6] or '0',
        redis.call('LRANGE', KEYS[9], 0, -1), redis.call('HGETALL', KEYS[10]), first, blobs,
        acks, order, last}
"""
)

# ARGV: start, end -> {'missing'} | {'unindexed'} | {'ok', epoch, rev, len, first, blobs}
_RANGE_SCRIPT = (
    _SPAN
    + """
local m = redis.call('HMGET', KEYS[1], 'epoch', 'rev', 'len', 'ix')
if not m[1] then return {'missing'} end
if m[4] ~= '1' then return {'unindexed'} end
local len = tonumber(m[3])
local s, e = math.min(tonumber(ARGV[1]), len), math.min(tonumber(ARGV[2]), len)
local blobs = {}
local r = span(s, e)
if r then blobs = redis.call('LRANGE', KEYS[2], r[1], r[2]) end
return {'ok', m[1], m[2], m[3], s, blobs}
"""
)

# Indexes a transcript stored before ``ends``/``segs``/``views`` existed (it has
# no View events then): decodes its log once. -> 1 indexed now, 0 no such id.
_INDEX_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'ix') == '1' then return 1 end
redis.call('DEL', KEYS[8], KEYS[9], KEYS[10])
local blobs = redis.call('LRANGE', KEYS[2], 0, -1)
for i, blob in ipairs(blobs) do
  local change = cmsgpack.unpack(blob)['change']
  if change['kind'] == 'messages-appended' then
    redis.call('ZADD', KEYS[8], change['start'] + #change['messages'], i)
  elseif change['kind'] == 'segment-started' then
    redis.call('RPUSH', KEYS[9], change['previousStart'] .. ':' .. change['end'])
  end
end
redis.call('HSET', KEYS[1], 'ix', 1, 'vchanges', 0)
return 1
"""


_KEY_NAMES: Final = (
    "meta", "log", "stream", "keys", "korder", "ikeys", "iorder", "ends", "segs", "views"
)  # fmt: skip


class _Script:
    """A Lua script sent by its SHA1 (``EVALSHA``), and whole (``EVAL``, which
    also caches it there) on the node that answers ``NOSCRIPT`` (a restarted
    Redis, a new cluster node): no separate ``SCRIPT LOAD`` that would need
    every node up."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()

    async def __call__(self, client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.execute_command("EVAL", self.text, len(keys), *keys, *args)

    async def many(
        self, client: Any, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]
    ) -> list[Any]:
        """Run ``calls`` (keys, args) pipelined (one round trip per node, in
        order); one answer or error per call."""
        answers: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for command, body in (("EVALSHA", self.sha), ("EVAL", self.text)):
            async with client.pipeline(transaction=False) as pipe:
                for i in todo:
                    keys, args = calls[i]
                    pipe.execute_command(command, body, len(keys), *keys, *args)
                replies = await pipe.execute(raise_on_error=False)
            for i, reply in zip(todo, replies, strict=True):
                answers[i] = reply
            todo = [i for i in todo if isinstance(answers[i], NoScriptError)]
            if not todo:
                break
        return answers


def _receipt_text(receipt: Receipt) -> str:
    return f"{receipt.revision}:{receipt.start}:{receipt.count}"


def _receipt_from(raw: bytes | str) -> Receipt:
    """The receipt of a recorded ack, ``rev:start:count`` (then, for an
    append, ``:token`` of the call that stored it)."""
    revision, start, count = (raw.encode() if isinstance(raw, str) else raw).split(b":")[:3]
    return Receipt(int(revision), int(start), int(count))


def _segment(raw: bytes) -> Segment:
    start, end = raw.split(b":")
    return Segment(int(start), int(end))


def _view(name: bytes, raw: bytes) -> View:
    start, end = raw.split(b":")
    return View(name.decode(), int(start), int(end) if end else None)


class RedisStore:
    """A ``Store`` on one Redis server or a Redis Cluster.

    ``options`` (``RedisOptions``) default to the URL's query parameters;
    give them one way or the other, not both. ``idempotency_retention`` keys
    are kept per transcript (the newest). Nothing connects before ``open()``.
    """

    name = "redis"

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        options: RedisOptions | None = None,
        *,
        idempotency_retention: int = DEFAULT_IDEMPOTENCY_RETENTION,
        idempotency_ttl_s: float = DEFAULT_IDEMPOTENCY_TTL_S,
    ) -> None:
        address, query = redis_address(url)
        if options is None:
            options = parse_query(RedisOptions, query, url=url)
        elif query:
            raise ValueError(f"store URL {url!r}: give the options in the URL or as RedisOptions")
        if idempotency_retention < 0:
            raise ValueError("idempotency_retention must be >= 0")
        self.options = options = validated(options)
        if not address.tls and any(
            getattr(options, name) is not None
            for name in ("ssl_cert_reqs", "ssl_ca_certs", "ssl_check_hostname")
        ):
            raise ValueError(
                f"store URL {url!r}: ssl_* options need rediss:// or rediss+cluster://"
            )
        self.idempotency_retention = idempotency_retention
        self.address = address
        self.cluster = address.cluster
        self.url = address.url
        self.idempotency_ttl_s = idempotency_ttl_s
        self.prefix = options.prefix
        self.where = address.where
        #: The one channel of every notice (one server); on a cluster each
        #: transcript has its own (``channel_of``).
        self.channel = self.prefix + "changes"
        self._publish = "SPUBLISH" if self.cluster else "PUBLISH"
        self._index = self.prefix + "ids"
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(TranscriptEvent)
        self._notice = msgspec.json.Decoder(tuple[str, str, int])
        self._relayed = msgspec.json.Decoder(RelayedDraft)
        self._relayed_presence = msgspec.json.Decoder(RelayedPresence)
        self._redis: aioredis.Redis | RedisCluster | None = None
        self._shards: ShardChannels | None = None
        self._append = _Script(_APPEND_SCRIPT)
        self._create = _Script(_CREATE_SCRIPT)
        self._delete = _Script(_DELETE_SCRIPT)
        self._state = _Script(_STATE_SCRIPT)
        self._range = _Script(_RANGE_SCRIPT)
        self._index_script = _Script(_INDEX_SCRIPT)
        link = StoreLink(
            prefix=self.prefix,
            client=self._client,
            channel_of=self.channel_of,
            publish=self._publish,
            unavailable=self._unavailable,
            script=_Script,
        )
        self._drafts = RedisDrafts(link)
        self._presence = RedisPresence(link)

    def channel_of(self, transcript_id: str) -> str:
        """The channel that carries ``transcript_id``'s notices."""
        if self.cluster:
            return f"{self.prefix}{{{transcript_id}}}:changes"
        return self.channel

    # --- lifecycle ------------------------------------------------------------------

    def _tls(self) -> dict[str, Any]:
        return {
            name: value
            for name in ("ssl_cert_reqs", "ssl_ca_certs", "ssl_check_hostname")
            if (value := getattr(self.options, name)) is not None
        }

    def _retry(self, retries: int | None) -> Retry:
        return Retry(
            ExponentialWithJitterBackoff(base=0.02, cap=0.25),
            self.options.retries if retries is None else retries,
        )

    def _new_client(self, *, retries: int | None = None, size: int | None = None) -> aioredis.Redis:
        """A client of the one server (``size`` pooled connections)."""
        options = self.options
        pool = aioredis.BlockingConnectionPool.from_url(
            self.url,
            max_connections=size or options.max_connections,
            timeout=options.pool_wait_s,
            socket_timeout=options.socket_timeout,
            socket_connect_timeout=options.socket_connect_timeout,
            health_check_interval=options.health_check_interval,
            retry=self._retry(retries),
            **self._tls(),
        )
        return aioredis.Redis(connection_pool=pool)

    def _new_cluster_client(self) -> RedisCluster:
        """redis-py's cluster client: it learns the slots from the nodes in
        the URL and follows MOVED/ASK; after a connection error it reads
        the slots again before each retry."""
        options, address = self.options, self.address
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in address.nodes],
            # Serve the slots that are up when one master is down.
            require_full_coverage=False,
            username=address.username,
            password=address.password,
            ssl=address.tls,
            max_connections=options.max_connections,
            socket_timeout=options.socket_timeout,
            socket_connect_timeout=options.socket_connect_timeout,
            health_check_interval=options.health_check_interval,
            retry=self._retry(None),
            **self._tls(),
        )

    def _node_client(self, host: str, port: int) -> aioredis.Redis:
        """One connection to one cluster node, no retries (shard notices)."""
        options, address = self.options, self.address
        return aioredis.Redis(
            host=host,
            port=port,
            username=address.username,
            password=address.password,
            ssl=address.tls,
            socket_timeout=options.socket_timeout,
            socket_connect_timeout=options.socket_connect_timeout,
            retry=self._retry(0),
            single_connection_client=True,
            **self._tls(),
        )

    async def open(self) -> None:
        """Make the connection pool; a Redis that is down now is not an error
        (every call then raises ``StoreUnavailable`` until it is back)."""
        if self._redis is not None:
            return
        if self.cluster:
            cluster = self._new_cluster_client()
            self._redis = cluster
            self._shards = ShardChannels(
                cluster,
                channel_of=self.channel_of,
                connect=self._node_client,
                decode=self._decode_notice,
                where=self.where,
            )
        else:
            self._redis = self._new_client()

    async def close(self) -> None:
        """Close the pool. Every accepted change is already in Redis."""
        client, self._redis = self._redis, None
        if isinstance(client, RedisCluster):
            await client.aclose()
        elif client is not None:
            await client.aclose(close_connection_pool=True)

    def _client(self) -> Any:
        """The client (``aioredis.Redis`` or ``RedisCluster``: the same commands)."""
        if self._redis is None:
            raise StoreUnavailable(f"{self.where} store is closed")
        return self._redis

    def _unavailable(self, err: RedisError | RedisClusterException) -> StoreError:
        node = getattr(err, "connection", None)
        where = self.where
        if isinstance(node, ClusterNode):
            where = f"{self.where} (node {node.name}, which holds this data)"
        if isinstance(err, RedisTimeoutError):
            return StoreUnavailable(
                f"{where} did not answer within {self.options.socket_timeout}s "
                f"({self.options.retries} retries): {err}; the change may still be applied "
                "when it answers again, retry with the same idempotency key"
            )
        if isinstance(err, RedisConnectionError):
            return StoreUnavailable(f"{where} is unreachable: {err}")
        if isinstance(err, ClusterError | TryAgainError | RedisClusterException):
            return StoreUnavailable(f"{where} cannot serve this data now: {err}")
        return StoreError(f"{where}: {type(err).__name__}: {err}")

    # --- keys -----------------------------------------------------------------------

    def _keys(self, transcript_id: str) -> list[str]:
        tag = f"{self.prefix}{{{transcript_id}}}:"
        return [tag + name for name in _KEY_NAMES]

    def _event_args(
        self, event: TranscriptEvent | None, key: str, internal: bool, *, token: str = ""
    ) -> list[Any]:
        """The ``accept`` arguments of the scripts for ``event``; ``token``
        (an append's call) goes into the ack recorded with the key."""
        kind, item, name, title, preview = "", "", "", "", ""
        if event is None:
            blob: bytes | str = ""
            ack, length, active, updated = "", "", "", 0
        else:
            blob = self._encoder.encode(event)
            ack = _receipt_text(Receipt.for_event(event))
            if token:
                ack += ":" + token
            change = event.change
            updated = event.occurred_at
            length, active = "", ""
            if isinstance(change, MessagesAppended):
                kind, length = "a", str(change.end)
                title = title_of(change.messages) or ""
                preview = preview_of(change.messages) or ""
            elif isinstance(change, SegmentStarted):
                kind, active = "s", str(change.start)
                item = f"{change.previous_start}:{change.end}"
            else:
                kind = "v" if isinstance(change, ViewChanged) else "l"
                name = change.name
                item = f"{change.start}:{'' if change.end is None else change.end}"
        retention = INTERNAL_KEY_RETENTION if internal else self.idempotency_retention
        return [
            blob,
            key,
            "1" if internal else "0",
            ack,
            updated,
            length,
            active,
            retention,
            self.options.stream_maxlen,
            self.channel if event is None else self.channel_of(event.transcript_id),
            event.transcript_id if event is not None else "",
            event.epoch if event is not None else "",
            self._publish,
            int(self.idempotency_ttl_s * 1000),
            kind,
            item,
            name,
            title,
            preview,
        ]

    # --- writes ---------------------------------------------------------------------

    async def create(
        self,
        transcript_id: str,
        epoch: str,
        created_at: int,
        first: TranscriptEvent | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> None:
        """Create a transcript, with its first event if given.

        The id enters the ``list`` index first (a separate key that may live
        on another Cluster slot), then the script creates the transcript; an
        index entry whose transcript does not exist is skipped by ``list``.
        """
        client = self._client()
        check_first_event(transcript_id, epoch, first)
        # A retried create is recognised by its token (the script), not a key.
        args = self._event_args(first, idempotency_key or "", internal=False)
        args[9], args[10], args[11] = self.channel_of(transcript_id), transcript_id, epoch
        token = uuid.uuid4().hex
        try:
            await client.zadd(self._index, {transcript_id: 0})
            answer = await self._create(
                client, self._keys(transcript_id), [epoch, created_at, token, *args]
            )
        except _FAILURES as err:
            raise self._unavailable(err) from err
        if answer[0] == b"exists":
            raise TranscriptExists(transcript_id)

    async def append(
        self, event: TranscriptEvent, *, idempotency_key: str | None = None
    ) -> AppendResult:
        """Append atomically (see ``Store.append``): a run of one.

        Without ``idempotency_key`` a generated one is sent, kept apart from
        the callers' keys. If redis-py retries the script after a timeout and
        the first attempt had run, the retry finds the key recorded with its
        own call's token and answers it as stored (not as a duplicate: for
        this caller it is the one append it asked for).
        """
        (outcome,) = await self.append_many([(event, idempotency_key)])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def append_many(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> list[AppendResult | Exception]:
        """Several appends in one round trip: the appends of one transcript
        are one script (one atomic step: stored only at the revision and the
        position each was planned for, nothing after one that is not, see
        ``Store.append_many``); the scripts of several transcripts are
        pipelined. One outcome per item; ``StoreUnavailable`` when the round
        trip failed (then nothing or everything of each script ran: a retry
        with the same events or keys is recognised)."""
        client = self._client()
        token = uuid.uuid4().hex[:16]
        runs: dict[str, list[int]] = {}
        internal: list[bool] = []
        args: list[list[Any]] = []
        for i, (event, idempotency_key) in enumerate(items):
            runs.setdefault(event.transcript_id, []).append(i)
            # No key kept (retention 0): a generated one still recognises a retry.
            own = idempotency_key is None or self.idempotency_retention == 0
            internal.append(own)
            key = uuid.uuid4().hex if own or idempotency_key is None else idempotency_key
            position = position_of(event)
            args.append(
                [
                    event.epoch,
                    event.revision,
                    "" if position is None else position,
                    *self._event_args(event, key, own, token=token),
                ]
            )
        calls: list[tuple[Sequence[str], Sequence[Any]]] = [
            (self._keys(tid), [arg for i in indices for arg in args[i]])
            for tid, indices in runs.items()
        ]
        try:
            if len(calls) == 1:
                replies: list[Any] = [await self._append(client, *calls[0])]
            else:
                replies = await self._append.many(client, calls)
        except _FAILURES as err:
            raise self._unavailable(err) from err
        outcomes: list[AppendResult | Exception] = [StoreError("no answer")] * len(items)
        for indices, reply in zip(runs.values(), replies, strict=True):
            for n, i in enumerate(indices):
                if isinstance(reply, _FAILURES):
                    outcomes[i] = self._unavailable(reply)
                elif isinstance(reply, Exception):
                    outcomes[i] = StoreError(f"{self.where}: {reply}")
                else:
                    outcomes[i] = self._outcome(items[i][0], reply[n], internal[i])
        return outcomes

    def _outcome(
        self, event: TranscriptEvent, answer: Any, internal: bool
    ) -> AppendResult | Exception:
        status = answer[0]
        if status == b"ok":
            return AppendResult(Receipt.for_event(event))
        if status == b"dup":
            return AppendResult(_receipt_from(answer[1]), duplicate=not internal)
        if status == b"mismatch":
            return RevisionMismatch(event.transcript_id, event.revision - 1, int(answer[1]))
        return TranscriptNotFound(event.transcript_id)

    async def delete(self, transcript_id: str) -> bool:
        """Remove a transcript (script), then its index entry."""
        client = self._client()
        try:
            existed = await self._delete(
                client,
                self._keys(transcript_id),
                [self.channel_of(transcript_id), transcript_id, self._publish],
            )
            await client.zrem(self._index, transcript_id)
        except _FAILURES as err:
            raise self._unavailable(err) from err
        return bool(existed)

    # --- reads ----------------------------------------------------------------------

    async def load(self, transcript_id: str) -> StoredTranscript | None:
        """The whole transcript from its log (never trimmed), read in one
        MULTI/EXEC so the events and keys belong to one instant."""
        client = self._client()
        meta, log_key, _, keys, korder, *_ = self._keys(transcript_id)
        try:
            async with client.pipeline(transaction=True) as pipe:
                pipe.hmget(meta, "epoch", "created")
                pipe.lrange(log_key, 0, -1)
                pipe.zrange(korder, -LOADED_KEYS, -1)
                (epoch, created), blobs, order = await pipe.execute()
            # Only the newest keys (the hub's memory); a key pruned meanwhile is left out.
            acks = await client.hmget(keys, order) if order else []
        except _FAILURES as err:
            raise self._unavailable(err) from err
        if epoch is None:
            return None
        events = tuple(self._decoder.decode(blob) for blob in blobs)
        idempotency = {
            k.decode(): _receipt_from(ack) for k, ack in zip(order, acks, strict=True) if ack
        }
        size = sum(len(blob) for blob in blobs)
        return StoredTranscript(
            transcript_id, epoch.decode(), int(created), events, idempotency, size
        )

    async def recorded(self, transcript_id: str, key: str) -> Receipt | None:
        """The key's ack if it is held (an expired one is pruned at the
        transcript's next change: until then it still answers)."""
        keys = self._keys(transcript_id)[3]
        try:
            ack = await self._client().hget(keys, key)
        except RedisError as err:
            raise self._unavailable(err) from err
        return None if ack is None else _receipt_from(ack)

    async def events_after(
        self, transcript_id: str, revision: int, *, limit: int | None = None
    ) -> list[TranscriptEvent] | None:
        """Events after ``revision`` from the stream; ``None`` when the stream
        no longer holds revision + 1 (trimmed) or ``revision`` is beyond the
        stored one."""
        client = self._client()
        check_events_after_args(revision, limit)
        meta, _, stream, *_ = self._keys(transcript_id)
        try:
            async with client.pipeline(transaction=True) as pipe:
                pipe.hget(meta, "rev")
                if limit != 0:
                    pipe.xrange(stream, f"0-{revision + 1}", "+", count=limit)
                replies = await pipe.execute()
        except _FAILURES as err:
            raise self._unavailable(err) from err
        if replies[0] is None:
            raise TranscriptNotFound(transcript_id)
        current = int(replies[0])
        if revision > current:
            return None
        if revision == current or limit == 0:
            return []
        entries = replies[1]
        if not entries or entries[0][0] != f"0-{revision + 1}".encode():
            return None
        return [self._decoder.decode(fields[b"e"]) for _, fields in entries]

    async def list(self, *, after: str | None = None, limit: int = 100) -> list[TranscriptInfo]:
        """Transcripts by id from the index; entries whose transcript is gone
        (a create or delete interrupted between its two steps) are skipped."""
        client = self._client()
        check_list_args(limit)
        found: list[TranscriptInfo] = []
        start = "-" if after is None else "(" + after
        try:
            while len(found) < limit:
                want = limit - len(found)
                found_ids = await client.zrangebylex(self._index, start, "+", 0, want)
                # decode_responses is off: every reply is bytes.
                ids = [raw for raw in found_ids if isinstance(raw, bytes)]
                if not ids:
                    break
                async with client.pipeline(transaction=False) as pipe:
                    for raw in ids:
                        pipe.hmget(
                            self._keys(raw.decode())[0],
                            "epoch", "rev", "len", "created", "updated", "title", "preview",
                        )  # fmt: skip
                    metas = await pipe.execute()
                for raw, meta in zip(ids, metas, strict=True):
                    epoch, rev, length, created, updated, title, preview = meta
                    if epoch is not None:
                        numbers = (int(rev), int(length), int(created), int(updated))
                        found.append(
                            TranscriptInfo(
                                raw.decode(),
                                epoch.decode(),
                                *numbers,
                                title=None if title is None else title.decode(),
                                preview=None if preview is None else preview.decode(),
                            )
                        )
                start = "(" + ids[-1].decode()
                if len(ids) < want:
                    break
        except _FAILURES as err:
            raise self._unavailable(err) from err
        return found

    async def load_recent(
        self, transcript_id: str, *, messages: int | None = None
    ) -> StoredState | None:
        """The state now with the newest ``messages`` messages: one script
        reads the meta, segments, Views, keys and only the events holding
        those messages (``ends``)."""
        self._client()
        keep = -1 if messages is None else messages
        answer = await self._indexed(self._state, transcript_id, [keep, LOADED_KEYS])
        if answer is None:
            return None
        (
            _, epoch, created, rev, length, active, vchanges, segs, views, first, blobs,
            acks, order, last,
        ) = answer  # fmt: skip
        length, first = int(length), int(first)
        segments = [_segment(raw) for raw in segs]
        segments.append(Segment(int(active), None))
        pairs = dict(zip(views[::2], views[1::2], strict=True))
        snapshot = TranscriptSnapshot(
            transcript_id=transcript_id,
            epoch=epoch.decode(),
            revision=int(rev),
            start=first,
            messages=self._messages(blobs, first, length),
            active_start=int(active),
            segments=tuple(segments),
            length=length,
            views=tuple(sorted((_view(k, v) for k, v in pairs.items()), key=lambda v: v.name)),
            view_changes=int(vchanges),
            digest=await self._digest(transcript_id, last),
        )
        # A key pruned between the two reads is left out (its HMGET is nil).
        idempotency = {
            k.decode(): _receipt_from(ack) for k, ack in zip(order, acks, strict=True) if ack
        }
        return StoredState(snapshot, int(created), idempotency)

    async def _digest(self, transcript_id: str, last: bytes) -> str | None:
        """The digest at the revision of ``last``, the newest event (``b''``:
        none): its own, or, for a transcript stored before events carried
        digests, computed from the whole log on every load (the log is never
        rewritten: another replica may be appending to it)."""
        digest = head_digest(transcript_id, self._decoder.decode(last) if last else None)
        if digest is not None:
            return digest
        whole = await self.load(transcript_id)
        return None if whole is None else digest_of_log(transcript_id, whole.events)

    async def read_messages(self, transcript_id: str, start: int, end: int) -> StoredRange:
        """Messages ``[start, end)`` (clamped to the length): one script reads
        the events holding them through ``ends``."""
        self._client()
        check_range_args(start, end)
        answer = await self._indexed(self._range, transcript_id, [start, end])
        if answer is None:
            raise TranscriptNotFound(transcript_id)
        _, epoch, rev, length, first, blobs = answer
        first, last = int(first), min(end, int(length))
        return StoredRange(
            epoch.decode(), int(rev), int(length), first, self._messages(blobs, first, last)
        )

    async def _indexed(self, script: Any, transcript_id: str, args: Sequence[int]) -> Any:
        """Run a reading script; index the transcript first if it predates
        the index. ``None`` when there is no such transcript."""
        client = self._client()
        keys = self._keys(transcript_id)
        try:
            answer = await script(client, keys, args)
            if answer[0] == b"unindexed":
                await self._index_script(client, keys, [])
                await self._backfill_summary(transcript_id)
                answer = await script(client, keys, args)
        except _FAILURES as err:
            raise self._unavailable(err) from err
        if answer[0] == b"missing":
            return None
        if answer[0] != b"ok":  # pragma: no cover - the scripts answer nothing else
            raise StoreError(f"{self.where}: unexpected answer {answer[0]!r}")
        return answer

    async def _backfill_summary(self, transcript_id: str) -> None:
        """The list's title and preview of a transcript stored before they
        were kept (the scripts keep them from then on)."""
        meta = self._keys(transcript_id)[0]
        stored = await self.load(transcript_id)
        if stored is None:
            return
        title = preview = None
        for event in stored.events:
            change = event.change
            if isinstance(change, MessagesAppended):
                title = title or title_of(change.messages)
                preview = preview_of(change.messages)
        client = self._client()
        if title is not None:
            await client.hsetnx(meta, "title", title)
        if preview is not None:
            await client.hsetnx(meta, "preview", preview)

    def _messages(self, blobs: Sequence[bytes], start: int, end: int) -> tuple[Any, ...]:
        return messages_in((self._decoder.decode(blob) for blob in blobs), start, end)

    # --- for the backplane ------------------------------------------------------------

    async def heads(self, transcript_ids: Iterable[str]) -> dict[str, Head | None]:
        """Epoch and revision of each transcript now (``None``: it does not
        exist). On a cluster each node is asked apart: the transcripts of a
        node that does not answer are left out (``StoreUnavailable`` when no
        node answers)."""
        client = self._client()
        ids = list(transcript_ids)
        if not ids:
            return {}
        groups = [ids]
        if isinstance(client, RedisCluster):
            try:
                await client.initialize()
                by_node: dict[str, list[str]] = {}
                for tid in ids:
                    node = client.get_node_from_key(self._keys(tid)[0])
                    by_node.setdefault(node.name if node else "", []).append(tid)
                groups = list(by_node.values())
            except _FAILURES as err:
                raise self._unavailable(err) from err
        replies = await asyncio.gather(
            *(self._heads_of(client, group) for group in groups), return_exceptions=True
        )
        heads: dict[str, Head | None] = {}
        failed: list[BaseException] = []
        for reply in replies:
            if isinstance(reply, BaseException):
                failed.append(reply)
            else:
                heads.update(reply)
        if failed and (not heads or not isinstance(failed[0], StoreUnavailable)):
            raise failed[0]
        return heads

    async def _heads_of(self, client: Any, ids: Sequence[str]) -> dict[str, Head | None]:
        try:
            async with client.pipeline(transaction=False) as pipe:
                for tid in ids:
                    pipe.hmget(self._keys(tid)[0], "epoch", "rev")
                replies = await pipe.execute()
        except _FAILURES as err:
            raise self._unavailable(err) from err
        return {
            tid: None if epoch is None else Head(epoch.decode(), int(rev))
            for tid, (epoch, rev) in zip(ids, replies, strict=True)
        }

    def watch(self, transcript_ids: Iterable[str]) -> bool:
        """One server: every change is announced already (``False``). A
        cluster: subscribe to their sharded channels; a ``Recheck`` of each
        follows its subscription (``True``)."""
        if self._shards is None:
            return False
        return self._shards.watch(transcript_ids)

    def unwatch(self, transcript_ids: Iterable[str]) -> None:
        if self._shards is not None:
            self._shards.unwatch(transcript_ids)

    def _decode_notice(self, data: bytes) -> Notice | RelayedDraft | RelayedPresence | None:
        try:
            if data[:1] == b"{":
                return self._relayed.decode(data)
            if data[:1] == PRESENCE_MARK:
                return self._relayed_presence.decode(data[1:])
            return Notice(*self._notice.decode(data))
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("ignored a malformed notice: %r", data[:200])
            return None

    # --- drafts (``SharedDrafts``, ``server.store.redis_drafts``) ---------------------

    async def relay_drafts(
        self, updates: Sequence[RelayedDraft], ttl_s: float
    ) -> builtins.list[RelayedOutcome]:
        """Store each draft update in its entry and announce it on the
        transcript's channel, in order (see ``server.store.redis_drafts``)."""
        return await self._drafts.relay(updates, ttl_s)

    async def drafts_of(
        self, transcript_ids: Iterable[str]
    ) -> dict[str, builtins.list[StoredDraft]]:
        """The open (with their text) and recently closed drafts of each transcript."""
        return await self._drafts.drafts_of(transcript_ids)

    # --- presence (``SharedPresence``, ``server.store.redis_presence``) --------------------

    async def relay_presence(self, updates: Sequence[RelayedPresence]) -> None:
        """Store and announce each replica's presence changes."""
        await self._presence.relay(updates)

    async def renew_presence(
        self, transcript_ids: Iterable[str], replica: str, ttl_s: float
    ) -> builtins.list[str]:
        """Keep ``replica``'s presence entries alive; those that had lapsed."""
        return await self._presence.renew(transcript_ids, replica, max(1, int(ttl_s * 1000)))

    async def presence_of(
        self, transcript_ids: Iterable[str]
    ) -> dict[str, builtins.list[StoredPresence]]:
        """Every live replica's presence members of each transcript."""
        return await self._presence.read(transcript_ids)

    async def notices(
        self, *, reconnect_delay: float = 0.1
    ) -> AsyncGenerator[Notice | Recheck | RelayedDraft | RelayedPresence | None, None]:
        """Every change's notice, from pub/sub, for as long as the caller iterates
        (and every draft update relayed, ``relay_drafts``).

        Pub/sub drops messages while a connection is down, so after every
        (re)subscription this yields ``None``: anything may have been missed,
        check every copy (on a cluster: a ``Recheck`` of the transcripts of
        the node whose subscription was made again). Connection errors are
        retried here forever (with a growing delay up to one second); they
        never end the iteration.
        """
        self._client()  # closed: StoreUnavailable ends the iteration
        if self._shards is not None:
            async for item in self._shards.notices(reconnect_delay):
                self._client()
                yield item
            return
        delay, lost = reconnect_delay, False
        while True:
            self._client()
            # A client of its own without retries: redis-py would otherwise
            # reconnect and resubscribe silently, hiding the lost messages.
            client = self._new_client(retries=0, size=1)
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(self.channel)
                if lost:
                    log.warning("backplane: %s subscribed again", self.where)
                lost, delay = False, reconnect_delay
                yield None
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is None or message.get("type") != "message":
                        continue
                    notice = self._decode_notice(message["data"])
                    if notice is not None:
                        yield notice
            except (*_FAILURES, OSError) as err:
                # Warn once per outage, not at every attempt to reconnect.
                log.log(
                    logging.DEBUG if lost else logging.WARNING,
                    "backplane: %s lost (%s); reconnecting",
                    self.where,
                    err,
                )
                lost = True
            finally:
                await pubsub.aclose()
                await client.aclose(close_connection_pool=True)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
