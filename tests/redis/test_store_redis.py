"""``RedisStore`` against the store contract, and what only Redis does:
a trimmed stream, retried scripts, an unreachable server, URL options."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from server.store import Store
from server.store.redis import RedisStore
from tests.server.store_contract import StoreBackend, StoreContract
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis

_prefixes = itertools.count()


class RedisBackend:
    persistent = True

    def __init__(self, url: str) -> None:
        # A fresh key prefix per test: one Redis serves the whole module.
        self.url = url
        self.prefix = f"t{next(_prefixes)}:"

    def make(self, **options: Any) -> Store:
        return RedisStore(self.url, prefix=self.prefix, **options)


class TestRedisStore(StoreContract):
    @pytest.fixture
    def store_backend(self, shared_redis: RedisServer) -> StoreBackend:
        return RedisBackend(shared_redis.url)
