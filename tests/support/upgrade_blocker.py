"""A TCP relay on 127.0.0.1 that lets no WebSocket through, for tests.

``UpgradeBlocker(upstream_port)`` reads the head of the first request of each
connection: one that asks for ``Upgrade: websocket`` is answered ``403`` and
closed (what a proxy that drops WebSockets does); anything else is relayed to
the server byte for byte, both ways, until either side closes. Browsers open a
WebSocket on a connection of its own (never a kept-alive HTTP one), so reading
the first head of a connection is enough. ``proxy.blocking = False`` lets
WebSockets through from then on (the network was fixed).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Final

_UPGRADE: Final = re.compile(rb"^upgrade:[ \t]*websocket[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)
#: A request head is far smaller; past this the relay gives up on the connection.
MAX_HEAD: Final = 64 * 1024
_REFUSAL: Final = (
    b"HTTP/1.1 403 Forbidden\r\n"
    b"Content-Type: text/plain\r\n"
    b"Content-Length: 28\r\n"
    b"Connection: close\r\n\r\n"
    b"WebSocket upgrades blocked.\n"
)


class UpgradeBlocker:
    """``async with UpgradeBlocker(port) as proxy``: open pages at ``proxy.url``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.blocking = True
        self.port = 0
        self.refused = 0  #: WebSocket handshakes answered 403
        self.relayed = 0  #: connections relayed to the server
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> UpgradeBlocker:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task
        await self._server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._handle(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = await reader.read(4096)
                if not chunk or len(head) > MAX_HEAD:
                    return
                head += chunk
            if self.blocking and _UPGRADE.search(head.split(b"\r\n\r\n", 1)[0]):
                self.refused += 1
                writer.write(_REFUSAL)
                await writer.drain()
                return
            self.relayed += 1
            up_reader, upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            upstream.write(head)
            await asyncio.gather(_pipe(reader, upstream), _pipe(up_reader, writer))
        except OSError:
            pass
        finally:
            for w in (writer, upstream):
                if w is not None:
                    w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()
