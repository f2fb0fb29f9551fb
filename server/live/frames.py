"""Outbound frames as the connection queues them: encoded once, numbered late.

A frame's ``seq`` is given when the connection actually sends it (a frame
dropped from a lagged queue takes no number), so queued items are templates:
the bytes before ``seq`` and the bytes after it, encoded once, and
``render(seq, binary)`` joins them. Increments and baselines are shared by
every subscriber (one encoding per event or snapshot); acks, pongs and errors
belong to one connection and are encoded once, in its format, when queued.

``size`` is what an item counts against the queue's byte bound: the bytes it
will be sent as (give or take the digits of ``seq``).

A baseline is made of the encoded head of its snapshot, the transcript's
messages as shared encoded chunks (``server.live.baselines``), and its tail: its
bytes are never copied per subscriber, and a connection that can take raw
frames gets a big one as a fragmented message (``parts``), chunk by chunk as
the client reads.

Draft updates (``EncodedDraft``) are shared like increments; while a
connection's frames wait, the updates of one draft merge into its
``DraftSlot``, written as the draft's text when it goes out.

``ws_header`` frames payloads for the raw write (``server.web.ws_protocol``):
server frames are not masked, so a frame is a header and the payload.

An event or draft that one format cannot encode (validation refuses every
such value, so this is a bug or a fault) never stops the others: its
encoding in that format is marked failed and logged once, here, and
``render`` then raises ``Unencodable``; the connection's queue ends that
subscription with an ``internal`` error (``server.live.outbound``) while every
other subscriber, and every subscriber of the other format, gets the frame.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final, Protocol

from protocol import wire
from protocol.types import TranscriptEvent, TranscriptSnapshot
from server.tuning import BASELINE_CHUNK_BYTES

log = logging.getLogger("tsync.frames")


class Unencodable(ValueError):
    """A shared frame cannot be built in one format (its encoding failed,
    logged once when it did): the subscription that needs it ends."""


def _failed(what: str, transcript_id: str, fmt: str, exc: BaseException) -> bytes:
    """Log an encoding that failed (once: the caller keeps the result) and
    return the mark of a failed encoding, ``b""`` (no real one is empty)."""
    log.error(
        "%s of transcript %s cannot be encoded as %s: %r; its %s subscribers get 'internal'",
        what,
        transcript_id,
        fmt,
        exc,
        fmt,
        extra={"transcript": transcript_id},
    )
    return b""


# --- WebSocket framing (RFC 6455 5.2; server to client: no mask) --------------------------

#: First header byte: FIN and the opcode.
TEXT: Final = 0x81
BINARY: Final = 0x82
TEXT_START: Final = 0x01  # first fragment of a text message
BINARY_START: Final = 0x02
CONTINUATION: Final = 0x00
CONTINUATION_FIN: Final = 0x80

_SHORT_HEADERS: Final = {
    first: tuple(bytes((first, n)) for n in range(126))
    for first in (TEXT, BINARY, TEXT_START, BINARY_START, CONTINUATION, CONTINUATION_FIN)
}
_pack16 = struct.Struct("!BBH").pack
_pack64 = struct.Struct("!BBQ").pack


def ws_header(first: int, length: int) -> bytes:
    """The header of an unmasked frame: ``first`` (FIN + opcode) and the
    payload's length."""
    if length < 126:
        return _SHORT_HEADERS[first][length]
    if length < 65536:
        return _pack16(first, 126, length)
    return _pack64(first, 127, length)


# --- queued items ----------------------------------------------------------------------

# The bytes around ``seq`` and the encoded event or snapshot; the tests check
# that rendering gives exactly what encoding the whole frame does.
_INC_JSON_HEAD: Final = b'{"type":"increment","seq":'
_INC_JSON_MID: Final = b',"event":'
_INC_MSGPACK_HEAD: Final = (
    b"\x83"  # a map of 3 entries: type, seq, event
    + wire.encode_msgpack({"type": "increment"})[1:]
    + wire.encode_msgpack("seq")
)
_INC_MSGPACK_MID: Final = wire.encode_msgpack("event")
#: Digits of ``seq`` counted in a frame's size (up to ten million frames exact).
SEQ_DIGITS: Final = 7


