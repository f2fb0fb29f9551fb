"""The SQLite store's checkpoints (copying the WAL into the database file),
on a thread and a connection of their own (``Checkpointer``), and the
numbers the store's policy of when to run them uses."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from server.store.options import SQLiteOptions
from server.store.sqlite.database import connect

__all__ = ["Checkpointer"]

#: A commit's pages in the WAL, guessed until the first checkpoint measures it.
PAGES_PER_COMMIT: Final = 4
#: At most this many commits between two checkpoints, whatever the guess.
MAX_CHECKPOINT_EVERY: Final = 10_000
#: Seconds after a commit before the WAL is checkpointed anyway.
CHECKPOINT_IDLE_S: Final = 1.0
#: Rounds of a checkpoint on its thread: each copies what the writes added
#: during the one before, until one finds nothing new.
_CHECKPOINT_ROUNDS: Final = 3
#: The writes outran the checkpoint thread and the WAL holds this many times
#: ``checkpoint_pages``: the thread goes again at once.
OUTRUN: Final = 4
#: The WAL holds this many times ``checkpoint_pages`` though the thread goes
#: again at once each time it is outrun: the writer copies the rest itself,
#: between two commits, so that the WAL cannot grow without bound.
WRITER_COPIES: Final = 16
#: Checkpoints that failed in a row before SQLite's own on the writer takes over.
CHECKPOINT_FAILURES: Final = 3


class Checkpointer:
    """A connection of its own that copies the WAL's committed pages into the
    database file (``PRAGMA wal_checkpoint(PASSIVE)``: it waits for neither
    the writer nor the readers, and copies what they let it). Made, used and
    closed on the store's checkpoint thread only; SQLite lets go of the GIL
    while it copies and syncs, so the loop goes on meanwhile."""

    def __init__(self, path: Path, options: SQLiteOptions) -> None:
        self.conn = connect(path, options.busy_timeout_s)

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
