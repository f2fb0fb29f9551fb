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

``open_backend`` opens the store and its Durable Streams part together
(``Backend``: Redis's part keeps them, SQLite's logs them, the memory store
has none); ``server.streams.open.stream_port`` makes the registry's port of
that part.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from server.store.base import DEFAULT_IDEMPOTENCY_RETENTION, DEFAULT_IDEMPOTENCY_TTL_S, Store
from server.store.memory import MemoryStore
from server.store.options import MemoryOptions, SQLiteOptions, parse_query
from server.store.sqlite import SQLiteStore
from server.store.sqlite.streams import SQLiteStreamLog

if TYPE_CHECKING:  # imported on use: the memory and SQLite stores need no Redis client
    from server.store.redis.streams import RedisStreams

__all__ = ["Backend", "backend_of", "open_backend", "open_store"]

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


@dataclass(frozen=True, slots=True)
class Backend:
    """A store and its Durable Streams part, opened together (``open_backend``;
    ``server.streams.open.stream_port`` makes the streams' port of it). At
    most one part is set: the memory store has none (its streams are the
    process's alone)."""

    store: Store
    #: The part of a store shared by replicas, which keeps the streams
    #: itself (Redis: ``RedisStreams``, built from the store's link; no I/O,
    #: usable before the store is opened).
    shared_streams: RedisStreams | None = None
    #: Opens the log a store of the process's own writes its streams to
    #: (SQLite: ``streams.sqlite3``; call once the store is open).
    streams_log: Callable[[], SQLiteStreamLog] | None = None


def open_backend(
    url: str,
    *,
    idempotency_retention: int = DEFAULT_IDEMPOTENCY_RETENTION,
    idempotency_ttl_s: float = DEFAULT_IDEMPOTENCY_TTL_S,
) -> Backend:
    """The store ``url`` names (``open_store``: nothing opened yet) with its
    streams part."""
    return backend_of(
        open_store(
            url, idempotency_retention=idempotency_retention, idempotency_ttl_s=idempotency_ttl_s
        )
    )


def backend_of(store: Store) -> Backend:
    """``store`` with its streams part (for a store made elsewhere: a test's)."""
    if isinstance(store, SQLiteStore):
        return Backend(store, streams_log=store.streams_log)
    if store.name != "redis":
        return Backend(store)
    from server.store.redis import RedisStore
    from server.store.redis.streams import RedisStreams

    assert isinstance(store, RedisStore)
    return Backend(store, shared_streams=RedisStreams(store.parts))
