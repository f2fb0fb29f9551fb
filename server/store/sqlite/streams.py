"""``SQLiteStreamLog``: the Durable Streams of a ``sqlite`` store, in their
own file beside its database.

``streams.sqlite3`` in the store's data folder (``transcripts.sqlite3`` is
the transcripts'), in WAL mode with the store's ``synchronous`` setting:
under ``normal`` (the default) a committed change survives the process
being killed (SIGKILL), under ``full`` also a power loss. A file of its own
keeps the two schemas, their versions and their writers apart: the store's
group commit and this log never wait for each other's transactions.

Every change the registry accepts is one transaction, committed on the event
loop's thread before the registry changes memory and the client is answered
(write-through; no group commit: a reader of memory then never sees bytes
the file does not hold yet). An append writes its message, its producer's
epoch and sequence and the stream's tail, closure and ``Stream-Seq`` in that
one transaction, which is the protocol's atomicity requirement for
idempotent producers. What a commit costs is in docs/protocol.md ("Where
streams live"; ``scripts/bench_stream_appends.py`` measures it).

Tables::

    streams   (id PK, path UNIQUE, content_type, created_at, last_access,
               ttl_s, expires_at, expires_at_ts, tail, closed,
               closed_by_id, closed_by_epoch, closed_by_seq, soft_deleted,
               forked_from, fork_offset, fork_sub_offset, stream_seq)
    messages  (stream_id, next_offset, data)       PK (stream_id, next_offset)
               data = the bytes of one append; in JSON mode its values as
               compact JSON, each followed by a comma (``Stream.encode``)
    producers (stream_id, producer_id, epoch, last_seq, updated)
                                                   PK (stream_id, producer_id)

Times are epoch seconds (``time.time``), so a TTL or an ``Expires-At``
that passed while the server was down has passed when it is back. The
schema version lives in ``PRAGMA user_version``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from server.store.base import StoreError, StoreUnavailable
from server.store.sqlite.database import Step, connect, migrate, rollback, use_wal
from server.streams.model import Producer, Stream, StreamError, StreamMessage, Update

__all__ = ["STREAMS_FILE", "SQLiteStreamLog"]

log = logging.getLogger("tsync.streams")

#: The streams' database file inside the data folder.
STREAMS_FILE: Final = "streams.sqlite3"
SCHEMA_VERSION: Final = 1

#: ``MIGRATIONS[v]`` takes the file from version ``v`` to ``v + 1``
#: (``server.store.sqlite.database.migrate``).
MIGRATIONS: Final[dict[int, tuple[Step, ...]]] = {
    0: (
        """CREATE TABLE streams (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL UNIQUE,
        content_type TEXT,
        created_at REAL NOT NULL,
        last_access REAL NOT NULL,
        ttl_s INTEGER,
        expires_at TEXT,
        expires_at_ts REAL,
        tail TEXT NOT NULL,
        closed INTEGER NOT NULL,
        closed_by_id TEXT,
        closed_by_epoch INTEGER,
        closed_by_seq INTEGER,
        soft_deleted INTEGER NOT NULL,
        forked_from TEXT,
        fork_offset TEXT,
        fork_sub_offset INTEGER NOT NULL,
        stream_seq TEXT
    )""",
        """CREATE TABLE messages (
        stream_id INTEGER NOT NULL,
        next_offset TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (stream_id, next_offset)
    )""",
        """CREATE TABLE producers (
        stream_id INTEGER NOT NULL,
        producer_id TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        last_seq INTEGER NOT NULL,
        updated REAL NOT NULL,
        PRIMARY KEY (stream_id, producer_id)
    ) WITHOUT ROWID""",
    ),
}

_COLUMNS: Final = (
    "path, content_type, created_at, last_access, ttl_s, expires_at, expires_at_ts, tail, "
    "closed, closed_by_id, closed_by_epoch, closed_by_seq, soft_deleted, forked_from, "
    "fork_offset, fork_sub_offset, stream_seq"
)
_DECODER: Final = json.JSONDecoder()


def json_values(data: bytes) -> tuple[str, ...]:
    """The JSON values a JSON-mode message holds, each as its own text
    (``data`` is ``v1,v2,...,``: compact values, each followed by a comma)."""
    text = data.decode()
    values: list[str] = []
    index = 0
    while index < len(text):
        _, end = _DECODER.raw_decode(text, index)
        values.append(text[index:end])
        index = end + 1
    return tuple(values)


class SQLiteStreamLog:
    """A ``StreamLog`` in ``streams.sqlite3`` inside the data folder
    ``folder``. Opened (created and migrated) when made; used and closed on
    the event loop's thread only."""

    def __init__(
        self,
        folder: str | Path,
        *,
        synchronous: str = "normal",
        busy_timeout_s: float = 5.0,
    ) -> None:
        folder = Path(folder)
        self.path = folder / STREAMS_FILE
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self.conn = connect(self.path, busy_timeout_s)
        except sqlite3.Error as err:
            raise StoreUnavailable(f"stream log {self.path}: {err}") from None
        try:
            use_wal(self.conn, synchronous, what=f"stream log {self.path}")
            migrate(self.conn, MIGRATIONS, SCHEMA_VERSION, what=f"stream log {self.path}")
        except sqlite3.Error as err:
            self.conn.close()
            raise StoreUnavailable(f"stream log {self.path}: {err}") from None
        except BaseException:
            self.conn.close()
            raise
        #: The row id of every stream written, by path.
        self._ids: dict[str, int] = {}

    def close(self) -> None:
        self.conn.close()

    # --- reading it all back ------------------------------------------------------

    def load(self) -> list[Stream]:
        try:
            return self._load()
        except (sqlite3.Error, ValueError, KeyError) as err:
            raise StoreError(f"stream log {self.path} cannot be read: {err}") from None

    def _load(self) -> list[Stream]:
        self.conn.execute("BEGIN")
        try:
            by_id: dict[int, Stream] = {}
            tails: dict[int, str] = {}
            for row in self.conn.execute(f"SELECT id, {_COLUMNS} FROM streams"):
                (
                    key, path, content_type, created_at, last_access, ttl_s, expires_at,
                    expires_at_ts, tail, closed, by_id_, by_epoch, by_seq, soft_deleted,
                    forked_from, fork_offset, fork_sub_offset, stream_seq,
                ) = row  # fmt: skip
                stream = Stream(
                    path=path,
                    content_type=content_type,
                    created_at=created_at,
                    last_access=last_access,
                    ttl_s=ttl_s,
                    expires_at=expires_at,
                    expires_at_ts=expires_at_ts,
                    closed=bool(closed),
                    closed_by=None if by_id_ is None else (by_id_, by_epoch, by_seq),
                    soft_deleted=bool(soft_deleted),
                    forked_from=forked_from,
                    fork_offset=fork_offset,
                    fork_sub_offset=fork_sub_offset,
                    stream_seq=stream_seq,
                    logged_access=last_access,
                )
                by_id[key] = stream
                tails[key] = tail
            for key, offset, data in self.conn.execute(
                "SELECT stream_id, next_offset, data FROM messages ORDER BY stream_id, next_offset"
            ):
                stream = by_id[key]
                stream.push(StreamMessage(data, offset, json_values(data) if stream.json else ()))
            for key, producer_id, epoch, last_seq, updated in self.conn.execute(
                "SELECT stream_id, producer_id, epoch, last_seq, updated FROM producers"
            ):
                by_id[key].put_producer(producer_id, Producer(epoch, last_seq, updated))
        finally:
            self.conn.execute("COMMIT")
        for key, stream in by_id.items():
            stream.tail = tails[key]  # a fork's tail when it has no messages of its own
        self._ids = {stream.path: key for key, stream in by_id.items()}
        return list(by_id.values())

    # --- writing --------------------------------------------------------------------

    def _write(self, what: str, steps: Callable[[sqlite3.Connection], object]) -> None:
        """Run ``steps`` in one transaction; ``StreamError`` 503 (nothing
        written) when SQLite cannot."""
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                steps(conn)
                conn.execute("COMMIT")
            except BaseException:
                rollback(conn)
                raise
        except sqlite3.Error as err:
            log.error("stream log %s: cannot write %s: %s", self.path, what, err)
            raise StreamError(
                503, f"the streams cannot be written now ({err})", {"retry-after": "1"}
            ) from None

    def create(self, stream: Stream) -> None:
        created: list[int] = []

        def steps(conn: sqlite3.Connection) -> None:
            old = conn.execute("SELECT id FROM streams WHERE path = ?", (stream.path,)).fetchone()
            if old is not None:
                _delete(conn, old[0])
            closed_by = stream.closed_by or (None, None, None)
            cursor = conn.execute(
                f"INSERT INTO streams ({_COLUMNS}) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    stream.path, stream.content_type, stream.created_at, stream.last_access,
                    stream.ttl_s, stream.expires_at, stream.expires_at_ts, stream.tail,
                    int(stream.closed), *closed_by, int(stream.soft_deleted),
                    stream.forked_from, stream.fork_offset, stream.fork_sub_offset,
                    stream.stream_seq,
                ),
            )  # fmt: skip
            assert cursor.lastrowid is not None
            created.append(cursor.lastrowid)
            conn.executemany(
                "INSERT INTO messages (stream_id, next_offset, data) VALUES (?, ?, ?)",
                [(cursor.lastrowid, m.offset, m.data) for m in stream.messages],
            )

        self._write("a new stream", steps)
        self._ids[stream.path] = created[0]

    def update(self, path: str, update: Update) -> None:
        key = self._ids[path]

        def steps(conn: sqlite3.Connection) -> None:
            if update.message is not None:
                conn.execute(
                    "INSERT INTO messages (stream_id, next_offset, data) VALUES (?, ?, ?)",
                    (key, update.message.offset, update.message.data),
                )
            if update.producer is not None:
                producer_id, state = update.producer
                conn.execute(
                    "INSERT OR REPLACE INTO producers"
                    " (stream_id, producer_id, epoch, last_seq, updated) VALUES (?, ?, ?, ?, ?)",
                    (key, producer_id, state.epoch, state.last_seq, state.updated),
                )
            closed_by = update.closed_by or (None, None, None)
            conn.execute(
                "UPDATE streams SET tail = ?, last_access = ?, closed = ?, closed_by_id = ?,"
                " closed_by_epoch = ?, closed_by_seq = ?, stream_seq = ? WHERE id = ?",
                (
                    update.tail, update.last_access, int(update.closed), *closed_by,
                    update.stream_seq, key,
                ),
            )  # fmt: skip

        self._write("an append", steps)

    def soft_delete(self, path: str) -> None:
        key = self._ids[path]
        self._write(
            "a deletion",
            lambda conn: conn.execute("UPDATE streams SET soft_deleted = 1 WHERE id = ?", (key,)),
        )

    def touch(self, path: str, last_access: float) -> None:
        key = self._ids[path]
        self._write(
            "a read's time",
            lambda conn: conn.execute(
                "UPDATE streams SET last_access = ? WHERE id = ?", (last_access, key)
            ),
        )

    def detach(self, path: str, inherited: Sequence[StreamMessage]) -> None:
        key = self._ids[path]

        def steps(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO messages (stream_id, next_offset, data) VALUES (?, ?, ?)",
                [(key, m.offset, m.data) for m in inherited],
            )
            conn.execute("UPDATE streams SET forked_from = NULL WHERE id = ?", (key,))

        self._write("a fork's detachment", steps)

    def remove(self, paths: Sequence[str]) -> None:
        keys = [self._ids[path] for path in paths if path in self._ids]

        def steps(conn: sqlite3.Connection) -> None:
            for key in keys:
                _delete(conn, key)

        self._write("a deletion", steps)
        for path in paths:
            self._ids.pop(path, None)


def _delete(conn: sqlite3.Connection, key: int) -> None:
    conn.execute("DELETE FROM messages WHERE stream_id = ?", (key,))
    conn.execute("DELETE FROM producers WHERE stream_id = ?", (key,))
    conn.execute("DELETE FROM streams WHERE id = ?", (key,))
