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
               forked_from, fork_offset, fork_sub_offset, stream_seq,
               held)                     held: ``Stream.held`` (version 2)
                                         index streams_by_source (forked_from)
    messages  (stream_id, next_offset, data)       PK (stream_id, next_offset)
               data = the bytes of one append; in JSON mode its values as
               compact JSON, each followed by a comma (``Stream.encode``)
    producers (stream_id, producer_id, epoch, last_seq, updated)
                                                   PK (stream_id, producer_id)

The registry reads one stream at a time (``load_one``), when a request asks
for it, and counts them all from ``streams`` alone (``totals``): nothing is
read at startup.

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
from typing import Any, Final, TypeVar

from server.store.base import StoreUnavailable
from server.store.sqlite.database import Step, connect, migrate, rollback, use_wal
from server.streams.model import (
    Producer,
    Stream,
    StreamError,
    StreamMessage,
    Update,
    is_json,
    producer_bytes,
)

__all__ = ["STREAMS_FILE", "SQLiteStreamLog"]

log = logging.getLogger("tsync.streams")

_R = TypeVar("_R")

#: The streams' database file inside the data folder.
STREAMS_FILE: Final = "streams.sqlite3"
SCHEMA_VERSION: Final = 2

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
    1: (
        # What each stream holds (``Stream.held``), kept with every write, so
        # that the registry counts the streams without reading them; and the
        # forks of a source found by index: streams are read one at a time.
        "ALTER TABLE streams ADD COLUMN held INTEGER NOT NULL DEFAULT 0",
        lambda conn: _count_held(conn),
        "CREATE INDEX streams_by_source ON streams (forked_from)",
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


def _count_held(conn: sqlite3.Connection) -> None:
    """Version 2: fill ``held`` from what each stream holds."""
    held: dict[int, int] = {}
    modes = dict(conn.execute("SELECT id, content_type FROM streams").fetchall())
    for key, data in conn.execute("SELECT stream_id, data FROM messages"):
        message = StreamMessage(data, "", json_values(data) if is_json(modes.get(key)) else ())
        held[key] = held.get(key, 0) + message.held
    for key, producer_id in conn.execute("SELECT stream_id, producer_id FROM producers"):
        held[key] = held.get(key, 0) + producer_bytes(producer_id)
    conn.executemany("UPDATE streams SET held = ? WHERE id = ?", [(h, k) for k, h in held.items()])


def _stream_of(row: tuple[Any, ...]) -> tuple[int, str, Stream]:
    """A ``streams`` row (``id, _COLUMNS``): its key, its tail and the stream
    without messages or producers."""
    (
        key, path, content_type, created_at, last_access, ttl_s, expires_at,
        expires_at_ts, tail, closed, by_id, by_epoch, by_seq, soft_deleted,
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
        closed_by=None if by_id is None else (by_id, by_epoch, by_seq),
        soft_deleted=bool(soft_deleted),
        forked_from=forked_from,
        fork_offset=fork_offset,
        fork_sub_offset=fork_sub_offset,
        stream_seq=stream_seq,
        logged_access=last_access,
    )
    return key, tail, stream


class SQLiteStreamLog:
    """A ``StreamLog`` in ``streams.sqlite3`` inside the data folder
    ``folder``. Opened (created and migrated) when made; used and closed on
    the event loop's thread only."""

    durable = True

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

    # --- one stream at a time ---------------------------------------------------------

    def _reading(self, what: str, read: Callable[[], _R]) -> _R:
        try:
            return read()
        except (sqlite3.Error, ValueError, KeyError) as err:
            log.error("stream log %s: cannot read %s: %s", self.path, what, err)
            raise StreamError(
                503, f"the streams cannot be read now ({err})", {"retry-after": "1"}
            ) from None

    def load_one(self, path: str) -> Stream | None:
        return self._reading(path, lambda: self._load_one(path))

    def _load_one(self, path: str) -> Stream | None:
        conn = self.conn
        conn.execute("BEGIN")
        try:
            row = conn.execute(f"SELECT id, {_COLUMNS} FROM streams WHERE path = ?", (path,))
            found = row.fetchone()
            if found is None:
                return None
            key, tail, stream = _stream_of(found)
            for offset, data in conn.execute(
                "SELECT next_offset, data FROM messages WHERE stream_id = ? ORDER BY next_offset",
                (key,),
            ):
                stream.push(StreamMessage(data, offset, json_values(data) if stream.json else ()))
            for producer_id, epoch, last_seq, updated in conn.execute(
                "SELECT producer_id, epoch, last_seq, updated FROM producers WHERE stream_id = ?",
                (key,),
            ):
                stream.put_producer(producer_id, Producer(epoch, last_seq, updated))
            (refs,) = conn.execute(
                "SELECT count(*) FROM streams WHERE forked_from = ?", (path,)
            ).fetchone()
        finally:
            conn.execute("COMMIT")
        stream.tail = tail  # a fork's tail when it has no messages of its own
        stream.refs = refs
        self._ids[path] = key
        return stream

    def totals(self) -> tuple[int, int]:
        def read() -> tuple[int, int]:
            count, held = self.conn.execute(
                "SELECT count(*), coalesce(sum(held), 0) FROM streams"
            ).fetchone()
            return int(count), int(held)

        return self._reading("the totals", read)

    def expired_paths(self, now: float) -> list[str]:
        return self._paths(
            "the expired streams",
            "WHERE expires_at_ts <= ? OR (ttl_s IS NOT NULL AND last_access + ttl_s <= ?)",
            (now, now),
        )

    def fork_paths(self, path: str) -> list[str]:
        return self._paths("the forks", "WHERE forked_from = ?", (path,))

    def _paths(self, what: str, where: str, args: tuple[object, ...]) -> list[str]:
        """The paths of the streams ``where`` selects."""
        return self._reading(
            what,
            lambda: [
                path for (path,) in self.conn.execute(f"SELECT path FROM streams {where}", args)
            ],
        )

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
            conn.execute(
                "UPDATE streams SET held = ? WHERE id = ?", (stream.held, cursor.lastrowid)
            )
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
                " closed_by_epoch = ?, closed_by_seq = ?, stream_seq = ?, held = ? WHERE id = ?",
                (
                    update.tail, update.last_access, int(update.closed), *closed_by,
                    update.stream_seq, update.held, key,
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
            conn.execute(
                "UPDATE streams SET forked_from = NULL, held = held + ? WHERE id = ?",
                (sum(m.held for m in inherited), key),
            )

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
