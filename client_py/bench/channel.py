"""A ``multiprocessing`` pipe end that an asyncio loop can await."""

from __future__ import annotations

import asyncio
from multiprocessing.connection import Connection
from typing import Any


class Channel:
    """Messages are small tuples ``(kind, payload)``; ``recv`` never blocks the loop."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.conn.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            message = self.conn.recv()
        except (EOFError, OSError):
            message = ("eof", None)
            assert self._loop is not None
            self._loop.remove_reader(self.conn.fileno())
        self._inbox.put_nowait(message)

    async def recv(self) -> tuple[str, Any]:
        kind, payload = await self._inbox.get()
        return kind, payload

    def send(self, kind: str, payload: Any = None) -> None:
        self.conn.send((kind, payload))

    def close(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.conn.fileno())
        self.conn.close()