class EncodedEvent:
    """An increment: the event encoded once (JSON now, MessagePack on first
    use) and shared by every subscriber. A format whose encoding failed has
    the tail ``b""``: ``render`` raises ``Unencodable`` for it."""

    __slots__ = ("_msgpack_tail", "event", "json_tail", "revision", "size", "transcript_id")
    data = True
    baseline = False
    draft = False

    def __init__(self, event: TranscriptEvent) -> None:
        self.event = event
        self.transcript_id = event.transcript_id
        self.revision = event.revision
        try:
            self.json_tail = b"".join((_INC_JSON_MID, wire.encode_event_json(event), b"}"))
        except Exception as exc:
            self.json_tail = _failed(self._what(), self.transcript_id, "JSON", exc)
        self.size = len(_INC_JSON_HEAD) + SEQ_DIGITS + len(self.json_tail)
        self._msgpack_tail: bytes | None = None

    def _what(self) -> str:
        return f"the increment of revision {self.revision}"

    def _unencodable(self, fmt: str) -> Unencodable:
        return Unencodable(f"{self._what()} of {self.transcript_id} cannot be encoded as {fmt}")

    def render(self, seq: int, binary: bool) -> bytes:
        if not binary:
            if not self.json_tail:
                raise self._unencodable("JSON")
            return b"".join((_INC_JSON_HEAD, b"%d" % seq, self.json_tail))
        tail = self._msgpack_tail
        if tail is None:
            try:
                tail = _INC_MSGPACK_MID + wire.encode_event_msgpack(self.event)
            except Exception as exc:
                tail = _failed(self._what(), self.transcript_id, "MessagePack", exc)
            self._msgpack_tail = tail
        if not tail:
            raise self._unencodable("MessagePack")
        return b"".join((_INC_MSGPACK_HEAD, wire.seq_bytes(seq, binary=True), tail))

    def frame_json(self, seq: int) -> bytes:
        """The whole WebSocket frame of this increment alone (the hot path:
        one subscriber, one event)."""
        if not self.json_tail:
            raise self._unencodable("JSON")
        seq_text = b"%d" % seq
        length = len(_INC_JSON_HEAD) + len(seq_text) + len(self.json_tail)
        return b"".join((ws_header(TEXT, length), _INC_JSON_HEAD, seq_text, self.json_tail))


