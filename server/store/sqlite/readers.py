"""The read-only connection of the SQLite store and every query (``Reader``),
used on the store's worker thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import msgspec

from protocol.summary import preview_of
from protocol.types import (
    Message,
    MessagesAppended,
    Segment,
    TranscriptEvent,
    TranscriptSnapshot,
    View,
)
from server.store.base import (
    LOADED_KEYS,
    Receipt,
    StoredRange,
    StoredState,
    StoredTranscript,
    TranscriptInfo,
    digest_of_log,
    head_digest,
    messages_in,
    recent_start,
)
from server.store.options import SQLiteOptions
from server.store.sqlite.database import connect
from server.store.sqlite.schema import KEY_COLUMNS, key_receipt, transcript_row

__all__ = ["Reader"]

#: Previews the reader keeps between listings (all dropped past this many).
_PREVIEWS_KEPT: Final = 10_000


#: The newest event recorded with a key, and its transcript's count of keys
#: (through ``events_by_key``, newest by revision: as ``writer._ROW_AND_KEY``).
_KEYED = (
    f"SELECT {KEY_COLUMNS}, (SELECT key_count FROM transcripts WHERE id = transcript_id)"
    " FROM events INDEXED BY events_by_key WHERE transcript_id = ? AND key = ?"
    " ORDER BY revision DESC LIMIT 1"
)

#: The transcript's keyed events, newest first (``Reader._keys`` stops at the
#: first no longer honoured), along its events (the primary key's index) ...
_KEYS = (
    f"SELECT key, {KEY_COLUMNS} FROM events"
    " WHERE transcript_id = ? AND key IS NOT NULL ORDER BY revision DESC"
)
#: ... or, when it has few, through ``events_by_key`` and sorted: a long
#: transcript with a few keys is not read whole for them.
_FEW_KEYS = (
    f"SELECT key, {KEY_COLUMNS} FROM events INDEXED BY events_by_key"
    " WHERE transcript_id = ? AND key IS NOT NULL ORDER BY revision DESC"
)


class Reader:
    """The read-only connection and every query. Made, used and closed on the
    store's worker thread only."""

    def __init__(
        self,
        path: Path,
        options: SQLiteOptions,
        retention: int,
        ttl_ms: int,
        clock: Callable[[], float],
    ) -> None:
        self.conn = connect(path, options.busy_timeout_s)
        self.conn.execute("PRAGMA query_only=ON")
        self.retention = retention
        self.ttl_ms = ttl_ms
        self.clock = clock
        self.decoder = msgspec.msgpack.Decoder(TranscriptEvent)
        #: The listing's previews, by transcript, with the version they were
        #: made at (``_preview``).
        self.previews: dict[str, tuple[tuple[str, int, int, int], str | None]] = {}

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: what the block reads is of one instant."""
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    def load(self, transcript_id: str) -> StoredTranscript | None:
        # One read transaction so the events and the keys are of one instant.
        with self.snapshot():
            row = self.conn.execute(
                "SELECT epoch, created_at FROM transcripts WHERE id = ?", (transcript_id,)
            ).fetchone()
            if row is None:
                return None
            size = 0
            decoded: list[TranscriptEvent] = []
            for (data,) in self.conn.execute(
                "SELECT data FROM events WHERE transcript_id = ? ORDER BY revision",
                (transcript_id,),
            ):
                size += len(data)
                decoded.append(self.decoder.decode(data))
            return StoredTranscript(
                transcript_id, row[0], row[1], tuple(decoded), self._keys(transcript_id), size
            )

    def recorded(self, transcript_id: str, key: str) -> Receipt | None:
        row = self.conn.execute(_KEYED, (transcript_id, key)).fetchone()
        if row is None:
            return None
        return key_receipt(row[:5], row[5], self.retention, self._since_ms())

    def _since_ms(self) -> int:
        """Keys recorded before this are expired."""
        return int(self.clock() * 1000) - self.ttl_ms

    def events_after(
        self, transcript_id: str, revision: int, limit: int | None
    ) -> list[TranscriptEvent] | None:
        with self.snapshot():
            (newest,) = transcript_row(self.conn, "revision", transcript_id)
            if revision > newest:
                return None
            return [
                self.decoder.decode(data)
                for (data,) in self.conn.execute(
                    "SELECT data FROM events WHERE transcript_id = ? AND revision > ?"
                    " ORDER BY revision LIMIT ?",
                    (transcript_id, revision, -1 if limit is None else limit),
                )
            ]

    def load_recent(self, transcript_id: str, messages: int | None) -> StoredState | None:
        with self.snapshot():
            row = self.conn.execute(
                "SELECT epoch, created_at, revision, length, active_start, view_changes"
                " FROM transcripts WHERE id = ?",
                (transcript_id,),
            ).fetchone()
            if row is None:
                return None
            epoch, created_at, revision, length, active_start, view_changes = row
            segments = [
                Segment(start, end)
                for start, end in self.conn.execute(
                    'SELECT start, "end" FROM segments WHERE transcript_id = ? ORDER BY revision',
                    (transcript_id,),
                )
            ]
            segments.append(Segment(active_start, None))
            views = tuple(
                View(name, start, end)
                for name, start, end in self.conn.execute(
                    'SELECT name, start, "end" FROM views WHERE transcript_id = ? ORDER BY name',
                    (transcript_id,),
                )
            )
            first = recent_start(length, messages)
            snapshot = TranscriptSnapshot(
                transcript_id=transcript_id,
                epoch=epoch,
                revision=revision,
                start=first,
                messages=self._messages(transcript_id, first, length),
                active_start=active_start,
                segments=tuple(segments),
                length=length,
                views=views,
                view_changes=view_changes,
                digest=self._digest(transcript_id, revision),
            )
            return StoredState(snapshot, created_at, self._keys(transcript_id))

    def _digest(self, transcript_id: str, revision: int) -> str | None:
        """The digest at ``revision``: its event's (one row), computed from
        the log if that event has none (written by hand, not by a server)."""
        row = self.conn.execute(
            "SELECT data FROM events WHERE transcript_id = ? AND revision = ?",
            (transcript_id, revision),
        ).fetchone()
        digest = head_digest(transcript_id, None if row is None else self.decoder.decode(row[0]))
        if digest is not None:
            return digest
        return digest_of_log(
            transcript_id,
            (
                self.decoder.decode(data)
                for (data,) in self.conn.execute(
                    "SELECT data FROM events WHERE transcript_id = ? ORDER BY revision",
                    (transcript_id,),
                )
            ),
        )

    def read_messages(self, transcript_id: str, start: int, end: int) -> StoredRange:
        with self.snapshot():
            epoch, revision, length = transcript_row(
                self.conn, "epoch, revision, length", transcript_id
            )
            first, last = min(start, length), min(end, length)
            return StoredRange(
                epoch, revision, length, first, self._messages(transcript_id, first, last)
            )

    def _messages(self, transcript_id: str, start: int, end: int) -> tuple[Message, ...]:
        """Messages ``[start, end)`` from the appends that hold them (inside
        the caller's read transaction)."""
        if start >= end:
            return ()
        rows = self.conn.execute(
            "SELECT data FROM events WHERE transcript_id = ? AND msg_end > ? ORDER BY msg_end",
            (transcript_id, start),
        )
        events: list[TranscriptEvent] = []
        for (data,) in rows:
            event = self.decoder.decode(data)
            events.append(event)
            change = event.change
            if isinstance(change, MessagesAppended) and change.end >= end:
                break
        rows.close()
        return messages_in(events, start, end)

    def _keys(self, transcript_id: str) -> dict[str, Receipt]:
        """The newest ``LOADED_KEYS`` keys still honoured, oldest first (the
        hub's memory; older ones are looked up with ``recorded``), inside the
        caller's read transaction.

        Read newest first up to the first key no longer honoured: the keys
        are recorded in revision order, so every older one is expired or
        past the retention too. ``key_count`` is how many keyed rows there
        are: up to ``LOADED_KEYS`` they are read through their index; past
        that, the events newest first (with keys that many, the events read
        are mostly keyed ones, back to the first key expired or past the
        retention, not the whole transcript)."""
        (key_count,) = transcript_row(self.conn, "key_count", transcript_id)
        if key_count == 0:
            return {}
        since = self._since_ms()
        newest: list[tuple[str, Receipt]] = []
        rows = self.conn.execute(_FEW_KEYS if key_count <= LOADED_KEYS else _KEYS, (transcript_id,))
        for key, *found in rows:
            receipt = key_receipt(found, key_count, self.retention, since)
            if receipt is None:
                break
            newest.append((key, receipt))
            if len(newest) >= LOADED_KEYS:
                break
        rows.close()
        return dict(reversed(newest))

    def list_transcripts(self, after: str | None, limit: int) -> list[TranscriptInfo]:
        with self.snapshot():
            rows = self.conn.execute(
                "SELECT id, epoch, revision, length, created_at, updated_at, title"
                " FROM transcripts WHERE id > ? ORDER BY id LIMIT ?",
                ("" if after is None else after, limit),
            ).fetchall()
            return [
                TranscriptInfo(
                    tid,
                    epoch,
                    rev,
                    length,
                    created,
                    updated,
                    title,
                    self._preview(tid, (epoch, rev, created, updated)),
                )
                for tid, epoch, rev, length, created, updated, title in rows
            ]

    def _preview(self, transcript_id: str, version: tuple[str, int, int, int]) -> str | None:
        """The preview the newest append gives: made here, not on every
        append, and again only once the transcript has changed (``version``:
        its epoch, revision, created_at and updated_at)."""
        made = self.previews.get(transcript_id)
        if made is not None and made[0] == version:
            return made[1]
        if len(self.previews) >= _PREVIEWS_KEPT:
            self.previews.clear()
        preview = self._newest_preview(transcript_id)
        self.previews[transcript_id] = (version, preview)
        return preview

    def _newest_preview(self, transcript_id: str) -> str | None:
        row = self.conn.execute(
            "SELECT data FROM events WHERE transcript_id = ? AND msg_end IS NOT NULL"
            " ORDER BY msg_end DESC, revision DESC LIMIT 1",
            (transcript_id,),
        ).fetchone()
        if row is None:
            return None
        change = self.decoder.decode(row[0]).change
        return preview_of(change.messages) if isinstance(change, MessagesAppended) else None
