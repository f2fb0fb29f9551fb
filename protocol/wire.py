"""The wire protocol of ``/v1/ws`` (docs/protocol.md, section 2) as tagged msgspec unions.

Client ops are tagged by ``op``, server frames by ``type``. Two encodings carry
the same objects: JSON text (subprotocol ``tsync.v1.json``, the default; the
server may put several frames into one WebSocket message separated by ``\\n``)
and MessagePack (``tsync.v1.msgpack``, one frame per WebSocket message).

The hot path of the server never re-encodes an event per subscriber: it
encodes the event once (``encode_event_json``) and splices the connection's
``seq`` in front of it (``increment_json``), which yields exactly the bytes that
encoding the whole ``Increment`` would.

Why one module of over 600 lines: the ops and the frames are two tagged
unions that msgspec decodes in one pass each, and their shape checks must
stay beside the structs they check; split, a new field would be added in one
place and checked in another.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeAlias

import msgspec
from msgspec import Meta, Struct

from protocol import codes
from protocol.errors import InvalidFrame
from protocol.limits import (
    ID_PATTERN,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_PRESENCE_NAME_LENGTH,
    MAX_REF_LENGTH,
    MAX_TOKEN_LENGTH,
)
from protocol.state import InvalidChange, InvalidSnapshot, check_baseline, check_event
from protocol.types import (
    Message,
    NonNegative,
    Positive,
    Role,
    TranscriptEvent,
    TranscriptId,
    TranscriptSnapshot,
    ViewName,
)
from protocol.views import Window

SUBPROTOCOL_JSON: Final = "tsync.v1.json"
SUBPROTOCOL_MSGPACK: Final = "tsync.v1.msgpack"
SUBPROTOCOLS: Final = (SUBPROTOCOL_JSON, SUBPROTOCOL_MSGPACK)

#: An op's ``ref``, echoed in its answer: a short string or a signed 64-bit
#: integer (an answer must be writable in MessagePack too, whatever form the
#: op came in).
Ref: TypeAlias = (
    Annotated[str, Meta(max_length=MAX_REF_LENGTH)]
    | Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
    | None
)
IdempotencyKey: TypeAlias = Annotated[
    str, Meta(min_length=1, max_length=MAX_IDEMPOTENCY_KEY_LENGTH)
]
#: A draft's id, chosen by its writer: unique among the transcript's drafts
#: (the same characters as a transcript id).
DraftId: TypeAlias = Annotated[str, Meta(pattern=ID_PATTERN + r"(?!\n)")]
#: Where a draft is: ``open`` (being written), or closed: ``final`` (committed
#: as the message of revision ``revision``), ``cancelled`` (by its writer) or
#: ``expired`` (no update for ``draft_ttl_s``, or its replica went away).
DraftState: TypeAlias = Literal["open", "final", "cancelled", "expired"]
#: What a member of a transcript's presence says it is (``docs/protocol.md``,
#: Presence): the server names no right by it, beyond that ``writer`` and
#: ``agent`` need ``write``.
PresenceKind: TypeAlias = Literal["viewer", "writer", "agent"]
#: Who a member is: its token's ``sub``, or the name it gave (a server that
#: asks for no credentials).
PresenceName: TypeAlias = Annotated[str, Meta(min_length=1, max_length=MAX_PRESENCE_NAME_LENGTH)]

# Error codes (docs/protocol.md, Errors and close codes), named here too for code that knows
# them as ``wire.LAGGED``; their meanings, statuses and close codes are in
# ``protocol.codes``. Clients treat unknown codes like ``internal``.
INVALID_FRAME: Final = codes.INVALID_FRAME
INVALID_MESSAGE: Final = codes.INVALID_MESSAGE
INVALID_SEGMENT: Final = codes.INVALID_SEGMENT
INVALID_VIEW: Final = codes.INVALID_VIEW
NOT_FOUND: Final = codes.NOT_FOUND
CONFLICT: Final = codes.CONFLICT
REVISION_CONFLICT: Final = codes.REVISION_CONFLICT
TOO_LARGE: Final = codes.TOO_LARGE
LAGGED: Final = codes.LAGGED
UNAUTHORIZED: Final = codes.UNAUTHORIZED
FORBIDDEN: Final = codes.FORBIDDEN
RATE_LIMITED: Final = codes.RATE_LIMITED
TOO_MANY_SUBSCRIPTIONS: Final = codes.TOO_MANY_SUBSCRIPTIONS
TOO_MANY_DRAFTS: Final = codes.TOO_MANY_DRAFTS
DRAFT_TOO_LARGE: Final = codes.DRAFT_TOO_LARGE
DRAFT_CLOSED: Final = codes.DRAFT_CLOSED
UNAVAILABLE: Final = codes.UNAVAILABLE
INTERNAL: Final = codes.INTERNAL
INVALID_JSON: Final = codes.INVALID_JSON
INVALID_BODY: Final = codes.INVALID_BODY
METHOD_NOT_ALLOWED: Final = codes.METHOD_NOT_ALLOWED

# --- client -> server ----------------------------------------------------------


class Subscribe(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="op", tag="subscribe"
):
    """Subscribe; with ``from_revision`` resume after it (same ``epoch`` required).

    ``window`` asks for part of the transcript: a baseline then holds only
    the window's messages (``protocol.views.Window``); a resume that the
    server answers with a baseline uses it too.
    """

    transcript_id: TranscriptId
    from_revision: NonNegative | None = None
    epoch: str | None = None
    ref: Ref = None
    window: Window | None = None
    #: Also follow the transcript's presence: its members right after the
    #: baseline (or resume), then their changes (``PresenceFrame``).
    presence: bool = False


class Unsubscribe(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="op", tag="unsubscribe"
):
    transcript_id: TranscriptId
    ref: Ref = None


class Append(Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="op", tag="append"):
    """Append a batch. ``messages`` stays plain data here and is validated by
    ``protocol.validation.parse_messages`` so that errors name the message path.

    ``draft_id``: the batch commits that draft: it closes (subscribers get
    its ``final`` frame right behind the increment) in the same step.

    ``format``: the messages are in the shape of OpenAI's or Anthropic's API
    (what their SDKs return), or the AI SDK's ``UIMessage``s (``ui``: a reply
    with parts commits as ``from_ui_message`` maps it), converted by
    ``protocol.sdk_in``; ``system`` is Anthropic's system prompt (with
    ``format="anthropic"`` only)."""

    transcript_id: TranscriptId
    messages: list[Any]
    expected_revision: NonNegative | None = None
    idempotency_key: IdempotencyKey | None = None
    ref: Ref = None
    draft_id: DraftId | None = None
    format: Literal["openai", "anthropic", "ui"] | None = None
    system: Any = None


class PlainAppend(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="op", tag="append"
):
    """An ``Append`` whose messages are decoded straight into ``Message``
    structs (``decode_plain_append``): the fast path of the common append, one
    decode instead of a decode to dicts and a conversion. Same fields and
    checks as ``Append``; only its ``messages`` differ."""

    transcript_id: TranscriptId
    messages: tuple[Message, ...]
    expected_revision: NonNegative | None = None
    idempotency_key: IdempotencyKey | None = None
    ref: Ref = None
    draft_id: DraftId | None = None
    format: Literal["openai", "anthropic", "ui"] | None = None
    system: Any = None


class StartSegment(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="op", tag="startSegment"
):
    transcript_id: TranscriptId
    start: NonNegative | None = None
    ref: Ref = None


class SetView(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="op", tag="setView"
):
    """Create the View ``name`` or move it to ``[start, end)`` (``end``
    absent: open). Setting a View to the range it has changes nothing."""

    transcript_id: TranscriptId
    name: ViewName
    start: NonNegative
    end: NonNegative | None = None
    ref: Ref = None


class LeaveView(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="op", tag="leaveView"
):
    """Leave the View ``name`` (deletes nothing; leaving one that does not
    exist changes nothing)."""

    transcript_id: TranscriptId
    name: ViewName
    ref: Ref = None


class Draft(Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="op", tag="draft"):
    """Write a draft: a message being written, shared live with every
    subscriber and never part of the transcript's history.

    The first op for a ``draft_id`` opens it (``role`` defaults to
    ``assistant``; later ops keep the role it was opened with). ``delta``
    appends text, ``text`` replaces the whole text, ``cancel`` drops the
    draft; an op with none of them only keeps the draft alive. At most one
    of the three. ``chunks`` (instead of ``delta`` and ``text``) writes a
    reply with parts: AI SDK ``UIMessageChunk``s folded into the draft's
    ``UIMessage`` (``protocol.ui_stream``), taken whole or refused whole.
    ``stop`` (alone) ends a reply someone else is writing: what it holds is
    committed as its message, marked ``stopped``, and its writer is told.
    Answered with ``ack {draftId, n}`` only when the op carries a ``ref``;
    refusals are ``error`` frames whatever the op carries. An ``append``
    with ``draftId`` commits it.
    """

    transcript_id: TranscriptId
    draft_id: DraftId
    role: Role | None = None
    delta: str | None = None
    text: str | None = None
    cancel: bool = False
    chunks: list[dict[str, Any]] | None = None
    stop: bool = False
    ref: Ref = None


class Presence(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="op", tag="presence"
):
    """State this connection's presence on a transcript it subscribes to.

    The first one joins (``kind`` defaults to ``viewer``, ``state`` to
    ``{}``); later ones change what they carry (``state``: the whole new
    state, ``{}`` or ``null`` clears it); ``leave`` ends it. ``name``: who
    the member is on a server that asks for no credentials (elsewhere the
    token's ``sub`` is, and a ``name`` is refused). ``state`` is a JSON
    object of at most ``MAX_PRESENCE_STATE_BYTES`` encoded (``too-large``).
    Answered with ``pong {ref}`` only when the op carries a ``ref``. The rules,
    in one place: ``protocol.presence.presence_change``.
    """

    transcript_id: TranscriptId
    kind: PresenceKind | None = None
    state: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    name: PresenceName | None = None
    leave: bool = False
    ref: Ref = None


class Ping(Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="op", tag="ping"):
    ref: Ref = None


class Auth(Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="op", tag="auth"):
    """New credentials for this connection (a bearer token), before the ones it
    holds expire or as its first op when it connected without any. Answered
    with a ``pong`` carrying ``ref`` when accepted, an ``unauthorized`` error
    when not."""

    token: Annotated[str, Meta(min_length=1, max_length=MAX_TOKEN_LENGTH)]
    ref: Ref = None

    def __repr__(self) -> str:  # a token never reaches a log line by way of a repr
        return f"Auth(token=<{len(self.token)} chars>, ref={self.ref!r})"


ClientOp: TypeAlias = (
    Subscribe
    | Unsubscribe
    | Append
    | StartSegment
    | SetView
    | LeaveView
    | Draft
    | Presence
    | Ping
    | Auth
)

#: Every op name a client may send (for error messages: "unknown op").
OP_NAMES: Final = (
    "subscribe",
    "unsubscribe",
    "append",
    "startSegment",
    "setView",
    "leaveView",
    "draft",
    "presence",
    "ping",
    "auth",
)

# --- server -> client ----------------------------------------------------------


class Baseline(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="type", tag="baseline"
):
    """The transcript at ``snapshot.revision``; increments follow from revision+1."""

    seq: Positive
    snapshot: TranscriptSnapshot


class Increment(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="type", tag="increment"
):
    """One event of one subscribed transcript."""

    seq: Positive
    event: TranscriptEvent


class Ack(Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="type", tag="ack"):
    """The answer to ``append`` (``start``/``count`` set), ``startSegment``,
    ``setView``, ``leaveView`` or ``draft`` (``draft_id`` and ``n`` set:
    the number of the draft's latest update; ``revision`` is the
    transcript's, which a draft never changes).

    ``duplicate`` is true when an idempotency key matched an earlier append and
    this ack repeats the first one.
    """

    seq: Positive
    transcript_id: TranscriptId
    revision: NonNegative
    ref: Ref = None
    start: NonNegative | None = None
    count: NonNegative | None = None
    duplicate: bool = False
    draft_id: str | None = None
    n: NonNegative | None = None


class Pong(Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="type", tag="pong"):
    seq: Positive
    ref: Ref = None


class ErrorFrame(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="type", tag="error"
):
    """An error about one op or one subscription; the connection stays usable.

    ``revision`` is the transcript's current revision when the server knows it
    (set for ``revision-conflict``).
    """

    seq: Positive
    code: str
    message: str
    transcript_id: str | None = None
    ref: Ref = None
    revision: NonNegative | None = None


class DraftFrame(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="type", tag="draft"
):
    """One update of a draft of a subscribed transcript.

    ``n`` numbers the draft's updates 1, 2, 3, ... An open draft's frame
    carries ``delta`` (append it: it is update ``n``, and applies only to
    the text of update ``n`` - 1) or ``text`` (the whole text as of update
    ``n``). A closed one (``state`` not ``open``) carries neither; ``final``
    carries the ``revision`` whose messages replaced it. Drafts never change
    the transcript's revision.

    A reply with parts (written with ``chunks``) carries, beside the
    ``delta`` or ``text`` of its text parts joined (what a consumer of text
    alone shows), the ``chunks`` of update ``n`` (fold them into the
    ``UIMessage`` of update ``n`` - 1) with a ``delta`` or a ``text``, or
    ``replay`` with a ``text``: the whole reply so far as compacted chunks
    (fold them into a new ``UIMessage``).
    """

    seq: Positive
    transcript_id: TranscriptId
    draft_id: DraftId
    role: Role
    n: NonNegative
    delta: str | None = None
    text: str | None = None
    state: DraftState = "open"
    revision: NonNegative | None = None
    chunks: list[dict[str, Any]] | None = None
    replay: list[dict[str, Any]] | None = None


class Member(Struct, frozen=True, rename="camel", omit_defaults=True):
    """One member of a transcript's presence: one connection that stated it.

    ``id`` tells members apart (one person with two tabs is two members);
    ``who`` is the token's ``sub`` or the name given; ``state`` the small
    JSON object it set (``{}`` when none)."""

    id: Annotated[str, Meta(min_length=1, max_length=MAX_PRESENCE_NAME_LENGTH)]
    who: PresenceName
    kind: PresenceKind = "viewer"
    state: dict[str, Any] = {}


class PresenceCounts(Struct, frozen=True, rename="camel"):
    """How many members of each kind a transcript has."""

    viewers: NonNegative = 0
    writers: NonNegative = 0
    agents: NonNegative = 0

    @property
    def total(self) -> int:
        return self.viewers + self.writers + self.agents


class PresenceFrame(
    Struct, frozen=True, rename="camel", omit_defaults=True, tag_field="type", tag="presence"
):
    """The presence of a subscribed transcript (to a subscribe with
    ``presence``): its whole ``members`` (right after a baseline or resume,
    and when a crowd thins out below ``presence_max_members``), or the
    changes since the last frame (``joined``, ``updated``: whole members;
    ``left``: their ids), at most one a ``presence_interval_s``; or, over
    ``presence_max_members``, ``counts`` alone. ``counts`` is always there.
    """

    seq: Positive
    transcript_id: TranscriptId
    counts: PresenceCounts
    members: list[Member] | None = None
    joined: list[Member] | None = None
    updated: list[Member] | None = None
    left: list[str] | None = None

    @property
    def crowd(self) -> bool:
        """Counts only: the members are not listed (over ``presence_max_members``)."""
        return self.members is None and not (self.joined or self.updated or self.left)


ServerFrame: TypeAlias = Baseline | Increment | Ack | Pong | ErrorFrame | DraftFrame | PresenceFrame

# --- codecs ----------------------------------------------------------------------

_json_encoder: Final = msgspec.json.Encoder()
_msgpack_encoder: Final = msgspec.msgpack.Encoder()
_json_server_decoder: Final = msgspec.json.Decoder(ServerFrame)
_msgpack_server_decoder: Final = msgspec.msgpack.Decoder(ServerFrame)
_json_client_decoder: Final = msgspec.json.Decoder(ClientOp)
_msgpack_client_decoder: Final = msgspec.msgpack.Decoder(ClientOp)

encode_json = _json_encoder.encode
encode_msgpack = _msgpack_encoder.encode


def encode(obj: Any, *, binary: bool = False) -> bytes:
    """Encode any protocol object as JSON (default) or MessagePack."""
    return _msgpack_encoder.encode(obj) if binary else _json_encoder.encode(obj)


def _decode(data: bytes | str, json_decoder: Any, msgpack_decoder: Any) -> Any:
    if isinstance(data, str):
        return json_decoder.decode(data)
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidFrame(f"expected bytes or str, got {type(data).__name__}")
    head = bytes(data[:1])
    if head == b"{" or head.isspace() or not head:
        return json_decoder.decode(data)
    return msgpack_decoder.decode(data)


def accept_transcript_update(data: bytes | str) -> ServerFrame:
    """Validate ONE server frame and return it typed.

    JSON when ``data`` is ``str`` or bytes starting with ``{``, MessagePack
    otherwise. Raises ``InvalidFrame`` with a readable reason, and nothing else,
    whatever the input: a frame that does not decode, an event whose change
    is malformed, a baseline that breaks the snapshot invariants
    (``protocol.state.check_baseline``, the same check ``Transcript.restore``
    and every consumer copy make). Keeps no state and checks no continuity
    (see ``protocol.consumer`` for that). Returns ``Baseline``, ``Increment`` or
    ``ErrorFrame`` for transcript updates, and ``Ack``/``Pong`` for answers.
    """
    try:
        frame: ServerFrame = _decode(data, _json_server_decoder, _msgpack_server_decoder)
    except InvalidFrame:
        raise
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidFrame(str(exc)) from None
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:  # defensive
        raise InvalidFrame(f"undecodable frame: {exc}") from None
    try:
        if isinstance(frame, Increment):
            check_event(frame.event)
        elif isinstance(frame, Baseline):
            check_baseline(frame.snapshot)
        elif isinstance(frame, DraftFrame):
            check_draft_frame(frame)
    except (InvalidChange, InvalidSnapshot) as exc:
        raise InvalidFrame(str(exc)) from None
    return frame


def check_draft_frame(frame: DraftFrame) -> None:
    """Raise ``InvalidFrame`` unless the draft frame is one of its shapes:
    an open draft's update (``n`` >= 1 and exactly one of ``delta`` and
    ``text``), or a close (neither; ``revision`` with ``final`` only)."""
    if frame.state == "open":
        if frame.n < 1 or (frame.delta is None) == (frame.text is None):
            raise InvalidFrame("an open draft's frame has n >= 1 and one of delta and text")
        if frame.revision is not None:
            raise InvalidFrame("only a final draft frame carries a revision")
        if frame.replay is not None and (frame.chunks is not None or frame.text is None):
            raise InvalidFrame("a draft frame's replay comes with its text and no chunks")
        return
    if (
        frame.delta is not None
        or frame.text is not None
        or frame.chunks is not None
        or frame.replay is not None
    ):
        raise InvalidFrame(f"a {frame.state} draft frame carries no delta or text (nor chunks)")
    if (frame.revision is None) == (frame.state == "final"):
        raise InvalidFrame("a final draft frame carries the revision, no other close does")


def check_draft_op(op: Draft) -> None:
    """Raise ``InvalidFrame`` when a ``draft`` op carries more than one of
    ``delta``, ``text`` and ``cancel``."""
    given = (op.delta is not None) + (op.text is not None) + op.cancel + (op.chunks is not None)
    if given + op.stop > 1:
        raise InvalidFrame("a draft op carries at most one of delta, text, chunks, cancel and stop")


_json_plain_decoder: Final = msgspec.json.Decoder()
_msgpack_plain_decoder: Final = msgspec.msgpack.Decoder()


def frame_format(data: bytes | str) -> str:
    """``"JSON"`` or ``"MessagePack"``: how ``decode_client_op`` reads
    ``data`` (a text frame, or bytes starting with ``{``, is JSON, whatever
    the subprotocol)."""
    if isinstance(data, str):
        return "JSON"
    head = bytes(data[:1])
    return "JSON" if head == b"{" or head.isspace() or not head else "MessagePack"


def decode_plain(data: bytes | str) -> Any:
    """A frame decoded without a schema, read as ``decode_client_op`` reads
    it (JSON or MessagePack, ``frame_format``): for saying why an op was
    refused. Raises ``msgspec.DecodeError`` when it is neither."""
    return _decode(data, _json_plain_decoder, _msgpack_plain_decoder)


def decode_client_op(data: bytes | str) -> ClientOp:
    """Decode one client op or raise ``InvalidFrame`` (used by the server)."""
    try:
        op: ClientOp = _decode(data, _json_client_decoder, _msgpack_client_decoder)
    except InvalidFrame:
        raise
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidFrame(str(exc)) from None
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:
        raise InvalidFrame(f"undecodable frame: {exc}") from None
    if isinstance(op, Draft):
        check_draft_op(op)
    elif isinstance(op, Presence):
        check_presence_op(op)
    return op


_json_plain_append_decoder: Final = msgspec.json.Decoder(PlainAppend)
#: How a JSON append op starts when a client writes ``op`` first (ours do).
_APPEND_HEAD: Final = b'{"op":"append"'
_APPEND_HEAD_TEXT: Final = _APPEND_HEAD.decode()


def decode_plain_append(data: bytes | str) -> PlainAppend | None:
    """A JSON ``append`` op in the transcript's own shape (no ``format``, no
    ``system``), its messages decoded straight into ``Message`` structs; or
    ``None`` for any other frame and for one that this decode refuses, valid
    or not: ``decode_client_op`` then reads it as it reads every op and says
    why. Never raises. The messages still need the checks ``Message`` does not
    make itself (``protocol.validation.accept_decoded``)."""
    if isinstance(data, str):
        if not data.startswith(_APPEND_HEAD_TEXT):
            return None
    elif not data.startswith(_APPEND_HEAD):
        return None
    try:
        op = _json_plain_append_decoder.decode(data)
    except (msgspec.DecodeError, ValueError, TypeError, RecursionError, OverflowError):
        return None  # (msgspec.ValidationError is a DecodeError)
    if op.format is not None or op.system is not None:
        return None
    return op


def presence_state_bytes(state: dict[str, Any]) -> int:
    """The size a presence state counts against ``MAX_PRESENCE_STATE_BYTES``:
    its compact JSON encoding."""
    return len(_json_encoder.encode(state))


def check_presence_op(op: Presence) -> None:
    """Raise ``InvalidFrame`` for a ``presence`` op that leaves and sets
    something at once: the one rule of the op a frame alone breaks, checked
    when it is decoded (the others need the connection:
    ``protocol.presence.presence_change``, which checks this one too)."""
    if op.leave and (op.kind is not None or op.state is not msgspec.UNSET):
        raise InvalidFrame("a presence op that leaves carries no kind or state")


def split_frames(message: bytes | str) -> list[bytes | str]:
    """Split one WebSocket text message into its newline-separated JSON frames.

    Binary (MessagePack) messages hold exactly one frame and are returned whole.
    """
    if isinstance(message, str):
        return [part for part in message.split("\n") if part.strip()]
    if message[:1] == b"{" or message[:1].isspace():
        return [part for part in message.split(b"\n") if part.strip()]
    return [message]


# --- the hot path: one encoding per event, seq spliced per connection ------------

_INCREMENT_HEAD: Final = b'{"type":"increment","seq":'
_INCREMENT_MID: Final = b',"event":'


def encode_event_json(event: TranscriptEvent) -> bytes:
    """The event's JSON, encoded once and shared by every subscriber."""
    return _json_encoder.encode(event)


def increment_json(seq: int, event_json: bytes) -> bytes:
    """The bytes of ``Increment(seq, event)`` given the event's encoded JSON.

    Equal to ``encode_json(Increment(seq=seq, event=event))``; a test checks it.
    """
    return b"".join((_INCREMENT_HEAD, str(seq).encode(), _INCREMENT_MID, event_json, b"}"))


def encode_event_msgpack(event: TranscriptEvent) -> bytes:
    """The event's MessagePack, encoded once and shared by every subscriber."""
    return _msgpack_encoder.encode(event)


def seq_parts(frame: Any, *, binary: bool = False) -> tuple[bytes, bytes]:
    """A server frame built with ``seq=0``, encoded once and cut around its
    ``seq``: ``head + seq_bytes(n) + tail`` is the frame with ``seq=n``.

    Every server frame starts with its tag and then ``seq``, so the first
    ``"seq":0`` (MessagePack: the key ``seq`` and the integer 0) is the field.
    """
    encoded = encode(frame, binary=binary)
    marker = _SEQ_ZERO_MSGPACK if binary else _SEQ_ZERO_JSON
    at = encoded.index(marker) + len(marker) - 1
    return encoded[:at], encoded[at + 1 :]


def seq_bytes(seq: int, *, binary: bool = False) -> bytes:
    """``seq`` as it is written between the parts of ``seq_parts``."""
    return _msgpack_encoder.encode(seq) if binary else b"%d" % seq


_SEQ_ZERO_JSON: Final = b'"seq":0'
_SEQ_ZERO_MSGPACK: Final = _msgpack_encoder.encode("seq") + _msgpack_encoder.encode(0)


def with_seq(frame: Any, seq: int) -> Any:
    """A copy of a frame struct with ``seq`` set (frames are built before numbering)."""
    return msgspec.structs.replace(frame, seq=seq)
