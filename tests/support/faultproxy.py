"""A fault-injecting WebSocket relay for tests, on 127.0.0.1.

``FaultProxy(upstream_ws_url, seed=..., faults=Faults(...))`` accepts client
connections and opens one upstream connection for each. Client -> server
messages pass through untouched; server -> client traffic is split into its
newline-separated frames (``Faults.per_frame``) or kept as whole messages,
and each unit is, by a seeded coin: dropped, sent twice, held back and sent
after the next one (reordered), or the connection is cut (aborted or closed)
before it. ``proxy.enabled = False`` turns every fault off (held units are
released), so a test can let things settle and then check convergence.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, fields
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.server import Server, ServerConnection, serve

from protocol.wire import SUBPROTOCOL_JSON, split_frames


@dataclass
class Faults:
    """Probabilities per server -> client unit (a frame, or a whole message)."""

    drop: float = 0.0
    repeat: float = 0.0
    reorder: float = 0.0
    cut: float = 0.0
    per_frame: bool = True


@dataclass
class FaultCounters:
    connections: int = 0
    units: int = 0  #: server -> client units seen
    dropped: int = 0
    repeated: int = 0
    reordered: int = 0
    cuts: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class FaultProxy:
    """Use as ``async with FaultProxy(srv.ws_url, seed=1, faults=...) as proxy``;
    point the client at ``proxy.ws_url``."""

    def __init__(self, upstream: str, *, seed: int, faults: Faults) -> None:
        self.upstream = upstream
        self.faults = faults
        self.enabled = True
        self.counters = FaultCounters()
        self._random = random.Random(seed)
        self._server: Server | None = None
        self._connections: set[ServerConnection] = set()
        self.port = 0

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/ws"

    async def __aenter__(self) -> FaultProxy:
        self._server = await serve(
            self._relay,
            "127.0.0.1",
            0,
            subprotocols=[SUBPROTOCOL_JSON],  # type: ignore[list-item]
            compression=None,
            max_size=None,
        )
        self.port = next(iter(self._server.sockets)).getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def cut_all(self) -> None:
        """Abort every client connection now."""
        for downstream in list(self._connections):
            self.counters.cuts += 1
            downstream.transport.abort()

    # -- one relayed connection ------------------------------------------------------

    async def _relay(self, downstream: ServerConnection) -> None:
        self.counters.connections += 1
        headers: dict[str, str] = {}
        if downstream.request is not None and "authorization" in downstream.request.headers:
            headers["authorization"] = downstream.request.headers["authorization"]
        try:
            upstream = await websockets.connect(
                self.upstream,
                subprotocols=[SUBPROTOCOL_JSON],  # type: ignore[list-item]
                compression=None,
                max_size=None,
                additional_headers=headers,
                close_timeout=1,
            )
        except (OSError, websockets.WebSocketException, TimeoutError):
            await downstream.close(1011, "upstream unreachable")
            return
        self._connections.add(downstream)
        try:
            async with upstream:
                pumps = {
                    asyncio.create_task(self._up(downstream, upstream)),
                    asyncio.create_task(self._down(upstream, downstream)),
                }
                try:
                    await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for pump in pumps:
                        pump.cancel()
                    await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._connections.discard(downstream)

    async def _up(self, downstream: ServerConnection, upstream: ClientConnection) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in downstream:
                await upstream.send(message)

    async def _down(self, upstream: ClientConnection, downstream: ServerConnection) -> None:
        held: list[Any] = []
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in upstream:
                if not self.enabled:
                    for unit in [*held, message]:
                        await downstream.send(unit)
                    held.clear()
                    continue
                units = split_frames(message) if self.faults.per_frame else [message]
                for unit in units:
                    if await self._fault(unit, held, downstream):
                        return

    async def _fault(self, unit: Any, held: list[Any], downstream: ServerConnection) -> bool:
        """Deliver one unit with faults; True when the connection was cut."""
        faults, counters, coin = self.faults, self.counters, self._random.random
        counters.units += 1
        if coin() < faults.cut:
            counters.cuts += 1
            if coin() < 0.5:
                downstream.transport.abort()
            else:
                await downstream.close(1012, "fault proxy: cut")
            return True
        if coin() < faults.drop:
            counters.dropped += 1
            return False
        if not held and coin() < faults.reorder:
            counters.reordered += 1
            held.append(unit)  # sent after the next unit
            return False
        copies = 2 if coin() < faults.repeat else 1
        counters.repeated += copies - 1
        for _ in range(copies):
            await downstream.send(unit)
        for late in held:
            await downstream.send(late)
        held.clear()
        return False
