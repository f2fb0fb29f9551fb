"""A WebSocket client on a plain socket, for the frames a library would not
send: fragments of a message that never ends, text that is not UTF-8, a client
that stops reading (a small receive buffer). ``websockets``' sans-I/O client
does the handshake and the framing; nothing here is hand-rolled beyond the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any

import msgspec
from websockets.client import ClientProtocol
from websockets.frames import Frame
from websockets.http11 import Response
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from protocol import wire


class RawSocket:
    """One connection. ``frames`` collects what the server sent (as
    ``websockets`` frames, fragments included) while ``read()`` runs."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.proto: ClientProtocol | None = None
        self.frames: list[Frame] = []

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        receive_buffer: int | None = None,
        subprotocol: str = wire.SUBPROTOCOL_JSON,
    ) -> RawSocket:
        """Connect and finish the handshake. With ``receive_buffer`` the
        socket's kernel buffer is that small and the stream's own buffer too,
        so a client that stops reading backs the server up quickly."""
        uri = parse_uri(url)
        sock = socket.socket()
        if receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (uri.host, uri.port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=receive_buffer or (1 << 16))
        conn = cls(reader, writer)
        proto = ClientProtocol(uri, subprotocols=[Subprotocol(subprotocol)])
        proto.send_request(proto.connect())
        conn.proto = proto
        conn.flush()
        async with asyncio.timeout(5):
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    raise ConnectionError("closed during the handshake")
                proto.receive_data(data)
                events = proto.events_received()
                if any(isinstance(e, Response) for e in events):
                    conn.frames.extend(e for e in events if isinstance(e, Frame))
                    return conn

    def flush(self) -> None:
        assert self.proto is not None
        for data in self.proto.data_to_send():
            if data:
                self.writer.write(data)

    def send_text(self, data: bytes, *, fin: bool = True) -> None:
        """Send a text frame (its bytes are not checked: they may be bad UTF-8),
        the first of a fragmented message unless ``fin``."""
        assert self.proto is not None
        self.proto.send_text(data, fin=fin)
        self.flush()

    def send_continuation(self, data: bytes, *, fin: bool = False) -> None:
        """Send the next fragment of the message begun with ``fin=False``."""
        assert self.proto is not None
        self.proto.send_continuation(data, fin=fin)
        self.flush()

    def send_binary(self, data: bytes) -> None:
        assert self.proto is not None
        self.proto.send_binary(data)
        self.flush()

    def send_op(self, **op: Any) -> None:
        """Send one op as JSON (as MessagePack on a connection that chose it)."""
        if self.proto is not None and self.proto.subprotocol == wire.SUBPROTOCOL_MSGPACK:
            self.send_binary(msgspec.msgpack.encode(op))
        else:
            self.send_text(msgspec.json.encode(op))

    async def drain(self) -> None:
        await self.writer.drain()

    async def read(
        self, timeout: float = 5.0, until: Callable[[list[Frame]], bool] | None = None
    ) -> list[Frame]:
        """Read what arrives within ``timeout``, until the server closes or
        ``until(frames)`` holds."""
        assert self.proto is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while until is None or not until(self.frames):
                    try:
                        data = await self.reader.read(1 << 16)
                    except ConnectionResetError:
                        # The server closed with data of ours unread: the
                        # kernel resets, and may drop what it sent last.
                        data = b""
                    if not data:
                        self.proto.receive_eof()
                        break
                    self.proto.receive_data(data)
                    self.frames.extend(
                        e for e in self.proto.events_received() if isinstance(e, Frame)
                    )
                    if self.proto.close_rcvd is not None:
                        break
        return self.frames

    async def close_code(self, timeout: float = 5.0) -> int | None:
        """Read until the server closes; its close code (None if it did not
        send one, or did not close within ``timeout``)."""
        await self.read(timeout)
        assert self.proto is not None
        return self.proto.close_rcvd.code if self.proto.close_rcvd is not None else None

    def abort(self) -> None:
        self.writer.transport.abort()