@dataclass(slots=True, eq=False)
class EncodedSnapshot:
    """A baseline: the snapshot's encoded head and tail around the
    transcript's messages, which are shared encoded chunks. One per revision
    and format, shared by every subscriber that subscribes then."""

    data = True
    baseline = True
    draft = False

    transcript_id: str
    revision: int
    _: KW_ONLY
    binary: bool
    #: The frame up to ``seq`` is _BASELINE_HEAD; ``head`` follows ``seq``.
    head: bytes
    chunks: tuple[bytes | memoryview, ...]
    tail: bytes
    #: Between chunks: a comma between JSON encodings of messages, none in
    #: MessagePack or between slices of one encoding.
    separator: bytes
    #: The shared encoding the chunks belong to (``server.live.baselines``): a
    #: queued baseline keeps it alive, and the next baseline finds it.
    source: object = None
    size: int = field(init=False)

    def __post_init__(self) -> None:
        separators = len(self.separator) * max(0, len(self.chunks) - 1)
        self.size = (
            len(_BASELINE_HEAD[self.binary])
            + SEQ_DIGITS
            + len(self.head)
            + sum(len(c) for c in self.chunks)
            + separators
            + len(self.tail)
        )

    @classmethod
    def of(cls, snapshot: TranscriptSnapshot, *, binary: bool = False) -> EncodedSnapshot:
        """The baseline of any snapshot (a range of a transcript, say),
        encoded in one call and cut into chunks of ``BASELINE_CHUNK_BYTES`` so
        that it streams like the others. Nothing is shared with other
        revisions: ``server.live.baselines`` does that for a live transcript's baselines."""
        encoded = memoryview(wire.encode(snapshot, binary=binary))
        step = BASELINE_CHUNK_BYTES
        return cls(
            snapshot.transcript_id,
            snapshot.revision,
            binary=binary,
            head=BASELINE_MSGPACK_MID if binary else BASELINE_JSON_MID,
            chunks=tuple(encoded[i : i + step] for i in range(0, len(encoded), step)),
            tail=b"" if binary else b"}",
            separator=b"",
        )

    def parts(self, seq: int) -> list[bytes | memoryview]:
        """The payload in pieces (joined, it is ``render(seq)``): the envelope
        and the snapshot's head, each chunk (with its separator), the tail."""
        binary = self.binary
        first = b"".join((_BASELINE_HEAD[binary], wire.seq_bytes(seq, binary=binary), self.head))
        separator = self.separator
        middle: list[bytes | memoryview] = [
            (separator + chunk) if i and separator else chunk for i, chunk in enumerate(self.chunks)
        ]
        return [first, *middle, self.tail]

    def render(self, seq: int, binary: bool) -> bytes:
        assert binary == self.binary, "a baseline is encoded for one format"
        return b"".join(self.parts(seq))

    def fragment(self, index: int, seq: int) -> tuple[list[bytes | memoryview], int, bool]:
        """Fragment ``index`` of this baseline sent as a fragmented message,
        framed: its buffers (a header, then the payload's pieces), its size,
        and whether it is the last. The envelope and head first, then one
        chunk per fragment, then the tail. A chunk is the shared encoding
        itself, never copied: the buffers go to ``transport.writelines``.
        Each fragment is a whole frame, so the WebSocket layer's own control
        frames may go between them."""
        chunks = self.chunks
        last = index == len(chunks) + 1
        if index == 0:
            payload = b"".join(
                (_BASELINE_HEAD[self.binary], wire.seq_bytes(seq, binary=self.binary), self.head)
            )
            first = BINARY_START if self.binary else TEXT_START
            header = ws_header(first, len(payload))
            return [header, payload], len(header) + len(payload), False
        if last:
            header = ws_header(CONTINUATION_FIN, len(self.tail))
            return [header, self.tail], len(header) + len(self.tail), True
        chunk = chunks[index - 1]
        separator = self.separator if index > 1 else b""
        header = ws_header(CONTINUATION, len(separator) + len(chunk))
        parts: list[bytes | memoryview] = (
            [header, separator, chunk] if separator else [header, chunk]
        )
        return parts, len(header) + len(separator) + len(chunk), False


_BASELINE_JSON_HEAD: Final = b'{"type":"baseline","seq":'
_BASELINE_MSGPACK_HEAD: Final = (
    b"\x83"  # a map of 3 entries: type, seq, snapshot
    + wire.encode_msgpack({"type": "baseline"})[1:]
    + wire.encode_msgpack("seq")
)
_BASELINE_HEAD: Final = {False: _BASELINE_JSON_HEAD, True: _BASELINE_MSGPACK_HEAD}
#: What follows ``seq`` in a baseline frame, before the snapshot's own bytes.
BASELINE_JSON_MID: Final = b',"snapshot":'
BASELINE_MSGPACK_MID: Final = wire.encode_msgpack("snapshot")


class DraftSource(Protocol):
    """An open draft as the server holds it: what a merged draft slot is
    written as when it goes out (``server.live.drafts.OpenDraft``)."""

    def text_frame(self) -> EncodedDraft:
        """The ``text`` frame of the draft's state now (encoded once per update)."""
        ...


