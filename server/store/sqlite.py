"""``SQLiteStore``: the embedded, durable ``Store`` of ``tsync serve``.

One data folder holds one database file, ``transcripts.sqlite3``, in WAL mode.
With ``synchronous=normal`` (the default) every committed append survives the
process being killed (SIGKILL); ``synchronous=full`` also survives power loss.

Three connections, one per thread, none ever shared:

- **Writes** (create, append, delete) go through ONE path: they are queued,
  and a callback on the event loop's own thread commits everything queued so
  far as one transaction on the write connection (group commit: one WAL
  fsync for the batch under ``full``, not one per append). Each write of a
  batch of several runs in its own SAVEPOINT, so one refused write (revision
  mismatch, unknown transcript) never takes the others of its batch down
  with it (but the later appends of the same ``append_many`` run to that
  transcript are refused too: they were planned on top of it); a batch of
  one needs none (its transaction rolls back instead). A commit
  takes tens of microseconds with ``normal`` (measured: less than handing it
  to a thread, which costs two trips through the loop and the GIL), about a
  millisecond with ``full``; the loop pays it once per batch. An append is
  five statements (BEGIN, the row, the event, one UPDATE of the row, COMMIT;
  two more with an idempotency key, three past the retention): the
  listing's preview is made when listed, the title only until there is one,
  and the keys are counted in the row, so no append scans them.
- **Checkpoints** (copying the WAL into the database file) run on a thread
  of their own (``_Checkpointer``), not after a commit on the loop's thread
  (SQLite's default: up to ~10 ms every ~1,000 pages): every
  ``checkpoint_pages`` pages and a second after a write. When the writes
  outrun them the thread goes again at once; only a WAL grown to 16 times
  ``checkpoint_pages`` is copied by the writer, so that it starts over;
  when they keep failing, SQLite's own checkpoint comes back.
  Checkpoints move committed pages: what is durable does not change.
- **Reads** (load, events_after, list) run on a worker thread on a read-only
  connection of their own. WAL lets them read while the loop writes, so a
  load of a long transcript never holds up an append to another one, nor
  the event loop (``tests/server/store/test_store_sqlite.py`` measures the loop's
  lag during a 40,000-event load).

Only another process can make a write wait (``busy_timeout_s``): run one
server per data folder.

Tables::

    transcripts (id PK, epoch, created_at, updated_at, revision, length,
                 active_start, view_changes, title, preview, key_count)
                 preview: NULL since version 4 (made when listed, from the
                 newest append); key_count: the rows of ``idempotency``
    events      (transcript_id, revision, occurred_at, data, msg_end)
                                                               PK (transcript_id, revision)
                 data = the TranscriptEvent as msgspec MessagePack; msg_end = one
                 past the last message an append added (NULL for other changes),
                 indexed: the events holding messages [a, b) are the appends
                 with msg_end > a, in msg_end order, up to the first reaching b
    segments    (transcript_id, revision, start, end)           PK (transcript_id, revision)
                 every closed segment, by the revision that closed it
    views       (transcript_id, name, start, end)               PK (transcript_id, name)
    idempotency (transcript_id, key, revision, start, count, created_at)
                                                               PK (transcript_id, key)

So ``load_recent`` and ``read_messages`` read the state from ``transcripts``,
``segments`` and ``views`` and only the events that hold the messages asked
for: a tail of a 100,000-message transcript costs what the tail costs.

The schema version lives in ``PRAGMA user_version``; ``_MIGRATIONS`` takes a
database from each version to the next (a step is SQL, or a function for
what SQL cannot do: version 2 decodes every stored event once to fill in
the new columns and tables).

Why one module of over 600 lines: one backend behind one connection: schema and
migrations, group commit, appends as prefixes, reads and idempotency share its
transaction discipline, which is easier to check in one place.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec

from protocol.digest import genesis_digest, next_digest
from protocol.summary import preview_of, title_of
from protocol.types import (
    Message,
    MessagesAppended,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
    View,
    ViewChanged,
)
from server.store.base import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    DEFAULT_IDEMPOTENCY_TTL_S,
    LOADED_KEYS,
    AppendResult,
    Receipt,
    RevisionMismatch,
    StoredRange,
    StoredState,
    StoredTranscript,
    StoreError,
    StoreUnavailable,
    TranscriptExists,
    TranscriptInfo,
    TranscriptNotFound,
    check_events_after_args,
    check_first_event,
    check_list_args,
    check_range_args,
    digest_of_log,
    head_digest,
    messages_in,
    position_of,
    recent_start,
)
from server.store.options import SQLiteOptions, validated

__all__ = ["DATABASE_FILE", "SCHEMA_VERSION", "SQLiteStore"]

#: The database file inside the data folder.
DATABASE_FILE: Final = "transcripts.sqlite3"

#: The schema version this code writes; kept in ``PRAGMA user_version``.
SCHEMA_VERSION: Final = 4


def _index_history(conn: sqlite3.Connection) -> None:
    """Version 2: fill ``msg_end``, ``segments``, ``active_start``, ``title``
    and ``preview`` from the events already stored (decoded once each)."""
    decoder = msgspec.msgpack.Decoder(TranscriptEvent)
    titles: dict[str, str] = {}
    previews: dict[str, str | None] = {}
    actives: dict[str, int] = {}
    rows = conn.execute("SELECT transcript_id, revision, data FROM events ORDER BY rowid")
    for tid, revision, data in rows.fetchall():
        change = decoder.decode(data).change
        if isinstance(change, MessagesAppended):
            conn.execute(
                "UPDATE events SET msg_end = ? WHERE transcript_id = ? AND revision = ?",
                (change.end, tid, revision),
            )
            if tid not in titles:
                title = title_of(change.messages)
                if title is not None:
                    titles[tid] = title
            previews[tid] = preview_of(change.messages)
        elif isinstance(change, SegmentStarted):
            conn.execute(
                'INSERT INTO segments (transcript_id, revision, start, "end") VALUES (?, ?, ?, ?)',
                (tid, revision, change.previous_start, change.end),
            )
            actives[tid] = change.start
    for tid, title in titles.items():
        conn.execute("UPDATE transcripts SET title = ? WHERE id = ?", (title, tid))
    for tid, preview in previews.items():
        conn.execute("UPDATE transcripts SET preview = ? WHERE id = ?", (preview, tid))
    for tid, active in actives.items():
        conn.execute("UPDATE transcripts SET active_start = ? WHERE id = ?", (active, tid))


def _digest_history(conn: sqlite3.Connection) -> None:
    """Version 3: every stored event gets the digest at its revision
    (``protocol.digest``), computed from the history once; events stored
    since carry the one their transcript computed."""
    decoder = msgspec.msgpack.Decoder(TranscriptEvent)
    encoder = msgspec.msgpack.Encoder()
    digest = ""
    current = None
    rows = conn.execute(
        "SELECT transcript_id, revision, data FROM events ORDER BY transcript_id, revision"
    )
    for tid, revision, data in rows.fetchall():
        if tid != current:
            current, digest = tid, genesis_digest(tid)
        event = decoder.decode(data)
        digest = next_digest(digest, event.change)
        if event.digest != digest:
            conn.execute(
                "UPDATE events SET data = ? WHERE transcript_id = ? AND revision = ?",
                (encoder.encode(msgspec.structs.replace(event, digest=digest)), tid, revision),
            )


#: One step of a migration: a statement, or a function run on the connection.
_Step = str | Callable[[sqlite3.Connection], None]

#: ``_MIGRATIONS[v]`` takes a database at version ``v`` to ``v + 1``.
#: Version 0 is an empty file. Append a step here whenever the schema changes.
_MIGRATIONS: Final[dict[int, tuple[_Step, ...]]] = {
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
    1: (
        "ALTER TABLE transcripts ADD COLUMN active_start INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE transcripts ADD COLUMN view_changes INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE transcripts ADD COLUMN title TEXT",
        "ALTER TABLE transcripts ADD COLUMN preview TEXT",
        "ALTER TABLE events ADD COLUMN msg_end INTEGER",
        """CREATE TABLE segments (
            transcript_id TEXT NOT NULL,
            revision INTEGER NOT NULL,
            start INTEGER NOT NULL,
            "end" INTEGER NOT NULL,
            PRIMARY KEY (transcript_id, revision)
        )""",
        """CREATE TABLE views (
            transcript_id TEXT NOT NULL,
            name TEXT NOT NULL,
            start INTEGER NOT NULL,
            "end" INTEGER,
            PRIMARY KEY (transcript_id, name)
        )""",
        _index_history,
        # After the backfill: one index build instead of one update per row.
        "CREATE INDEX events_by_msg_end ON events (transcript_id, msg_end)",
    ),
    2: (_digest_history,),
    3: (
        # Counted so that an append knows without a scan whether its key
        # takes the count past the retention.
        "ALTER TABLE transcripts ADD COLUMN key_count INTEGER NOT NULL DEFAULT 0",
        "UPDATE transcripts SET key_count ="
        " (SELECT count(*) FROM idempotency WHERE transcript_id = transcripts.id)",
        # The preview is made when listed, from the newest append.
        "UPDATE transcripts SET preview = NULL",
    ),
}

#: A commit's pages in the WAL, guessed until the first checkpoint measures it.
_PAGES_PER_COMMIT: Final = 4
#: At most this many commits between two checkpoints, whatever the guess.
_MAX_CHECKPOINT_EVERY: Final = 10_000
#: Seconds after a commit before the WAL is checkpointed anyway.
_CHECKPOINT_IDLE_S: Final = 1.0
#: Previews the reader keeps between listings (all dropped past this many).
_PREVIEWS_KEPT: Final = 10_000
#: Rounds of a checkpoint on its thread: each copies what the writes added
#: during the one before, until one finds nothing new.
_CHECKPOINT_ROUNDS: Final = 3
#: The writes outran the checkpoint thread and the WAL holds this many times
#: ``checkpoint_pages``: the thread goes again at once.
_OUTRUN: Final = 4
#: The WAL holds this many times ``checkpoint_pages`` though the thread goes
#: again at once each time it is outrun: the writer copies the rest itself,
#: between two commits, so that the WAL cannot grow without bound.
_WRITER_COPIES: Final = 16
#: Checkpoints that failed in a row before SQLite's own on the writer takes over.
_CHECKPOINT_FAILURES: Final = 3

_T = TypeVar("_T")
#: One write: runs inside the batch's transaction, given the commit's time (ms).
_Write = Callable[[int], Any]


def _unavailable(path: Path, err: sqlite3.Error) -> StoreError:
    """Map a sqlite3 error to the store's error tree.

    Operational errors (locked, busy, disk I/O, disk full, cannot open) are
    transient or environmental: ``StoreUnavailable``, nothing was applied.
    """
    if isinstance(err, sqlite3.OperationalError):
        return StoreUnavailable(f"sqlite store {path}: {err}")
    return StoreError(f"sqlite store {path}: {type(err).__name__}: {err}")


def _connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves.
    return sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_s)


class _Writer:
    """The write connection and every statement that changes the file. Made,
    used and closed on the event loop's thread only."""

    def __init__(
        self,
        folder: Path,
        options: SQLiteOptions,
        retention: int,
        ttl_s: float,
        clock: Callable[[], float],
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / DATABASE_FILE
        self.conn = _connect(self.path, options.busy_timeout_s)
        self.retention = retention
        self.ttl_ms = int(ttl_s * 1000)
        self.sweep_interval_ms = int(options.key_sweep_interval_s * 1000)
        self.clock = clock
        self.encoder = msgspec.msgpack.Encoder()
        self.last_sweep_ms = 0
        try:
            mode = self.conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise StoreUnavailable(f"sqlite store {self.path}: cannot use WAL (got {mode})")
            self.conn.execute(f"PRAGMA synchronous={options.synchronous.upper()}")
            # Checkpoints run on the store's checkpoint thread (``_Checkpointer``),
            # not after a commit on the loop's thread.
            self.conn.execute("PRAGMA wal_autocheckpoint=0")
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
                for step in _MIGRATIONS[version]:
                    if callable(step):
                        step(self.conn)
                    else:
                        self.conn.execute(step)
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

    def commit(self, batch: Sequence[Sequence[_Write]]) -> list[list[Any]]:
        """Run every write of ``batch`` in one transaction; one outcome per
        write (its result or the exception it raised), grouped as given.

        A refused write is rolled back to its savepoint and reported as its
        exception; the others still commit. If the transaction itself fails
        (disk, lock), the sqlite3 error propagates and nothing was applied.
        """
        now = self.now_ms()
        outcomes: list[list[Any]] = []
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            if len(batch) == 1 and len(batch[0]) == 1:
                # One write: the transaction is its savepoint (a refusal rolls
                # back only it), two statements fewer than SAVEPOINT/RELEASE.
                try:
                    outcomes.append([batch[0][0](now)])
                except sqlite3.OperationalError:
                    raise  # the connection or the disk: the batch fails
                except Exception as err:
                    self._rollback()
                    return [[self._refusal(err)]]
            else:
                for group in batch:
                    results: list[Any] = []
                    for write in group:
                        self.conn.execute("SAVEPOINT one_write")
                        try:
                            outcome: Any = write(now)
                        except sqlite3.OperationalError:
                            raise  # the connection or the disk: the whole batch fails
                        except Exception as err:
                            self.conn.execute("ROLLBACK TO one_write")
                            outcome = self._refusal(err)
                        self.conn.execute("RELEASE one_write")
                        results.append(outcome)
                    outcomes.append(results)
            self._sweep_expired_keys(now)
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        return outcomes

    def _refusal(self, err: Exception) -> Exception:
        """What a refused write reports: its exception, a sqlite3 error as the store's."""
        return _unavailable(self.path, err) if isinstance(err, sqlite3.Error) else err

    # --- the writes (each inside ``commit``'s transaction) --------------------

    def create(
        self,
        transcript_id: str,
        epoch: str,
        created_at: int,
        first: TranscriptEvent | None,
        key: str | None,
        now: int,
    ) -> None:
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
            self._accept(first, 0, key, now, untitled=True, key_count=0, key_on_disk=False)

    def delete(self, transcript_id: str) -> bool:
        deleted = self.conn.execute(
            "DELETE FROM transcripts WHERE id = ?", (transcript_id,)
        ).rowcount
        for table in ("events", "idempotency", "segments", "views"):
            self.conn.execute(f"DELETE FROM {table} WHERE transcript_id = ?", (transcript_id,))
        return deleted > 0

    def append(self, event: TranscriptEvent, key: str | None, now: int) -> AppendResult:
        tid = event.transcript_id
        row = self.conn.execute(
            "SELECT epoch, revision, length, title IS NULL, key_count"
            " FROM transcripts WHERE id = ?",
            (tid,),
        ).fetchone()
        if row is None:
            raise TranscriptNotFound(tid)
        epoch, revision, length, untitled, key_count = row
        if event.epoch != epoch:
            raise RevisionMismatch(tid, event.revision - 1, revision)
        key_on_disk = False
        if key is not None:
            found = self.conn.execute(
                "SELECT revision, start, count, created_at FROM idempotency"
                " WHERE transcript_id = ? AND key = ?",
                (tid, key),
            ).fetchone()
            if found is not None:
                if found[3] >= now - self.ttl_ms:
                    return AppendResult(Receipt(*found[:3]), duplicate=True)
                key_on_disk = True  # expired, not swept yet: replaced, still counted
        if event.revision != revision + 1 or position_of(event) not in (None, length):
            raise RevisionMismatch(tid, event.revision - 1, revision)
        receipt = self._accept(
            event,
            length,
            key,
            now,
            untitled=bool(untitled),
            key_count=key_count,
            key_on_disk=key_on_disk,
        )
        return AppendResult(receipt)

    def not_attempted(self, event: TranscriptEvent) -> StoreError:
        """The refusal of an item of ``append_many`` planned on top of one
        that was not stored."""
        tid = event.transcript_id
        row = self.conn.execute("SELECT revision FROM transcripts WHERE id = ?", (tid,)).fetchone()
        if row is None:
            return TranscriptNotFound(tid)
        return RevisionMismatch(tid, event.revision - 1, row[0])

    def _accept(
        self,
        event: TranscriptEvent,
        length: int,
        key: str | None,
        now: int,
        *,
        untitled: bool,
        key_count: int,
        key_on_disk: bool,
    ) -> Receipt:
        """Write an event already checked to be the next one, and its key,
        with one UPDATE of the transcript's row. ``untitled``: the row has no
        title yet; ``key_count``: its keys on disk; ``key_on_disk``: ``key``
        is one of them (expired, to be replaced)."""
        tid = event.transcript_id
        change = event.change
        msg_end: int | None = None
        if isinstance(change, MessagesAppended):
            length = msg_end = change.end
        self.conn.execute(
            "INSERT INTO events (transcript_id, revision, occurred_at, data, msg_end)"
            " VALUES (?, ?, ?, ?, ?)",
            (tid, event.revision, event.occurred_at, self.encoder.encode(event), msg_end),
        )
        sets = "revision = ?, length = ?, updated_at = ?"
        params: list[Any] = [event.revision, length, event.occurred_at]
        if isinstance(change, MessagesAppended):
            # The title is the first user message's: made until there is one,
            # then never again. The preview is made when listed (``_Reader``).
            title = title_of(change.messages) if untitled else None
            if title is not None:
                sets += ", title = ?"
                params.append(title)
        elif isinstance(change, SegmentStarted):
            self.conn.execute(
                'INSERT INTO segments (transcript_id, revision, start, "end") VALUES (?, ?, ?, ?)',
                (tid, event.revision, change.previous_start, change.end),
            )
            sets += ", active_start = ?"
            params.append(change.start)
        else:
            if isinstance(change, ViewChanged):
                self.conn.execute(
                    'INSERT OR REPLACE INTO views (transcript_id, name, start, "end")'
                    " VALUES (?, ?, ?, ?)",
                    (tid, change.name, change.start, change.end),
                )
            else:
                self.conn.execute(
                    "DELETE FROM views WHERE transcript_id = ? AND name = ?", (tid, change.name)
                )
            sets += ", view_changes = view_changes + 1"
        receipt = Receipt.for_event(event)
        if key is not None and self.retention > 0:
            # REPLACE: the key may still be on disk, expired but not yet swept.
            self.conn.execute(
                "INSERT OR REPLACE INTO idempotency"
                " (transcript_id, key, revision, start, count, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (tid, key, receipt.revision, receipt.start, receipt.count, now),
            )
            if not key_on_disk:
                key_count += 1
            if key_count > self.retention:
                # Keep the newest `retention` keys (by revision): drop the oldest.
                self.conn.execute(
                    "DELETE FROM idempotency WHERE rowid IN (SELECT rowid FROM idempotency"
                    " WHERE transcript_id = ? ORDER BY revision LIMIT ?)",
                    (tid, key_count - self.retention),
                )
                key_count = self.retention
            sets += ", key_count = ?"
            params.append(key_count)
        params.append(tid)
        self.conn.execute(f"UPDATE transcripts SET {sets} WHERE id = ?", params)
        return receipt

    def _sweep_expired_keys(self, now: int) -> None:
        if now - self.last_sweep_ms < self.sweep_interval_ms:
            return
        self.last_sweep_ms = now
        expired = self.conn.execute(
            "SELECT transcript_id, count(*) FROM idempotency WHERE created_at < ?"
            " GROUP BY transcript_id",
            (now - self.ttl_ms,),
        ).fetchall()
        if expired:
            self.conn.execute("DELETE FROM idempotency WHERE created_at < ?", (now - self.ttl_ms,))
            self.conn.executemany(
                "UPDATE transcripts SET key_count = key_count - ? WHERE id = ?",
                [(count, tid) for tid, count in expired],
            )


def _recorded(
    conn: sqlite3.Connection, transcript_id: str, key: str, since_ms: int
) -> Receipt | None:
    row = conn.execute(
        "SELECT revision, start, count FROM idempotency"
        " WHERE transcript_id = ? AND key = ? AND created_at >= ?",
        (transcript_id, key, since_ms),
    ).fetchone()
    return None if row is None else Receipt(*row)


class _Reader:
    """The read-only connection and every query. Made, used and closed on the
    store's worker thread only."""

    def __init__(
        self, path: Path, options: SQLiteOptions, ttl_ms: int, clock: Callable[[], float]
    ) -> None:
        self.conn = _connect(path, options.busy_timeout_s)
        self.conn.execute("PRAGMA query_only=ON")
        self.ttl_ms = ttl_ms
        self.clock = clock
        self.decoder = msgspec.msgpack.Decoder(TranscriptEvent)
        #: The listing's previews, by transcript, with the version they were
        #: made at (``_preview``).
        self.previews: dict[str, tuple[tuple[str, int, int, int], str | None]] = {}

    def close(self) -> None:
        self.conn.close()

    def load(self, transcript_id: str) -> StoredTranscript | None:
        # One read transaction so the events and the keys are of one instant.
        self.conn.execute("BEGIN")
        try:
            row = self.conn.execute(
                "SELECT epoch, created_at FROM transcripts WHERE id = ?", (transcript_id,)
            ).fetchone()
            if row is None:
                return None
            size = 0
            decoded: list[TranscriptEvent] = []
            for (data,) in self.conn.execute(
                "SELECT data FROM events WHERE transcript_id = ? ORDER BY revision",
                (transcript_id,),
            ):
                size += len(data)
                decoded.append(self.decoder.decode(data))
            return StoredTranscript(
                transcript_id, row[0], row[1], tuple(decoded), self._keys(transcript_id), size
            )
        finally:
            self.conn.execute("COMMIT")

    def recorded(self, transcript_id: str, key: str) -> Receipt | None:
        return _recorded(self.conn, transcript_id, key, int(self.clock() * 1000) - self.ttl_ms)

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

    def load_recent(self, transcript_id: str, messages: int | None) -> StoredState | None:
        self.conn.execute("BEGIN")
        try:
            row = self.conn.execute(
                "SELECT epoch, created_at, revision, length, active_start, view_changes"
                " FROM transcripts WHERE id = ?",
                (transcript_id,),
            ).fetchone()
            if row is None:
                return None
            epoch, created_at, revision, length, active_start, view_changes = row
            segments = [
                Segment(start, end)
                for start, end in self.conn.execute(
                    'SELECT start, "end" FROM segments WHERE transcript_id = ? ORDER BY revision',
                    (transcript_id,),
                )
            ]
            segments.append(Segment(active_start, None))
            views = tuple(
                View(name, start, end)
                for name, start, end in self.conn.execute(
                    'SELECT name, start, "end" FROM views WHERE transcript_id = ? ORDER BY name',
                    (transcript_id,),
                )
            )
            first = recent_start(length, messages)
            snapshot = TranscriptSnapshot(
                transcript_id=transcript_id,
                epoch=epoch,
                revision=revision,
                start=first,
                messages=self._messages(transcript_id, first, length),
                active_start=active_start,
                segments=tuple(segments),
                length=length,
                views=views,
                view_changes=view_changes,
                digest=self._digest(transcript_id, revision),
            )
            return StoredState(snapshot, created_at, self._keys(transcript_id))
        finally:
            self.conn.execute("COMMIT")

    def _digest(self, transcript_id: str, revision: int) -> str | None:
        """The digest at ``revision``: its event's (one row), computed from
        the log if that event has none (written by hand, not by a server)."""
        row = self.conn.execute(
            "SELECT data FROM events WHERE transcript_id = ? AND revision = ?",
            (transcript_id, revision),
        ).fetchone()
        digest = head_digest(transcript_id, None if row is None else self.decoder.decode(row[0]))
        if digest is not None:
            return digest
        return digest_of_log(
            transcript_id,
            (
                self.decoder.decode(data)
                for (data,) in self.conn.execute(
                    "SELECT data FROM events WHERE transcript_id = ? ORDER BY revision",
                    (transcript_id,),
                )
            ),
        )

    def read_messages(self, transcript_id: str, start: int, end: int) -> StoredRange:
        self.conn.execute("BEGIN")
        try:
            row = self.conn.execute(
                "SELECT epoch, revision, length FROM transcripts WHERE id = ?", (transcript_id,)
            ).fetchone()
            if row is None:
                raise TranscriptNotFound(transcript_id)
            epoch, revision, length = row
            first, last = min(start, length), min(end, length)
            return StoredRange(
                epoch, revision, length, first, self._messages(transcript_id, first, last)
            )
        finally:
            self.conn.execute("COMMIT")

    def _messages(self, transcript_id: str, start: int, end: int) -> tuple[Message, ...]:
        """Messages ``[start, end)`` from the appends that hold them (inside
        the caller's read transaction)."""
        if start >= end:
            return ()
        rows = self.conn.execute(
            "SELECT data FROM events WHERE transcript_id = ? AND msg_end > ? ORDER BY msg_end",
            (transcript_id, start),
        )
        events: list[TranscriptEvent] = []
        for (data,) in rows:
            event = self.decoder.decode(data)
            events.append(event)
            change = event.change
            if isinstance(change, MessagesAppended) and change.end >= end:
                break
        rows.close()
        return messages_in(events, start, end)

    def _keys(self, transcript_id: str) -> dict[str, Receipt]:
        """The newest ``LOADED_KEYS`` keys not expired, oldest first (the hub's
        memory; older ones are looked up with ``recorded``)."""
        newest = self.conn.execute(
            "SELECT key, revision, start, count FROM idempotency"
            " WHERE transcript_id = ? AND created_at >= ? ORDER BY revision DESC LIMIT ?",
            (transcript_id, int(self.clock() * 1000) - self.ttl_ms, LOADED_KEYS),
        ).fetchall()
        return {
            key: Receipt(revision, start, count) for key, revision, start, count in reversed(newest)
        }

    def list_transcripts(self, after: str | None, limit: int) -> list[TranscriptInfo]:
        self.conn.execute("BEGIN")
        try:
            rows = self.conn.execute(
                "SELECT id, epoch, revision, length, created_at, updated_at, title"
                " FROM transcripts WHERE id > ? ORDER BY id LIMIT ?",
                ("" if after is None else after, limit),
            ).fetchall()
            return [
                TranscriptInfo(
                    tid,
                    epoch,
                    rev,
                    length,
                    created,
                    updated,
                    title,
                    self._preview(tid, (epoch, rev, created, updated)),
                )
                for tid, epoch, rev, length, created, updated, title in rows
            ]
        finally:
            self.conn.execute("COMMIT")

    def _preview(self, transcript_id: str, version: tuple[str, int, int, int]) -> str | None:
        """The preview the newest append gives: made here, not on every
        append, and again only once the transcript has changed (``version``:
        its epoch, revision, created_at and updated_at)."""
        made = self.previews.get(transcript_id)
        if made is not None and made[0] == version:
            return made[1]
        if len(self.previews) >= _PREVIEWS_KEPT:
            self.previews.clear()
        preview = self._newest_preview(transcript_id)
        self.previews[transcript_id] = (version, preview)
        return preview

    def _newest_preview(self, transcript_id: str) -> str | None:
        row = self.conn.execute(
            "SELECT data FROM events WHERE transcript_id = ? AND msg_end IS NOT NULL"
            " ORDER BY msg_end DESC, revision DESC LIMIT 1",
            (transcript_id,),
        ).fetchone()
        if row is None:
            return None
        change = self.decoder.decode(row[0]).change
        return preview_of(change.messages) if isinstance(change, MessagesAppended) else None


class _Checkpointer:
    """A connection of its own that copies the WAL's committed pages into the
    database file (``PRAGMA wal_checkpoint(PASSIVE)``: it waits for neither
    the writer nor the readers, and copies what they let it). Made, used and
    closed on the store's checkpoint thread only; SQLite lets go of the GIL
    while it copies and syncs, so the loop goes on meanwhile."""

    def __init__(self, path: Path, options: SQLiteOptions) -> None:
        self.conn = _connect(path, options.busy_timeout_s)

    def passive(self) -> tuple[int, int, int]:
        """(busy, pages in the WAL, pages of them now in the database file)."""
        busy, log, done = self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return busy, log, done

    def catch_up(self) -> tuple[int, bool, bool]:
        """Checkpoint until a round finds nothing new (the WAL then starts
        over with the next write): (pages the WAL held, caught up, held: a
        reader of an older snapshot keeps pages from being copied)."""
        busy, pages, done = self.passive()
        log = pages
        for _ in range(_CHECKPOINT_ROUNDS):
            if busy or done < log:
                return pages, False, True
            busy, again, done = self.passive()
            if again <= log:  # nothing new, or the WAL started over meanwhile
                return pages, not busy and done == again, busy != 0 or done < again
            log = again
        return pages, False, busy != 0 or done < log

    def close(self) -> None:
        """Copy what is left (the store's other connections are closed by now,
        so nothing stops it), then close: the file's last connection to
        close also deletes the WAL."""
        try:
            self.passive()
        finally:
            self.conn.close()


def _append_writes(
    writer: _Writer, items: Sequence[tuple[TranscriptEvent, str | None]]
) -> list[_Write]:
    """The writes of ``append_many``: they run in order in one transaction;
    once one of a transcript is not stored, the later ones of that
    transcript are refused without being tried (``Store.append_many``)."""
    broken: set[str] = set()

    def write(event: TranscriptEvent, key: str | None, now: int) -> AppendResult:
        tid = event.transcript_id
        if tid in broken:
            raise writer.not_attempted(event)
        try:
            result = writer.append(event, key, now)
        except Exception:
            broken.add(tid)
            raise
        if result.duplicate:
            broken.add(tid)
        return result

    return [functools.partial(write, event, key) for event, key in items]


class _Queued:
    """Writes waiting for the next commit, and the future of their outcomes."""

    __slots__ = ("future", "writes")

    def __init__(self, writes: list[_Write], future: asyncio.Future[list[Any]]) -> None:
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
        if idempotency_retention < 0:
            raise ValueError("idempotency_retention must be >= 0")
        if idempotency_ttl_s <= 0:
            raise ValueError("idempotency_ttl_s must be > 0")
        self.path = Path(path)
        self.options = validated(options or SQLiteOptions())
        self.idempotency_retention = idempotency_retention
        self.idempotency_ttl_s = idempotency_ttl_s
        self._clock = clock
        self._executor: ThreadPoolExecutor | None = None
        self._writer: _Writer | None = None
        self._reader: _Reader | None = None
        self._queued: list[_Queued] = []
        self._queued_writes = 0
        self._commit_scheduled: asyncio.Handle | None = None
        self._checkpointer: _Checkpointer | None = None
        self._checkpoint_executor: ThreadPoolExecutor | None = None
        self._checkpointing: asyncio.Future[tuple[int, bool, bool]] | None = None
        self._idle_check: asyncio.TimerHandle | None = None
        #: Commits since the last checkpoint started, and how many start one:
        #: ``checkpoint_pages`` over the pages per commit the last one saw.
        self._since_checkpoint = 0
        self._checkpoint_every = max(1, self.options.checkpoint_pages // _PAGES_PER_COMMIT)
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

    async def open(self) -> None:
        """Create the folder and the file if missing, switch to WAL, migrate."""
        if self._writer is not None:
            raise RuntimeError("store is already open")
        try:
            writer = _Writer(
                self.path,
                self.options,
                self.idempotency_retention,
                self.idempotency_ttl_s,
                self._clock,
            )
        except sqlite3.Error as err:
            raise _unavailable(self.path, err) from err
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-reader")
        ttl_ms = writer.ttl_ms
        try:
            self._reader = await asyncio.get_running_loop().run_in_executor(
                executor, lambda: _Reader(writer.path, self.options, ttl_ms, self._clock)
            )
        except BaseException as err:
            writer.close()
            executor.shutdown(wait=False)
            if isinstance(err, sqlite3.Error):
                raise _unavailable(self.path, err) from err
            raise
        checkpoint_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-ckpt")
        try:
            self._checkpointer = await asyncio.get_running_loop().run_in_executor(
                checkpoint_executor, lambda: _Checkpointer(writer.path, self.options)
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
                raise _unavailable(self.path, err) from err
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

    def _submit(self, writes: list[_Write]) -> asyncio.Future[list[Any]]:
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
            failure = _unavailable(self.path, err) if isinstance(err, sqlite3.Error) else err
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
                _CHECKPOINT_IDLE_S, self._checkpoint_when_idle
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
        ``_WRITER_COPIES`` times ``checkpoint_pages`` does the writer copy
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
                self._checkpoint_every = max(1, min(_MAX_CHECKPOINT_EVERY, every))
            self._wal_pages = pages
            if not caught_up and not held and pages >= _OUTRUN * limit:
                if pages < _WRITER_COPIES * limit:
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
        failing = self._checkpoint_failures >= _CHECKPOINT_FAILURES
        if failing != self.autocheckpoint:
            try:
                writer.conn.execute(f"PRAGMA wal_autocheckpoint={limit if failing else 0}")
                self.autocheckpoint = failing
            except sqlite3.Error:
                pass  # tried again after the next checkpoint
        if (not caught_up or self._since_checkpoint > 0) and self._idle_check is None:
            self._idle_check = asyncio.get_running_loop().call_later(
                _CHECKPOINT_IDLE_S, self._checkpoint_when_idle
            )

    async def _write(self, write: _Write) -> Any:
        (outcome,) = await self._submit([write])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    # --- the read path -------------------------------------------------------------

    async def _read(self, fn: Callable[[_Reader], _T]) -> _T:
        reader, executor = self._reader, self._executor
        if reader is None or executor is None:
            raise StoreUnavailable(f"sqlite store {self.path} is not open")
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, lambda: fn(reader))
        except sqlite3.Error as err:
            raise _unavailable(self.path, err) from err

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

        ``idempotency_key`` is recorded with the first event's receipt;
        without a first event there is no receipt and the key is ignored.
        """
        check_first_event(transcript_id, epoch, first)
        writer = self._writer
        if writer is None:
            raise StoreUnavailable(f"sqlite store {self.path} is not open")
        await self._write(
            lambda now: writer.create(transcript_id, epoch, created_at, first, idempotency_key, now)
        )

    async def load(self, transcript_id: str) -> StoredTranscript | None:
        return await self._read(lambda reader: reader.load(transcript_id))

    async def append(
        self, event: TranscriptEvent, *, idempotency_key: str | None = None
    ) -> AppendResult:
        (outcome,) = await self.append_many([(event, idempotency_key)])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

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
            _append_writes(writer, items)
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
