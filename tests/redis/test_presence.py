"""Presence across replicas on one private Redis and on a Redis Cluster: a
member stated through replica A is seen by B's watchers (joins, changes,
leaves, a closed connection), a watcher that arrives later on B gets A's
members, ``GET .../presence`` on B lists them, and a replica SIGKILLed
takes its members with it on the others within ``presence_ttl_s``."""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx
import pytest

from protocol.presence import PresenceCopy
from protocol.wire import Baseline, Pong
from server.replicas.backplane import Backplane
from server.store.redis import RedisStore
from tests.redis.replicas import create, replicas
from tests.server.live.test_presence import follow, follow_until, who_of
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer
from tests.support.servers import running_server
from tests.support.wsclient import RawClient

pytestmark = pytest.mark.redis

_prefixes = itertools.count()


async def _watcher(ws_url: str, tid: str = "t") -> RawClient:
    client = await RawClient.connect(ws_url)
    await client.send(op="subscribe", transcriptId=tid, presence=True)
    await client.expect(Baseline)
    return client


async def _member(ws_url: str, name: str, tid: str = "t", **op: object) -> RawClient:
    client = await RawClient.connect(ws_url)
    await client.send(op="subscribe", transcriptId=tid)
    await client.send(op="presence", transcriptId=tid, name=name, ref=name, **op)
    await client.expect(Baseline)
    await client.expect(Pong)
    return client


async def _crosses(url: str) -> None:
    url = f"{url}?prefix=pr{next(_prefixes)}:"
    settings = {"backplane_resync_s": 0.2, "presence_interval_s": 0.1}
    async with (
        running_server(store=RedisStore(url), **settings) as a,
        running_server(store=RedisStore(url), **settings) as b,
        httpx.AsyncClient() as http,
    ):
        await create(http, a.url, "t")
        on_b = await _watcher(b.ws_url)
        seen = PresenceCopy()
        await follow(on_b, seen)
        ana = await _member(a.ws_url, "Ana", state={"typing": True})
        await follow_until(on_b, seen, lambda: who_of(seen) == ["Ana"], timeout=10)
        assert seen.listed()[0].state == {"typing": True}
        await ana.send(op="presence", transcriptId="t", state={})
        await follow_until(on_b, seen, lambda: seen.listed()[0].state == {}, timeout=10)
        # A watcher that comes later on B learns A's members too.
        late = await _watcher(b.ws_url)
        late_seen = PresenceCopy()
        await follow_until(late, late_seen, lambda: who_of(late_seen) == ["Ana"], timeout=10)
        body = (await http.get(f"{b.url}/v1/transcripts/t/presence")).json()
        assert [m["who"] for m in body["members"]] == ["Ana"]
        bo = await _member(b.ws_url, "Bo", kind="writer")
        await follow_until(on_b, seen, lambda: who_of(seen) == ["Ana", "Bo"], timeout=10)
        on_a = await _watcher(a.ws_url)
        a_seen = PresenceCopy()
        await follow_until(on_a, a_seen, lambda: who_of(a_seen) == ["Ana", "Bo"], timeout=10)
        await ana.close()  # its connection closes: Ana leaves everywhere
        await follow_until(on_b, seen, lambda: who_of(seen) == ["Bo"], timeout=10)
        await follow_until(on_a, a_seen, lambda: who_of(a_seen) == ["Bo"], timeout=10)
        await bo.send(op="presence", transcriptId="t", leave=True)
        await follow_until(on_a, a_seen, lambda: who_of(a_seen) == [], timeout=10)
        backplane = b.app.state.backplane
        assert isinstance(backplane, Backplane) and backplane.presence is not None
        assert backplane.presence.applied >= 2
        for client in (on_b, late, bo, on_a):
            await client.close()


async def test_presence_crosses_replicas(shared_redis: RedisServer) -> None:
    await _crosses(shared_redis.url)


async def test_presence_crosses_replicas_on_a_redis_cluster(shared_cluster: RedisCluster) -> None:
    await _crosses(shared_cluster.url)


async def test_a_replica_killed_takes_its_members_with_it_within_the_ttl(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    ttl = 1.5
    url = redis_server.url + "?prefix=presence-kill:"
    async with (
        replicas(2, url, tmp_path, f"presence_ttl_s={ttl}", "presence_interval_s=0.1") as (a, b),
        httpx.AsyncClient(timeout=10) as http,
    ):
        await create(http, a.url, "t")
        on_b = await _watcher(b.ws_url)
        seen = PresenceCopy()
        await follow(on_b, seen)
        ana = await _member(a.ws_url, "Ana")
        bo = await _member(b.ws_url, "Bo")
        await follow_until(on_b, seen, lambda: who_of(seen) == ["Ana", "Bo"], timeout=10)
        # Let A renew a few times: its members must stay while it lives.
        for _ in range(3):
            assert await on_b.nothing_pending(ttl / 2)
        assert who_of(seen) == ["Ana", "Bo"]
        a.kill()  # SIGKILL: its connections are not closed by it, nothing is written
        # Gone once A's entries lapse: within the TTL of its last renewal
        # (bounded generously: the machine is shared, no timing is asserted).
        await follow_until(on_b, seen, lambda: who_of(seen) == ["Bo"], timeout=ttl * 4)
        for client in (on_b, bo):
            await client.close()
        del ana
