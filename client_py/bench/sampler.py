"""Server CPU and memory, read with psutil from the server's process id."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psutil


class ServerSampler:
    """Samples the RSS of one process (and its children) and reads CPU time at marks."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.process = psutil.Process(pid)
        self.interval = interval
        self.peak_rss = 0
        self._task: asyncio.Task[None] | None = None

    def rss(self) -> int:
        """Resident bytes now (the process plus its children, e.g. uvicorn workers)."""
        total: int = self.process.memory_info().rss
        with contextlib.suppress(psutil.Error):
            for child in self.process.children(recursive=True):
                total += child.memory_info().rss
        self.peak_rss = max(self.peak_rss, total)
        return total

    def cpu(self) -> float:
        """User + system CPU seconds used so far (children included)."""
        times = self.process.cpu_times()
        total: float = times.user + times.system
        with contextlib.suppress(psutil.Error):
            for child in self.process.children(recursive=True):
                t = child.cpu_times()
                total += t.user + t.system
        return total

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(psutil.Error):
                self.rss()
            await asyncio.sleep(self.interval)

    def describe(self) -> dict[str, Any]:
        return {"pid": self.process.pid, "name": self.process.name()}
