"""``open_store``: which store each URL names."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.store import MemoryStore, SQLiteOptions, SQLiteStore, open_store
from server.store.base import NewTranscript


def test_memory() -> None:
    store = open_store("memory", idempotency_retention=5)
    assert isinstance(store, MemoryStore)
    assert store.name == "memory"
    assert store.idempotency_retention == 5


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
    store = open_store(url + "?synchronous=full")
    assert isinstance(store, SQLiteStore)
    assert store.path == Path(path)
    assert store.options.synchronous == "full"


async def test_an_opened_store_from_a_url_works(tmp_path: Path) -> None:
    store = open_store(f"sqlite:{tmp_path}")
    await store.open()
    try:
        await store.create(NewTranscript("t1", "e1", 0))
        assert [i.transcript_id for i in await store.list()] == ["t1"]
    finally:
        await store.close()
    assert (tmp_path / "transcripts.sqlite3").exists()


@pytest.mark.parametrize("url", ["", "  ", "sqlite:", "sqlite://", "postgres://x/y", "mem:"])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        open_store(url)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("memory?synchronous=full", "unknown option 'synchronous'; memory options: none"),
        (
            "sqlite:./data?synchronus=full",
            "unknown option 'synchronus' (did you mean 'synchronous'?)",
        ),
        ("./data?max_batch=1&max_batch=2", "'max_batch' is given twice"),
        ("sqlite:./data?max_batch=0", "max_batch: expected `int` >= 1"),
        (
            "sqlite:./data?synchronous=sometimes",
            "synchronous: invalid enum value 'sometimes' (one of extra, full, normal, off)",
        ),
        ("sqlite:./data?idempotency_retention=5", "a server setting (TSYNC_IDEMPOTENCY_RETENTION)"),
        ("redis://h:6379/0?prefx=a:&retries=x", "unknown option 'prefx' (did you mean 'prefix'?)"),
        ("redis://h:6379/0?retries=x", "retries: expected `int`, got `str`"),
        ("redis://h:6379/0?ssl_cert_reqs=none", "ssl_* options need rediss://"),
    ],
)
def test_bad_options_are_one_line_that_names_them(url: str, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        open_store(url)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_url_sets_the_options_and_touches_nothing(tmp_path: Path) -> None:
    """The bug this guards against: ``sqlite:PATH?synchronous=full`` made a
    folder named ``PATH?synchronous=full``. And a URL can be checked early:
    building the store does no I/O."""
    store = open_store(f"sqlite:{tmp_path / 'data'}?synchronous=full&busy_timeout_s=0.5")
    assert isinstance(store, SQLiteStore)
    assert store.path == tmp_path / "data"
    assert store.options.synchronous == "full" and store.options.busy_timeout_s == 0.5
    assert list(tmp_path.iterdir()) == []


def test_options_made_in_code_are_checked_too() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        SQLiteStore("x", SQLiteOptions(max_batch=0))


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://example:6380?ssl_cert_reqs=none"]
)
def test_redis_goes_to_the_redis_store(url: str) -> None:
    store = open_store(url)
    assert store.name == "redis"


async def test_a_server_takes_its_store_options_from_the_url(tmp_path: Path) -> None:
    """What ``tsync serve --store 'sqlite:PATH?synchronous=full'`` does."""
    from server.config import ServerConfig
    from tests.support.servers import running_server

    url = f"sqlite:{tmp_path / 'data'}?synchronous=full&max_batch=8"
    async with running_server(ServerConfig(store=url, graceful_shutdown_s=2.0)) as srv:
        store = srv.hub.store
        assert isinstance(store, SQLiteStore)
        assert store.path == tmp_path / "data"
        assert (store.options.synchronous, store.options.max_batch) == ("full", 8)
        assert store._writer is not None
        assert store._writer.conn.execute("PRAGMA synchronous").fetchone() == (2,)
        await srv.hub.writes.create("t")
    assert [p.name for p in tmp_path.iterdir()] == ["data"]  # noqa: ASYNC240 - a test
