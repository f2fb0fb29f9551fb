"""What the generator does to the machine it runs on: CPU pinning and the
event loop.

``tsync bench --client-cpus 1 --server-cpus 0`` keeps the generator (this
process and its subscriber processes) off the server's CPU, and the server
(``--server-pid``, ``--compare-pid``, every thread and child process of
theirs) off the generator's: on a shared machine a generator that steals the
server's core measures itself. ``--fast`` runs the loops on uvloop when it is
installed (the ``bench`` extra brings it on Linux and macOS).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["cpu_quota", "loop_name", "parse_cpus", "pin_process", "pin_self", "run"]


def parse_cpus(text: str) -> frozenset[int]:
    """``0``, ``0,2``, ``0-3,6`` (as taskset -c) -> the CPU numbers. Raises
    ``ValueError`` for a bad list or a CPU this machine does not have."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, sep, high = part.strip().partition("-")
        try:
            first = int(low)
            last = int(high) if sep else first
        except ValueError:
            raise ValueError(f"bad CPU list {text!r} (expected e.g. 0 or 0,2 or 0-3)") from None
        if first < 0 or last < first:
            raise ValueError(f"bad CPU range {part.strip()!r} in {text!r}")
        cpus.update(range(first, last + 1))
    have = os.cpu_count() or 1
    missing = sorted(c for c in cpus if c >= have)
    if missing:
        raise ValueError(f"CPU {missing[0]} does not exist here (CPUs 0-{have - 1})")
    return frozenset(cpus)


def _can_pin() -> None:
    if not hasattr(os, "sched_setaffinity"):
        raise OSError("CPU pinning needs os.sched_setaffinity (Linux)")


def pin_self(cpus: frozenset[int]) -> None:
    """Pin this process (threads it starts later inherit it)."""
    _can_pin()
    os.sched_setaffinity(0, cpus)


def pin_process(pid: int, cpus: frozenset[int]) -> list[int]:
    """Pin every thread of ``pid`` and of its child processes (a server's
    store thread, ``tsync serve --workers``' workers); the pids pinned.

    Refuses (``OSError``) the init process and this process's own ancestors:
    their children are the whole machine, or the generator itself."""
    _can_pin()
    import psutil

    try:
        root = psutil.Process(pid)
    except psutil.Error as exc:
        raise OSError(f"no process {pid} to pin ({exc})") from None
    ancestors = {p.pid for p in psutil.Process().parents()}
    if pid <= 1 or pid in ancestors or pid == os.getpid():
        raise OSError(
            f"process {pid} ({root.name()}) is not a server to pin: it is init or "
            "this generator's own parent, whose children include far more than a server"
        )
    procs = [root, *root.children(recursive=True)]
    pinned = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            # sched_setaffinity(pid) pins one thread: every task of the process.
            for task in Path(f"/proc/{proc.pid}/task").iterdir():
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setaffinity(int(task.name), cpus)
            pinned.append(proc.pid)
    return pinned


def run(coro: Coroutine[Any, Any, T], *, fast: bool) -> T:
    """``asyncio.run``; on uvloop when ``fast`` and uvloop is installed."""
    if fast:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(coro)
    return asyncio.run(coro)


def loop_name(fast: bool) -> str:
    """The event loop ``run`` uses, for the report."""
    if fast:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            return "asyncio (uvloop not installed)"
        return "uvloop"
    return "asyncio"


def cpu_quota(
    membership: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> float | None:
    """The CPUs' worth a cgroup quota allows this process (cgroup v1
    ``cpu.cfs_quota_us``/``cpu.cfs_period_us``, v2 ``cpu.max``), or ``None``
    when it has no quota (or this is not Linux)."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        try:
            if controllers == "":  # v2
                quota, _, period = (root / rel / "cpu.max").read_text().partition(" ")
                if quota != "max":
                    return int(quota) / int(period)
            elif "cpu" in controllers.split(","):
                base = root / controllers
                quota_us = int((base / rel / "cpu.cfs_quota_us").read_text())
                if quota_us > 0:
                    return quota_us / int((base / rel / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
    return None


def generator_cpu(
    cpu_s: float, wall_s: float, client_cpus: frozenset[int] | None, check: str, fast: bool = True
) -> dict[str, Any]:
    """The ``generator_cpu`` block of a result: the generator's CPU over a run
    of ``wall_s`` seconds, as cores and as a share of the CPUs it may use
    (a share near 1 is a saturated generator, whose latencies are its own)."""
    cpus = len(client_cpus) if client_cpus else (os.cpu_count() or 1)
    cores = cpu_s / max(wall_s, 1e-9)
    return {
        "cpu_s": round(cpu_s, 3),
        "cores": round(cores, 3),
        "cpus": cpus,
        "pinned": sorted(client_cpus) if client_cpus else None,
        "share": round(cores / cpus, 3),
        "check": check,
        "loop": loop_name(fast),
    }
