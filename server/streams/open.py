"""``stream_port``: the ``StreamPort`` of a store's streams part, as
``server.store.open.open_backend`` opened them together
(``server.streams.port``):

- a part shared by replicas (Redis): ``server.streams.shared.SharedPort``
  (imported on use: the other stores need no Redis client);
- a log (the SQLite store's ``streams.sqlite3``): a ``LogPort`` that opens
  it when the registry binds it (at startup, once the store is open);
- none (the memory store): a ``LogPort`` over ``NoLog``.
"""

from __future__ import annotations

from server.store.open import Backend
from server.streams.port import LogPort, StreamPort

__all__ = ["stream_port"]


def stream_port(backend: Backend, *, resync_s: float = 1.0) -> StreamPort:
    """The port of ``backend``'s streams part, for ``StreamRegistry.attach``
    (``resync_s``: a shared part's safety net for lost notices,
    ``server.streams.shared``). No I/O until the registry binds it."""
    if backend.shared_streams is not None:
        from server.streams.shared import SharedPort

        return SharedPort(backend.shared_streams, resync_s=resync_s)
    return LogPort(backend.streams_log)
