"""``open_store``: which store each URL names."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from server.store import MemoryStore, SQLiteStore, open_store


def test_memory() -> None:
    store = open_store("memory", idempotency_retention=5)
    assert isinstance(store, MemoryStore)
    assert store.name == "memory"


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:data", "data"),
        ("sqlite:./var/tsync", "var/tsync"),
        ("sqlite:///abs/data", "/abs/data"),
        ("sqlite:/abs/data", "/abs/data"),
        ("data", "data"),
        ("/srv/tsync", "/srv/tsync"),
        ("C:\\tsync", "C:\\tsync"),
    ],
)
def test_sqlite_paths(url: str, path: str) -> None:
    store = open_store(url, synchronous="full")
    assert isinstance(store, SQLiteStore)
    assert store.path == Path(path)


async def test_an_opened_store_from_a_url_works(tmp_path: Path) -> None:
    store = open_store(f"sqlite:{tmp_path}")
    await store.open()
    try:
        await store.create("t1", "e1", 0)
        assert [i.transcript_id for i in await store.list()] == ["t1"]
    finally:
        await store.close()
    assert (tmp_path / "transcripts.sqlite3").exists()


@pytest.mark.parametrize("url", ["", "  ", "sqlite:", "sqlite://", "postgres://x/y", "mem:"])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        open_store(url)


def test_unknown_option_is_refused() -> None:
    with pytest.raises(TypeError):
        open_store("memory", synchronous="full")


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/0", "rediss://example:6380"])
def test_redis_goes_to_the_redis_store(url: str) -> None:
    if importlib.util.find_spec("server.store.redis") is not None:
        store = open_store(url)
        assert store.name == "redis"
    else:
        with pytest.raises(ValueError, match="no Redis store"):
            open_store(url)
