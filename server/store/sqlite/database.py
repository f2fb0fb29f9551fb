"""How this server opens a SQLite file: ``connect`` (transactions issued by
hand), ``use_wal`` (WAL mode and the ``synchronous`` setting) and
``migrate``, the one migration helper: it takes a database from the version
in its ``PRAGMA user_version`` to the one the code writes, one list of steps
per version, in one transaction (all or nothing). The transcripts' database
(``server.store.sqlite.schema``) and the streams' (``server.store.sqlite.streams``)
both use it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from server.store.base import StoreError, StoreUnavailable

__all__ = ["Step", "connect", "migrate", "use_wal"]

#: One step of a migration: a statement, or a function run on the connection.
Step = str | Callable[[sqlite3.Connection], None]


def connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection to ``path``; ``isolation_level=None``: the caller issues
    BEGIN/COMMIT itself."""
    return sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_s)


def use_wal(conn: sqlite3.Connection, synchronous: str, *, what: str) -> None:
    """Switch the file to WAL mode (``StoreUnavailable`` when it cannot) and
    set ``synchronous`` (``normal`` or ``full``)."""
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode != "wal":
        raise StoreUnavailable(f"{what}: cannot use WAL (got {mode})")
    conn.execute(f"PRAGMA synchronous={synchronous.upper()}")


def migrate(
    conn: sqlite3.Connection, steps: Mapping[int, Sequence[Step]], version: int, *, what: str
) -> None:
    """Take the database on ``conn`` to ``version``: ``steps[v]`` takes it
    from ``v`` to ``v + 1`` (version 0 is an empty file). ``StoreError`` for
    a file newer than ``version`` (``what`` names the file); rolled back on
    any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        current: int = conn.execute("PRAGMA user_version").fetchone()[0]
        if current > version:
            raise StoreError(
                f"{what}: schema version {current} is newer than this program's {version}"
            )
        while current < version:
            for step in steps[current]:
                if callable(step):
                    step(conn)
                else:
                    conn.execute(step)
            current += 1
            conn.execute(f"PRAGMA user_version={current}")
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if any: SQLite rolls some failures
    back on its own (e.g. disk full); then there is no transaction left and
    ROLLBACK would mask the real error."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
