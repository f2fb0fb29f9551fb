"""CPU-heavy work off the event loop (``Offload``): a few worker processes
with a bounded queue and a time budget per job. (Not ``server.run.supervisor``,
which runs several whole servers for ``tsync serve --workers``.)

Reading an LMML import (zip inflation included) and writing an export take
time proportional to their size: seconds for the largest bodies the server
accepts. On the event loop that would stall every connection for as long.
Here they run in worker processes (``pebble.ProcessPool``):

- **Processes, not threads.** A thread running pure Python holds the GIL: the
  loop would only get it back every switch interval and would share one core
  with it. Worse, a thread cannot be stopped: a job over its budget would run
  to its end whatever the server answered. A worker process runs on another
  core, and a job over its budget is stopped by terminating that worker
  (pebble then starts a new one; the other workers and their jobs go on).
  What it costs: the input and the output cross a pipe (a copy of bytes,
  microseconds per MiB), and small jobs are cheaper inline (``inline_ok``).
- **A bounded queue.** At most ``offload_processes`` jobs run and
  ``offload_queue`` wait; one more is refused at once with ``unavailable``
  (503, ``Retry-After``) instead of piling up memory and latency.
- **A budget.** A job still running after ``offload_budget_s`` is stopped and
  refused with ``too-costly`` (422): the same request would take as long
  again. A caller that goes away (its client disconnected) cancels its job,
  which stops the worker too if the job had started.

Offload start on first use (a server that never imports or exports a large
file starts none) from a ``forkserver`` (never a fork of this multi-threaded
process), and each is replaced after ``server.tuning.OFFLOAD_JOBS_PER_WORKER``
jobs so that a large one does not keep its memory forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Final, TypeVar

import msgspec
from pebble import ProcessPool

from protocol import codes
from protocol.types import Message
from server import tuning
from server.errors import Refused

__all__ = ["Offload", "encode_messages"]

log = logging.getLogger("tsync.offload")
T = TypeVar("T")


class Offload:
    """The worker processes of one server (see the module's docstring)."""

    def __init__(self, *, processes: int, queue: int, budget_s: float) -> None:
        self.processes = processes
        self.queue = queue
        self.budget_s = budget_s
        self._pool: ProcessPool | None = None
        self._jobs = 0  # running or waiting
        self.completed = 0

    @property
    def jobs(self) -> int:
        """Jobs running or waiting now."""
        return self._jobs

    def _new_pool(self) -> ProcessPool:
        try:
            context: Any = multiprocessing.get_context("forkserver")
        except ValueError:  # a platform without it
            context = multiprocessing.get_context("spawn")
        # No process starts before the first job is scheduled.
        self._pool = ProcessPool(
            max_workers=self.processes,
            max_tasks=tuning.OFFLOAD_JOBS_PER_WORKER,
            initializer=_lower_priority,
            context=context,
        )
        return self._pool

    async def run(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker process; what it returns or raises.

        Raises ``Refused`` ``unavailable`` when the queue is full and
        ``too-costly`` when the job ran past the budget (``what`` names the
        job in the message, e.g. "reading the import").
        """
        if self._jobs >= self.processes + self.queue:
            raise Refused(
                codes.UNAVAILABLE,
                f"the server is busy with {self._jobs} imports and exports; retry shortly",
                retryAfter=tuning.OFFLOAD_FULL_RETRY_AFTER_S,
            )
        self._jobs += 1
        started = time.perf_counter()
        pool = self._pool or self._new_pool()
        # Scheduling pickles the arguments (a large body) and, the first
        # time, starts the worker processes: a thread does it, not the loop.
        scheduling = asyncio.ensure_future(
            asyncio.to_thread(pool.schedule, fn, args=args, timeout=self.budget_s)
        )
        try:
            future = await asyncio.shield(scheduling)
            try:
                return await asyncio.wrap_future(future)
            except asyncio.CancelledError:
                future.cancel()  # type: ignore[no-untyped-call]  # stops a started job's worker
                raise
        except FutureTimeout:
            log.warning(
                "%s took longer than its budget and was stopped",
                what,
                extra={"budget_s": self.budget_s},
            )
            raise Refused(
                codes.TOO_COSTLY,
                f"{what} takes longer than the server's budget of {self.budget_s:g} s",
            ) from None
        except asyncio.CancelledError:
            scheduling.add_done_callback(_cancel_scheduled)
            raise
        finally:
            self._jobs -= 1
            self.completed += 1
            log.debug("%s took %.3f s", what, time.perf_counter() - started)

    async def close(self) -> None:
        """Stop the workers (a job still running is cut: the server is
        going away)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()  # type: ignore[no-untyped-call]
            with contextlib.suppress(Exception):
                await asyncio.to_thread(pool.join, 5)


def _lower_priority() -> None:
    """In each worker: yield the CPU to the event loop when cores are scarce
    (a busy machine schedules the loop's process first)."""
    with contextlib.suppress(OSError, AttributeError):
        os.nice(tuning.OFFLOAD_WORKER_NICENESS)


def _cancel_scheduled(scheduling: asyncio.Future[Any]) -> None:
    """The caller went away while its job was being scheduled: cancel the job."""
    if not scheduling.cancelled() and scheduling.exception() is None:
        scheduling.result().cancel()


def inline_ok(size: int) -> bool:
    """Whether a job on ``size`` bytes is cheaper on the loop than through a
    worker: LMML reads a line in about a microsecond and a trip through the
    pipe costs about a millisecond, so below ``INLINE_BYTES`` the loop is
    held for less than a trip would cost."""
    return size <= INLINE_BYTES


#: Input below this size is handled on the loop (see ``inline_ok``).
INLINE_BYTES: Final = 16 << 10

_encode = msgspec.msgpack.Encoder().encode


async def encode_messages(messages: Sequence[Message]) -> tuple[list[bytes], int]:
    """``messages`` as MessagePack chunks for a worker, and their size. The
    loop is given back every ``server.tuning.ENCODE_SLICE_S``: a transcript of
    any length is encoded without a stall longer than one chunk's encoding."""
    chunks: list[bytes] = []
    size = 0
    slice_began = time.perf_counter()
    for start in range(0, len(messages), tuning.ENCODE_CHUNK_MESSAGES):
        chunk = _encode(messages[start : start + tuning.ENCODE_CHUNK_MESSAGES])
        chunks.append(chunk)
        size += len(chunk)
        if time.perf_counter() - slice_began > tuning.ENCODE_SLICE_S:
            await asyncio.sleep(0)
            slice_began = time.perf_counter()
    return chunks, size
