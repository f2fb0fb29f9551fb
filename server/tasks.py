"""Background tasks: stopped the one way (cancel, then wait for each, bounded)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Final

__all__ = ["STOP_WAIT_S", "Background", "cancel_and_wait"]

log = logging.getLogger("tsync.tasks")

#: Seconds a cancelled task may take to stop before shutdown goes on without it
#: (a task that is stuck, say in a client library's reconnect, must not hold
#: the server's shutdown past its grace).
STOP_WAIT_S: Final = 5.0


async def cancel_and_wait(
    tasks: Iterable[asyncio.Task[None] | None], *, timeout: float = STOP_WAIT_S
) -> None:
    """Cancel every task given (``None``: none), then wait until each has
    stopped, at most ``timeout`` seconds in all; a task still running then is
    logged and left behind. A task's ``CancelledError`` is expected and
    swallowed, any other error is logged."""
    running = [task for task in tasks if task is not None]
    for task in running:
        task.cancel()
    if not running:
        return
    done, pending = await asyncio.wait(running, timeout=timeout)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed while stopping", task.get_name(), exc_info=task.exception())
    for task in pending:
        log.warning(
            "task %s did not stop within %.0f s; going on without it", task.get_name(), timeout
        )


class Background:
    """The background tasks of a part that runs beside what it is attached
    to (a relay beside the hub or the presence registry).

    ``attached`` keeps the call that detaches the part, ``run`` starts its
    tasks; ``stop`` detaches it first (nothing new reaches it), then stops
    every task the one way (``cancel_and_wait``). Stopping a part that
    never started, or twice, does nothing more.
    """

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []
        self._detach: Callable[[], None] | None = None

    def attached(self, detach: Callable[[], None]) -> None:
        """``detach`` undoes the part's attach: ``stop`` calls it first."""
        self._detach = detach

    def run(self, tasks: Mapping[str, Coroutine[Any, Any, None]]) -> None:
        """Run each coroutine as a task of that name."""
        self.tasks = [asyncio.create_task(coro, name=name) for name, coro in tasks.items()]

    async def stop(self) -> None:
        """Detach the part, then cancel its tasks and wait for them."""
        detach, self._detach = self._detach, None
        if detach is not None:
            detach()
        tasks, self.tasks = self.tasks, []
        await cancel_and_wait(tasks)
