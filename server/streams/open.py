"""Which streams' registry and log a store gets (as ``server.store.open``
picks a store): the only module that knows every backend of the streams.
"""

from __future__ import annotations

from server.store.base import Store
from server.store.redis import RedisStore
from server.store.sqlite import SQLiteStore
from server.store.sqlite.streams import SQLiteStreamLog
from server.streams.log import NoLog, StreamLog
from server.streams.memory import Limits, Registry
from server.streams.redis import RedisRegistry

__all__ = ["log_for_store", "registry_for_store"]


def log_for_store(store: Store) -> StreamLog:
    """The streams' log beside ``store`` (opened: it reads and writes its
    file from now on): a SQLite file in the data folder of the ``sqlite``
    store; ``NoLog`` otherwise (memory, Redis)."""
    if isinstance(store, SQLiteStore):
        return SQLiteStreamLog(
            store.path,
            synchronous=store.options.synchronous,
            busy_timeout_s=store.options.busy_timeout_s,
        )
    return NoLog()


def registry_for_store(store: Store, limits: Limits, *, resync_s: float = 1.0) -> Registry:
    """The streams' registry of ``store``: on Redis one that keeps the
    streams in Redis, shared by every replica (``resync_s``: its safety net
    for lost notices, ``server.streams.redis``); otherwise the process's own
    (its log attached at startup, ``log_for_store``)."""
    if isinstance(store, RedisStore):
        return RedisRegistry(store.parts, limits, resync_s=resync_s)
    return Registry(limits)
