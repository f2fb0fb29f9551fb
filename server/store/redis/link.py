"""The link to one Redis or a Redis Cluster that the Redis store and each of
its parts (shards, drafts, presence, the Durable Streams) share.

- ``RedisLink``: the clients (a pooled one, redis-py's cluster client, one
  connection to one cluster node), their TLS and retry settings, the error
  mapping to the store's error tree (``unavailable``), and the connection a
  pub/sub subscription gets (``subscriber``).
- ``resubscribed``: THE pub/sub reconnect loop. Pub/sub drops what is
  published while a connection is down, so a subscription has a connection
  of its own without retries (redis-py would otherwise reconnect and
  subscribe again silently, hiding what was lost), and the loop makes a new
  one after every failure, with a growing delay up to a second; the caller's
  session says what a (re)subscription means (check every copy).
- ``Script``: a Lua script run by its SHA1 and sent whole where the node
  does not know it.
- ``StoreLink``/``RedisPart``: what a part of the store is given, so that
  each part reaches Redis only through the link.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

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

from server.store.base import StoreError, StoreUnavailable
from server.store.options import RedisAddress, RedisOptions

__all__ = ["FAILURES", "RedisLink", "RedisPart", "Script", "StoreLink", "resubscribed"]

log = logging.getLogger("tsync.store.redis")

#: What redis-py raises when Redis cannot serve (its cluster client's own
#: exceptions, e.g. a slot no node covers, are not ``RedisError``s).
FAILURES: Final = (RedisError, RedisClusterException)

_T = TypeVar("_T")


class Script:
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


class RedisLink:
    """The connection of one store to its Redis (``address``, ``options``):
    nothing connects before ``open()``."""

    def __init__(self, address: RedisAddress, options: RedisOptions) -> None:
        self.address = address
        self.options = options
        self.cluster = address.cluster
        self.url = address.url
        self.where = address.where
        self.redis: aioredis.Redis | RedisCluster | None = None

    def _sockets(self) -> dict[str, Any]:
        """What every connection to this Redis carries: timeouts and TLS."""
        options = self.options
        return {
            "socket_timeout": options.socket_timeout,
            "socket_connect_timeout": options.socket_connect_timeout,
        } | {
            name: value
            for name in ("ssl_cert_reqs", "ssl_ca_certs", "ssl_check_hostname")
            if (value := getattr(options, name)) is not None
        }

    def _credentials(self) -> dict[str, Any]:
        """Who connects and whether over TLS, for the clients not made from
        the URL (which carries them)."""
        address = self.address
        return {"username": address.username, "password": address.password, "ssl": address.tls}

    def _retry(self, retries: int | None) -> Retry:
        return Retry(
            ExponentialWithJitterBackoff(base=0.02, cap=0.25),
            self.options.retries if retries is None else retries,
        )

    def new_client(self, *, retries: int | None = None, size: int | None = None) -> aioredis.Redis:
        """A client of the one server (``size`` pooled connections)."""
        options = self.options
        pool = aioredis.BlockingConnectionPool.from_url(
            self.url,
            max_connections=size or options.max_connections,
            timeout=options.pool_wait_s,
            health_check_interval=options.health_check_interval,
            retry=self._retry(retries),
            **self._sockets(),
        )
        return aioredis.Redis(connection_pool=pool)

    def new_cluster_client(self) -> RedisCluster:
        """redis-py's cluster client: it learns the slots from the nodes in
        the URL and follows MOVED/ASK; after a connection error it reads
        the slots again before each retry."""
        options = self.options
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in self.address.nodes],
            # Serve the slots that are up when one master is down.
            require_full_coverage=False,
            max_connections=options.max_connections,
            health_check_interval=options.health_check_interval,
            retry=self._retry(None),
            **self._credentials(),
            **self._sockets(),
        )

    def node_client(self, host: str, port: int) -> aioredis.Redis:
        """One connection to one cluster node, no retries (subscriptions)."""
        return aioredis.Redis(
            host=host,
            port=port,
            retry=self._retry(0),
            single_connection_client=True,
            **self._credentials(),
            **self._sockets(),
        )

    def subscriber(self, attempt: int) -> aioredis.Redis:
        """A connection of its own, without retries, for a subscription to
        ``PUBLISH``'s channels (``resubscribed``). On a cluster, a node
        (``PUBLISH`` reaches every node): the next one at each ``attempt``."""
        self.client()  # closed: StoreUnavailable ends the subscription
        if self.cluster:
            host, port = self.address.nodes[attempt % len(self.address.nodes)]
            return self.node_client(host, port)
        return self.new_client(retries=0, size=1)

    def open(self) -> aioredis.Redis | RedisCluster:
        """Make the client (a pool; no connection yet): a Redis that is down
        now is not an error (every call then raises ``StoreUnavailable``
        until it is back)."""
        if self.redis is None:
            self.redis = self.new_cluster_client() if self.cluster else self.new_client()
        return self.redis

    async def close(self) -> None:
        client, self.redis = self.redis, None
        if isinstance(client, RedisCluster):
            await client.aclose()
        elif client is not None:
            await client.aclose(close_connection_pool=True)

    def client(self) -> Any:
        """The client (``aioredis.Redis`` or ``RedisCluster``: the same commands)."""
        if self.redis is None:
            raise StoreUnavailable(f"{self.where} store is closed")
        return self.redis

    def unavailable(self, err: RedisError | RedisClusterException) -> StoreError:
        """The store's error for a redis-py one."""
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


