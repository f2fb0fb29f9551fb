"""The streams' backend contract (``tests/durable_streams/stream_backend_contract``)
on the Redis store, on one Redis and on a Redis Cluster: each registry its
own store (a replica), all on one key prefix."""

from __future__ import annotations

import uuid

import pytest

from server.store.open import backend_of
from server.store.redis import RedisStore
from server.streams.open import stream_port
from server.streams.registry import Limits, StreamRegistry
from tests.durable_streams.stream_backend_contract import StreamBackend, StreamBackendContract
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis


class RedisBackend:
    durable = True
    shared = True

    def __init__(self, url: str) -> None:
        self.url = f"{url}?prefix=c{uuid.uuid4().hex[:8]}:"
        self.opened: list[tuple[RedisStore, StreamRegistry]] = []

    async def open(self) -> StreamRegistry:
        store = RedisStore(self.url)
        await store.open()
        registry = StreamRegistry(Limits(), port=stream_port(backend_of(store), resync_s=0.2))
        await registry.start()
        self.opened.append((store, registry))
        return registry

    async def close_all(self) -> None:
        for store, registry in self.opened:
            await registry.stop()
            await store.close()


class TestRedisStreams(StreamBackendContract):
    @pytest.fixture
    def stream_backend(self, shared_redis: RedisServer) -> StreamBackend:
        return RedisBackend(shared_redis.url)


class TestRedisClusterStreams(StreamBackendContract):
    @pytest.fixture
    def stream_backend(self, shared_cluster: RedisCluster) -> StreamBackend:
        return RedisBackend(shared_cluster.url)
