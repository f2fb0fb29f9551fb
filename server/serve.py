"""``tsync serve``: the app under uvicorn, with a shutdown that says goodbye.

On SIGTERM or Ctrl-C, uvicorn on its own stops accepting, closes every
WebSocket with 1012 at once, waits for requests, then runs the lifespan
shutdown (the app closes and flushes its store there). ``TsyncServer`` first
lets the app drain (``TsyncApp.drain``: ``/readyz`` says 503, new WebSockets
are refused, queued frames get a moment to leave, then each connection is
closed with 1001), all of it within ``graceful_shutdown_s``.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import uvicorn

from server.application import TsyncApp, create_app
from server.config import ServerConfig
from server.ws_protocol import protocol_class

log = logging.getLogger("tsync.serve")

#: Share of ``graceful_shutdown_s`` given to draining WebSockets; the rest is
#: uvicorn's wait for HTTP requests in flight.
DRAIN_SHARE = 0.5


class TsyncServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, *, grace_s: float | None = None) -> None:
        super().__init__(config)
        #: The whole shutdown's budget (default: uvicorn's own setting).
        self.grace_s = grace_s if grace_s is not None else config.timeout_graceful_shutdown or 10

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        began = time.monotonic()
        app = _tsync_app(self.config.loaded_app)
        if app is not None:
            await app.drain(self.grace_s * DRAIN_SHARE)
        left = max(0.1, self.grace_s - (time.monotonic() - began))
        self.config.timeout_graceful_shutdown = max(1, round(left))
        await super().shutdown(sockets)


def _tsync_app(app: Any) -> TsyncApp | None:
    """Our app inside whatever uvicorn wrapped it in (proxy headers, ...)."""
    for _ in range(8):
        if isinstance(app, TsyncApp):
            return app
        app = getattr(app, "app", None)
    return None


def uvicorn_config(config: ServerConfig, app: Any | None = None, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's settings from ours (the WebSocket ones live in uvicorn)."""
    return uvicorn.Config(
        app if app is not None else create_app(config),
        host=config.host,
        port=config.port,
        # uvicorn's sans-I/O protocol plus the raw frame write, a time limit
        # per inbound message and quiet invalid UTF-8 (server.ws_protocol);
        # a test may pass uvicorn's own.
        ws=kwargs.pop("ws", None) or protocol_class(message_timeout_s=config.ws_message_timeout_s),
        ws_max_size=config.ws_max_bytes(),
        ws_ping_interval=config.ping_interval_s or None,
        ws_ping_timeout=config.ping_timeout_s or None,
        ws_per_message_deflate=config.permessage_deflate,
        # The app configures logging itself (server.logs).
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=max(1, round(config.graceful_shutdown_s)),
        lifespan="on",
        **kwargs,
    )


def server_for(config: ServerConfig, app: Any | None = None, **kwargs: Any) -> TsyncServer:
    return TsyncServer(uvicorn_config(config, app, **kwargs), grace_s=config.graceful_shutdown_s)


def run(config: ServerConfig) -> None:
    """Serve until SIGTERM or Ctrl-C. uvicorn raises the signal again once it
    has shut down (so that a supervisor sees how the process ended): the
    caller turns Ctrl-C's ``KeyboardInterrupt`` into a quiet exit."""
    server_for(config).run()
