"""Baselines of a live transcript, encoded once and a chunk at a time.

Messages never change and are only ever added at the end, so a baseline at
revision R from message ``start`` is the snapshot's head (id, epoch,
revision, start, ``"messages":[``), the messages ``[start, length)`` and its
tail (``activeStart``, ``segments``, ``length``), and the encoded messages
can be shared by every baseline from ``start`` of every later revision.
``EncodedMessages`` keeps them for one start and format as chunks of about
``BASELINE_CHUNK_BYTES``, encoded once each: a baseline after an append
encodes only what was appended since the last one, not the whole transcript
again.

The messages may come from two places: a live transcript holds only its
newest ones, and a baseline that starts earlier encodes the older ones from
the store's reads (``encode_from``), once, then the held ones
(``encode_step``). Either way each message is encoded once per start and
format, however many connections take a baseline of it.

Encoding a big transcript the first time is the only long step. msgspec holds
the GIL while it encodes, so a worker thread would stall the event loop just
as much, and a process would have to be sent the messages (pickling costs
more than encoding). ``encode_step`` therefore encodes one chunk per call and
the caller (``LiveTranscript.prepare_baseline``) lets the loop run between
chunks, under a server-wide bound on how many baselines encode at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from protocol import wire
from protocol.state import TranscriptState
from protocol.types import Message
from server.live.frames import BASELINE_JSON_MID, BASELINE_MSGPACK_MID, EncodedSnapshot
from server.tuning import BASELINE_CHUNK_BYTES

_MESSAGES_JSON: Final = b'"messages":[]'
_MESSAGES_MSGPACK: Final = wire.encode_msgpack("messages") + wire.encode_msgpack(())
#: Messages encoded by the first step (then as many as their average size
#: says fill a chunk), and the most a transcript not encoded yet may hold to be
#: encoded without yielding.
_FIRST_STEP: Final = 8
_SMALL: Final = 64


class EncodedMessages:
    """The messages ``[start, count)`` of one transcript, encoded in one
    format as chunks (JSON: the messages joined by commas; MessagePack: the
    messages back to back)."""

    __slots__ = ("__weakref__", "binary", "chunks", "count", "encoded_bytes", "start")

    def __init__(self, *, binary: bool, start: int = 0) -> None:
        self.binary = binary
        self.start = start
        self.chunks: list[bytes] = []
        self.count = start
        self.encoded_bytes = 0

    def missing(self, state: TranscriptState) -> int:
        """Messages of ``state`` not encoded yet."""
        return state.length - self.count

    def _step(self) -> int:
        """Messages one step encodes: about a chunk's worth, by their average size."""
        done = self.count - self.start
        if not done:
            return _FIRST_STEP
        each = max(1, self.encoded_bytes // done)
        return max(1, BASELINE_CHUNK_BYTES // each)

    def fits_one_step(self, state: TranscriptState) -> bool:
        """Whether what is missing is at most one step's work (for a log not
        begun: a small transcript)."""
        begun = self.count > self.start
        return state.length - self.count <= (self._step() if begun else _SMALL)

    def encode_step(self, state: TranscriptState) -> None:
        """Encode the next chunk of ``state``'s messages (one chunk's worth:
        about ``BASELINE_CHUNK_BYTES``, at least one message). ``state`` must
        hold the next message."""
        missing = state.length - self.count
        if missing <= 0:
            return
        end = self.count + min(missing, self._step())
        self._append(state.slice(self.count, end))

    def encode_from(self, first: int, messages: Sequence[Message]) -> int:
        """Encode the next chunk taken from ``messages``, which are the
        transcript's ``[first, first + len(messages))`` (read from the store)
        and must include the next message; returns how many of them are left
        to encode."""
        at = self.count - first
        if not 0 <= at <= len(messages):
            raise ValueError(f"messages from {first} do not continue at {self.count}")
        end = min(len(messages), at + self._step())
        if end > at:
            self._append(messages[at:end])
        return len(messages) - end

    def _append(self, batch: Sequence[Message]) -> None:
        encoded = wire.encode(tuple(batch), binary=self.binary)
        chunk = _strip_array(encoded, self.binary)
        chunks = self.chunks
        if chunks and len(chunks[-1]) < BASELINE_CHUNK_BYTES // 2:
            # A few messages appended since the last baseline: grow the last
            # chunk rather than keep many small ones.
            chunks[-1] = b"".join((chunks[-1], b"" if self.binary else b",", chunk))
        else:
            chunks.append(chunk)
        self.encoded_bytes += len(chunk)
        self.count += len(batch)

    def encode_all(self, state: TranscriptState) -> None:
        """Encode whatever is missing now, without yielding (``state`` must
        hold every message not encoded yet)."""
        while self.count < state.length:
            self.encode_step(state)

    def snapshot(self, state: TranscriptState) -> EncodedSnapshot:
        """The baseline of ``state`` from ``start`` now (every message must
        be encoded). It keeps this encoding alive while it is queued."""
        assert self.count == state.length, "encode the missing messages first"
        encoded = wire.encode(state.snapshot_of(self.start, ()), binary=self.binary)
        if self.binary:
            at = encoded.index(_MESSAGES_MSGPACK) + len(_MESSAGES_MSGPACK) - 1
            head = b"".join(
                (BASELINE_MSGPACK_MID, encoded[:at], _array_header(state.length - self.start))
            )
            tail = encoded[at + 1 :]
        else:
            at = encoded.index(_MESSAGES_JSON) + len(_MESSAGES_JSON) - 1
            head = b"".join((BASELINE_JSON_MID, encoded[:at]))
            tail = encoded[at:] + b"}"
        return EncodedSnapshot(
            state.transcript_id,
            state.revision,
            binary=self.binary,
            head=head,
            chunks=tuple(self.chunks),
            tail=tail,
            separator=b"" if self.binary else b",",
            source=self,
        )


def _strip_array(encoded: bytes, binary: bool) -> bytes:
    """The items of an encoded array, without its brackets or header."""
    if not binary:
        return encoded[1:-1]
    first = encoded[0]
    if first == 0xDC:
        return encoded[3:]
    if first == 0xDD:
        return encoded[5:]
    return encoded[1:]  # fixarray


def _array_header(count: int) -> bytes:
    """A MessagePack array header for ``count`` items."""
    if count < 16:
        return bytes((0x90 | count,))
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")
