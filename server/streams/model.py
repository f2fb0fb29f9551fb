"""One Durable Stream and the rules of the protocol that do not wait.

A stream is a list of messages, each the bytes of one append (in JSON mode, one
or more JSON values, each kept as its compact text) and the offset after it.
Offsets are ``<16 digits>_<16 digits>``: a read sequence (0) and the byte
position after the message, counting a 5-byte frame per message as the
reference server does, so that offsets of the same history are the same here
and there. They sort as strings, as the protocol requires, and a fork shares
its source's offsets up to its fork offset.

Nothing here does I/O or knows the clock: ``now`` (seconds) is passed in.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

import msgspec

__all__ = [
    "ZERO_OFFSET",
    "Producer",
    "ProducerOutcome",
    "Stream",
    "StreamError",
    "StreamMessage",
    "Update",
    "format_offset",
    "is_json",
    "json_body",
    "json_values",
    "media_type",
    "parse_expires_at",
    "producer_bytes",
]

ZERO_OFFSET: Final = "0000000000000000_0000000000000000"
FRAME_BYTES: Final = 5  # the reference server's 4-byte length and newline per message
#: An offset as this server writes it: ASCII digits only (``\d`` and
#: ``int()`` take other scripts' digits too), and bounded (``int()`` refuses
#: over 4,300 digits, and nothing needs more than 16).
OFFSET_RE: Final = re.compile(r"[0-9]{16}_[0-9]{16}")
#: What a JSON value held as its own ``str`` costs besides its text
#: (CPython's object header and the tuple's slot), counted by ``StreamMessage.held``.
VALUE_OVERHEAD: Final = 64
#: 7 days, as the protocol recommends for a store that forgets producers.
PRODUCER_TTL_S: Final = 7 * 24 * 3600.0
#: What one producer's state costs besides its id's bytes (its epoch,
#: sequence and time, and the index entry), counted with the stream's bytes.
PRODUCER_STATE_BYTES: Final = 64


def producer_bytes(producer_id: str) -> int:
    """What a producer's state counts against ``max_stream_bytes``."""
    return len(producer_id.encode("utf-8", "surrogatepass")) + PRODUCER_STATE_BYTES


class StreamError(Exception):
    """A request the protocol refuses: ``status`` and a plain-text reason."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers or {}


def format_offset(read_seq: int, position: int) -> str:
    return f"{read_seq:016d}_{position:016d}"


def _parse_offset(offset: str) -> tuple[int, int]:
    seq, _, position = offset.partition("_")
    return int(seq), int(position)


def media_type(content_type: str | None) -> str:
    """``application/json; charset=utf-8`` -> ``application/json``."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_json(content_type: str | None) -> bool:
    return media_type(content_type) == "application/json"


def parse_expires_at(value: str) -> float:
    """An RFC 3339 time as epoch seconds; ``ValueError`` when it is not one."""
    text = value.strip()
    if not text:
        raise ValueError("empty")
    moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError("no time zone")
    return moment.timestamp()


def json_values(body: bytes, *, allow_empty: bool, max_values: int | None = None) -> list[str]:
    """The messages a JSON-mode body holds: one level of an array flattened,
    each value as compact JSON text. ``StreamError`` 400 for invalid JSON
    or an empty array (unless ``allow_empty``: a create may be empty), 413
    for more than ``max_values`` values (refused before any is encoded)."""
    try:
        parsed = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):
        raise StreamError(400, "Invalid JSON") from None
    if isinstance(parsed, list):
        if not parsed and not allow_empty:
            raise StreamError(400, "Empty arrays are not allowed")
        if max_values is not None and len(parsed) > max_values:
            raise too_many_values(len(parsed), max_values)
        return [_compact(v) for v in parsed]
    return [_compact(parsed)]


def too_many_values(count: int, max_values: int) -> StreamError:
    return StreamError(
        413,
        f"the body holds {count} JSON values, over {max_values} per append"
        " (max_stream_append_values)",
    )


