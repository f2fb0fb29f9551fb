"""The transcripts' database file, ``transcripts.sqlite3``: its tables, the
steps that migrate it (run by ``server.store.sqlite.database.migrate``) and
how its errors map to the store's; ``transcript_row`` reads one row of
``transcripts``.

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

The schema version lives in ``PRAGMA user_version``; ``MIGRATIONS`` takes a
database from each version to the next (a step is SQL, or a function for
what SQL cannot do: version 2 decodes every stored event once to fill in
the new columns and tables).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Final

import msgspec

from protocol.digest import genesis_digest, next_digest
from protocol.summary import preview_of, title_of
from protocol.types import MessagesAppended, SegmentStarted, TranscriptEvent
from server.store.base import StoreError, StoreUnavailable, TranscriptNotFound
from server.store.sqlite.database import Step

__all__ = ["DATABASE_FILE", "MIGRATIONS", "SCHEMA_VERSION", "transcript_row", "unavailable"]

#: The database file inside the data folder.
DATABASE_FILE: Final = "transcripts.sqlite3"

#: The schema version this code writes; kept in ``PRAGMA user_version``.
SCHEMA_VERSION: Final = 4


def index_history(conn: sqlite3.Connection) -> None:
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


def digest_history(conn: sqlite3.Connection) -> None:
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


#: ``MIGRATIONS[v]`` takes a database at version ``v`` to ``v + 1``.
#: Version 0 is an empty file. Append a step here whenever the schema changes.
MIGRATIONS: Final[dict[int, tuple[Step, ...]]] = {
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
        index_history,
        # After the backfill: one index build instead of one update per row.
        "CREATE INDEX events_by_msg_end ON events (transcript_id, msg_end)",
    ),
    2: (digest_history,),
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


def transcript_row(conn: sqlite3.Connection, columns: str, transcript_id: str) -> Any:
    """These ``columns`` (SQL expressions) of the transcript's row in
    ``transcripts``; ``TranscriptNotFound`` when there is none."""
    row = conn.execute(
        f"SELECT {columns} FROM transcripts WHERE id = ?", (transcript_id,)
    ).fetchone()
    if row is None:
        raise TranscriptNotFound(transcript_id)
    return row


def unavailable(path: Path, err: sqlite3.Error) -> StoreError:
    """Map a sqlite3 error to the store's error tree.

    Operational errors (locked, busy, disk I/O, disk full, cannot open) are
    transient or environmental: ``StoreUnavailable``, nothing was applied.
    """
    if isinstance(err, sqlite3.OperationalError):
        return StoreUnavailable(f"sqlite store {path}: {err}")
    return StoreError(f"sqlite store {path}: {type(err).__name__}: {err}")
