"""Background tasks: stopped the one way (cancel, then wait for each)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(tasks: Iterable[asyncio.Task[None] | None]) -> None:
    """Cancel every task given (``None``: none), then wait until each has
    stopped; a task's ``CancelledError`` is expected and swallowed."""
    running = [task for task in tasks if task is not None]
    for task in running:
        task.cancel()
    for task in running:
        with contextlib.suppress(asyncio.CancelledError):
            await task
