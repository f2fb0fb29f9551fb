#!/usr/bin/env python3
"""The floor under a durable SQLite append: the store's own schema (its
migrations) and pragmas (WAL, ``synchronous=NORMAL``, no automatic
checkpoint), and per append nothing but the statements an unkeyed append
must run, in one transaction each, from the stdlib's ``sqlite3``: no
event, no encoding, no event loop. ``BEGIN IMMEDIATE``, the transcript's
row read, the event's INSERT, the row's UPDATE and the ``COMMIT`` (the
WAL frames). Appends go round-robin to ``--transcripts`` transcripts (the
chat room's 50), each with a ``--size``-byte body; every 2,000 the WAL is
checkpointed, as the store's checkpoint thread does. Issue 42's target 5
quotes it (docs/benchmarks.md):

    taskset -c 0 .venv/bin/python scripts/bench_sqlite_floor.py

Prints the thread CPU per append spent in its statements, each one's
share, and the total with the loop around them and the clock reads.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

from server.store.sqlite.database import migrate, use_wal
from server.store.sqlite.schema import MIGRATIONS, SCHEMA_VERSION

STEPS = (
    ("begin", "BEGIN IMMEDIATE"),
    ("select", "SELECT epoch, revision, length FROM transcripts WHERE id = ?"),
    (
        "insert",
        "INSERT INTO events (transcript_id, revision, occurred_at, data, msg_end)"
        " VALUES (?, ?, ?, ?, ?)",
    ),
    ("update", "UPDATE transcripts SET revision = ?, length = ?, updated_at = ? WHERE id = ?"),
    ("commit", "COMMIT"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=15_000)
    parser.add_argument("--transcripts", type=int, default=50)
    parser.add_argument("--size", type=int, default=300)
    args = parser.parse_args()
    body = b"x" * args.size
    with tempfile.TemporaryDirectory() as folder:
        conn = sqlite3.connect(Path(folder) / "floor.sqlite3", isolation_level=None)
        use_wal(conn, "normal", what="floor")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        migrate(conn, MIGRATIONS, SCHEMA_VERSION, what="floor")
        ids = [f"t{n:04d}" for n in range(args.transcripts)]
        conn.executemany(
            "INSERT INTO transcripts (id, epoch, created_at, updated_at, revision, length)"
            " VALUES (?, 'e', 0, 0, 0, 0)",
            [(tid,) for tid in ids],
        )
        revisions = dict.fromkeys(ids, 0)
        spent = dict.fromkeys((name for name, _ in STEPS), 0.0)
        warm_up = args.appends // 4
        started = 0.0
        for n in range(warm_up + args.appends):
            if n == warm_up:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                spent = dict.fromkeys(spent, 0.0)
                started = time.thread_time()
            elif n % 2000 == 0:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            tid = ids[n % len(ids)]
            revision = revisions[tid] = revisions[tid] + 1
            params = (
                (),
                (tid,),
                (tid, revision, n, body, revision),
                (revision, revision, n, tid),
                (),
            )
            for (name, sql), values in zip(STEPS, params, strict=True):
                before = time.thread_time()
                conn.execute(sql, values).fetchall()
                spent[name] += time.thread_time() - before
        total = time.thread_time() - started
        conn.close()
    shares = ", ".join(
        f"{name} {seconds / args.appends * 1e6:.1f}" for name, seconds in spent.items()
    )
    statements = sum(spent.values()) / args.appends * 1e6
    print(
        f"{statements:.1f} us of CPU per append in its statements ({shares});"
        f" {total / args.appends * 1e6:.1f} us with the loop and the clock reads"
    )


if __name__ == "__main__":
    main()
