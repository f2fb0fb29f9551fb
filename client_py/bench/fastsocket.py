"""A WebSocket client connection for the fast subscribers (``--fast``):
websockets' sans-I/O client (``websockets.client.ClientProtocol``) driven
straight from an asyncio ``Protocol``.

``websockets.asyncio.client`` hands each message to a reader through a
queue and a future (``await ws.recv()``): tens of microseconds of generator
CPU per delivery, more than the server spends on it. Here the library still
does the handshake, the framing, pings and the closing handshake; each
complete text message goes to ``on_message`` from ``data_received``, with no
task switch. Reading can be paused (a subscriber that stops reading).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidHandshake
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

__all__ = ["FastSocket"]


class FastSocket(asyncio.Protocol):
    """One connection; ``connect`` returns once the handshake succeeded."""

    def __init__(self, on_message: Callable[[bytes], None], subprotocol: str | None) -> None:
        self.on_message = on_message
        self.subprotocol = subprotocol
        self.protocol: ClientProtocol | None = None
        self.transport: asyncio.Transport | None = None
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: Done when the connection is gone (with the close code, if any).
        self.closed: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._fragments: list[bytes] = []

    @classmethod
    async def connect(
        cls,
        url: str,
        on_message: Callable[[bytes], None],
        *,
        subprotocol: str | None,
        sock: socket.socket | None = None,
        timeout: float = 30,
    ) -> FastSocket:
        uri = parse_uri(url)
        loop = asyncio.get_running_loop()
        conn = cls(on_message, subprotocol)
        offered = [Subprotocol(subprotocol)] if subprotocol else None  # None: offer none
        conn.protocol = ClientProtocol(uri, subprotocols=offered, max_size=None)
        async with asyncio.timeout(timeout):
            if sock is not None:
                await loop.create_connection(lambda: conn, sock=sock)
            else:
                await loop.create_connection(lambda: conn, uri.host, uri.port)
            await conn.opened
        return conn

    # --- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        assert self.protocol is not None
        self.protocol.send_request(self.protocol.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        protocol = self.protocol
        assert protocol is not None
        protocol.receive_data(data)
        for event in protocol.events_received():
            if isinstance(event, Frame):
                self._frame(event)
            elif isinstance(event, Response) and not self.opened.done():
                if protocol.handshake_exc is not None:
                    self.opened.set_exception(protocol.handshake_exc)
                else:
                    self.opened.set_result(None)
        self._flush()
        if protocol.state is State.CLOSED and self.transport is not None:
            self.transport.close()

    def _frame(self, frame: Frame) -> None:
        if frame.opcode is Opcode.TEXT or frame.opcode is Opcode.BINARY:
            if frame.fin:
                self.on_message(bytes(frame.data))
            else:
                self._fragments = [bytes(frame.data)]
        elif frame.opcode is Opcode.CONT:
            self._fragments.append(bytes(frame.data))
            if frame.fin:
                message, self._fragments = b"".join(self._fragments), []
                self.on_message(message)

    def eof_received(self) -> bool | None:
        assert self.protocol is not None
        self.protocol.receive_eof()
        self._flush()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(exc or InvalidHandshake("connection closed"))
        if not self.closed.done():
            self.closed.set_result(self.protocol.close_code if self.protocol else None)

    # --- what a subscriber does -----------------------------------------------------

    def _flush(self) -> None:
        assert self.protocol is not None and self.transport is not None
        for data in self.protocol.data_to_send():
            if data:
                self.transport.write(data)
            elif not self.transport.is_closing():
                self.transport.write_eof()

    def send(self, data: bytes) -> None:
        """Send one text message (the bytes of its UTF-8 text)."""
        assert self.protocol is not None
        if self.protocol.state is State.OPEN:
            self.protocol.send_text(data)
            self._flush()

    def pause_reading(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    async def close(self, timeout: float = 2.0) -> None:
        """The closing handshake (1000), then the socket; bounded in time."""
        assert self.protocol is not None and self.transport is not None
        if self.protocol.state is State.OPEN:
            self.protocol.send_close(1000)
            self._flush()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self.closed)
        except TimeoutError:
            self.transport.abort()
