"""Waiting on a condition of server state, bounded in time (never a bare sleep)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def until(condition: Callable[[], object], timeout: float = 5.0) -> None:
    """Return as soon as ``condition()`` is true; ``TimeoutError`` after ``timeout``.

    For state that offers no event to wait on (a process's view of another
    process, a sweep in a server); it polls every 20 ms.
    """
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - no event exists to wait on
            await asyncio.sleep(0.02)


class Changes:
    """What a fake (a socket, a transport) notifies on every change it
    records, for a test to wait on a condition of it without a sleep loop:
    ``until`` looks at the condition again only when the fake notified."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def notify(self) -> None:
        """Wake the waiters (each looks at its condition when it runs next)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def until(
        self, condition: Callable[[], object], what: str | Callable[[], str], timeout: float = 5.0
    ) -> None:
        """Return once ``condition()`` is true; fail naming ``what`` after ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                while not condition():
                    await self._changed.wait()
        except TimeoutError:
            said = what() if callable(what) else what
            raise AssertionError(f"waited {timeout} s in vain for {said}") from None


async def within(awaitable: Awaitable[T], what: str, timeout: float = 5.0) -> T:
    """``await awaitable`` (an event of the code under test); fail naming
    ``what`` if it takes longer than ``timeout``."""
    try:
        async with asyncio.timeout(timeout):
            return await awaitable
    except TimeoutError:
        raise AssertionError(f"waited {timeout} s in vain for {what}") from None


async def parked(*tasks: asyncio.Task[Any]) -> None:
    """Let tasks just created run to their first ``await`` and check they wait there.

    For tests of an interleaving (a waiter cancelled, or woken, while it
    waits): what they test is that nothing has happened yet, so there is no
    condition to wait for. One loop turn is exactly enough: asyncio runs
    ready callbacks in order, and each task's first step was scheduled when
    it was created, before this call's."""
    await asyncio.sleep(0)
    for task in tasks:
        assert not task.done(), f"{task.get_name()} finished instead of waiting"
        state = inspect.getcoroutinestate(task.get_coro())  # type: ignore[arg-type]
        assert state == inspect.CORO_SUSPENDED, f"{task.get_name()} is {state}, not waiting"
