"""Fixtures of the Redis tests: a private ``redis-server`` per module, or per
test for the tests that stop, kill or pause it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_binary
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
