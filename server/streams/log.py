"""``StreamLog``: where the ``Registry`` writes each change of its streams
before the change is made in memory and answered.

The registry stays the index every read is answered from; a log only makes
what it holds survive the process. Each method is one atomic write (all of
it or nothing) and returns once the write is as durable as the log promises;
when it cannot write it raises ``StreamError`` 503 and nothing was written,
so the registry leaves memory as it was and the client may retry.

- ``NoLog``: nothing is written (the ``memory`` store; on Redis the streams
  live in Redis itself: ``server.streams.redis.RedisRegistry``).
- ``server.streams.sqlite.SQLiteStreamLog``: a SQLite file in the data
  folder of the ``sqlite`` store.

``log_for_store`` picks the log of a store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from server.store.base import Store
from server.streams.model import Stream, Update

if TYPE_CHECKING:
    from server.streams.memory import Limits, Registry

__all__ = ["NoLog", "StreamLog", "log_for_store", "registry_for_store"]


class StreamLog(Protocol):
    """The persistence port of ``server.streams.memory.Registry``."""

    def load(self) -> list[Stream]:
        """Every stream written and not removed, with its own messages,
        producers, closure and soft deletion (``refs`` is the registry's)."""
        ...

    def create(self, stream: Stream) -> None:
        """A new stream with the messages it starts with (whatever was at its
        path before is replaced)."""
        ...

    def update(self, path: str, update: Update) -> None:
        """An accepted append or close: its message, its producer's state and
        the stream's new tail, closure and ``Stream-Seq``, together."""
        ...

    def soft_delete(self, path: str) -> None:
        """A stream deleted while forks still read through it."""
        ...

    def touch(self, path: str, last_access: float) -> None:
        """A read moved the stream's sliding TTL along."""
        ...

    def remove(self, paths: Sequence[str]) -> None:
        """Streams gone for good, with everything they held."""
        ...

    def close(self) -> None: ...


class NoLog:
    """Nothing is written: the streams live as long as the process."""

    def load(self) -> list[Stream]:
        return []

    def create(self, stream: Stream) -> None:
        pass

    def update(self, path: str, update: Update) -> None:
        pass

    def soft_delete(self, path: str) -> None:
        pass

    def touch(self, path: str, last_access: float) -> None:
        pass

    def remove(self, paths: Sequence[str]) -> None:
        pass

    def close(self) -> None:
        pass


def log_for_store(store: Store) -> StreamLog:
    """The streams' log beside ``store`` (opened: it reads and writes its
    file from now on): a SQLite file in the data folder of the ``sqlite``
    store; ``NoLog`` otherwise (memory, Redis)."""
    from server.store.sqlite import SQLiteStore
    from server.streams.sqlite import SQLiteStreamLog

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
    from server.store.redis import RedisStore
    from server.streams.memory import Registry
    from server.streams.redis import RedisRegistry

    if isinstance(store, RedisStore):
        return RedisRegistry(store, limits, resync_s=resync_s)
    return Registry(limits)
