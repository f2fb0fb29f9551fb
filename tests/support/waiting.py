"""Waiting on a condition of server state, bounded in time (never a bare sleep)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], object], timeout: float = 5.0) -> None:
    """Return as soon as ``condition()`` is true; ``TimeoutError`` after ``timeout``.

    For state that offers no event to wait on (a process's view of another
    process, a sweep in a server); it polls every 20 ms.
    """
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - no event exists to wait on
            await asyncio.sleep(0.02)
