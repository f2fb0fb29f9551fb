"""The streams' backend contract (``stream_backend_contract``) on the
memory store and on the SQLite store (its ``streams.sqlite3``); Redis and
Redis Cluster: ``tests/redis/test_stream_backends.py``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from server.store.sqlite.streams import STREAMS_FILE, SQLiteStreamLog
from server.streams.model import StreamError
from server.streams.registry import Limits, StreamRegistry
from tests.durable_streams.stream_backend_contract import (
    StreamBackend,
    StreamBackendContract,
    append,
    create,
    text,
)
from tests.support.waiting import until


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


# --- the SQLite store's streams are read on demand ----------------------------------------


async def _filled(folder: Path, count: int, body: bytes) -> StreamRegistry:
    registry = StreamRegistry(Limits(), log=SQLiteStreamLog(folder))
    for index in range(count):
        await create(registry, f"/s{index}", body)
    await create(registry, "/fork", forked_from="/s0")
    await append(registry, "/fork", b"!", producer=("w", 0, 0))
    registry.detach()
    return registry


async def test_a_restarted_registry_reads_no_stream_before_one_is_asked_for(
    tmp_path: Path,
) -> None:
    before = await _filled(tmp_path, 200, b"x" * 10)
    again = StreamRegistry(Limits(), log=SQLiteStreamLog(tmp_path))
    try:
        # Counted, not read: the limits hold as before the restart.
        assert len(again) == len(before) == 201
        assert again.size == before.size
        assert again.loads == 0
        assert text(again, await again.live("/s7")) == b"x" * 10
        assert again.loads == 1
        # A fork brings its source along; what it held counts as before.
        fork = await again.live("/fork")
        assert text(again, fork) == b"x" * 10 + b"!"
        assert again.loads == 3
        assert (await again.live("/s0")).refs == 1
        await create(again, "/more", b"y" * 100)
        assert len(again) == 202
    finally:
        again.detach()
    # The limits count the streams not held too.
    full = StreamRegistry(Limits(max_streams=202), log=SQLiteStreamLog(tmp_path))
    try:
        with pytest.raises(StreamError) as refused:
            await create(full, "/one-more")
        assert refused.value.status == 429 and full.loads <= 1
    finally:
        full.detach()


async def test_copies_of_the_streams_stay_within_max_live_bytes(tmp_path: Path) -> None:
    before = await _filled(tmp_path, 40, b"z" * 1000)
    limits = Limits(max_live_bytes=5_000)
    again = StreamRegistry(limits, log=SQLiteStreamLog(tmp_path))
    try:
        for index in range(40):
            stream = await again.live(f"/s{index}")
            assert text(again, stream) == b"z" * 1000
            # Let go once the request's step is over, not under it.
            await until(lambda: again._copy_bytes <= limits.max_live_bytes)
        assert again.evicted >= 35
        assert len(again) == 41 and again.size == before.size
        # A copy let go is read again, whole, and changes go on from it.
        result = await append(again, "/s0", b"more")
        assert result.message is not None
        assert text(again, await again.live("/s0")) == b"z" * 1000 + b"more"
    finally:
        again.detach()
    reopened = StreamRegistry(Limits(), log=SQLiteStreamLog(tmp_path))
    try:
        assert text(reopened, await reopened.live("/s0")) == b"z" * 1000 + b"more"
        assert reopened.size == again.size
    finally:
        reopened.detach()


async def test_a_file_of_version_1_counts_what_each_stream_holds_once_migrated(
    tmp_path: Path,
) -> None:
    """Version 2 adds ``held``: filled from the messages (JSON values
    counted as ``StreamMessage.held`` counts them) and producers."""
    registry = StreamRegistry(Limits(), log=SQLiteStreamLog(tmp_path))
    await create(registry, "/j", b'[{"a": 1}, 2, "three"]', content_type="application/json")
    await create(registry, "/b", b"bytes")
    await append(registry, "/b", b" more", producer=("writer", 0, 0))
    held = {path: (await registry.live(path)).held for path in ("/j", "/b")}
    registry.detach()
    with sqlite3.connect(tmp_path / STREAMS_FILE) as conn:  # back to version 1
        conn.execute("DROP INDEX streams_by_source")
        conn.execute("ALTER TABLE streams DROP COLUMN held")
        conn.execute("PRAGMA user_version=1")
    conn.close()
    migrated = StreamRegistry(Limits(), log=SQLiteStreamLog(tmp_path))
    try:
        assert migrated.size == sum(held.values())
        assert {path: (await migrated.live(path)).held for path in held} == held
    finally:
        migrated.detach()


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_each_port_is_the_store_verbs_alone() -> None:
    """Issue 41: the port is small (the lifecycle, ``load``, ``forks``,
    ``write``, ``remove``, ``sweep``) and each port offers it and nothing the
    registry could call besides (its policy stays in the registry)."""
    from server.streams.port import LogPort, StreamPort
    from server.streams.shared import SharedPort

    verbs = {"bind", "start", "stop", "close", "load", "forks", "write", "remove", "sweep"}
    assert _public(StreamPort) - {"shared"} == verbs
    assert verbs <= _public(LogPort)
    assert verbs <= _public(SharedPort)
    # What else each shows is its own state, not a verb the registry uses.
    assert _public(LogPort) - verbs == {"shared", "log", "copies"}
    assert not {"make_room", "before_wait", "current", "sync", "load_one"} & _public(SharedPort)


async def test_a_sqlite_port_opens_its_log_when_bound(tmp_path: Path) -> None:
    """``open_backend`` opens nothing: the log is opened when a registry binds
    the port, counted then, and its streams read on demand."""
    from server.store.open import open_backend
    from server.streams.open import stream_port

    first = StreamRegistry(Limits(), log=SQLiteStreamLog(tmp_path))
    await create(first, "/a", b"hello")
    first.detach()
    port = stream_port(open_backend(f"sqlite:{tmp_path}"))
    registry = StreamRegistry(Limits())
    assert len(registry) == 0
    registry.attach(port)
    try:
        assert len(registry) == 1 and registry.streams == {}
        assert text(registry, await registry.live("/a")) == b"hello"
    finally:
        registry.detach()
