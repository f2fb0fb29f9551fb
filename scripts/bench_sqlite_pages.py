#!/usr/bin/env python3
"""What one append costs the SQLite writer, one append per transaction (as
the chat room's): CPU µs per append through ``Writer.commit`` and the WAL
frames (pages) each commit writes. Appends of one message go round-robin to
50 transcripts, each with an idempotency key (``NOKEY=1``: none); the WAL
is checkpointed every 2,000 appends, which also counts its frames. Env:
``N`` appends (20,000; the first quarter warms up), ``SIZE`` message bytes
(200), ``RET`` retention (1,000).

It imports the checkout it is started in, so the same file measures
another one (issue 42 target 5's A/B, docs/benchmarks.md):

    flock /work/wt/bench.lock taskset -c 0 .venv/bin/python scripts/bench_sqlite_pages.py
    (cd /tmp/old && flock /work/wt/bench.lock taskset -c 0 \\
        /path/to/this/.venv/bin/python /path/to/this/scripts/bench_sqlite_pages.py)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())

from protocol.types import Message, MessagesAppended, TranscriptEvent
from server.store.base import NewTranscript
from server.store.options import SQLiteOptions
from server.store.sqlite.writer import Writer

COUNT = int(os.environ.get("N", "20000"))
TRANSCRIPTS = 50
EVERY = 2000


def main() -> None:
    keyed = not os.environ.get("NOKEY")
    text = "x" * int(os.environ.get("SIZE", "200"))
    with tempfile.TemporaryDirectory() as folder:
        writer = Writer(
            Path(folder),
            SQLiteOptions(),
            retention=int(os.environ.get("RET", "1000")),
            ttl_s=3600,
            clock=time.time,
        )
        for t in range(TRANSCRIPTS):
            new = NewTranscript(transcript_id=f"t{t:03d}", epoch="e", created_at=0)
            writer.commit([[lambda now, new=new: writer.create(new, now)]])
        revisions = [0] * TRANSCRIPTS

        def one(i: int) -> None:
            t = i % TRANSCRIPTS
            revisions[t] += 1
            event = TranscriptEvent(
                transcript_id=f"t{t:03d}",
                epoch="e",
                revision=revisions[t],
                occurred_at=1,
                change=MessagesAppended(
                    start=revisions[t] - 1, messages=(Message(role="user", content=text),)
                ),
            )
            key = f"key-{i}" if keyed else None
            [[outcome]] = writer.commit([[lambda now: writer.append(event, key, now)]])
            assert not isinstance(outcome, Exception), outcome

        warm = COUNT // 4
        for i in range(warm):
            one(i)
        writer.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        frames: list[int] = []
        started = time.process_time()
        for i in range(warm, COUNT):
            one(i)
            if (i + 1 - warm) % EVERY == 0:
                frames.append(writer.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
                writer.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        took = time.process_time() - started
        writer.close()
    print(
        f"{'keyed' if keyed else 'no key'}: {took / (COUNT - warm) * 1e6:.1f} us/append,"
        f" {sum(frames) / (len(frames) * EVERY):.2f} WAL frames/commit"
    )


if __name__ == "__main__":
    main()