async def resubscribed(
    connect: Callable[[int], Any],
    session: Callable[[Any], AsyncIterator[_T]],
    *,
    what: str,
    delay: float = 0.1,
    lost_note: str = "reconnecting",
    logger: logging.Logger = log,
) -> AsyncGenerator[_T, None]:
    """What ``session(pubsub)`` yields, for as long as the caller iterates,
    through every lost connection: the one pub/sub reconnect loop.

    ``connect(attempt)`` makes a connection of its own without retries (the
    attempts since the last subscription held); ``session`` subscribes on
    its pub/sub and yields (an item means the subscription stands). A
    connection error or a timeout ends the session: it is warned about once
    per outage (``what`` names the subscription), and a new connection is
    made after ``delay``, doubled at each failure up to one second.
    Anything else ``connect`` or ``session`` raise ends the iteration.
    """
    base, lost, attempt = delay, False, 0
    while True:
        client = connect(attempt)
        pubsub = client.pubsub()
        try:
            async with contextlib.aclosing(session(pubsub)) as items:  # type: ignore[type-var]
                async for item in items:
                    if lost:
                        logger.warning("%s subscribed again", what)
                    lost, delay, attempt = False, base, 0
                    yield item
        except (*FAILURES, OSError) as err:
            # Warn once per outage, not at every attempt to reconnect.
            logger.log(
                logging.DEBUG if lost else logging.WARNING, "%s lost (%s); %s", what, err, lost_note
            )
            lost = True
            attempt += 1
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
            with contextlib.suppress(Exception):
                await client.aclose(close_connection_pool=True)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


@dataclass(frozen=True, slots=True)
class StoreLink:
    """The store's handles a part uses: ``prefix`` of every key,
    ``client()`` the store's client, ``channel_of`` its notice channel per
    transcript, ``publish`` the command (``PUBLISH``, or ``SPUBLISH`` on a
    Cluster), ``unavailable`` maps a redis-py error to a ``StoreError``,
    ``script`` makes a runnable script (``Script``), ``redis`` the link
    itself (its subscriptions, ``where`` it is)."""

    prefix: str
    client: Callable[[], Any]
    channel_of: Callable[[str], str]
    publish: str
    unavailable: Callable[[Any], StoreError]
    script: Callable[[str], Any]
    redis: RedisLink


class RedisPart:
    """A part of the Redis store: the link's handles as attributes,
    ``_encode`` (compact JSON) and ``_many`` (a script, pipelined)."""

    def __init__(self, link: StoreLink) -> None:
        self.prefix = link.prefix
        self._client = link.client
        self._channel_of = link.channel_of
        self._publish = link.publish
        self._unavailable = link.unavailable
        self._encode = msgspec.json.Encoder().encode

    async def _many(
        self, script: Any, calls: Sequence[tuple[Sequence[str], Sequence[Any]]], what: str
    ) -> list[Any]:
        """``script`` run for each call, pipelined; every answer, or the
        store's error for the first that failed (``what`` names the job)."""
        try:
            replies: list[Any] = await script.many(self._client(), calls)
        except FAILURES as err:
            raise self._unavailable(err) from err
        for reply in replies:
            if isinstance(reply, FAILURES):
                raise self._unavailable(reply)
            if isinstance(reply, Exception):
                raise StoreError(f"{what} failed: {reply}")
        return replies
