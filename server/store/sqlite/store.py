"""``SQLiteStore``: the embedded, durable ``Store`` (``server.store.sqlite``
says how its writer, readers and checkpoints share the file)."""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from protocol.types import (
    TranscriptEvent,
)
from server.store.base import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    DEFAULT_IDEMPOTENCY_TTL_S,
    AppendResult,
    NewTranscript,
    Receipt,
    StoredRange,
    StoredState,
    StoredTranscript,
    StoreUnavailable,
    TranscriptInfo,
    append_alone,
    check_events_after_args,
    check_idempotency_args,
    check_list_args,
    check_range_args,
)
from server.store.options import SQLiteOptions, validated
from server.store.sqlite.checkpoints import (
    CHECKPOINT_FAILURES,
    CHECKPOINT_IDLE_S,
    MAX_CHECKPOINT_EVERY,
    OUTRUN,
    PAGES_PER_COMMIT,
    WRITER_COPIES,
    Checkpointer,
)
from server.store.sqlite.readers import Reader
from server.store.sqlite.schema import unavailable
from server.store.sqlite.streams import SQLiteStreamLog
from server.store.sqlite.writer import Write, Writer, append_writes

__all__ = ["SQLiteStore"]

_T = TypeVar("_T")


class _Queued:
    """Writes waiting for the next commit, and the future of their outcomes."""

    __slots__ = ("future", "writes")

    def __init__(self, writes: list[Write], future: asyncio.Future[list[Any]]) -> None:
        self.writes = writes
        self.future = future