def json_values_job(
    body: bytes, allow_empty: bool, max_values: int
) -> tuple[int, str, tuple[str, ...]]:
    """``json_values`` in a worker process (``server.web.offload``): a
    refusal comes back as its status and reason (status 0: the values).
    The values of an array past the limit are counted (by msgspec, fast),
    never encoded."""
    try:
        parsed = msgspec.json.decode(body)
    except msgspec.DecodeError:
        parsed = None  # what ``json_values`` says of it (it reads NaN, msgspec does not)
    if isinstance(parsed, list) and len(parsed) > max_values:
        return 413, too_many_values(len(parsed), max_values).reason, ()
    del parsed
    try:
        values = json_values(body, allow_empty=allow_empty, max_values=max_values)
        return 0, "", tuple(values)
    except StreamError as error:
        return error.status, error.reason, ()


def _no_constant(name: str) -> object:
    """``NaN``, ``Infinity`` and ``-Infinity``: Python's parser takes them,
    JSON has no such values (every reader would get text that is not JSON)."""
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    """A JSON number as a float, refused when it is too large for one
    (``1e999`` would be written back as ``Infinity``)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_body(messages: list[StreamMessage]) -> bytes:
    """The JSON array of every value the messages hold."""
    return ("[" + ",".join(v for m in messages for v in m.values) + "]").encode()


@dataclass(slots=True, frozen=True)
class StreamMessage:
    """One append: its bytes (``values``: its JSON values in JSON mode) and
    the offset after it."""

    data: bytes
    offset: str
    values: tuple[str, ...] = ()

    @property
    def held(self) -> int:
        """The bytes this message holds in memory, as limits count them
        (``max_stream_bytes``): its bytes and, in JSON mode, each value's
        text and the object that holds it (``VALUE_OVERHEAD``)."""
        if not self.values:
            return len(self.data)
        return 2 * len(self.data) + VALUE_OVERHEAD * len(self.values)


@dataclass(slots=True)
class Producer:
    epoch: int
    last_seq: int
    updated: float


@dataclass(slots=True, frozen=True)
class Update:
    """What one accepted append or close changes in a stream: decided before
    anything changes, so that it can be written down (``StreamLog``) before
    it is applied in memory (``Stream.apply``)."""

    tail: str
    last_access: float
    closed: bool
    closed_by: tuple[str, int, int] | None
    stream_seq: str | None
    message: StreamMessage | None = None
    #: The producer's state after this request, written with the message.
    producer: tuple[str, Producer] | None = None
    #: What the stream holds after this change (``Stream.held``): a log that
    #: loads streams one at a time keeps it, to count them all without
    #: reading them (``StreamLog.totals``).
    held: int = 0


@dataclass(slots=True, frozen=True)
class ProducerOutcome:
    """What producer validation decided (nothing is changed by deciding)."""

    status: Literal["accepted", "duplicate", "stale_epoch", "invalid_epoch_seq", "gap"]
    epoch: int = 0
    seq: int = 0
    expected: int = 0


@dataclass(slots=True)
class Stream:
    """One stream's state. Its messages are its own (a fork's inherited
    messages stay in its source, read through ``Registry.read``)."""

    path: str
    content_type: str | None
    created_at: float
    last_access: float
    ttl_s: int | None = None
    expires_at: str | None = None
    expires_at_ts: float | None = None
    messages: list[StreamMessage] = field(default_factory=list)
    offsets: list[str] = field(default_factory=list)
    tail: str = ZERO_OFFSET
    size: int = 0
    closed: bool = False
    closed_by: tuple[str, int, int] | None = None
    refs: int = 0
    soft_deleted: bool = False
    forked_from: str | None = None
    fork_offset: str | None = None
    fork_sub_offset: int = 0
    stream_seq: str | None = None
    producers: dict[str, Producer] = field(default_factory=dict)
    #: What ``producers`` counts against ``max_stream_bytes`` (``producer_bytes``).
    producer_bytes: int = 0
    #: ``last_access`` as the stream log last wrote it (reads move
    #: ``last_access`` without writing it every time: ``Registry.touch``).
    logged_access: float = 0.0
    #: In a shared store (Redis): which incarnation of the path this copy
    #: is (made at each create) and how many changes it holds.
    gen: str = ""
    version: int = 0

    @property
    def held(self) -> int:
        """The bytes this stream counts against ``max_stream_bytes``: its
        own messages' and its producers' state."""
        return self.size + self.producer_bytes

    def put_producer(self, producer_id: str, state: Producer) -> None:
        if producer_id not in self.producers:
            self.producer_bytes += producer_bytes(producer_id)
        self.producers[producer_id] = state

    def drop_producer(self, producer_id: str) -> None:
        if self.producers.pop(producer_id, None) is not None:
            self.producer_bytes -= producer_bytes(producer_id)

    def live_producers(self, now: float) -> int:
        """How many producers were heard from within ``PRODUCER_TTL_S``."""
        return sum(1 for p in self.producers.values() if now - p.updated <= PRODUCER_TTL_S)

    @property
    def json(self) -> bool:
        return is_json(self.content_type)

    def expired(self, now: float) -> bool:
        if self.expires_at_ts is not None and now >= self.expires_at_ts:
            return True
        return self.ttl_s is not None and now >= self.last_access + self.ttl_s

    def touch(self, now: float) -> None:
        self.last_access = now

    # --- writing ---------------------------------------------------------------------

    def encode(
        self,
        body: bytes,
        *,
        create: bool = False,
        values: tuple[str, ...] | None = None,
        max_values: int | None = None,
    ) -> StreamMessage | None:
        """The next message the bytes of one request make, not added yet
        (``StreamError`` 400 for bad JSON, 413 past ``max_values``); ``None``
        for an empty JSON array at creation (nothing to add). ``values``:
        the body's JSON values, already parsed (off the loop)."""
        data = body
        if self.json:
            if values is None:
                values = tuple(json_values(body, allow_empty=create, max_values=max_values))
            if not values:
                return None
            try:
                data = (",".join(values) + ",").encode()
            except UnicodeEncodeError:  # "\ud800": valid JSON, but no text to keep
                raise StreamError(400, "Invalid JSON: a lone surrogate is not text") from None
        return self.next_message(data, values or ())

    def next_message(self, data: bytes, values: tuple[str, ...] = ()) -> StreamMessage:
        """The message ``data`` would be if appended now (nothing changes)."""
        read_seq, position = _parse_offset(self.tail)
        return StreamMessage(
            data, format_offset(read_seq, position + FRAME_BYTES + len(data)), values
        )

    def add_raw(self, data: bytes, values: tuple[str, ...] = ()) -> StreamMessage:
        message = self.next_message(data, values)
        self.push(message)
        return message

    def push(self, message: StreamMessage) -> None:
        """Add a message made by ``next_message`` (or read back from a log)."""
        self.messages.append(message)
        self.offsets.append(message.offset)
        self.tail = message.offset
        self.size += message.held

    def apply(self, update: Update) -> None:
        """Make in memory the change ``update`` describes."""
        if update.message is not None:
            self.push(update.message)
        if update.producer is not None:
            self.put_producer(*update.producer)
        self.tail = update.tail
        self.closed = update.closed
        self.closed_by = update.closed_by
        self.stream_seq = update.stream_seq
        self.last_access = self.logged_access = update.last_access

    def check_producer(self, producer_id: str, epoch: int, seq: int, now: float) -> ProducerOutcome:
        """Kafka-style validation of one producer request (changes nothing).
        One look-up by id: a producer not heard from for ``PRODUCER_TTL_S``
        is as new (its state is replaced when it is accepted)."""
        state = self.producers.get(producer_id)
        if state is not None and now - state.updated > PRODUCER_TTL_S:
            state = None
        if state is None:
            if seq != 0:
                return ProducerOutcome("gap", epoch, seq, expected=0)
            return ProducerOutcome("accepted", epoch, seq)
        if epoch < state.epoch:
            return ProducerOutcome("stale_epoch", state.epoch, seq)
        if epoch > state.epoch:
            if seq != 0:
                return ProducerOutcome("invalid_epoch_seq", epoch, seq)
            return ProducerOutcome("accepted", epoch, seq)
        if seq <= state.last_seq:
            return ProducerOutcome("duplicate", epoch, state.last_seq)
        if seq == state.last_seq + 1:
            return ProducerOutcome("accepted", epoch, seq)
        return ProducerOutcome("gap", epoch, seq, expected=state.last_seq + 1)

    # --- reading ---------------------------------------------------------------------

    def own_after(self, offset: str | None, cap: str | None = None) -> list[StreamMessage]:
        """This stream's own messages after ``offset`` (all for ``None``), up
        to and including the one at ``cap``."""
        start = 0 if offset is None else bisect.bisect_right(self.offsets, offset)
        end = len(self.offsets) if cap is None else bisect.bisect_right(self.offsets, cap)
        return self.messages[start:end] if start < end else []


def valid_offset(offset: str) -> bool:
    return OFFSET_RE.fullmatch(offset) is not None
