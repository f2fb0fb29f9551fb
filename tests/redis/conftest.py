"""Fixtures of the Redis tests: a private ``redis-server`` (or a three-master
Redis Cluster) per module, or per test for the tests that stop, kill or pause
it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_binary
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer


@pytest.fixture(scope="module")
def shared_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One Redis for a module; tests keep apart by key prefix."""
    binary = require_binary("redis-server")
    with RedisServer(binary, tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test alone (it may be killed, restarted or paused)."""
    binary = require_binary("redis-server")
    with RedisServer(binary, tmp_path / "redis") as server:
        yield server


def _cluster(folder: Path) -> RedisCluster:
    return RedisCluster(folder, require_binary("redis-server"), require_binary("redis-cli"))


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """One three-master Redis Cluster for a module; tests keep apart by key prefix."""
    with _cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    """A Redis Cluster of this test alone (its nodes may be killed and restarted)."""
    with _cluster(tmp_path / "cluster") as cluster:
        yield cluster
