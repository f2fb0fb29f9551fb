"""``open_store``: a ``Store`` from a URL such as ``tsync serve --store`` takes.

::

    memory                      MemoryStore
    sqlite:PATH                 SQLiteStore on the data folder PATH
    sqlite:///abs/path          the same, with an absolute path
    PATH                        a bare path: SQLiteStore too
    redis://... rediss://...    RedisStore (server/store/redis.py, imported on use)
"""

from __future__ import annotations

import re
from typing import Any

from server.store.base import Store
from server.store.memory import MemoryStore
from server.store.sqlite import SQLiteStore

__all__ = ["open_store"]

# Two or more characters, so that a Windows drive ("C:\\data") stays a path.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")


def open_store(url: str, **options: Any) -> Store:
    """Build the store ``url`` names, passing ``options`` to its constructor.

    The store is not opened yet: call ``await store.open()`` before using it.
    Raises ``ValueError`` for an empty URL, an empty path or an unknown scheme.
    """
    url = url.strip()
    if not url:
        raise ValueError("store URL is empty (expected memory, sqlite:PATH or redis://...)")
    if url in ("memory", "memory:"):
        return MemoryStore(**options)
    match = _SCHEME.match(url)
    if match is None:
        return SQLiteStore(url, **options)
    scheme = match.group(1).lower()
    if scheme == "sqlite":
        path = url[len("sqlite:") :]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise ValueError(f"store URL {url!r} names no path (expected sqlite:PATH)")
        return SQLiteStore(path, **options)
    if scheme in ("redis", "rediss"):
        # Imported on use: the memory and SQLite stores need no Redis client.
        try:
            from server.store.redis import (  # type: ignore[import-not-found,unused-ignore]
                RedisStore,
            )
        except ModuleNotFoundError as err:
            if err.name != "server.store.redis":
                raise
            raise ValueError(f"store URL {url!r}: this build has no Redis store yet") from err

        store: Store = RedisStore(url, **options)
        return store
    raise ValueError(
        f"unknown store scheme {scheme!r} in {url!r} "
        "(expected memory, sqlite:PATH, a path, redis:// or rediss://)"
    )