class SQLiteStore:
    """A ``Store`` in one SQLite file inside the data folder ``path``.

    ``options`` (``SQLiteOptions``, the URL's query) set durability, group
    commit and timeouts. ``idempotency_retention`` keys are kept per
    transcript (the newest), each for ``idempotency_ttl_s``.
    ``clock`` gives the time in seconds used to age idempotency keys.
    Nothing is touched before ``open()``.
    """

    name = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        options: SQLiteOptions | None = None,
        *,
        idempotency_retention: int = DEFAULT_IDEMPOTENCY_RETENTION,
        idempotency_ttl_s: float = DEFAULT_IDEMPOTENCY_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_idempotency_args(idempotency_retention, idempotency_ttl_s)
        self.path = Path(path)
        self.options = validated(options or SQLiteOptions())
        self.idempotency_retention = idempotency_retention
        self.idempotency_ttl_s = idempotency_ttl_s
        self._clock = clock
        self._executor: ThreadPoolExecutor | None = None
        self._writer: Writer | None = None
        self._reader: Reader | None = None
        self._queued: list[_Queued] = []
        self._queued_writes = 0
        self._commit_scheduled: asyncio.Handle | None = None
        self._checkpointer: Checkpointer | None = None
        self._checkpoint_executor: ThreadPoolExecutor | None = None
        self._checkpointing: asyncio.Future[tuple[int, bool, bool]] | None = None
        self._idle_check: asyncio.TimerHandle | None = None
        #: Commits since the last checkpoint started, and how many start one:
        #: ``checkpoint_pages`` over the pages per commit the last one saw.
        self._since_checkpoint = 0
        self._checkpoint_every = max(1, self.options.checkpoint_pages // PAGES_PER_COMMIT)
        self._wal_pages = 0  # in the WAL when the last checkpoint ran
        self._wal_restarts = True  # ... and it copied them all: the WAL starts over
        self._checkpoint_failures = 0
        #: SQLite's own checkpoint on the writer is on (the thread's keep failing).
        self.autocheckpoint = False
        #: Checkpoints run on the checkpoint thread, and how many of them the
        #: writes outran, so that the writer copied the rest (for tests and metrics).
        self.checkpoints = 0
        self.writer_checkpoints = 0
        #: Transactions committed, and the writes they carried (for metrics:
        #: ``committed_writes / commits`` is the mean group-commit batch).
        self.commits = 0
        self.committed_writes = 0

    def streams_log(self) -> SQLiteStreamLog:
        """The store's streams part, opened now: ``streams.sqlite3`` beside
        its database, with its ``synchronous`` and ``busy_timeout_s``."""
        return SQLiteStreamLog(
            self.path,
            synchronous=self.options.synchronous,
            busy_timeout_s=self.options.busy_timeout_s,
        )

    async def open(self) -> None:
        """Create the folder and the file if missing, switch to WAL, migrate."""
        if self._writer is not None:
            raise RuntimeError("store is already open")
        try:
            writer = Writer(
                self.path,
                self.options,
                self.idempotency_retention,
                self.idempotency_ttl_s,
                self._clock,
            )
        except sqlite3.Error as err:
            raise unavailable(self.path, err) from err
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-reader")
        retention, ttl_ms = writer.retention, writer.ttl_ms
        try:
            self._reader = await asyncio.get_running_loop().run_in_executor(
                executor,
                lambda: Reader(writer.path, self.options, retention, ttl_ms, self._clock),
            )
        except BaseException as err:
            writer.close()
            executor.shutdown(wait=False)
            if isinstance(err, sqlite3.Error):
                raise unavailable(self.path, err) from err
            raise
        checkpoint_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-ckpt")
        try:
            self._checkpointer = await asyncio.get_running_loop().run_in_executor(
                checkpoint_executor, lambda: Checkpointer(writer.path, self.options)
            )
        except BaseException as err:
            reader = self._reader
            self._reader = None
            writer.close()
            if reader is not None:
                await asyncio.get_running_loop().run_in_executor(executor, reader.close)
            executor.shutdown(wait=False)
            checkpoint_executor.shutdown(wait=False)
            if isinstance(err, sqlite3.Error):
                raise unavailable(self.path, err) from err
            raise
        self._writer, self._executor = writer, executor
        self._checkpoint_executor = checkpoint_executor

    async def close(self) -> None:
        """Commit every queued write, then close the file (the last
        connection to close checkpoints the whole WAL) and stop the threads."""
        writer, reader, executor = self._writer, self._reader, self._executor
        if writer is None or executor is None:
            return
        while self._queued:
            self._commit_queued()
        checkpointer, checkpoint_executor = self._checkpointer, self._checkpoint_executor
        self._writer = self._reader = self._executor = None
        self._checkpointer = self._checkpoint_executor = None
        if self._idle_check is not None:
            self._idle_check.cancel()
            self._idle_check = None
        loop = asyncio.get_running_loop()
        try:
            if self._checkpointing is not None:
                await asyncio.wait([self._checkpointing])
            writer.close()
            if reader is not None:
                await loop.run_in_executor(executor, reader.close)
            if checkpointer is not None and checkpoint_executor is not None:
                await loop.run_in_executor(checkpoint_executor, checkpointer.close)
        finally:
            # The workers are idle now, so this does not block.
            executor.shutdown(wait=True)
            if checkpoint_executor is not None:
                checkpoint_executor.shutdown(wait=True)

    # --- the write path ----------------------------------------------------------

    def _submit(self, writes: list[Write]) -> asyncio.Future[list[Any]]:
        """Queue ``writes`` for the next commit (one step of the event loop
        from now, together with every write queued meanwhile)."""
        if self._writer is None:
            raise StoreUnavailable(f"sqlite store {self.path} is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        self._queued.append(_Queued(writes, future))
        self._queued_writes += len(writes)
        if self._commit_scheduled is None:
            self._commit_scheduled = loop.call_soon(self._commit_queued)
        return future

    def _commit_queued(self) -> None:
        """Commit what is queued (up to ``max_batch`` writes) in one transaction
        on the loop's thread, then resolve each caller's future."""
        self._commit_scheduled = None
        writer = self._writer
        if writer is None or not self._queued:
            return
        batch: list[_Queued] = []
        count = 0
        limit = self.options.max_batch
        while self._queued and (not batch or count + len(self._queued[0].writes) <= limit):
            item = self._queued.pop(0)
            batch.append(item)
            count += len(item.writes)
        self._queued_writes -= count
        if self._queued:
            self._commit_scheduled = asyncio.get_running_loop().call_soon(self._commit_queued)
        try:
            outcomes = writer.commit([item.writes for item in batch])
        except Exception as err:
            failure = unavailable(self.path, err) if isinstance(err, sqlite3.Error) else err
            for item in batch:
                if not item.future.done():
                    # A fresh exception per caller: they are raised in different tasks.
                    item.future.set_exception(type(failure)(*failure.args))
            return
        self.commits += 1
        self.committed_writes += count
        for item, results in zip(batch, outcomes, strict=True):
            if not item.future.done():
                item.future.set_result(results)
        self._since_checkpoint += 1
        if self._since_checkpoint >= self._checkpoint_every:
            self._start_checkpoint()
        elif self._idle_check is None:
            self._idle_check = asyncio.get_running_loop().call_later(
                CHECKPOINT_IDLE_S, self._checkpoint_when_idle
            )

    # --- checkpoints, off the loop's thread ------------------------------------------

    def _start_checkpoint(self) -> None:
        """Copy the WAL into the database file on the checkpoint thread (one
        at a time: while one runs, the next commit starts the next)."""
        checkpointer, executor = self._checkpointer, self._checkpoint_executor
        if self._checkpointing is not None or checkpointer is None or executor is None:
            return
        commits, self._since_checkpoint = self._since_checkpoint, 0
        self._checkpointing = asyncio.get_running_loop().run_in_executor(
            executor, checkpointer.catch_up
        )
        self._checkpointing.add_done_callback(functools.partial(self._checkpointed, commits))

    def _checkpoint_when_idle(self) -> None:
        """A second after a commit: copy what the commits since the last
        checkpoint left (the WAL then starts over with the next write)."""
        self._idle_check = None
        if self._since_checkpoint > 0 or not self._wal_restarts:
            self._start_checkpoint()

    def _checkpointed(self, commits: int, done: asyncio.Future[tuple[int, bool, bool]]) -> None:
        """Learn the pages per commit from what the WAL held. When the writes
        keep outrunning the thread (the WAL would never start over, and
        grow), the thread goes again at once; only once the WAL holds
        ``WRITER_COPIES`` times ``checkpoint_pages`` does the writer copy
        what the thread left, between two commits (the WAL then starts over
        with the next one)."""
        self._checkpointing = None
        writer = self._writer
        if writer is None or done.cancelled():
            return
        limit = self.options.checkpoint_pages
        caught_up = False
        if done.exception() is not None:
            self._checkpoint_failures += 1
        else:
            self.checkpoints += 1
            self._checkpoint_failures = 0
            pages, caught_up, held = done.result()
            grown = pages if self._wal_restarts else pages - self._wal_pages
            if grown > 0 and commits > 0:
                every = limit * commits // grown
                self._checkpoint_every = max(1, min(MAX_CHECKPOINT_EVERY, every))
            self._wal_pages = pages
            if not caught_up and not held and pages >= OUTRUN * limit:
                if pages < WRITER_COPIES * limit:
                    # Outrun: the thread goes again at once rather than the
                    # loop copying what it left (a copy and its sync on the
                    # loop held it 230 ms after a burst, under load).
                    self._wal_restarts = False
                    self._start_checkpoint()
                    return
                try:
                    writer.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.writer_checkpoints += 1
                    caught_up = True
                except sqlite3.Error:
                    pass  # the thread tries again
            self._wal_restarts = caught_up
        failing = self._checkpoint_failures >= CHECKPOINT_FAILURES
        if failing != self.autocheckpoint:
            try:
                writer.conn.execute(f"PRAGMA wal_autocheckpoint={limit if failing else 0}")
                self.autocheckpoint = failing
            except sqlite3.Error:
                pass  # tried again after the next checkpoint
        if (not caught_up or self._since_checkpoint > 0) and self._idle_check is None:
            self._idle_check = asyncio.get_running_loop().call_later(
                CHECKPOINT_IDLE_S, self._checkpoint_when_idle
            )

    async def _write(self, write: Write) -> Any:
        (outcome,) = await self._submit([write])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    # --- the read path -------------------------------------------------------------

    async def _read(self, fn: Callable[[Reader], _T]) -> _T:
        reader, executor = self._reader, self._executor
        if reader is None or executor is None:
            raise StoreUnavailable(f"sqlite store {self.path} is not open")
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, lambda: fn(reader))
        except sqlite3.Error as err:
            raise unavailable(self.path, err) from err

    # --- Store -----------------------------------------------------------------

    async def create(self, new: NewTranscript) -> None:
        writer = self._writer
        if writer is None:
            raise StoreUnavailable(f"sqlite store {self.path} is not open")
        await self._write(lambda now: writer.create(new, now))

    async def load(self, transcript_id: str) -> StoredTranscript | None:
        return await self._read(lambda reader: reader.load(transcript_id))

    async def append(
        self, event: TranscriptEvent, *, idempotency_key: str | None = None
    ) -> AppendResult:
        return await append_alone(self, event, idempotency_key)

    async def append_many(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> list[AppendResult | Exception]:
        """Several appends in order, committed in one transaction with
        whatever else is queued; one outcome per item (``append``'s result or
        the exception it would raise). Raises ``StoreUnavailable`` when
        nothing could be committed. If the caller is cancelled the appends may
        still commit, as with any database; a retry with the same idempotency
        key is then a duplicate."""
        outcomes: list[AppendResult | Exception] = await self.submit_appends(items)
        return outcomes

    def submit_appends(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> asyncio.Future[list[AppendResult | Exception]]:
        """``append_many`` started now (``SubmitsAppends``): the appends are
        queued for the next commit before this returns, and commit whether
        or not the future is still awaited."""
        writer = self._writer
        if writer is None:
            raise StoreUnavailable(f"sqlite store {self.path} is not open")
        future: asyncio.Future[list[AppendResult | Exception]] = self._submit(
            append_writes(writer, items)
        )
        return future

    async def recorded(self, transcript_id: str, key: str) -> Receipt | None:
        return await self._read(lambda reader: reader.recorded(transcript_id, key))

    async def events_after(
        self, transcript_id: str, revision: int, *, limit: int | None = None
    ) -> list[TranscriptEvent] | None:
        """Events after ``revision``; the whole log is kept, so ``None`` only
        when ``revision`` is beyond the stored one."""
        check_events_after_args(revision, limit)
        return await self._read(lambda reader: reader.events_after(transcript_id, revision, limit))

    async def load_recent(
        self, transcript_id: str, *, messages: int | None = None
    ) -> StoredState | None:
        """The state now with the newest ``messages`` messages, in one read
        transaction on the worker thread (the events before them are not read)."""
        return await self._read(lambda reader: reader.load_recent(transcript_id, messages))

    async def read_messages(self, transcript_id: str, start: int, end: int) -> StoredRange:
        check_range_args(start, end)
        return await self._read(lambda reader: reader.read_messages(transcript_id, start, end))

    async def list(self, *, after: str | None = None, limit: int = 100) -> list[TranscriptInfo]:
        check_list_args(limit)
        return await self._read(lambda reader: reader.list_transcripts(after, limit))

    async def delete(self, transcript_id: str) -> bool:
        writer = self._writer
        if writer is None:
            raise StoreUnavailable(f"sqlite store {self.path} is not open")
        deleted: bool = await self._write(lambda now: writer.delete(transcript_id))
        return deleted
