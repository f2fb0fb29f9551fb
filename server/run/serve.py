"""``tsync serve``: the app under uvicorn, with a shutdown that says goodbye.

On SIGTERM or Ctrl-C, uvicorn on its own stops accepting, closes every
WebSocket with 1012 at once, waits for requests, then runs the lifespan
shutdown (the app closes and flushes its store there). ``TsyncServer`` first
lets the app drain (``TsyncApp.drain``: ``/readyz`` says 503, new WebSockets
are refused, queued frames get a moment to leave, then each connection is
closed with 1001), all of it within ``graceful_shutdown_s``.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import socket
import sys
import time
from typing import Any, Final

import msgspec
import uvicorn
from uvicorn.config import STARTUP_FAILURE

from server import logs
from server.config import ServerConfig
from server.web.application import TsyncApp, create_app
from server.web.http_guard import guarded_protocol
from server.web.ws_protocol import protocol_class

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
        #: Log "Uvicorn running on ..." for sockets passed in (uvicorn does
        #: only for the ones it binds itself): ``tsync serve`` binds its own.
        self.announce = False
        #: The process is this server's alone (``tsync serve``, a worker of
        #: ``--workers``; not a test's): its garbage collector is tuned for
        #: serving once the app has started (``settle_gc``).
        self.own_process = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.own_process and self.started:
            settle_gc()
        if self.announce and sockets and self.started:
            self._log_started_message(sockets)

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


#: The cyclic garbage collector's thresholds while serving (Python's own are
#: 700, 10, 10). A request leaves no reference cycles behind (a test counts
#: them: ``tests/server/web/test_http_guard.py``), but its objects live as
#: long as it does: at Python's 700 every parked long-poll's task, cycle and
#: scope were scanned again and again, and promoted to the oldest
#: generation, whose full scans (every connection's objects) came every few
#: seconds; at 1,000 readers x 50 values/s the collector took a sixth of the
#: server's CPU with the cycles gone, over a quarter before.
GC_THRESHOLDS: Final = (50_000, 20, 100)


def settle_gc() -> None:
    """Once the app has started: what it loaded (modules, routes, the
    store's copies) is moved out of the collector's sight (``gc.freeze``:
    never garbage, never scanned again), and collections come at
    ``GC_THRESHOLDS``."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _tsync_app(app: Any) -> TsyncApp | None:
    """Our app inside whatever uvicorn wrapped it in (proxy headers, ...)."""
    for _ in range(8):
        if isinstance(app, TsyncApp):
            return app
        app = getattr(app, "app", None)
    return None


#: Which request parser ``tsync serve`` runs: ``auto`` (httptools when it is
#: installed, else h11), ``httptools`` or ``h11``; the guard's tests run on
#: both. Not a setting of ``ServerConfig`` (so not ``TSYNC_``, which the app
#: would call misspelt): only a way to compare them.
HTTP_PARSER_ENV = "TRANSCRIPT_SYNC_HTTP_PARSER"


def http_parser() -> str:
    return os.environ.get(HTTP_PARSER_ENV, "").strip().lower() or "auto"


def uvicorn_config(config: ServerConfig, app: Any | None = None, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's settings from ours (the WebSocket ones live in uvicorn)."""
    return uvicorn.Config(
        app if app is not None else create_app(config),
        host=config.host,
        port=config.port,
        # httptools (h11 where it is not installed) with deadlines and a
        # connection cap (server.web.http_guard).
        http=guarded_protocol(config, parser=http_parser()),
        timeout_keep_alive=config.http_keep_alive_s,  # type: ignore[arg-type]
        # uvicorn's sans-I/O protocol plus the raw frame write, a time limit
        # per inbound message and quiet invalid UTF-8 (server.web.ws_protocol);
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
#: opened, its port is taken; one line says why), as for any other bad setting.
EXIT_STARTUP_FAILED = 2


#: File descriptors kept for everything but client sockets (the store's
#: files and connections, the workers' pipes, the log).
FD_RESERVE = 128


def fit_open_file_limit(config: ServerConfig) -> ServerConfig:
    """Raise this process's open-file limit as far as the hard limit allows
    (a socket is a file descriptor; the usual soft limit of 1024 is far below
    what the connection settings allow) so that ``max_connections +
    max_http_connections`` plus ``FD_RESERVE`` fit; past the limit ``accept()``
    fails and the server is unreachable. When even the hard limit is too low,
    the two caps are lowered in proportion to fit, and one warning says so
    and names the settings. Returns the settings to serve with (``config``
    itself when they fit)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return config
    needed = config.max_connections + config.max_http_connections + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = max(needed, 1 << 20) if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return config
    room = max(2, soft - FD_RESERVE)
    caps = config.max_connections + config.max_http_connections
    http = max(1, min(config.max_http_connections, room * config.max_http_connections // caps))
    ws = max(1, min(config.max_connections, room - http))
    # The defaults are what the server may take, not what an operator asked
    # for: fitting them to the machine is the normal case (info); caps an
    # operator set that the machine cannot give are a warning.
    defaults = {f.name: f.default for f in msgspec.structs.fields(ServerConfig)}
    asked = (config.max_connections, config.max_http_connections) != (
        defaults["max_connections"],
        defaults["max_http_connections"],
    )
    log.log(
        logging.WARNING if asked else logging.INFO,
        "the open-file limit is %d and cannot be raised: serving at most %d WebSockets and "
        "%d HTTP connections; set max_connections and max_http_connections to fit (their sum "
        "plus %d), or raise the hard limit (see docs/deploy.md, File descriptors)",
        soft,
        ws,
        http,
        FD_RESERVE,
        extra={
            "max_connections": ws,
            "max_http_connections": http,
            logs.SAID: ("max_connections", "max_http_connections"),
        },
    )
    return msgspec.structs.replace(config, max_connections=ws, max_http_connections=http)


class CannotListen(Exception):
    """The port could not be bound; ``str()`` is the one line to print."""


def listen_failure(exc: OSError, host: str, port: int) -> CannotListen:
    """``exc`` of binding ``host:port`` as one line a person can act on."""
    if exc.errno == errno.EADDRINUSE:
        return CannotListen(
            f"tsync: port {port} on {host} is in use (another tsync?); pick another with --port"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return CannotListen(
            f"tsync: may not listen on port {port} (ports below 1024 need privileges); "
            "pick another with --port"
        )
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return CannotListen(
            f"tsync: {host} is no address of this machine; pick another with --host"
        )
    return CannotListen(f"tsync: cannot listen on {host}:{port}: {exc.strerror or exc}")


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A socket listening on ``host:port`` (bound before uvicorn starts, so
    that a port in use is one line and exit status 2, not a started app's
    log); raises ``CannotListen``."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        # "localhost" may resolve to ::1 first: IPv4, what clients try first, wins.
        found.sort(key=lambda info: info[0] != socket.AF_INET)
        family, kind, proto, _, address = found[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise listen_failure(exc, host, port) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise listen_failure(exc, host, port) from None
    return sock


#: The listening socket's backlog (uvicorn's default).
BACKLOG = 2048


def run(config: ServerConfig) -> int:
    """Serve until SIGTERM or Ctrl-C; the exit status. uvicorn raises the
    signal again once it has shut down (so that a supervisor sees how the
    process ended): the caller turns Ctrl-C's ``KeyboardInterrupt`` into a
    quiet exit."""
    logs.configure(config.log_level, config.log_format)
    try:
        sock = listening_socket(config.host, config.port)
    except CannotListen as exc:
        print(exc, file=sys.stderr)
        return EXIT_STARTUP_FAILED
    config = fit_open_file_limit(config)
    with sock:
        server = server_for(config)
        server.announce = True
        server.own_process = True
        try:
            server.run(sockets=[sock])
        except SystemExit as exc:
            if exc.code == STARTUP_FAILURE:
                return EXIT_STARTUP_FAILED
            raise
    return 0
