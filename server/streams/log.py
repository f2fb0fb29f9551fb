"""``StreamLog``: where the ``StreamRegistry`` writes each change of its streams
before the change is made in memory and answered.

The registry stays the index every read is answered from; a log only makes
what it holds survive the process. Each method is one atomic write (all of
it or nothing) and returns once the write is as durable as the log promises;
when it cannot write it raises ``StreamError`` 503 and nothing was written,
so the registry leaves memory as it was and the client may retry.

- ``NoLog``: nothing is written (the ``memory`` store; on Redis the streams
  live in Redis itself: ``server.streams.shared.SharedPort``).
- ``server.store.sqlite.streams.SQLiteStreamLog``: a SQLite file in the data
  folder of the ``sqlite`` store.

``server.store.open.open_backend`` opens a store with its log (opened when
the registry binds it); the registry writes to it through a
``server.streams.port.LogPort``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from server.streams.model import Stream, StreamMessage, Update

__all__ = ["NoLog", "StreamLog"]


class StreamLog(Protocol):
    """What a store of the process's own writes its streams to (the registry
    reaches it through ``server.streams.port.LogPort``).

    A ``durable`` log holds every stream; the registry then holds copies of
    the streams it is asked about, each read with ``load_one`` on demand and
    let go again past ``max_live_bytes``, so that a server with 100,000
    streams starts as fast as one with none. A log that is not durable
    (``NoLog``) holds nothing: every stream is the registry's alone."""

    #: Whether the log holds the streams (the registry loads them on demand).
    durable: bool

    def load_one(self, path: str) -> Stream | None:
        """The stream at ``path`` with its own messages, producers, closure,
        soft deletion and ``refs`` (the forks that read through it), or
        ``None``."""
        ...

    def totals(self) -> tuple[int, int]:
        """How many streams the log holds, and what they hold (the sum of
        ``Stream.held``), without reading them."""
        ...

    def expired_paths(self, now: float) -> list[str]:
        """The streams whose TTL or ``Expires-At`` passed by ``now``."""
        ...

    def fork_paths(self, path: str) -> list[str]:
        """The forks that read through the stream at ``path`` directly."""
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

    def detach(self, path: str, inherited: Sequence[StreamMessage]) -> None:
        """A fork that now holds ``inherited`` (what it read through its
        sources, offsets kept) itself, and reads through no source."""
        ...

    def remove(self, paths: Sequence[str]) -> None:
        """Streams gone for good, with everything they held."""
        ...

    def close(self) -> None: ...


class NoLog:
    """Nothing is written: the streams live as long as the process."""

    durable = False

    def load_one(self, path: str) -> Stream | None:
        return None

    def totals(self) -> tuple[int, int]:
        return 0, 0

    def expired_paths(self, now: float) -> list[str]:
        return []

    def fork_paths(self, path: str) -> list[str]:
        return []

    def create(self, stream: Stream) -> None:
        pass

    def update(self, path: str, update: Update) -> None:
        pass

    def soft_delete(self, path: str) -> None:
        pass

    def touch(self, path: str, last_access: float) -> None:
        pass

    def detach(self, path: str, inherited: Sequence[StreamMessage]) -> None:
        pass

    def remove(self, paths: Sequence[str]) -> None:
        pass

    def close(self) -> None:
        pass
