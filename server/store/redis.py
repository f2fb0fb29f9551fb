"""``RedisStore``: the ``Store`` interface on Redis, shared by several replicas.

Keys of one transcript all carry the hash tag ``{<id>}`` so that they live on
one Redis Cluster slot and one Lua script can change them atomically::

    <prefix>{<id>}:meta     hash: epoch, created, updated, rev, len, active, ctoken
    <prefix>{<id>}:log      list: every event (msgpack), revision r at index r-1;
                            the authoritative history, never trimmed
    <prefix>{<id>}:stream   stream: the same events with ids ``0-<revision>``,
                            trimmed to about ``stream_maxlen``; catch-up reads it
    <prefix>{<id>}:keys     hash: caller's idempotency key -> ack ("rev:start:count")
    <prefix>{<id>}:korder   zset: those keys by the time they were recorded (ms;
                            pruned after ``idempotency_ttl_s`` and past
                            ``idempotency_retention``, oldest first)
    <prefix>{<id>}:ikeys    hash/zset pair for the keys this store generates
    <prefix>{<id>}:iorder   itself when the caller gave none (see ``append``)
    <prefix>ids             zset of ids (score 0) for ``list``; kept outside the
                            scripts (another slot), see ``create``/``delete``
    <prefix>changes         pub/sub channel: ``[id, epoch, revision]`` per change

Every change is one script (``create``, ``append``, ``delete``): it checks the
idempotency key, the epoch and the revision, stores the event in the log and
the stream, records the key with its ack, and publishes a notice, all or
nothing. redis-py retries a command after a connection error or a timeout, so
an append always carries an idempotency key (a generated one when the caller
gave none): a retried script that had already run answers the first ack.

``events_after`` reads the stream: when it no longer holds the range (trimmed)
it returns ``None`` and the caller loads the whole transcript from the log.

Errors: a connection error, a timeout, or a Redis still loading its data after
a restart raise ``StoreUnavailable``. After a timeout the outcome is unknown
(the command may still run once Redis answers again); a retry with the same
idempotency key then answers the first ack instead of appending twice.

URL: ``redis://[user:pass@]host:port/db`` or ``rediss://`` (TLS); its query
parameters are the options (``server.store.options.RedisOptions``: ``prefix``,
``stream_maxlen``, ``socket_timeout``...). An unknown one is refused.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncGenerator, Iterable, Sequence
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from protocol.types import MessagesAppended, TranscriptEvent
from server.store.base import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    DEFAULT_IDEMPOTENCY_TTL_S,
    LOADED_KEYS,
    AppendResult,
    Head,
    Notice,
    Receipt,
    RevisionMismatch,
    StoredTranscript,
    StoreError,
    StoreUnavailable,
    TranscriptExists,
    TranscriptInfo,
    TranscriptNotFound,
    check_events_after_args,
    check_first_event,
    check_list_args,
)
from server.store.options import RedisOptions, parse_query, validated

__all__ = ["RedisStore"]

log = logging.getLogger("tsync.store.redis")

#: Keys generated for appends without one, kept per transcript: they only
#: have to outlive redis-py's retries of one call.
INTERNAL_KEY_RETENTION: Final = 64

# --- the scripts -----------------------------------------------------------------------

# KEYS: meta, log, stream, keys, korder, ikeys, iorder
# Shared body: store one event (ARGV from index 4 on, see _event_args) and publish.
_ACCEPT = """
local function accept(rev, a)
  local event, key, internal, ack = a[1], a[2], a[3], a[4]
  local updated, length, active = a[5], a[6], a[7]
  local retention, maxlen, channel = tonumber(a[8]), tonumber(a[9]), a[10]
  local tid, epoch, ttl_ms = a[11], a[12], tonumber(a[13])
  redis.call('RPUSH', KEYS[2], event)
  if maxlen > 0 then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', maxlen, '0-' .. rev, 'e', event)
  end
  redis.call('HSET', KEYS[1], 'rev', rev, 'updated', updated)
  if length ~= '' then redis.call('HSET', KEYS[1], 'len', length) end
  if active ~= '' then redis.call('HSET', KEYS[1], 'active', active) end
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
  redis.call('PUBLISH', channel, cjson.encode({tid, epoch, rev}))
