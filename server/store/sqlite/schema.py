"""The transcripts' database file, ``transcripts.sqlite3``: its tables, the
steps that migrate it (run by ``server.store.sqlite.database.migrate``) and
how its errors map to the store's; ``transcript_row`` reads one row of
``transcripts``.

Tables::

    transcripts (id PK, epoch, created_at, updated_at, revision, length,
                 active_start, view_changes, title, preview, key_count)
                 preview: NULL since version 4 (made when listed, from the
                 newest append); key_count: the idempotency keys the
                 transcript ever recorded (since version 5)
    events      (transcript_id, revision, occurred_at, data, msg_end,
                 key, key_at, key_start, key_seq)              PK (transcript_id, revision)
                 data = the TranscriptEvent as msgspec MessagePack; msg_end = one
                 past the last message an append added (NULL for other changes),
                 indexed: the events holding messages [a, b) are the appends
                 with msg_end > a, in msg_end order, up to the first reaching b;
                 key = the idempotency key of the append that made the event
                 (NULL without one), key_at = when it was recorded (the
                 writer's clock, ms), key_start = its receipt's start (the
                 count is msg_end - key_start, 0 for other changes), key_seq
                 = its ordinal among the transcript's keys (1, 2, ...),
                 indexed by (transcript_id, key) where there is one
    segments    (transcript_id, revision, start, end)           PK (transcript_id, revision)
                 every closed segment, by the revision that closed it
    views       (transcript_id, name, start, end)               PK (transcript_id, name)

A key is honoured (``key_receipt``) while it is younger than the TTL and
among the transcript's newest ``retention`` keys (``key_count - key_seq <
retention``); the newest row of a (transcript, key) is the one that counts
(a key may be recorded again once expired or past the retention). Nothing
is deleted to enforce either: since version 5 a key costs a few bytes of
the event row that is kept anyway and one index entry, where its own table
and three indexes (versions 1-4) made a keyed commit write four more pages.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from protocol.digest import genesis_digest, next_digest
from protocol.summary import preview_of, title_of
from protocol.types import MessagesAppended, SegmentStarted, TranscriptEvent
from server.store.base import Receipt, StoreError, StoreUnavailable, TranscriptNotFound
from server.store.sqlite.database import Step

__all__ = [
    "DATABASE_FILE",
    "KEY_COLUMNS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "key_receipt",
    "transcript_row",
    "unavailable",
]

#: The database file inside the data folder.
DATABASE_FILE: Final = "transcripts.sqlite3"

#: The schema version this code writes; kept in ``PRAGMA user_version``.
SCHEMA_VERSION: Final = 5


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
    4: (
        # The key moves into the row of the event its append made: a keyed
        # commit writes one index page for it instead of a table and three
        # indexes (8.9 WAL pages a keyed commit -> 5.7, scripts/bench_sqlite_pages.py).
        "ALTER TABLE events ADD COLUMN key TEXT",
        "ALTER TABLE events ADD COLUMN key_at INTEGER",
        "ALTER TABLE events ADD COLUMN key_start INTEGER",
        "ALTER TABLE events ADD COLUMN key_seq INTEGER",
        # The retention kept at most the newest `retention` keys: numbered in
        # revision order they are all within it, as they were.
        """UPDATE events SET key = i.key, key_at = i.created_at, key_start = i.start,
            key_seq = i.seq
        FROM (SELECT transcript_id, key, revision, start, created_at,
                row_number() OVER (PARTITION BY transcript_id ORDER BY revision) AS seq
            FROM idempotency) AS i
        WHERE events.transcript_id = i.transcript_id AND events.revision = i.revision""",
        "UPDATE transcripts SET key_count = (SELECT count(*) FROM events"
        " WHERE transcript_id = transcripts.id AND key IS NOT NULL)",
        "DROP INDEX idempotency_by_age",
        "DROP INDEX idempotency_by_revision",
        "DROP TABLE idempotency",
        # After the backfill: one index build instead of one update per row.
        "CREATE INDEX events_by_key ON events (transcript_id, key) WHERE key IS NOT NULL",
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


#: What ``key_receipt`` reads of the event row recorded with a key.
KEY_COLUMNS: Final = "revision, key_start, msg_end, key_at, key_seq"


def key_receipt(
    found: Sequence[Any], key_count: int, retention: int, since_ms: int
) -> Receipt | None:
    """The receipt a key's newest row (``KEY_COLUMNS``) answers, or ``None``
    when the key is no longer honoured: recorded before ``since_ms`` (older
    than the TTL) or not among the transcript's newest ``retention`` keys
    (``key_count``: the keys it ever recorded)."""
    revision, start, msg_end, at, seq = found
    if at < since_ms or key_count - seq >= retention:
        return None
    return Receipt(revision, start, 0 if msg_end is None else msg_end - start)


def unavailable(path: Path, err: sqlite3.Error) -> StoreError:
    """Map a sqlite3 error to the store's error tree.

    Operational errors (locked, busy, disk I/O, disk full, cannot open) are
    transient or environmental: ``StoreUnavailable``, nothing was applied.
    """
    if isinstance(err, sqlite3.OperationalError):
        return StoreUnavailable(f"sqlite store {path}: {err}")
    return StoreError(f"sqlite store {path}: {type(err).__name__}: {err}")
