"""Which streams' registry and log a store gets (as ``server.store.open``
picks a store), without knowing its class: each store opens its own
streams part.

- The SQLite store: ``streams_log()``, its ``streams.sqlite3``
  (``server.store.sqlite.streams``), attached to the registry at startup.
- The Redis store: ``parts``, the link its parts are built from; the
  registry is ``server.streams.redis.RedisRegistry`` over the store's
  streams part (``server.store.redis.streams``), imported on use as the
  store is (the memory and SQLite stores need no Redis client).
- The memory store: nothing (``NoLog``): the registry holds its streams.
"""

from __future__ import annotations

from server.store.base import Store
from server.streams.log import NoLog, StreamLog
from server.streams.registry import Limits, StreamRegistry

__all__ = ["log_for_store", "registry_for_store"]


def log_for_store(store: Store) -> StreamLog:
    """The streams' log beside ``store`` (opened: it reads and writes its
    file from now on): the store's own (``streams_log``), or ``NoLog``."""
    opened = getattr(store, "streams_log", None)
    if callable(opened):
        log: StreamLog = opened()
        return log
    return NoLog()


def registry_for_store(store: Store, limits: Limits, *, resync_s: float = 1.0) -> StreamRegistry:
    """The streams' registry of ``store``: on a shared store (Redis) one
    that keeps the streams there, shared by every replica (``resync_s``: its
    safety net for lost notices, ``server.streams.redis``); otherwise the
    process's own (its log attached at startup, ``log_for_store``)."""
    parts = getattr(store, "parts", None)
    if store.name == "redis" and parts is not None:
        from server.streams.redis import RedisRegistry

        return RedisRegistry(parts, limits, resync_s=resync_s)
    return StreamRegistry(limits)