end
"""

# ARGV: epoch, revision, _, then the accept arguments.
# -> {'ok'} | {'dup', ack} | {'mismatch', current} | {'missing'}
_APPEND_SCRIPT = (
    _ACCEPT
    + """
local m = redis.call('HMGET', KEYS[1], 'epoch', 'rev')
if not m[1] then return {'missing'} end
local current = tonumber(m[2])
if m[1] ~= ARGV[1] then return {'mismatch', current} end
local a = {unpack(ARGV, 4)}
local key, internal = a[2], a[3]
if key ~= '' then
  local h = KEYS[4]
  if internal == '1' then h = KEYS[6] end
  local ack = redis.call('HGET', h, key)
  if ack then return {'dup', ack} end
end
local rev = tonumber(ARGV[2])
if rev ~= current + 1 then return {'mismatch', current} end
accept(rev, a)
return {'ok'}
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
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'created', ARGV[2], 'updated', ARGV[2],
           'rev', 0, 'len', 0, 'active', 0, 'ctoken', ARGV[3])
local a = {unpack(ARGV, 4)}
if a[1] ~= '' then
  accept(1, a)
else
  redis.call('PUBLISH', a[10], cjson.encode({a[11], ARGV[1], 0}))
end
return {'ok'}
"""
)

# ARGV: channel, id -> 1 if it existed
_DELETE_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
redis.call('PUBLISH', ARGV[1], cjson.encode({ARGV[2], '', 0}))
return 1
"""


_KEY_NAMES: Final = ("meta", "log", "stream", "keys", "korder", "ikeys", "iorder")


def _receipt_text(receipt: Receipt) -> str:
    return f"{receipt.revision}:{receipt.start}:{receipt.count}"


def _receipt_from(raw: bytes | str) -> Receipt:
    revision, start, count = (raw.encode() if isinstance(raw, str) else raw).split(b":")
    return Receipt(int(revision), int(start), int(count))


