"""The streams' backend contract (``stream_backend_contract``) on the
memory store and on the SQLite store (its ``streams.sqlite3``); Redis and
Redis Cluster: ``tests/redis/test_stream_backends.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.store.sqlite.streams import SQLiteStreamLog
from server.streams.registry import Limits, StreamRegistry
from tests.durable_streams.stream_backend_contract import StreamBackend, StreamBackendContract


class MemoryBackend:
    durable = False
    shared = False

    async def open(self) -> StreamRegistry:
        return StreamRegistry(Limits())

    async def close_all(self) -> None:
        pass


class SQLiteBackend:
    durable = True
    shared = False

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.opened: list[StreamRegistry] = []

    async def open(self) -> StreamRegistry:
        # One registry writes the file at a time, as one server per data folder.
        for registry in self.opened:
            registry.detach()
        registry = StreamRegistry(Limits(), log=SQLiteStreamLog(self.folder))
        self.opened.append(registry)
        return registry

    async def close_all(self) -> None:
        for registry in self.opened:
            registry.detach()


class TestMemoryStreams(StreamBackendContract):
    @pytest.fixture
    def stream_backend(self) -> StreamBackend:
        return MemoryBackend()


class TestSQLiteStreams(StreamBackendContract):
    @pytest.fixture
    def stream_backend(self, tmp_path: Path) -> StreamBackend:
        return SQLiteBackend(tmp_path / "data")
