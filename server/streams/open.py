"""The streams' registry of a store and its port (as ``server.store.open``
picks a store), without knowing the store's class: the store opens its own
streams part (``server.store.open``) and the registry is given
the port that part needs (``server.streams.port``):

- a part shared by replicas (Redis): ``server.streams.shared.SharedPort``,
  made with the registry (it does no I/O until ``start``);
- a log (the SQLite store's ``streams.sqlite3``): a ``LogPort``, attached at
  startup once the store is open (``log_for_store``);
- none (the memory store): a ``LogPort`` over ``NoLog``.
"""

from __future__ import annotations

from collections.abc import Callable

from server.store.base import Store
from server.store.open import shared_streams, streams_log
from server.streams.log import NoLog, StreamLog
from server.streams.registry import Limits, StreamRegistry
from server.streams.shared import SharedPort

__all__ = ["log_for_store", "registry_for_store"]


def log_for_store(store: Store) -> StreamLog:
    """The streams' log beside ``store`` (opened: it reads and writes its
    file from now on), for ``StreamRegistry.attach`` (which gives it a
    ``LogPort``): the store's own, or ``NoLog`` (on a shared store the
    registry keeps the port it was made with)."""
    log: StreamLog | None = streams_log(store)
    return log if log is not None else NoLog()


def registry_for_store(
    store: Store,
    limits: Limits,
    *,
    resync_s: float = 1.0,
    clock: Callable[[], float] | None = None,
) -> StreamRegistry:
    """The streams' registry of ``store``: on a store shared by replicas
    one whose port keeps the streams there (``resync_s``: its safety net for
    lost notices, ``server.streams.shared``); otherwise the process's own
    (its log attached at startup, ``log_for_store``)."""
    shared = shared_streams(store)
    if shared is not None:
        return StreamRegistry(limits, clock, port=SharedPort(shared, resync_s=resync_s))
    return StreamRegistry(limits, clock)
