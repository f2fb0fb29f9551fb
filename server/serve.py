"""Running the app under uvicorn, with a shutdown that says goodbye properly.

On SIGTERM/SIGINT uvicorn stops accepting and would close WebSockets with
1012; we first close every connection ourselves with 1001 (going away) after
letting each writer drain briefly, then uvicorn finishes and the lifespan
closes the store (committing what is queued).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from typing import Any

import uvicorn

from protocol import codes
from server.app import create_app
from server.config import ServerConfig

log = logging.getLogger("tsync.serve")
GOING_AWAY = codes.CLOSE_GOING_AWAY
GOING_AWAY_REASON = codes.CLOSES[GOING_AWAY].reason


class TsyncServer(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.loaded_app
        hub = getattr(getattr(app, "state", None), "hub", None)
        if hub is None:  # wrapped by uvicorn middleware: find the Starlette app
            inner: Any = app
            while hub is None and hasattr(inner, "app"):
                inner = inner.app
                hub = getattr(getattr(inner, "state", None), "hub", None)
        if hub is not None:
            await close_connections(hub, timeout=min(self.config.timeout_graceful_shutdown or 5, 5))
        await super().shutdown(sockets)


async def close_connections(hub: Any, timeout: float) -> None:
    """Let each connection's queue drain for a moment, then close it with 1001.
    A client that does not read cannot hold the shutdown up: every step is
    bounded by ``timeout``."""
    conns = list(hub.connections.values())
    if not conns:
        return
    log.info("closing connections", extra={"count": len(conns)})

    async def goodbye(conn: Any) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.drain(), timeout / 2)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.send_close(GOING_AWAY, GOING_AWAY_REASON), timeout / 2)

    await asyncio.gather(*(goodbye(c) for c in conns))


def uvicorn_config(config: ServerConfig, app: Any | None = None, **kwargs: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app if app is not None else create_app(config),
        host=config.host,
        port=config.port,
        ws="websockets-sansio",
        ws_max_size=config.ws_hard_max_bytes,
        ws_ping_interval=config.ping_interval_s or None,
        ws_ping_timeout=config.ping_timeout_s or None,
        ws_per_message_deflate=config.permessage_deflate,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=max(1, round(config.graceful_shutdown_s)),
        lifespan="on",
        **kwargs,
    )


def run(config: ServerConfig) -> None:
    # The store's worker thread (SQLite) needs the GIL for a few steps per
    # commit; with the default 5 ms switch interval each of those waits up to
    # 5 ms behind a busy event loop (measured: ~20 ms per append under fan-out
    # load). A shorter interval hands the GIL over sooner.
    sys.setswitchinterval(config.gil_switch_interval_ms / 1000)
    server = TsyncServer(uvicorn_config(config))
    server.run()
