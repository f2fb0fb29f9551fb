"""``SQLiteStore``: the embedded, durable ``Store`` of ``tsync serve``.

One data folder holds one database file, ``transcripts.sqlite3``, in WAL mode.
With ``synchronous="normal"`` (the default) every committed append survives the
process being killed (SIGKILL); ``synchronous="full"`` also survives power loss.

Threads: the stdlib ``sqlite3`` module is used from ONE dedicated worker thread
(a single-thread executor). The connection is made, used and closed there and
never crosses threads; the event loop only awaits futures.

Group commit: appends are queued; a committer task hands everything queued so
far to the worker as one transaction, so appends that arrive while the worker
is busy share the next commit (one fsync of the WAL, not one per append). Each
append runs inside its own SAVEPOINT, so one refused append (revision mismatch,
unknown transcript) never takes the others of its batch down with it.

Tables::

    transcripts (id PK, epoch, created_at, updated_at, revision, length)
    events      (transcript_id, revision, occurred_at, data)   PK (transcript_id, revision)
                 data = the TranscriptEvent as msgspec MessagePack
    idempotency (transcript_id, key, revision, start, count, created_at)
                                                               PK (transcript_id, key)

The schema version lives in ``PRAGMA user_version``; ``_MIGRATIONS`` takes a
database from each version to the next.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeVar

import msgspec

from protocol.types import MessagesAppended, TranscriptEvent
from server.store.base import (
    AppendAck,
    AppendResult,
    RevisionMismatch,
    StoredTranscript,
    StoreError,
    StoreUnavailable,
    TranscriptExists,
    TranscriptInfo,
    TranscriptNotFound,
)
from server.store.memory import check_events_after_args, check_first_event

__all__ = ["DATABASE_FILE", "SCHEMA_VERSION", "SQLiteStore"]

#: The database file inside the data folder.
DATABASE_FILE: Final = "transcripts.sqlite3"

#: The schema version this code writes; kept in ``PRAGMA user_version``.
SCHEMA_VERSION: Final = 1

#: ``_MIGRATIONS[v]`` takes a database at version ``v`` to ``v + 1``.
#: Version 0 is an empty file. Append a step here whenever the schema changes.
_MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    0: (
        """CREATE TABLE transcripts (
            id TEXT PRIMARY KEY NOT NULL,
            epoch TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            revision INTEGER NOT NULL,
            length INTEGER NOT NULL
        )""",
        """CREATE TABLE events (
            transcript_id TEXT NOT NULL,
            revision INTEGER NOT NULL,
            occurred_at INTEGER NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (transcript_id, revision)
        )""",
        """CREATE TABLE idempotency (
            transcript_id TEXT NOT NULL,
            key TEXT NOT NULL,
            revision INTEGER NOT NULL,
            start INTEGER NOT NULL,
            count INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            PRIMARY KEY (transcript_id, key)
        )""",
        # Pruning by count walks a transcript's keys newest first.
        "CREATE INDEX idempotency_by_revision ON idempotency (transcript_id, revision)",
        # Pruning by age deletes across all transcripts.
        "CREATE INDEX idempotency_by_age ON idempotency (created_at)",
    ),
}

#: Most appends committed in one transaction.
DEFAULT_MAX_BATCH: Final = 256
#: How often (seconds) keys older than the TTL are swept; between sweeps an
#: expired key is already ignored on lookup, so this only bounds disk use.
_SWEEP_INTERVAL_S: Final = 60.0

Synchronous = Literal["off", "normal", "full", "extra"]
_T = TypeVar("_T")


def _unavailable(path: Path, err: sqlite3.Error) -> StoreError:
    """Map a sqlite3 error to the store's error tree.

    Operational errors (locked, busy, disk I/O, disk full, cannot open) are
    transient or environmental: ``StoreUnavailable``, nothing was applied.
    """
    if isinstance(err, sqlite3.OperationalError):
        return StoreUnavailable(f"sqlite store {path}: {err}")
    return StoreError(f"sqlite store {path}: {type(err).__name__}: {err}")


class _Database:
    """The connection and every SQL statement. Used only from the worker thread."""

    def __init__(
        self,
        folder: Path,
        synchronous: Synchronous,
        retention: int,
        ttl_ms: int,
        busy_timeout_s: float,
        clock: Callable[[], float],
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / DATABASE_FILE
        # isolation_level=None: we issue BEGIN/COMMIT ourselves.
        # Used from the worker thread and, for inline writes, from the event
        # loop's thread; ``lock`` makes sure never from both at once.
        self.conn = sqlite3.connect(
            self.path, isolation_level=None, timeout=busy_timeout_s, check_same_thread=False
        )
        self.lock = threading.Lock()
        self.retention = retention
        self.ttl_ms = ttl_ms
        self.clock = clock
        self.encoder = msgspec.msgpack.Encoder()
        self.decoder = msgspec.msgpack.Decoder(TranscriptEvent)
        self.last_sweep_ms = 0
        try:
            mode = self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise StoreUnavailable(f"sqlite store {self.path}: cannot use WAL (got {mode})")
            self.conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._migrate()
        except BaseException:
            self.conn.close()
            raise

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _migrate(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            version: int = self.conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"sqlite store {self.path}: schema version {version} is newer than "
                    f"this program's {SCHEMA_VERSION}"
                )
            while version < SCHEMA_VERSION:
                for statement in _MIGRATIONS[version]:
                    self.conn.execute(statement)
                version += 1
                self.conn.execute(f"PRAGMA user_version={version}")
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        # SQLite rolls some failures back on its own (e.g. disk full); then
        # there is no transaction left and ROLLBACK would mask the real error.
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def close(self) -> None:
        self.conn.close()

    # --- reads -------------------------------------------------------------

    def load(self, transcript_id: str) -> StoredTranscript | None:
        # One read transaction so the events and the keys are of one instant.
        self.conn.execute("BEGIN")
        try:
            row = self.conn.execute(
                "SELECT epoch, created_at FROM transcripts WHERE id = ?", (transcript_id,)
            ).fetchone()
            if row is None:
                return None
            events = tuple(
                self.decoder.decode(data)
                for (data,) in self.conn.execute(
                    "SELECT data FROM events WHERE transcript_id = ? ORDER BY revision",
                    (transcript_id,),
                )
            )
            keys = {
                key: AppendAck(revision, start, count)
                for key, revision, start, count in self.conn.execute(
                    "SELECT key, revision, start, count FROM idempotency"
                    " WHERE transcript_id = ? AND created_at >= ? ORDER BY revision",
                    (transcript_id, self.now_ms() - self.ttl_ms),
                )
            }
            return StoredTranscript(transcript_id, row[0], row[1], events, keys)
        finally:
            self.conn.execute("COMMIT")

    def events_after(
        self, transcript_id: str, revision: int, limit: int | None
    ) -> list[TranscriptEvent] | None:
        self.conn.execute("BEGIN")
        try:
            row = self.conn.execute(
                "SELECT revision FROM transcripts WHERE id = ?", (transcript_id,)
            ).fetchone()
            if row is None:
                raise TranscriptNotFound(transcript_id)
            if revision > row[0]:
                return None
            return [
                self.decoder.decode(data)
                for (data,) in self.conn.execute(
                    "SELECT data FROM events WHERE transcript_id = ? AND revision > ?"
                    " ORDER BY revision LIMIT ?",
                    (transcript_id, revision, -1 if limit is None else limit),
                )
            ]
        finally:
            self.conn.execute("COMMIT")

    def list_transcripts(self, after: str | None, limit: int) -> list[TranscriptInfo]:
        rows = self.conn.execute(
            "SELECT id, epoch, revision, length, created_at, updated_at FROM transcripts"
            " WHERE id > ? ORDER BY id LIMIT ?",
            ("" if after is None else after, limit),
        ).fetchall()
        return [TranscriptInfo(*row) for row in rows]

    # --- writes ------------------------------------------------------------

    def create(
        self,
        transcript_id: str,
        epoch: str,
        created_at: int,
        first: TranscriptEvent | None,
        key: str | None,
    ) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            exists = self.conn.execute(
                "SELECT 1 FROM transcripts WHERE id = ?", (transcript_id,)
            ).fetchone()
            if exists:
                raise TranscriptExists(transcript_id)
            self.conn.execute(
                "INSERT INTO transcripts (id, epoch, created_at, updated_at, revision, length)"
                " VALUES (?, ?, ?, ?, 0, 0)",
                (transcript_id, epoch, created_at, created_at),
            )
            if first is not None:
                self._accept(first, 0, key, self.now_ms())
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def delete(self, transcript_id: str) -> bool:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            deleted = self.conn.execute(
                "DELETE FROM transcripts WHERE id = ?", (transcript_id,)
            ).rowcount
            self.conn.execute("DELETE FROM events WHERE transcript_id = ?", (transcript_id,))
            self.conn.execute("DELETE FROM idempotency WHERE transcript_id = ?", (transcript_id,))
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        return deleted > 0

    def append_batch(
        self, batch: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> list[AppendResult | Exception]:
        """Commit a batch of appends in one transaction; one outcome per append.

        A refused append is rolled back to its savepoint and reported as its
        exception; the others still commit. If the transaction itself fails
        (disk, lock), the sqlite3 error propagates and nothing was applied.
        """
        now = self.now_ms()
        outcomes: list[AppendResult | Exception] = []
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for event, key in batch:
                self.conn.execute("SAVEPOINT one_append")
                try:
                    outcome: AppendResult | Exception = self._append_one(event, key, now)
                except sqlite3.OperationalError:
                    raise  # the connection or the disk: the whole batch fails
                except Exception as err:
                    self.conn.execute("ROLLBACK TO one_append")
                    outcome = (
                        _unavailable(self.path, err) if isinstance(err, sqlite3.Error) else err
                    )
                self.conn.execute("RELEASE one_append")
                outcomes.append(outcome)
            self._sweep_expired_keys(now)
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        return outcomes

    def _append_one(self, event: TranscriptEvent, key: str | None, now: int) -> AppendResult:
        tid = event.transcript_id
        row = self.conn.execute(
            "SELECT epoch, revision, length FROM transcripts WHERE id = ?", (tid,)
        ).fetchone()
        if row is None:
            raise TranscriptNotFound(tid)
        epoch, revision, length = row
        if event.epoch != epoch:
            raise RevisionMismatch(tid, event.revision - 1, revision)
        if key is not None:
            ack = self._recorded_ack(tid, key, now)
            if ack is not None:
                return AppendResult(ack, duplicate=True)
        if event.revision != revision + 1:
            raise RevisionMismatch(tid, event.revision - 1, revision)
        return AppendResult(self._accept(event, length, key, now))

    def _recorded_ack(self, transcript_id: str, key: str, now: int) -> AppendAck | None:
        row = self.conn.execute(
            "SELECT revision, start, count FROM idempotency"
            " WHERE transcript_id = ? AND key = ? AND created_at >= ?",
            (transcript_id, key, now - self.ttl_ms),
        ).fetchone()
        return None if row is None else AppendAck(*row)

    def _accept(self, event: TranscriptEvent, length: int, key: str | None, now: int) -> AppendAck:
        """Write an event already checked to be the next one, and its key."""
        tid = event.transcript_id
        if isinstance(event.change, MessagesAppended):
            length = event.change.end
        self.conn.execute(
            "INSERT INTO events (transcript_id, revision, occurred_at, data) VALUES (?, ?, ?, ?)",
            (tid, event.revision, event.occurred_at, self.encoder.encode(event)),
        )
        self.conn.execute(
            "UPDATE transcripts SET revision = ?, length = ?, updated_at = ? WHERE id = ?",
            (event.revision, length, event.occurred_at, tid),
        )
        ack = AppendAck.for_event(event)
        if key is not None and self.retention > 0:
            # REPLACE: the key may still be on disk, expired but not yet swept.
            self.conn.execute(
                "INSERT OR REPLACE INTO idempotency"
                " (transcript_id, key, revision, start, count, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (tid, key, ack.revision, ack.start, ack.count, now),
            )
            # Keep the newest `retention` keys: drop the (retention+1)-th newest and older.
            self.conn.execute(
                "DELETE FROM idempotency WHERE transcript_id = ?1 AND revision <= ("
                " SELECT revision FROM idempotency WHERE transcript_id = ?1"
                " ORDER BY revision DESC LIMIT 1 OFFSET ?2)",
                (tid, self.retention),
            )
        return ack

    def _sweep_expired_keys(self, now: int) -> None:
        if now - self.last_sweep_ms < _SWEEP_INTERVAL_S * 1000:
            return
        self.last_sweep_ms = now
        self.conn.execute("DELETE FROM idempotency WHERE created_at < ?", (now - self.ttl_ms,))


@dataclass
class _PendingAppend:
    event: TranscriptEvent
    key: str | None
    future: asyncio.Future[AppendResult]


class SQLiteStore:
    """A ``Store`` in one SQLite file inside the data folder ``path``.

    ``synchronous``: ``"normal"`` survives SIGKILL, ``"full"`` also power loss.
    ``idempotency_retention`` keys are kept per transcript (the newest), each
    for at most ``idempotency_ttl_s`` seconds. ``max_batch`` bounds how many
    appends share one commit (1 turns group commit off). ``inline_writes``
    commits each append in the event loop's own thread instead (no group
    commit): a WAL commit with ``synchronous=normal`` takes tens of
    microseconds, less than the two trips through the event loop and the
    GIL that handing it to the worker costs under load. ``busy_timeout_s`` is
    how long a write waits for another process's lock before the store answers
    ``StoreUnavailable``. ``clock`` gives the time in seconds used to age
    idempotency keys.
    """

    name = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "normal",
        idempotency_retention: int = 1000,
        idempotency_ttl_s: float = 86400,
        max_batch: int = DEFAULT_MAX_BATCH,
        busy_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        inline_writes: bool = True,
    ) -> None:
        if synchronous not in ("off", "normal", "full", "extra"):
            raise ValueError(f"synchronous must be off, normal, full or extra, not {synchronous!r}")
        if idempotency_retention < 0:
            raise ValueError("idempotency_retention must be >= 0")
        if idempotency_ttl_s <= 0:
            raise ValueError("idempotency_ttl_s must be > 0")
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.path = Path(path)
        self._synchronous: Synchronous = synchronous
        self._retention = idempotency_retention
        self._ttl_ms = int(idempotency_ttl_s * 1000)
        self._max_batch = max_batch
        self._busy_timeout_s = busy_timeout_s
        self._clock = clock
        self._inline_writes = inline_writes
        self._executor: ThreadPoolExecutor | None = None
        self._db: _Database | None = None
        self._pending: list[_PendingAppend] = []
        self._wakeup = asyncio.Event()
        self._committer: asyncio.Task[None] | None = None
        self._closing = False
        #: Append transactions run, and appends they carried (for metrics:
        #: ``batched_appends / append_transactions`` is the mean batch size).
        self.append_transactions = 0
        self.batched_appends = 0

    @property
    def database_file(self) -> Path:
        """The database file inside the data folder."""
        return self.path / DATABASE_FILE

    async def open(self) -> None:
        """Create the folder and the file if missing, switch to WAL, migrate."""
        if self._db is not None:
            raise RuntimeError("store is already open")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        folder = self.path
        try:
            self._db = await self._run_raw(
                lambda: _Database(
                    folder,
                    self._synchronous,
                    self._retention,
                    self._ttl_ms,
                    self._busy_timeout_s,
                    self._clock,
                )
            )
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise
        self._closing = False
        self._wakeup = asyncio.Event()
        self._committer = asyncio.create_task(self._commit_loop(), name="sqlite-store-committer")

    async def close(self) -> None:
        """Commit every queued append, then close the file and stop the worker."""
        if self._db is None:
            return
        self._closing = True
        self._wakeup.set()
        if self._committer is not None:
            await self._committer
            self._committer = None
        db, executor = self._db, self._executor
        self._db = None
        self._executor = None
        assert executor is not None
        try:
            await asyncio.get_running_loop().run_in_executor(executor, db.close)
        finally:
            # The worker is idle now, so this does not block.
            executor.shutdown(wait=True)

    # --- the worker ----------------------------------------------------------

    async def _run_raw(self, fn: Callable[[], _T]) -> _T:
        assert self._executor is not None
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn)
        except sqlite3.Error as err:
            raise _unavailable(self.path, err) from err

    async def _run(self, fn: Callable[[_Database], _T]) -> _T:
        db = self._db
        if db is None or self._closing:
            raise StoreUnavailable(f"sqlite store {self.path} is not open")

        def locked() -> _T:
            with db.lock:
                return fn(db)

        return await self._run_raw(locked)

    # --- Store -----------------------------------------------------------------

    async def create(
        self,
        transcript_id: str,
        epoch: str,
        created_at: int,
        first: TranscriptEvent | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> None:
        """Create a transcript, with its first event (revision 1) if given.

        ``idempotency_key`` is recorded with the first event's ack; without a
        first event there is no ack and the key is ignored.
        """
        check_first_event(transcript_id, epoch, first)
        await self._run(
            lambda db: db.create(transcript_id, epoch, created_at, first, idempotency_key)
        )

    async def load(self, transcript_id: str) -> StoredTranscript | None:
        return await self._run(lambda db: db.load(transcript_id))

    async def append(
        self, event: TranscriptEvent, *, idempotency_key: str | None = None
    ) -> AppendResult:
        db = self._db
        if db is None or self._closing:
            raise StoreUnavailable(f"sqlite store {self.path} is not open")
        if self._inline_writes:
            try:
                with db.lock:
                    (outcome,) = db.append_batch([(event, idempotency_key)])
            except sqlite3.Error as err:
                raise _unavailable(self.path, err) from err
            self.append_transactions += 1
            self.batched_appends += 1
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self._pending.append(_PendingAppend(event, idempotency_key, future))
        self._wakeup.set()
        # If the caller is cancelled the append may still commit, as with any
        # database; a retry with the same idempotency key is then a duplicate.
        return await future

    async def append_many(
        self, items: Sequence[tuple[TranscriptEvent, str | None]]
    ) -> list[AppendResult | Exception]:
        """Several appends in order, committed in one transaction; one
        outcome per item (``append``'s result or the exception it would
        raise). Raises ``StoreUnavailable`` when nothing could be committed."""
        db = self._db
        if db is None or self._closing:
            raise StoreUnavailable(f"sqlite store {self.path} is not open")
        if self._inline_writes:
            try:
                with db.lock:
                    outcomes = db.append_batch(items)
            except sqlite3.Error as err:
                raise _unavailable(self.path, err) from err
            self.append_transactions += 1
            self.batched_appends += len(items)
            return outcomes
        # The committer takes them in this order, most likely in one batch.
        results = await asyncio.gather(
            *(self.append(event, idempotency_key=key) for event, key in items),
            return_exceptions=True,
        )
        return [
            r if isinstance(r, AppendResult | Exception) else StoreUnavailable(str(r))
            for r in results
        ]

    async def _commit_loop(self) -> None:
        """Hand everything queued to the worker, one transaction per turn."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                await self._commit(batch)
            if self._closing:
                return

    async def _commit(self, batch: list[_PendingAppend]) -> None:
        db = self._db
        assert db is not None
        work = [(p.event, p.key) for p in batch]

        def commit() -> list[AppendResult | Exception]:
            with db.lock:
                return db.append_batch(work)

        try:
            outcomes = await self._run_raw(commit)
        except asyncio.CancelledError:
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(StoreUnavailable("sqlite store was shut down"))
            raise
        except Exception as err:
            for p in batch:
                if not p.future.done():
                    # A fresh exception per caller: they are raised in different tasks.
                    p.future.set_exception(type(err)(*err.args))
            return
        self.append_transactions += 1
        self.batched_appends += len(batch)
        for p, result in zip(batch, outcomes, strict=True):
            if p.future.done():
                continue
            if isinstance(result, Exception):
                p.future.set_exception(result)
            else:
                p.future.set_result(result)

    async def events_after(
        self, transcript_id: str, revision: int, *, limit: int | None = None
    ) -> list[TranscriptEvent] | None:
        """Events after ``revision``; the whole log is kept, so ``None`` only
        when ``revision`` is beyond the stored one."""
        check_events_after_args(revision, limit)
        return await self._run(lambda db: db.events_after(transcript_id, revision, limit))

    async def list(self, *, after: str | None = None, limit: int = 100) -> list[TranscriptInfo]:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        return await self._run(lambda db: db.list_transcripts(after, limit))

    async def delete(self, transcript_id: str) -> bool:
        return await self._run(lambda db: db.delete(transcript_id))
