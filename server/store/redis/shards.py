"""Change notices on a Redis Cluster: one sharded channel per transcript.

On a cluster, ``PUBLISH`` goes to every node; ``SPUBLISH`` only to the node
that owns the channel's slot. Each transcript's channel carries its hash tag
(``<prefix>{<id>}:changes``), so its append script publishes on the node
that stores it, and a replica subscribes (``SSUBSCRIBE``) there, only to the
transcripts it holds in memory (``watch``/``unwatch``).

``ShardChannels`` keeps one listener per node that owns a watched channel,
each on a connection of its own without retries (redis-py would otherwise
reconnect and subscribe again silently, hiding what was published
meanwhile). Every confirmed ``SSUBSCRIBE`` yields a ``Recheck`` of its
transcript: a first subscription, and the same after a node came back, a
failover or a slot migration. Changes stored before that moment were never
announced here, so the backplane compares those copies with the store: the
"(re)subscribed, check" rule of a single Redis, per shard. A node that is
down costs only its own transcripts their notices (the backplane's safety
net still reads the heads of the others).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Any, Final

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import SlotNotCoveredError

from server.store.base import Notice, Recheck, RelayedDraft, RelayedPresence
from server.store.redis.link import FAILURES, RedisLink, resubscribed

__all__ = ["ShardChannels"]

log = logging.getLogger("tsync.store.redis")

#: Seconds a node's listener waits for a message before it looks whether its
#: channels changed (a new watch waits at most this long for its SSUBSCRIBE;
#: its Recheck covers whatever was published before).
POLL_S: Final = 0.05

Decode = Callable[[bytes], Notice | RelayedDraft | RelayedPresence | None]


class ShardChannels:
    """The watched transcripts' sharded channels, subscribed on their nodes.

    ``cluster``: the store's client, which reads who owns which slot;
    ``link``: the store's link, whose ``node_client`` makes a client of one
    node (no retries, one connection) and ``where`` names it in logs;
    ``channel_of(id)`` names a transcript's channel; ``decode`` reads a
    notice or a relayed draft update (``None`` for a malformed one).
    """

    def __init__(
        self,
        cluster: RedisCluster,
        link: RedisLink,
        *,
        channel_of: Callable[[str], str],
        decode: Decode,
    ) -> None:
        self.cluster = cluster
        self.link = link
        self.channel_of = channel_of
        self.decode = decode
        self.watched: set[str] = set()
        #: Watched transcripts whose subscription is confirmed and standing.
        self.confirmed: set[str] = set()
        self._changed = asyncio.Event()
        self._stale = False
        self._out: asyncio.Queue[Notice | Recheck | RelayedDraft | RelayedPresence] | None = None
        self._listeners: dict[str, _NodeListener] = {}

    def watch(self, transcript_ids: Iterable[str]) -> bool:
        ids = set(transcript_ids)
        before = len(self.watched)
        self.watched.update(ids)
        if len(self.watched) != before:
            self._changed.set()
        # Still subscribed (watched again before the unwatch took effect):
        # nothing was missed, but the caller waits for its Recheck.
        standing = ids & self.confirmed
        if standing and self._out is not None:
            self._out.put_nowait(Recheck(frozenset(standing)))
        return True

    def unwatch(self, transcript_ids: Iterable[str]) -> None:
        before = len(self.watched)
        self.watched.difference_update(transcript_ids)
        if len(self.watched) != before:
            self._changed.set()

    def topology_changed(self) -> None:
        """A listener failed or was redirected: read who owns which slot again."""
        self._stale = True
        self._changed.set()

    async def notices(
        self, reconnect_delay: float
    ) -> AsyncGenerator[Notice | Recheck | RelayedDraft | RelayedPresence | None, None]:
        """``None`` (nothing is subscribed yet), then notices and rechecks
        until the caller stops iterating."""
        out: asyncio.Queue[Notice | Recheck | RelayedDraft | RelayedPresence] = asyncio.Queue()
        self._out = out
        self._changed.set()
        supervisor = asyncio.create_task(self._supervise(out, reconnect_delay))
        supervisor.add_done_callback(_log_failure)
        try:
            yield None
            while True:
                yield await out.get()
        finally:
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
            await asyncio.gather(*(listener.stop() for listener in self._listeners.values()))
            self._listeners.clear()
            self._out = None

    async def _supervise(
        self, out: asyncio.Queue[Notice | Recheck | RelayedDraft | RelayedPresence], delay: float
    ) -> None:
        """Give each node the watched channels it owns; start and stop listeners."""
        failures = 0
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                if self._stale:
                    self._stale = False
                    await self.cluster.nodes_manager.initialize()
                else:
                    await self.cluster.initialize()
                owners = self._owners()
            except (*FAILURES, OSError) as err:
                failures += 1
                log.log(
                    logging.WARNING if failures == 1 else logging.DEBUG,
                    "backplane: %s: cannot read the cluster's slots (%s); trying again",
                    self.link.where,
                    err,
                )
                await asyncio.sleep(min(delay * 2**failures, 1.0))
                self.topology_changed()
                continue
            failures = 0
            for name, ids in owners.items():
                listener = self._listeners.get(name)
                if listener is None:
                    host, port = name.rsplit(":", 1)
                    listener = _NodeListener(self, host, int(port), out, delay)
                    self._listeners[name] = listener
                listener.assign(ids)
            for name in [n for n in self._listeners if n not in owners]:
                await self._listeners.pop(name).stop()

    def _owners(self) -> dict[str, dict[str, str]]:
        """node name -> {channel: transcript id} of the watched transcripts."""
        owners: dict[str, dict[str, str]] = {}
        for tid in self.watched:
            channel = self.channel_of(tid)
            node = self.cluster.get_node_from_key(channel)
            if node is None:
                raise SlotNotCoveredError(f"no node serves the slot of {channel!r}")
            owners.setdefault(node.name, {})[channel] = tid
        return owners


class _NodeListener:
    """The subscriptions on one node: its own connection, its own task."""

    def __init__(
        self,
        owner: ShardChannels,
        host: str,
        port: int,
        out: asyncio.Queue[Notice | Recheck | RelayedDraft | RelayedPresence],
        delay: float,
    ) -> None:
        self.owner = owner
        self.host = host
        self.port = port
        self.name = f"{host}:{port}"
        self.out = out
        self.base_delay = delay
        self.wanted: dict[str, str] = {}
        #: channel -> id, subscribed (sent or confirmed) on the connection now.
        self.subscribed: dict[str, str] = {}
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"shard-notices-{self.name}")

    def assign(self, channels: dict[str, str]) -> None:
        if channels != self.wanted:
            self.wanted = dict(channels)
            self._wake.set()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        async with contextlib.aclosing(
            resubscribed(
                lambda attempt: self.owner.link.node_client(self.host, self.port),
                self._session,
                what=f"backplane: {self.owner.link.where} node {self.name}",
                delay=self.base_delay,
                lost_note="its transcripts' notices resume when it is back",
            )
        ) as confirmations:
            async for confirmed in confirmations:
                self.owner.confirmed.update(confirmed)
                self.out.put_nowait(Recheck(frozenset(confirmed)))

    async def _session(self, pubsub: Any) -> AsyncGenerator[list[str], None]:
        """Once channels are wanted: the subscriptions on one connection
        (``_listen``); a failure makes the owner read the slots again."""
        try:
            while not self.wanted:
                self._wake.clear()
                await self._wake.wait()
            async for confirmed in self._listen(pubsub):
                yield confirmed
        except (*FAILURES, OSError):
            self.owner.topology_changed()
            raise
        finally:
            self.owner.confirmed.difference_update(self.subscribed.values())
            self.subscribed = {}

    async def _listen(self, pubsub: Any) -> AsyncGenerator[list[str], None]:
        """Keep the subscriptions equal to ``wanted``; yield the transcripts
        whose subscription was confirmed; put their notices out."""
        subscribed = self.subscribed = {}
        while True:
            if subscribed.keys() != self.wanted.keys():
                gone = [c for c in subscribed if c not in self.wanted]
                for channel in gone:
                    self.owner.confirmed.discard(subscribed.pop(channel))
                    await pubsub.sunsubscribe(channel)
                # One channel per command: channels of different slots may
                # not share one SSUBSCRIBE (CROSSSLOT).
                for channel, tid in list(self.wanted.items()):
                    if channel not in subscribed:
                        await pubsub.ssubscribe(channel)
                        subscribed[channel] = tid
            if not subscribed:
                return
            message = await pubsub.get_message(timeout=POLL_S)
            if message is None:
                continue
            kind = message.get("type")
            channel = _text(message.get("channel"))
            if kind == "smessage":
                notice = self.owner.decode(message["data"])
                if notice is not None:
                    self.out.put_nowait(notice)
            elif kind == "ssubscribe" and channel in subscribed:
                yield [subscribed[channel]]


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("backplane: shard subscriptions stopped", exc_info=task.exception())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