class EncodedDraft:
    """One update of a draft (``delta`` or ``text``) or its close, encoded
    once (JSON now, MessagePack on first use) and shared by every subscriber,
    like an increment. ``frame`` is the wire struct with ``seq=0``: what the
    Redis backplane publishes. ``source`` is the open draft it belongs to
    (``None`` for a close): a connection that fell behind writes its merged
    slot as ``source.text_frame()``. Never counted against the queue's
    bounds (``server.live.outbound``)."""

    __slots__ = ("_msgpack", "draft_id", "frame", "head", "size", "source", "tail", "transcript_id")
    data = False
    baseline = False
    draft = True

    def __init__(self, frame: wire.DraftFrame, source: DraftSource | None = None) -> None:
        self.frame = frame
        self.transcript_id = frame.transcript_id
        self.draft_id = frame.draft_id
        self.source = source
        self.head, self.tail = wire.seq_parts(frame)
        self.size = len(self.head) + SEQ_DIGITS + len(self.tail)
        self._msgpack: tuple[bytes, bytes] | None = None

    @property
    def closes(self) -> bool:
        """Whether this is a close (``final``, ``cancelled``, ``expired``)."""
        return self.frame.state != "open"

    def render(self, seq: int, binary: bool) -> bytes:
        if not binary:
            return b"".join((self.head, b"%d" % seq, self.tail))
        parts = self._msgpack
        if parts is None:
            try:
                parts = wire.seq_parts(self.frame, binary=True)
            except Exception as exc:
                what = f"an update of draft {self.draft_id}"
                parts = (_failed(what, self.transcript_id, "MessagePack", exc), b"")
            self._msgpack = parts
        if not parts[0]:
            raise Unencodable(
                f"an update of draft {self.draft_id} of {self.transcript_id} "
                "cannot be encoded as MessagePack"
            )
        return b"".join((parts[0], wire.seq_bytes(seq, binary=True), parts[1]))

    def frame_json(self, seq: int) -> bytes:
        """The whole WebSocket frame of this update alone (JSON)."""
        seq_text = b"%d" % seq
        length = len(self.head) + len(seq_text) + len(self.tail)
        return b"".join((ws_header(TEXT, length), self.head, seq_text, self.tail))


class DraftSlot:
    """One connection's queued frame of one open draft, while its socket is
    not taking data: the updates pushed meanwhile merge into it, and once
    more than one did, it goes out as the ``text`` of the draft's state at
    that moment (one slot per draft, never a backlog of tokens)."""

    __slots__ = ("merged", "update")
    data = False
    baseline = False
    draft = True
    closes = False
    size = 0

    def __init__(self, update: EncodedDraft) -> None:
        self.update = update
        self.merged = False

    @property
    def transcript_id(self) -> str:
        return self.update.transcript_id

    def merge(self, update: EncodedDraft) -> None:
        self.update = update
        self.merged = True

    def render(self, seq: int, binary: bool) -> bytes:
        update = self.update
        if self.merged and update.source is not None:
            update = update.source.text_frame()
        return update.render(seq, binary)


class ControlFrame:
    """An ack, pong or error: one connection's, encoded once in its format
    when queued; never dropped on lag."""

    __slots__ = ("binary", "head", "size", "tail", "transcript_id")
    data = False
    baseline = False
    draft = False

    def __init__(self, frame: Any, *, binary: bool = False) -> None:
        # ``frame`` is a wire struct built with a placeholder seq of 0.
        self.transcript_id = getattr(frame, "transcript_id", None)
        self.binary = binary
        self.head, self.tail = wire.seq_parts(frame, binary=binary)
        self.size = len(self.head) + SEQ_DIGITS + len(self.tail)

    def render(self, seq: int, binary: bool) -> bytes:
        return b"".join((self.head, wire.seq_bytes(seq, binary=self.binary), self.tail))


class SharedFrame:
    """A frame of one transcript shared by every subscriber that takes it
    (a ``presence`` frame): encoded once per format, JSON now and
    MessagePack on first use, numbered when sent. Queued like an answer:
    never dropped on lag (``server.live.outbound.OutboundQueue.push_shared``)."""

    __slots__ = ("_msgpack", "frame", "head", "size", "tail", "transcript_id")
    data = False
    baseline = False
    draft = False

    def __init__(self, frame: Any) -> None:
        self.frame = frame
        self.transcript_id: str = frame.transcript_id
        self.head, self.tail = wire.seq_parts(frame)
        self.size = len(self.head) + SEQ_DIGITS + len(self.tail)
        self._msgpack: tuple[bytes, bytes] | None = None

    def render(self, seq: int, binary: bool) -> bytes:
        if not binary:
            return b"".join((self.head, b"%d" % seq, self.tail))
        parts = self._msgpack
        if parts is None:
            parts = self._msgpack = wire.seq_parts(self.frame, binary=True)
        return b"".join((parts[0], wire.seq_bytes(seq, binary=True), parts[1]))


Outbound = EncodedEvent | EncodedSnapshot | ControlFrame | EncodedDraft | DraftSlot | SharedFrame
