"""Tools for the hostile-load suite: a real ``tsync serve`` process to
attack, what it costs (RSS, peak RSS, open file descriptors, its log), and an
unrelated client that measures how long a ``ping`` round trip takes while the
attack runs.

Why a subprocess: an in-process server shares this process's event loop and
GIL with the attacking clients, so a stall could be the test's own. The
probe runs on a thread of its own with the synchronous websockets client, for
the same reason: the attack's coroutines never delay its measurements.

This machine is shared and loaded, so a fixed bound on latency would fail for
reasons that have nothing to do with the server: ``Probe.idle_worst`` is the
worst round trip measured just before the attack, on the same connection,
and ``assert_responsive`` allows ``max(bound, 2 * idle)``, as the SQLite
loop-lag test does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.servers import ServerProcess

#: The round trip an unrelated client's ping must stay under during an
#: attack (the issue's bound); a loaded machine may raise it to twice its
#: own idle lag (``assert_responsive``).
PING_BOUND_S = 0.1


@dataclass
class Target:
    """A ``tsync serve`` subprocess under attack."""

    process: ServerProcess
    log_path: Path

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def ws_url(self) -> str:
        return self.process.ws_url

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def pid(self) -> int:
        assert self.process.proc is not None
        return self.process.proc.pid

    def alive(self) -> bool:
        proc = self.process.proc
        return proc is not None and proc.poll() is None

    def _status(self, field_name: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024  # kB
        raise KeyError(field_name)

    def rss(self) -> int:
        """Resident memory now, in bytes."""
        return self._status("VmRSS")

    def peak_rss(self) -> int:
        """The most resident memory the process ever had, in bytes (VmHWM):
        a bound on it holds for the whole attack, not only at its end."""
        return self._status("VmHWM")

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_bytes(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def healthy(self, timeout: float = 2.0) -> bool:
        """Whether ``/healthz`` answers 200 within ``timeout`` on a new connection."""
        try:
            return httpx.get(self.url + "/healthz", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False


@contextmanager
def serving(
    tmp_path: Path,
    *,
    store: str | None = None,
    settings: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    log_level: str = "info",
) -> Iterator[Target]:
    """``tsync serve`` on 127.0.0.1:<free port> with ``--set`` ``settings``
    (a SQLite folder under ``tmp_path`` unless ``store`` says otherwise); its
    log goes to a file the test can read. Killed on exit."""
    log_path = tmp_path / f"server-{time.monotonic_ns()}.log"
    args = ["--log-level", log_level]
    for name, value in (settings or {}).items():
        args += ["--set", f"{name}={value}"]
    process = ServerProcess(
        store=store or f"sqlite:{tmp_path / 'data'}",
        args=args,
        env=env or {},
        log_path=log_path,
    )
    process.start()
    try:
        yield Target(process, log_path)
    finally:
        process.kill()


# --- the unrelated client -----------------------------------------------------------------


@dataclass
class Probe:
    """An unrelated client's ping round trips, measured by a process of its
    own (``tests.robustness.probe``)."""

    ws_url: str
    interval_s: float = 0.01
    rtts: list[float] = field(default_factory=list)
    #: When each ping of ``rtts`` was sent (the probe's ``perf_counter``).
    sent: list[float] = field(default_factory=list)
    idle_worst: float = 0.0
    failures: list[str] = field(default_factory=list)
    _proc: subprocess.Popen[str] | None = None
    _reader: threading.Thread | None = None
    _idle: threading.Event = field(default_factory=threading.Event)

    def start(self, idle_s: float = 0.5) -> None:
        """Start the probe; return once it measured the idle round trip."""
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.robustness.probe", self.ws_url, str(idle_s),
             str(self.interval_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[2],
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, name="probe-reader", daemon=True)
        self._reader.start()
        if not self._idle.wait(30 + idle_s):
            self.stop()
            raise TimeoutError(f"the probe did not start: {self.failures}")

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            kind, _, rest = line.strip().partition(" ")
            if kind == "rtt":
                sent, rtt = rest.split()
                self.rtts.append(float(rtt))
                self.sent.append(float(sent))
            elif kind == "idle":
                self.idle_worst = float(rest)
                self._idle.set()
            elif kind == "fail":
                self.failures.append(rest)
        if not self._idle.is_set():
            self.failures.append("the probe ended before it measured anything")
            self._idle.set()

    def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(35)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        if self._reader is not None:
            self._reader.join(5)
        if proc.stdout is not None:
            proc.stdout.close()
        self._proc = None

    def wait_pings(self, count: int, timeout: float = 10.0) -> None:
        """Return once ``count`` pings came back (or the probe failed, or
        ``timeout`` passed)."""
        deadline = time.monotonic() + timeout
        while len(self.rtts) < count and not self.failures and time.monotonic() < deadline:
            time.sleep(0.01)

    @property
    def worst(self) -> float:
        return max(self.rtts, default=0.0)

    def summary(self) -> str:
        when = ""
        if self.rtts:
            i = self.rtts.index(self.worst)
            when = f" {self.sent[i] - self.sent[0]:.2f} s after the first"
        return (
            f"{len(self.rtts)} pings, worst {self.worst * 1000:.1f} ms{when} "
            f"(idle worst {self.idle_worst * 1000:.1f} ms)"
        )


@contextmanager
def probing(ws_url: str, *, idle_s: float = 0.5) -> Iterator[Probe]:
    """Measure the idle round trip, then ping throughout the ``with`` block."""
    probe = Probe(ws_url)
    probe.start(idle_s)
    try:
        yield probe
    finally:
        probe.stop()


def assert_responsive(probe: Probe, bound: float = PING_BOUND_S) -> None:
    """No ping round trip over ``bound``, or twice the idle worst on a
    machine loaded beyond that; the probe's connection survived; it pinged."""
    assert not probe.failures, f"the unrelated client failed: {probe.failures}"
    assert probe.rtts, "the probe never pinged"
    limit = max(bound, 2 * probe.idle_worst)
    assert probe.worst < limit, f"{probe.summary()}: over {limit * 1000:.0f} ms"


# --- raw sockets ----------------------------------------------------------------------------


def raw_socket(port: int, timeout: float = 5.0) -> socket.socket:
    """A plain TCP connection to the target (for attacks below HTTP)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Whether the server closes ``sock`` within ``timeout`` (EOF or reset;
    whatever it answered first is read and ignored)."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False
