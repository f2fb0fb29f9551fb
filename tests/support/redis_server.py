"""A private ``redis-server`` for tests: 127.0.0.1, a free port, a temp dir.

``RedisServer(dir).start()`` runs one with AOF on (``appendfsync always``, so
an acknowledged write survives even a SIGKILL of Redis); ``stop()``, ``kill()``,
``restart()`` (same port, same data), ``pause()``/``resume()`` (SIGSTOP and
SIGCONT) drive the faults the replica tests need.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.servers import free_port


@dataclass
class RedisServer:
    """One ``redis-server`` process owned by a test."""

    binary: str
    dir: Path
    port: int = field(default_factory=free_port)
    appendonly: bool = True
    #: More ``redis-server`` arguments (a cluster node's, for instance).
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start and wait until it answers PING (and has loaded its data)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            self.binary,
            "--bind", "127.0.0.1", "--port", str(self.port),
            "--dir", str(self.dir), "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
            "--protected-mode", "no", "--daemonize", "no",
            "--logfile", str(self.dir / "redis.log"),
            *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {self.log()}")
            if self.ping():
                return self
            time.sleep(0.02)
        self.kill()
        raise TimeoutError(f"redis-server did not answer PING: {self.log()}")

    def ping(self, timeout: float = 0.5) -> bool:
        """True when the server answers PING with PONG (not LOADING)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def log(self) -> str:
        path = self.dir / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM: Redis flushes the AOF and exits."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused server cannot exit
            self.proc.terminate()
            self.proc.wait(10)

    def kill(self) -> None:
        """SIGKILL: nothing is flushed beyond what ``appendfsync always`` wrote."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, *, hard: bool = True) -> None:
        """Kill (or stop) and start again on the same port with the same data."""
        if hard:
            self.kill()
        else:
            self.stop()
        self.start()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
