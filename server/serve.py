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
from uvicorn.config import STARTUP_FAILURE

from server.application import TsyncApp, create_app
from server.config import ServerConfig
from server.http_guard import guarded_protocol
from server.ws_protocol import protocol_class

log = logging.getLogger("tsync.serve")

#: Share of ``graceful_shutdown_s`` given to draining WebSockets; the rest is
#: uvicorn's wait for HTTP requests in flight.
DRAIN_SHARE = 0.5
#: Share of ``graceful_shutdown_s`` kept for the app's shutdown after the
#: connections are gone (the hub stops, the store flushes and closes).
CLOSE_SHARE = 0.1


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
        # What is left, less a moment for the app's own shutdown (closing the
        # store), is uvicorn's wait for connections: never rounded up.
        left = self.grace_s - (time.monotonic() - began)
        self.config.timeout_graceful_shutdown = max(0.1, left - self.grace_s * CLOSE_SHARE)  # type: ignore[assignment]
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
        # h11 with deadlines and a connection cap (server.http_guard).
        http=guarded_protocol(config),
        timeout_keep_alive=config.http_keep_alive_s,  # type: ignore[arg-type]
        # uvicorn's sans-I/O protocol plus the raw frame write, a time limit
        # per inbound message and quiet invalid UTF-8 (server.ws_protocol);
        # a test may pass uvicorn's own.
        ws=kwargs.pop("ws", None)
        or protocol_class(
            message_timeout_s=config.ws_message_timeout_s,
            max_fragments=config.ws_max_fragments,
            max_fragments_per_s=config.ws_max_fragments_per_s,
        ),
        ws_max_size=config.ws_max_bytes(),
        ws_ping_interval=config.ping_interval_s or None,
        ws_ping_timeout=config.ping_timeout_s or None,
        ws_per_message_deflate=config.permessage_deflate,
        # The app configures logging itself (server.logs).
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=config.graceful_shutdown_s,  # type: ignore[arg-type]
        lifespan="on",
        **kwargs,
    )


def server_for(config: ServerConfig, app: Any | None = None, **kwargs: Any) -> TsyncServer:
    return TsyncServer(uvicorn_config(config, app, **kwargs), grace_s=config.graceful_shutdown_s)


#: The exit status of a server that could not start (its store could not be
#: opened; the log says why in one line), as for any other bad setting.
EXIT_STARTUP_FAILED = 2


#: File descriptors kept for everything but client sockets (the store's
#: files and connections, the workers' pipes, the log).
FD_RESERVE = 128


def raise_fd_limit(config: ServerConfig) -> int:
    """Raise this process's open-file limit to its hard limit (a socket is
    a file descriptor; the usual soft limit of 1024 is far below what the
    connection settings allow) and warn when even that cannot hold
    ``max_connections + max_http_connections`` plus ``FD_RESERVE``: past it,
    ``accept()`` fails and the server is unreachable. Returns the limit."""
    try:
        import resource
    except ImportError:  # not on this platform
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    needed = config.max_connections + config.max_http_connections + FD_RESERVE
    if soft < needed:
        log.warning(
            "the open-file limit (%d) is below max_connections + max_http_connections + %d "
            "(%d): lower those settings or raise the limit (see docs/deploy.md)",
            soft,
            FD_RESERVE,
            needed,
        )
    return soft


def run(config: ServerConfig) -> int:
    """Serve until SIGTERM or Ctrl-C; the exit status. uvicorn raises the
    signal again once it has shut down (so that a supervisor sees how the
    process ended): the caller turns Ctrl-C's ``KeyboardInterrupt`` into a
    quiet exit."""
    server = server_for(config)  # configures logging
    raise_fd_limit(config)
    try:
        server.run()
    except SystemExit as exc:
        if exc.code == STARTUP_FAILURE:
            return EXIT_STARTUP_FAILED
        raise
    return 0
