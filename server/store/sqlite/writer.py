"""The write connection of the SQLite store and every statement that changes
its file (``Writer``), and the writes of a run of appends (``append_writes``)."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from protocol.summary import title_of
from protocol.types import (
    MessagesAppended,
    SegmentStarted,
    TranscriptEvent,
    ViewChanged,
)
from server.store.base import (
    AppendResult,
    NewTranscript,
    Receipt,
    RevisionMismatch,
    StoreError,
    TranscriptExists,
    TranscriptNotFound,
    position_of,
)
from server.store.options import SQLiteOptions
from server.store.sqlite.database import connect, migrate, rollback, use_wal
from server.store.sqlite.schema import (
    DATABASE_FILE,
    KEY_COLUMNS,
    MIGRATIONS,
    SCHEMA_VERSION,
    key_receipt,
    transcript_row,
    unavailable,
)

__all__ = ["Write", "Writer", "append_writes"]

#: One write: runs inside the batch's transaction, given the commit's time (ms).
Write = Callable[[int], Any]


class Writer:
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
        self.conn = connect(self.path, options.busy_timeout_s)
        self.retention = retention
        self.ttl_ms = int(ttl_s * 1000)
        self.clock = clock
        self.encoder = msgspec.msgpack.Encoder()
        try:
            use_wal(self.conn, options.synchronous, what=f"sqlite store {self.path}")
            # Checkpoints run on the store's checkpoint thread (``Checkpointer``),
            # not after a commit on the loop's thread.
            self.conn.execute("PRAGMA wal_autocheckpoint=0")
            migrate(self.conn, MIGRATIONS, SCHEMA_VERSION, what=f"sqlite store {self.path}")
        except BaseException:
            self.conn.close()
            raise

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _rollback(self) -> None:
        rollback(self.conn)

    def close(self) -> None:
        self.conn.close()

    def commit(self, batch: Sequence[Sequence[Write]]) -> list[list[Any]]:
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
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        return outcomes

    def _refusal(self, err: Exception) -> Exception:
        """What a refused write reports: its exception, a sqlite3 error as the store's."""
        return unavailable(self.path, err) if isinstance(err, sqlite3.Error) else err

    # --- the writes (each inside ``commit``'s transaction) --------------------

    def create(self, new: NewTranscript, now: int) -> None:
        tid = new.transcript_id
        if self.conn.execute("SELECT 1 FROM transcripts WHERE id = ?", (tid,)).fetchone():
            raise TranscriptExists(tid)
        self.conn.execute(
            "INSERT INTO transcripts (id, epoch, created_at, updated_at, revision, length)"
            " VALUES (?, ?, ?, ?, 0, 0)",
            (tid, new.epoch, new.created_at, new.created_at),
        )
        if new.first is not None:
            self._accept(new.first, 0, new.idempotency_key, now, untitled=True, key_count=0)

    def delete(self, transcript_id: str) -> bool:
        deleted = self.conn.execute(
            "DELETE FROM transcripts WHERE id = ?", (transcript_id,)
        ).rowcount
        for table in ("events", "segments", "views"):
            self.conn.execute(f"DELETE FROM {table} WHERE transcript_id = ?", (transcript_id,))
        return deleted > 0

    def append(self, event: TranscriptEvent, key: str | None, now: int) -> AppendResult:
        tid = event.transcript_id
        found: Receipt | None = None
        if key is None:
            epoch, revision, length, untitled, key_count = transcript_row(
                self.conn, "epoch, revision, length, title IS NULL, key_count", tid
            )
        else:
            # The row and the key's newest event in one statement (one execute
            # less per append: every client sends a key).
            row = self.conn.execute(_ROW_AND_KEY, (key, tid)).fetchone()
            if row is None:
                raise TranscriptNotFound(tid)
            epoch, revision, length, untitled, key_count = row[:5]
            if row[5] is not None:  # the event's revision: never NULL when found
                found = key_receipt(row[5:], key_count, self.retention, now - self.ttl_ms)
        if event.epoch != epoch:
            raise RevisionMismatch(tid, event.revision - 1, revision)
        if found is not None:
            return AppendResult(found, duplicate=True)
        # (A key found expired or past the retention is recorded again, in
        # this event's row: the newest row of a key is the one that counts.)
        if event.revision != revision + 1 or position_of(event) not in (None, length):
            raise RevisionMismatch(tid, event.revision - 1, revision)
        receipt = self._accept(
            event, length, key, now, untitled=bool(untitled), key_count=key_count
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
    ) -> Receipt:
        """Write an event already checked to be the next one, with its key in
        its row, and one UPDATE of the transcript's row. ``untitled``: the row
        has no title yet; ``key_count``: the keys it ever recorded."""
        tid = event.transcript_id
        change = event.change
        msg_end: int | None = None
        if isinstance(change, MessagesAppended):
            length = msg_end = change.end
        receipt = Receipt.for_event(event)
        sets = "revision = ?, length = ?, updated_at = ?"
        params: list[Any] = [event.revision, length, event.occurred_at]
        data = self.encoder.encode(event)
        if key is not None and self.retention > 0:
            # In the event's row, with its ordinal: it is honoured while among
            # the newest `retention` (``key_receipt``); nothing is deleted for that.
            key_count += 1
            self.conn.execute(
                "INSERT INTO events (transcript_id, revision, occurred_at, data, msg_end,"
                " key, key_at, key_start, key_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    tid,
                    event.revision,
                    event.occurred_at,
                    data,
                    msg_end,
                    key,
                    now,
                    receipt.start,
                    key_count,
                ),
            )
            sets += ", key_count = ?"
            params.append(key_count)
        else:
            self.conn.execute(
                "INSERT INTO events (transcript_id, revision, occurred_at, data, msg_end)"
                " VALUES (?, ?, ?, ?, ?)",
                (tid, event.revision, event.occurred_at, data, msg_end),
            )
        if isinstance(change, MessagesAppended):
            # The title is the first user message's: made until there is one,
            # then never again. The preview is made when listed (``Reader``).
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
        params.append(tid)
        self.conn.execute(f"UPDATE transcripts SET {sets} WHERE id = ?", params)
        return receipt


#: The transcript's row (as ``Writer.append`` reads it) and the newest event
#: recorded with a key, if any (its ``KEY_COLUMNS``, the first NULL only when
#: there is none), found through ``events_by_key``: newest by revision, not
#: rowid (VACUUM may renumber rowids), and INDEXED BY, or the planner may walk
#: the transcript's events by revision looking for the key.
_ROW_AND_KEY = (
    "SELECT t.epoch, t.revision, t.length, t.title IS NULL, t.key_count,"
    f" {', '.join('e.' + c for c in KEY_COLUMNS.split(', '))}"
    " FROM transcripts AS t LEFT JOIN events AS e ON e.rowid = (SELECT rowid FROM events"
    " INDEXED BY events_by_key"
    " WHERE transcript_id = t.id AND key = ? ORDER BY revision DESC LIMIT 1)"
    " WHERE t.id = ?"
)


def append_writes(
    writer: Writer, items: Sequence[tuple[TranscriptEvent, str | None]]
) -> list[Write]:
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