class RedisStore:
    """A ``Store`` on one Redis server (or a Sentinel-managed primary).

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
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError(f"not a redis:// or rediss:// URL: {url!r}")
        if options is None:
            options = parse_query(RedisOptions, parts.query, url=url)
        elif parts.query:
            raise ValueError(f"store URL {url!r}: give the options in the URL or as RedisOptions")
        if idempotency_retention < 0:
            raise ValueError("idempotency_retention must be >= 0")
        self.options = options = validated(options)
        if parts.scheme == "redis" and any(
            getattr(options, name) is not None
            for name in ("ssl_cert_reqs", "ssl_ca_certs", "ssl_check_hostname")
        ):
            raise ValueError(f"store URL {url!r}: ssl_* options need rediss://")
        self.idempotency_retention = idempotency_retention
        self.idempotency_ttl_s = idempotency_ttl_s
        self.url = urlunsplit(parts._replace(query=""))
        self.prefix = options.prefix
        self.where = f"redis at {parts.hostname or 'localhost'}:{parts.port or 6379}"
        self.channel = self.prefix + "changes"
        self._index = self.prefix + "ids"
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(TranscriptEvent)
        self._notice = msgspec.json.Decoder(tuple[str, str, int])
        self._redis: aioredis.Redis | None = None

    # --- lifecycle ------------------------------------------------------------------

    def _new_client(self, *, retries: int | None = None, size: int | None = None) -> aioredis.Redis:
        options = self.options
        tls = {
            name: value
            for name in ("ssl_cert_reqs", "ssl_ca_certs", "ssl_check_hostname")
            if (value := getattr(options, name)) is not None
        }
        pool = aioredis.BlockingConnectionPool.from_url(
            self.url,
            max_connections=size or options.max_connections,
            timeout=options.pool_wait_s,
            socket_timeout=options.socket_timeout,
            socket_connect_timeout=options.socket_connect_timeout,
            health_check_interval=options.health_check_interval,
            retry=Retry(
                ExponentialWithJitterBackoff(base=0.02, cap=0.25),
                options.retries if retries is None else retries,
            ),
            **tls,
        )
        return aioredis.Redis(connection_pool=pool)

    async def open(self) -> None:
        """Make the connection pool; a Redis that is down now is not an error
        (every call then raises ``StoreUnavailable`` until it is back)."""
        if self._redis is not None:
            return
        client = self._new_client()
        self._redis = client
        self._append = client.register_script(_APPEND_SCRIPT)
        self._create = client.register_script(_CREATE_SCRIPT)
        self._delete = client.register_script(_DELETE_SCRIPT)

    async def close(self) -> None:
        """Close the pool. Every accepted change is already in Redis."""
        client, self._redis = self._redis, None
        if client is not None:
            await client.aclose(close_connection_pool=True)

    def _client(self) -> aioredis.Redis:
        if self._redis is None:
            raise StoreUnavailable(f"redis store ({self.where}) is closed")
        return self._redis

    def _unavailable(self, err: RedisError) -> StoreError:
        if isinstance(err, RedisTimeoutError):
            return StoreUnavailable(
                f"{self.where} did not answer within {self.options.socket_timeout}s "
                f"({self.options.retries} retries): {err}; the change may still be applied "
                "when it answers again, retry with the same idempotency key"
            )
        if isinstance(err, RedisConnectionError):
            return StoreUnavailable(f"{self.where} is unreachable: {err}")
        return StoreError(f"{self.where}: {type(err).__name__}: {err}")

    # --- keys -----------------------------------------------------------------------

    def _keys(self, transcript_id: str) -> list[str]:
        tag = f"{self.prefix}{{{transcript_id}}}:"
        return [tag + name for name in _KEY_NAMES]

    def _event_args(self, event: TranscriptEvent | None, key: str, internal: bool) -> list[Any]:
        """The ``accept`` arguments of the scripts for ``event``."""
        if event is None:
            blob: bytes | str = ""
            ack, length, active, updated = "", "", "", 0
        else:
            blob = self._encoder.encode(event)
            ack = _receipt_text(Receipt.for_event(event))
            change = event.change
            updated = event.occurred_at
            if isinstance(change, MessagesAppended):
                length, active = str(change.end), ""
            else:
                length, active = "", str(change.start)
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
            self.channel,
            event.transcript_id if event is not None else "",
            event.epoch if event is not None else "",
            int(self.idempotency_ttl_s * 1000),
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
        args[10], args[11] = transcript_id, epoch
        token = uuid.uuid4().hex
        try:
            await client.zadd(self._index, {transcript_id: 0})
            answer = await self._create(
                keys=self._keys(transcript_id), args=[epoch, created_at, token, *args]
            )
        except RedisError as err:
            raise self._unavailable(err) from err
        if answer[0] == b"exists":
            raise TranscriptExists(transcript_id)

    async def append(
        self, event: TranscriptEvent, *, idempotency_key: str | None = None
    ) -> AppendResult:
        """Append atomically (see ``Store.append``).

        Without ``idempotency_key`` a generated one is sent, kept apart from
        the callers' keys: if redis-py retries the script after a timeout and
        the first attempt had run, the retry answers that attempt's ack (not
        as a duplicate: for this caller it is the one append it asked for).
        """
        self._client()
        internal = idempotency_key is None
        key = uuid.uuid4().hex if idempotency_key is None else idempotency_key
        args = self._event_args(event, key, internal)
        try:
            answer = await self._append(
                keys=self._keys(event.transcript_id),
                args=[event.epoch, event.revision, "", *args],
            )
        except RedisError as err:
            raise self._unavailable(err) from err
        status = answer[0]
        if status == b"ok":
            return AppendResult(Receipt.for_event(event))
        if status == b"dup":
            return AppendResult(_receipt_from(answer[1]), duplicate=not internal)
        if status == b"mismatch":
            raise RevisionMismatch(event.transcript_id, event.revision - 1, int(answer[1]))
        raise TranscriptNotFound(event.transcript_id)

    async def append_many(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> list[AppendResult | Exception]:
        """Several appends in one round trip: the scripts are pipelined on one
        connection, so Redis runs them in order, each atomic on its own. One
        outcome per item; ``StoreUnavailable`` when the round trip failed."""
        client = self._client()
        internal: list[bool] = []
        try:
            async with client.pipeline(transaction=False) as pipe:
                for event, idempotency_key in items:
                    internal.append(idempotency_key is None)
                    key = uuid.uuid4().hex if idempotency_key is None else idempotency_key
                    args = self._event_args(event, key, idempotency_key is None)
                    await self._append(
                        keys=self._keys(event.transcript_id),
                        args=[event.epoch, event.revision, "", *args],
                        client=pipe,
                    )
                answers = await pipe.execute(raise_on_error=False)
        except RedisError as err:
            raise self._unavailable(err) from err
        outcomes: list[AppendResult | Exception] = []
        for (event, _), was_internal, answer in zip(items, internal, answers, strict=True):
            if isinstance(answer, RedisError):
                outcomes.append(self._unavailable(answer))
                continue
            if isinstance(answer, Exception):
                outcomes.append(StoreError(f"{self.where}: {answer}"))
                continue
            outcomes.append(self._outcome(event, answer, was_internal))
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
                keys=self._keys(transcript_id), args=[self.channel, transcript_id]
            )
            await client.zrem(self._index, transcript_id)
        except RedisError as err:
            raise self._unavailable(err) from err
        return bool(existed)

    # --- reads ----------------------------------------------------------------------

    async def load(self, transcript_id: str) -> StoredTranscript | None:
        """The whole transcript from its log (never trimmed), read in one
        MULTI/EXEC so the events and keys belong to one instant."""
        client = self._client()
        meta, log_key, _, keys, korder, _, _ = self._keys(transcript_id)
        try:
            async with client.pipeline(transaction=True) as pipe:
                pipe.hmget(meta, "epoch", "created")
                pipe.lrange(log_key, 0, -1)
                pipe.zrange(korder, -LOADED_KEYS, -1)
                (epoch, created), blobs, order = await pipe.execute()
            # Only the newest keys (the hub's memory); a key pruned meanwhile is left out.
            acks = await client.hmget(keys, order) if order else []
        except RedisError as err:
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
        except RedisError as err:
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
                            "epoch", "rev", "len", "created", "updated",
                        )  # fmt: skip
                    metas = await pipe.execute()
                for raw, (epoch, rev, length, created, updated) in zip(ids, metas, strict=True):
                    if epoch is not None:
                        numbers = (int(rev), int(length), int(created), int(updated))
                        found.append(TranscriptInfo(raw.decode(), epoch.decode(), *numbers))
                start = "(" + ids[-1].decode()
                if len(ids) < want:
                    break
        except RedisError as err:
            raise self._unavailable(err) from err
        return found

    # --- for the backplane ------------------------------------------------------------

    async def heads(self, transcript_ids: Iterable[str]) -> dict[str, Head | None]:
        """Epoch and revision of each transcript now (``None``: it does not exist)."""
        client = self._client()
        ids = list(transcript_ids)
        if not ids:
            return {}
        try:
            async with client.pipeline(transaction=False) as pipe:
                for tid in ids:
                    pipe.hmget(self._keys(tid)[0], "epoch", "rev")
                replies = await pipe.execute()
        except RedisError as err:
            raise self._unavailable(err) from err
        return {
            tid: None if epoch is None else Head(epoch.decode(), int(rev))
            for tid, (epoch, rev) in zip(ids, replies, strict=True)
        }

    async def notices(self, *, reconnect_delay: float = 0.1) -> AsyncGenerator[Notice | None, None]:
        """Every change's notice, from pub/sub, for as long as the caller iterates.

        Pub/sub drops messages while a connection is down, so after every
        (re)subscription this yields ``None``: anything may have been missed,
        check every copy. Connection errors are retried here forever (with a
        growing delay up to one second); they never end the iteration.
        """
        delay, lost = reconnect_delay, False
        while True:
            self._client()  # closed: StoreUnavailable ends the iteration
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
                    try:
                        tid, epoch, revision = self._notice.decode(message["data"])
                    except msgspec.DecodeError:
                        log.warning("ignored a malformed notice: %r", message["data"][:200])
                        continue
                    yield Notice(tid, epoch, revision)
            except (RedisError, OSError) as err:
                # Warn once per outage, not at every attempt to reconnect.
                log.log(
                    logging.DEBUG if lost else logging.WARNING,
                    "backplane: %s lost (%s); reconnecting",
                    self.where,
                    err,
                )
                lost = True
            finally:
                await pubsub.aclose()  # type: ignore[no-untyped-call]
                await client.aclose(close_connection_pool=True)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
