"""``SQLiteStore``: the embedded, durable ``Store`` of ``tsync serve``.

One data folder holds one database file, ``transcripts.sqlite3``, in WAL mode.
With ``synchronous=normal`` (the default) every committed append survives the
process being killed (SIGKILL); ``synchronous=full`` also survives power loss.

Three connections, one per thread, none ever shared; a module each:

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
  five statements (BEGIN, the row, the event, one UPDATE of the row, COMMIT),
  with or without an idempotency key: the key is looked up with the row
  (one SELECT) and written in the event's own row (its ordinal counted in
  the transcript's row, so that the retention needs neither a scan nor a
  DELETE); the listing's preview is made when listed, the title only until
  there is one.
- **Checkpoints** (copying the WAL into the database file) run on a thread
  of their own (``Checkpointer``), not after a commit on the loop's thread
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


The tables and their migrations: ``server.store.sqlite.schema`` (migrated by
``server.store.sqlite.database.migrate``, as the streams' file is). The
Durable Streams of this store live in a file of their own beside it:
``server.store.sqlite.streams``.
"""

from __future__ import annotations

from server.store.sqlite.schema import DATABASE_FILE, SCHEMA_VERSION
from server.store.sqlite.store import SQLiteStore
from server.store.sqlite.streams import STREAMS_FILE, SQLiteStreamLog

__all__ = ["DATABASE_FILE", "SCHEMA_VERSION", "STREAMS_FILE", "SQLiteStore", "SQLiteStreamLog"]
