"""Outbound frames as the connection queues them: encoded once, numbered late.

A frame's ``seq`` is given when the connection's writer actually sends it (a
frame dropped from a lagged queue takes no number), so queued items are
templates that render themselves for a given ``seq``. Increments and baselines
carry bytes encoded once per event or snapshot and shared by every subscriber;
rendering only splices the ``seq`` in front. ``estimated_bytes`` is what a
queued frame counts against the queue's byte bound: close to, not exactly, the
bytes it will be sent as.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol import wire
from protocol.types import TranscriptEvent, TranscriptSnapshot
from server.tuning import CONTROL_FRAME_BYTES, FRAME_ENVELOPE_BYTES

_BASELINE_HEAD = b'{"type":"baseline","seq":'
_BASELINE_MID = b',"snapshot":'
_MSGPACK_BASELINE_HEAD = wire.encode_msgpack({"type": "baseline"})[1:]


class EncodedEvent:
    """An event with its JSON encoding (and MessagePack on first use)."""

    __slots__ = ("_msgpack", "estimated_bytes", "event", "json", "revision", "transcript_id")
    data = True

    def __init__(self, event: TranscriptEvent) -> None:
        self.event = event
        self.transcript_id = event.transcript_id
        self.revision = event.revision
        self.json = wire.encode_event_json(event)
        self.estimated_bytes = len(self.json) + FRAME_ENVELOPE_BYTES
        self._msgpack: bytes | None = None

    def render_json(self, seq: int) -> bytes:
        return wire.increment_json(seq, self.json)

    def render_msgpack(self, seq: int) -> bytes:
        if self._msgpack is None:
            self._msgpack = wire.encode_event_msgpack(self.event)
        return wire.increment_msgpack(seq, self._msgpack)


class EncodedSnapshot:
    """A baseline's snapshot, encoded once and shared by every subscriber that
    subscribes at the same revision."""

    __slots__ = ("_msgpack", "estimated_bytes", "json", "revision", "snapshot", "transcript_id")
    data = True

    def __init__(self, snapshot: TranscriptSnapshot) -> None:
        self.snapshot = snapshot
        self.transcript_id = snapshot.transcript_id
        self.revision = snapshot.revision
        self.json = wire.encode_json(snapshot)
        self.estimated_bytes = len(self.json) + FRAME_ENVELOPE_BYTES
        self._msgpack: bytes | None = None

    def render_json(self, seq: int) -> bytes:
        return b"".join((_BASELINE_HEAD, str(seq).encode(), _BASELINE_MID, self.json, b"}"))

    def render_msgpack(self, seq: int) -> bytes:
        if self._msgpack is None:
            self._msgpack = wire.encode_msgpack(self.snapshot)
        return b"".join(
            (
                b"\x83",  # fixmap of 3 entries: type, seq, snapshot
                _MSGPACK_BASELINE_HEAD,
                wire.encode_msgpack("seq"),
                wire.encode_msgpack(seq),
                wire.encode_msgpack("snapshot"),
                self._msgpack,
            )
        )


class ControlFrame:
    """An ack, pong or error: small, per connection, never dropped on lag."""

    __slots__ = ("estimated_bytes", "frame", "transcript_id")
    data = False

    def __init__(self, frame: Any) -> None:
        # ``frame`` is a wire struct built with a placeholder seq of 0.
        self.frame = frame
        self.transcript_id = getattr(frame, "transcript_id", None)
        self.estimated_bytes = CONTROL_FRAME_BYTES

    def render_json(self, seq: int) -> bytes:
        return wire.encode_json(msgspec.structs.replace(self.frame, seq=seq))

    def render_msgpack(self, seq: int) -> bytes:
        return wire.encode_msgpack(msgspec.structs.replace(self.frame, seq=seq))


Outbound = EncodedEvent | EncodedSnapshot | ControlFrame
