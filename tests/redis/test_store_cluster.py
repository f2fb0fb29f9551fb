"""``RedisStore`` on a Redis Cluster (three masters, started by the tests):
the store contract and the shared-store contract, sharded notices that go
only to the node of the transcript, and one master killed and started again."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from server.store import (
    AppendResult,
    Head,
    NewTranscript,
    Notice,
    Receipt,
    Recheck,
    StoreUnavailable,
    TranscriptNotFound,
)
from server.store.options import RedisOptions
from server.store.redis import RedisStore
from tests.server.store.shared_store_contract import SharedBackend, SharedStoreContract
from tests.server.store.store_contract import (
    CREATED_AT,
    EPOCH,
    StoreBackend,
    StoreContract,
    appended,
)
from tests.support.redis_cluster import RedisCluster

pytestmark = pytest.mark.redis

_prefixes = itertools.count()


class ClusterBackend:
    persistent = True

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = f"c{next(_prefixes)}:"

    def make(self, **options: Any) -> RedisStore:
        return RedisStore(self.url, RedisOptions(prefix=self.prefix), **options)


class TestRedisClusterStore(StoreContract, SharedStoreContract):
    @pytest.fixture
    def store_backend(self, shared_cluster: RedisCluster) -> StoreBackend:
        return ClusterBackend(shared_cluster.url)

    @pytest.fixture
    def shared_backend(self, shared_cluster: RedisCluster) -> SharedBackend:
        return ClusterBackend(shared_cluster.url)


@pytest.fixture
async def cluster_store(shared_cluster: RedisCluster) -> AsyncIterator[RedisStore]:
    store = ClusterBackend(shared_cluster.url).make()
    await store.open()
    yield store
    await store.close()


async def _next(notices: AsyncIterator[Any], timeout: float = 10) -> Any:
    async with asyncio.timeout(timeout):
        return await anext(notices)


async def _until(notices: AsyncIterator[Any], wanted: Any, timeout: float = 10) -> list[Any]:
    """Items up to and including ``wanted`` (what came before, for the asserts)."""
    seen = []
    async with asyncio.timeout(timeout):
        while (item := await anext(notices)) != wanted:
            seen.append(item)
    return seen


def _ids_on(cluster: RedisCluster, store: RedisStore, port: int, count: int) -> list[str]:
    """``count`` transcript ids whose keys live on the node at ``port``."""
    found = []
    for i in itertools.count():
        tid = f"t{i}"
        if cluster.node_of(store._keys(tid)[0]).port == port:
            found.append(tid)
            if len(found) == count:
                return found
    raise AssertionError("unreachable")


def test_cluster_urls() -> None:
    store = RedisStore("redis+cluster://u:pw@h1:7000,h2:7001/?prefix=x:&socket_timeout=0.5")
    assert store.cluster and store.address.nodes == (("h1", 7000), ("h2", 7001))
    assert (store.address.username, store.address.password) == ("u", "pw")
    assert store.options.prefix == "x:" and store.options.socket_timeout == 0.5
    assert store.where == "redis cluster at h1:7000,h2:7001"
    assert store.channel_of("t1") == "x:{t1}:changes"  # the transcript's slot
    assert RedisStore("rediss+cluster://h:7000").address.tls
    for bad in (
        "redis+cluster://h:7000/1",  # a cluster has database 0 only
        "redis://h1:7000,h2:7001/0",  # several hosts: a cluster
        "redis+cluster://h:x",
        "redis+cluster://h:7000?ssl_ca_certs=/ca.pem",  # TLS options need rediss
    ):
        with pytest.raises(ValueError):
            RedisStore(bad)


async def test_a_notice_is_published_only_on_the_node_of_its_transcript(
    shared_cluster: RedisCluster, cluster_store: RedisStore
) -> None:
    tid = "only-here"
    owner = shared_cluster.node_of(cluster_store._keys(tid)[0])
    others = [n for n in shared_cluster.nodes if n is not owner]
    notices = cluster_store.notices()
    try:
        assert await _next(notices) is None
        assert cluster_store.watch([tid])
        assert await _next(notices) == Recheck(frozenset({tid}))
        channel = cluster_store.channel_of(tid).encode()
        with redis.Redis(port=owner.port) as client:
            assert channel in client.pubsub_shardchannels()
        for node in others:
            with redis.Redis(port=node.port) as client:
                assert channel not in client.pubsub_shardchannels()
        # Nothing goes to the one channel of a single Redis any more: a
        # listener on every node's classic channel hears nothing.
        listeners = [redis.Redis(port=n.port).pubsub() for n in shared_cluster.nodes]
        for pubsub in listeners:
            pubsub.subscribe(cluster_store.channel)
            assert pubsub.get_message(timeout=1)["type"] == "subscribe"
        await cluster_store.create(
            NewTranscript(tid, EPOCH, CREATED_AT, appended(1, 0, transcript_id=tid))
        )
        assert await _next(notices) == Notice(tid, EPOCH, 1)
        for pubsub in listeners:
            assert pubsub.get_message(timeout=0.2) is None
            pubsub.close()
        cluster_store.unwatch([tid])
        async with asyncio.timeout(5):
            while True:
                with redis.Redis(port=owner.port) as client:
                    if channel not in client.pubsub_shardchannels():
                        break
                await asyncio.sleep(0.02)  # polling Redis: no event for "unsubscribed"
    finally:
        await notices.aclose()  # type: ignore[attr-defined]


async def test_appends_of_many_transcripts_in_one_call_reach_every_node(
    shared_cluster: RedisCluster, cluster_store: RedisStore
) -> None:
    ids = [f"m{i}" for i in range(12)]
    nodes = {shared_cluster.node_of(cluster_store._keys(tid)[0]).port for tid in ids}
    assert len(nodes) == 3
    for tid in ids:
        await cluster_store.create(NewTranscript(tid, EPOCH, CREATED_AT))
    outcomes = await cluster_store.append_many(
        [(appended(1, 0, transcript_id=tid), None) for tid in ids]
    )
    assert not [o for o in outcomes if isinstance(o, Exception)]
    heads = await cluster_store.heads(ids)
    assert heads == {tid: Head(EPOCH, 1) for tid in ids}
    assert [info.transcript_id for info in await cluster_store.list()] == sorted(ids)


async def test_a_script_cache_lost_by_a_node_is_filled_again(
    shared_cluster: RedisCluster, cluster_store: RedisStore
) -> None:
    # What a restarted node (or a new one after a failover) looks like: no
    # scripts. EVALSHA answers NOSCRIPT; the store sends the script itself.
    await cluster_store.create(NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0)))
    node = shared_cluster.node_of(cluster_store._keys("t1")[0])
    with redis.Redis(port=node.port) as client:
        client.script_flush()
        assert await cluster_store.append(appended(2, 1)) == AppendResult(Receipt(2, 1, 1))
        client.script_flush()
        outcomes = await cluster_store.append_many([(appended(3, 2), None), (appended(4, 3), "k")])
        assert outcomes == [AppendResult(Receipt(3, 2, 1)), AppendResult(Receipt(4, 3, 1))]
    loaded = await cluster_store.load("t1")
    assert loaded is not None and loaded.revision == 4


async def test_a_killed_master_makes_only_its_transcripts_unavailable(
    redis_cluster: RedisCluster,
) -> None:
    url = redis_cluster.url + "?socket_timeout=0.5&socket_connect_timeout=0.5&retries=1"
    store = RedisStore(url)
    await store.open()
    index_node = redis_cluster.node_of(store._index)
    victim = next(n for n in redis_cluster.nodes if n is not index_node)
    doomed = _ids_on(redis_cluster, store, victim.port, 3)
    spared = [
        tid
        for tid in (f"s{i}" for i in range(40))
        if redis_cluster.node_of(store._keys(tid)[0]) is not victim
    ][:6]
    watcher = RedisStore(url)
    await watcher.open()
    notices = watcher.notices(reconnect_delay=0.02)
    try:
        assert await _next(notices) is None
        for tid in [*doomed, *spared]:
            await store.create(
                NewTranscript(tid, EPOCH, CREATED_AT, appended(1, 0, transcript_id=tid))
            )
        watcher.watch([*doomed, *spared])
        rechecked: set[str] = set()
        while rechecked != {*doomed, *spared}:
            item = await _next(notices)
            if isinstance(item, Recheck):
                rechecked |= item.transcript_ids

        victim.kill()  # SIGKILL; appendfsync always kept every acknowledged write
        for tid in doomed:
            with pytest.raises(StoreUnavailable, match=f"node 127.0.0.1:{victim.port}"):
                await store.append(appended(2, 1, transcript_id=tid))
            with pytest.raises(StoreUnavailable):
                await store.load(tid)
        # The other masters go on: appends, reads, creates, the list, the heads.
        for tid in spared:
            await store.append(appended(2, 1, transcript_id=tid))
            assert await _until(notices, Notice(tid, EPOCH, 2)) == []
            loaded = await store.load(tid)
            assert loaded is not None and loaded.revision == 2
        new = next(
            t for t in (f"n{i}" for i in range(40))
            if redis_cluster.node_of(store._keys(t)[0]) is not victim
        )  # fmt: skip
        await store.create(NewTranscript(new, EPOCH, CREATED_AT))
        heads = await store.heads([*doomed, *spared])
        assert set(heads) == set(spared)  # the victim's are left out, not guessed
        assert all(heads[tid] == Head(EPOCH, 2) for tid in spared)

        victim.start()  # same port, same AOF and nodes.conf
        redis_cluster.wait_ok()
        # Its transcripts are subscribed again: a Recheck says "look now".
        rechecked = set()
        while not set(doomed) <= rechecked:
            item = await _next(notices, timeout=20)
            if isinstance(item, Recheck):
                rechecked |= item.transcript_ids
        for tid in doomed:
            loaded = await store.load(tid)  # nothing acknowledged was lost
            assert loaded is not None and loaded.events == (appended(1, 0, transcript_id=tid),)
            await store.append(appended(2, 1, transcript_id=tid))
            assert await _until(notices, Notice(tid, EPOCH, 2)) == []
        assert await store.heads([*doomed, *spared]) == {
            tid: Head(EPOCH, 2) for tid in [*doomed, *spared]
        }
    finally:
        await notices.aclose()  # type: ignore[attr-defined]
        await watcher.close()
        await store.close()


async def test_unknown_and_deleted_transcripts(cluster_store: RedisStore) -> None:
    with pytest.raises(TranscriptNotFound):
        await cluster_store.events_after("nope", 0)
    await cluster_store.create(NewTranscript("d1", EPOCH, CREATED_AT))
    assert await cluster_store.delete("d1")
    assert await cluster_store.heads(["d1"]) == {"d1": None}
