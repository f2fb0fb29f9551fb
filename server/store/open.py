"""``open_store``: a ``Store`` from a URL such as ``tsync serve --store`` takes.

::

    memory                      MemoryStore
    sqlite:PATH                 SQLiteStore on the data folder PATH
    sqlite:///abs/path          the same, with an absolute path
    PATH                        a bare path: SQLiteStore too
    redis://... rediss://...    RedisStore (imported on use)
    redis+cluster://h:p,h:p     RedisStore on a Redis Cluster (rediss+cluster:// with TLS)

Each may end in ``?name=value&...``: the backend's options
(``server.store.options``), e.g. ``sqlite:./data?synchronous=full``. Unknown
options are refused.

The store's Durable Streams part is opened here too: ``shared_streams``
(Redis, which keeps them) or ``streams_log`` (SQLite, which logs them);
``server.streams.open`` gives the streams' registry the port each needs.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from server.store.base import DEFAULT_IDEMPOTENCY_RETENTION, DEFAULT_IDEMPOTENCY_TTL_S, Store
from server.store.memory import MemoryStore
from server.store.options import MemoryOptions, SQLiteOptions, parse_query
from server.store.sqlite import SQLiteStore
from server.store.sqlite.streams import SQLiteStreamLog

if TYPE_CHECKING:  # imported on use: the memory and SQLite stores need no Redis client
    from server.store.redis.streams import RedisStreams

__all__ = ["open_store", "shared_streams", "streams_log"]

# Two or more characters, so that a Windows drive ("C:\\data") stays a path.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


def open_store(
    url: str,
    *,
    idempotency_retention: int = DEFAULT_IDEMPOTENCY_RETENTION,
    idempotency_ttl_s: float = DEFAULT_IDEMPOTENCY_TTL_S,
) -> Store:
    """Build the store ``url`` names, with the options its query string sets.

    The store is not opened yet (constructors do no I/O, so this can be
    called early to check a URL): call ``await store.open()`` before using it.
    Raises ``ValueError``, one line, for an empty URL, an empty path, an
    unknown scheme or a bad option.
    """
    url = url.strip()
    if not url:
        raise ValueError("store URL is empty (expected memory, sqlite:PATH or redis://...)")
    match = _SCHEME.match(url)
    scheme = match.group(1).lower() if match else ""
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        # Imported on use: the memory and SQLite stores need no Redis client.
        from server.store.redis import RedisStore

        return RedisStore(
            url, idempotency_retention=idempotency_retention, idempotency_ttl_s=idempotency_ttl_s
        )
    location, _, query = url.partition("?")
    if location in ("memory", "memory:"):
        return MemoryStore(
            parse_query(MemoryOptions, query, url=url),
            idempotency_retention=idempotency_retention,
            idempotency_ttl_s=idempotency_ttl_s,
        )
    if scheme and scheme != "sqlite":
        raise ValueError(
            f"unknown store scheme {scheme!r} in {url!r} "
            "(expected memory, sqlite:PATH, a path, redis://, rediss:// or redis+cluster://)"
        )
    path = location
    if scheme == "sqlite":
        path = location[len("sqlite:") :]
        if path.startswith("//"):
            path = path[2:]
    if not path:
        raise ValueError(f"store URL {url!r} names no path (expected sqlite:PATH)")
    return SQLiteStore(
        path,
        parse_query(SQLiteOptions, query, url=url),
        idempotency_retention=idempotency_retention,
        idempotency_ttl_s=idempotency_ttl_s,
    )


def shared_streams(store: Store) -> RedisStreams | None:
    """The streams' part of a store shared by replicas, which keeps the
    streams itself (Redis: ``RedisStreams``, built from the store's link; no
    I/O, usable before the store is opened); ``None`` for the others."""
    if store.name != "redis":
        return None
    from server.store.redis import RedisStore
    from server.store.redis.streams import RedisStreams

    assert isinstance(store, RedisStore)
    return RedisStreams(store.parts)


def streams_log(store: Store) -> SQLiteStreamLog | None:
    """The log a store of the process's own writes its streams to, opened
    (call once the store is open): the SQLite store's ``streams.sqlite3``;
    ``None`` for the memory store (and a shared one: ``shared_streams``)."""
    if isinstance(store, SQLiteStore):
        return store.streams_log()
    return None
