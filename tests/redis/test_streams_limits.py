"""A replica's copies of the Redis streams stay within its own limits
(``max_streams``, ``max_stream_bytes``) whatever made them: a read of
streams another replica wrote drops the least recently used idle copies."""

from __future__ import annotations

import uuid

import pytest

from server.store.open import backend_of
from server.store.redis import RedisStore
from server.streams.fanout import Follower
from server.streams.open import stream_port
from server.streams.registry import SWEEP_EVERY_S, Limits, StreamRegistry
from server.streams.shared import SharedPort
from tests.support.redis_server import RedisServer
from tests.support.waiting import until

pytestmark = pytest.mark.redis

BLOB = b"x" * 1000


async def _create(registry: StreamRegistry, path: str, body: bytes) -> None:
    await registry.create(
        path, content_type="application/octet-stream", ttl_s=None, expires_at=None,
        expires_at_ts=None, body=body, closed=False, forked_from=None, fork_offset=None,
        fork_sub_offset=0,
    )  # fmt: skip


async def test_reads_keep_a_replica_within_its_limits(shared_redis: RedisServer) -> None:
    url = f"{shared_redis.url}?prefix=l{uuid.uuid4().hex[:8]}:"
    stores = [RedisStore(url), RedisStore(url)]
    for store in stores:
        await store.open()
    limits = Limits(max_streams=5, max_bytes=6 * len(BLOB))
    one, two = (StreamRegistry(limits, port=stream_port(backend_of(store))) for store in stores)
    try:
        for index in range(5):
            await _create(one, f"/a{index}", BLOB)
            await _create(two, f"/b{index}", BLOB)
        # One reads all ten, each answered in full, holding at most five
        # (it held ten: every read kept its copy).
        for index in range(5):
            for path in (f"/b{index}", f"/a{index}"):
                stream = await one.live(path)
                assert b"".join(m.data for m in one.read(stream, None)) == BLOB
                assert len(one) <= 5 and one.size <= limits.max_bytes
        assert one.evicted >= 5
        # A stream it dropped is read again from Redis, whole.
        stream = await one.live("/b0")
        assert b"".join(m.data for m in one.read(stream, None)) == BLOB
        # Room is made for a create too: the idle copies give way.
        await _create(one, "/a5", BLOB)
        assert len(one) <= 5 and one.size <= limits.max_bytes
        # A copy a reader waits on is kept: only idle ones are dropped.
        stream = await one.live("/b1")
        reader = Follower(None, None, lambda s, m: b"", lambda s, o, c: b"", stream.tail)
        one.fanout.follow("/b1", reader)
        for index in range(5):
            await one.live(f"/a{index}")
        assert "/b1" in one.streams
    finally:
        for store in stores:
            await store.close()


async def test_copies_past_max_live_bytes_are_let_go_and_read_again(
    shared_redis: RedisServer,
) -> None:
    """As on a durable log, a replica's copies past ``max_live_bytes`` are
    let go, least recently used first (Redis keeps them), except those a
    reader follows; a later request reads one again from Redis, whole, and
    the port's marks of the copies let go are swept."""
    url = f"{shared_redis.url}?prefix=i{uuid.uuid4().hex[:8]}:"
    store = RedisStore(url)
    await store.open()
    now = [1_000_000.0]
    limits = Limits(max_live_bytes=int(2.5 * len(BLOB)))
    registry = StreamRegistry(limits, lambda: now[0], port=stream_port(backend_of(store)))
    port = registry.port
    assert isinstance(port, SharedPort)
    try:
        await _create(registry, "/followed", BLOB)
        followed = await registry.live("/followed")
        reader = Follower(None, None, lambda s, m: b"", lambda s, o, c: b"", followed.tail)
        registry.fanout.follow("/followed", reader)
        for index in range(4):
            now[0] += 1
            await _create(registry, f"/idle{index}", BLOB)
        await until(lambda: registry.size <= limits.max_live_bytes)
        assert "/followed" in registry.streams
        assert "/idle3" in registry.streams  # the most recent
        assert "/idle0" not in registry.streams and registry.evicted >= 2
        reads = port.reads
        again = await registry.live("/idle0")
        assert port.reads == reads + 1
        assert b"".join(m.data for m in registry.read(again, None)) == BLOB
        assert "/idle0" in registry.streams
        await until(lambda: registry.size <= limits.max_live_bytes)
        assert not set(port._synced) <= set(registry.streams)  # marks of copies let go
        now[0] += SWEEP_EVERY_S + 1
        await registry.get("/other")  # a request sweeps
        assert set(port._synced) <= set(registry.streams)
    finally:
        await store.close()
