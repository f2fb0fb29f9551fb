"""``tsync serve --workers N``: N server processes on one port.

The parent opens N listening sockets on HOST:PORT with ``SO_REUSEPORT`` and
starts one worker process per socket; the kernel spreads new connections
over the sockets by a hash of the client's address and port. Each worker runs
exactly what ``tsync serve`` runs (``server.run.serve``: uvicorn, the app, the
drain on SIGTERM) and is a replica over the shared store: its own hub and
backplane, its own ``/readyz`` and ``/metrics``. A change made through one
worker reaches the subscribers of the others through the store (Redis), as
between machines; the embedded stores (``sqlite:``, ``memory``) belong to one
process, so more than one worker needs ``redis://`` or ``redis+cluster://``
(``server.config`` refuses the rest with one line and exit status 2).

Why not uvicorn's own ``--workers``: its supervisor runs a plain
``uvicorn.Server`` in each child (no drain: WebSockets get 1012 at once
instead of their queued frames and 1001), needs the app as an import string,
and shares one listening socket among the children, whose accepts the kernel
does not spread evenly (the process that last went idle tends to win).

Signals: SIGTERM, SIGINT or SIGHUP to the parent sends SIGTERM to every
worker, which drains as one ``tsync serve`` does within
``graceful_shutdown_s``; a worker still running a few seconds after that is
killed. Ctrl-C on a terminal reaches the workers too (one process group); they
shut down the same way. A worker that dies is started again on a new socket of
the same port after a pause that grows up to ``MAX_RESTART_DELAY_S``; one that
fails before serving (the store unreachable at startup is no failure; a bad
app or port is) stops them all and the parent exits with status 1.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import time
from typing import Any, Final

from server import logs
from server.config import ServerConfig

__all__ = ["STARTUP_FAILURE", "Supervisor", "run"]

log = logging.getLogger("tsync.workers")

#: A worker's exit status when it stopped before it served (uvicorn's own).
STARTUP_FAILURE: Final = 3
#: Seconds a stopping worker gets beyond ``graceful_shutdown_s`` before SIGKILL.
KILL_MARGIN_S: Final = 5.0
#: The first and the longest pause before a dead worker is started again.
FIRST_RESTART_DELAY_S: Final = 0.5
MAX_RESTART_DELAY_S: Final = 10.0
#: The parent's exit status after Ctrl-C, as ``tsync serve``'s.
EXIT_INTERRUPTED: Final = 130


def run(config: ServerConfig) -> int:
    """Serve with ``config.workers`` processes until a signal; the exit status."""
    from server.run import serve

    logs.configure(config.log_level, config.log_format)
    try:
        return Supervisor(config).run()
    except serve.CannotListen as exc:
        print(exc, file=sys.stderr)
        return serve.EXIT_STARTUP_FAILED


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` in the port's ``SO_REUSEPORT``
    group; raises ``server.run.serve.CannotListen``."""
    from server.run import serve

    if not hasattr(socket, "SO_REUSEPORT"):
        raise serve.CannotListen("tsync: this platform has no SO_REUSEPORT (--workers needs it)")
    sock = serve.listening_socket(host, port, reuse_port=True)
    sock.set_inheritable(True)
    return sock


def _worker(config: ServerConfig, sock: socket.socket, index: int) -> None:
    """A worker process: ``tsync serve``'s server on the socket it was given."""
    from server.run import serve

    server = serve.server_for(config)
    server.own_process = True
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        # uvicorn raises the signal again once it has shut down: Ctrl-C on
        # the terminal reached this worker too. It has stopped cleanly.
        return
    if not server.started:
        sys.exit(STARTUP_FAILURE)


class Supervisor:
    """Starts the workers, starts again the ones that die, stops them all."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.count = config.workers
        self._context = multiprocessing.get_context("spawn")
        self.procs: list[Any] = [None] * self.count
        self._restart_at: dict[int, float] = {}
        self._delay: dict[int, float] = {}
        self._signal: int | None = None
        self.failed = False
        self.port = config.port

    def _on_signal(self, signum: int, frame: object) -> None:
        if self._signal is None:
            self._signal = signum

    def _start(self, index: int, sock: socket.socket | None = None) -> None:
        if sock is None:
            sock = listening_socket(self.config.host, self.port)
        try:
            proc = self._context.Process(
                target=_worker,
                args=(self.config, sock, index),
                name=f"tsync-worker-{index}",
            )
            proc.start()
        finally:
            # The worker holds its own copy; the parent keeps none, so a
            # stopped worker's socket leaves the group at once.
            sock.close()
        self.procs[index] = proc
        log.info("worker started", extra={"worker": index, "pid": proc.pid})

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        # The first socket learns the port when it is 0; the others join it.
        first = listening_socket(self.config.host, self.config.port)
        self.port = first.getsockname()[1]
        socks = [first] + [
            listening_socket(self.config.host, self.port) for _ in range(self.count - 1)
        ]
        # Raised (or the caps fitted, said once) here: the workers inherit it.
        from server.run import serve

        self.config = serve.fit_open_file_limit(self.config)
        for index, sock in enumerate(socks):
            self._start(index, sock)
        log.info(
            "serving with %d workers on http://%s:%d",
            self.count,
            self.config.host,
            self.port,
            extra={"workers": self.count, "port": self.port},
        )
        while self._signal is None and not self.failed:
            self._watch()
        self._stop()
        if self.failed:
            return 1
        return EXIT_INTERRUPTED if self._signal == signal.SIGINT else 0

    def _watch(self) -> None:
        """Wait a moment for a worker to end; start again those due."""
        sentinels = [proc.sentinel for proc in self.procs if proc is not None]
        multiprocessing.connection.wait(sentinels, timeout=0.5)
        if self._signal is not None:
            return
        now = time.monotonic()
        for index, proc in enumerate(self.procs):
            if proc is None or proc.exitcode is None:
                continue
            self.procs[index] = None
            if proc.exitcode == STARTUP_FAILURE:
                log.error(
                    "worker %d stopped before it served: stopping every worker",
                    index,
                    extra={"worker": index, "pid": proc.pid},
                )
                self.failed = True
                return
            delay = self._delay.get(index, FIRST_RESTART_DELAY_S)
            self._delay[index] = min(delay * 2, MAX_RESTART_DELAY_S)
            self._restart_at[index] = now + delay
            log.warning(
                "worker %d exited with status %s; starting it again in %.1f s",
                index,
                proc.exitcode,
                delay,
                extra={"worker": index, "pid": proc.pid, "exitcode": proc.exitcode},
            )
        for index, due in list(self._restart_at.items()):
            if due <= now:
                del self._restart_at[index]
                self._start(index)

    def _stop(self) -> None:
        """SIGTERM to every worker; wait for their drain; kill stragglers."""
        alive = [proc for proc in self.procs if proc is not None and proc.exitcode is None]
        log.info("stopping %d workers", len(alive), extra={"workers": len(alive)})
        for proc in alive:
            if proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.config.graceful_shutdown_s + KILL_MARGIN_S
        for proc in alive:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.exitcode is None:
                log.warning("worker did not stop in time: killed", extra={"pid": proc.pid})
                proc.kill()
                proc.join()
        log.info("stopped")
