"""A raw protocol test client: sends ops, receives frames, checks ``seq``."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, TypeVar

import msgspec
import websockets
from websockets.asyncio.client import ClientConnection

from protocol import wire
from protocol.wire import ServerFrame, accept_transcript_update, split_frames

F = TypeVar("F")


class RawClient:
    """One WebSocket connection speaking JSON (or MessagePack: ``binary``);
    every received frame is validated with ``accept_transcript_update`` and
    its ``seq`` checked."""

    def __init__(self, ws: ClientConnection, binary: bool = False) -> None:
        self.ws = ws
        self.binary = binary
        self.seq = 0
        self.pending: deque[ServerFrame] = deque()

    @classmethod
    async def connect(cls, url: str, *, binary: bool = False, **kwargs: Any) -> RawClient:
        """Connect; ``binary``: on ``tsync.v1.msgpack`` (ops sent as MessagePack)."""
        if binary:
            kwargs.setdefault("subprotocols", [wire.SUBPROTOCOL_MSGPACK])
        ws = await websockets.connect(url, compression=None, **kwargs)
        if binary:
            assert ws.subprotocol == wire.SUBPROTOCOL_MSGPACK, ws.subprotocol
        return cls(ws, binary)

    async def send(self, **op: Any) -> None:
        if self.binary:
            await self.ws.send(msgspec.msgpack.encode(op))
        else:
            await self.ws.send(msgspec.json.encode(op).decode())

    async def recv(self, timeout: float = 5.0) -> ServerFrame:
        while not self.pending:
            message = await asyncio.wait_for(self.ws.recv(), timeout)
            for raw in split_frames(message):
                frame = accept_transcript_update(raw)
                assert frame.seq == self.seq + 1, f"seq gap: {self.seq} -> {frame.seq}"
                self.seq = frame.seq
                self.pending.append(frame)
        return self.pending.popleft()

    async def expect(self, kind: type[F], timeout: float = 5.0) -> F:
        frame = await self.recv(timeout)
        assert isinstance(frame, kind), f"expected {kind.__name__}, got {frame!r}"
        return frame

    async def nothing_pending(self, timeout: float = 0.2) -> bool:
        """True if no frame arrives before a ping's pong comes back."""
        await self.send(op="ping", ref="quiet?")
        frame = await self.recv(timeout + 5)
        return isinstance(frame, wire.Pong) and frame.ref == "quiet?"

    async def close(self) -> None:
        await self.ws.close()

    async def __aenter__(self) -> RawClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
