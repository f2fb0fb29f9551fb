"""transcript-sync's pure layer: the model's types, the wire protocol, validation,
the transcript state every copy shares with the entity, and the consumer core.

This package does no I/O and imports no asyncio, sockets, Starlette or Redis
(``tests/protocol/test_purity.py`` proves it), so both ends, the browser
client's tests and the server's replica mirroring can rely on one definition.
"""

from protocol.consumer import Consumer, Subscription
from protocol.errors import (
    InvalidFrame,
    InvalidId,
    InvalidMessage,
    InvalidSegment,
    ProtocolError,
)
from protocol.pairs import group_adjacent_pairs
from protocol.state import InvalidChange, InvalidSnapshot, TranscriptState, check_snapshot
from protocol.types import (
    AttachmentPart,
    Change,
    ContentPart,
    ImageUrl,
    ImageUrlPart,
    Message,
    MessageLocator,
    MessagesAppended,
    Origin,
    Segment,
    SegmentStarted,
    TextPart,
    TranscriptEvent,
    TranscriptRangeLocator,
    TranscriptRecord,
    TranscriptSnapshot,
)
from protocol.validation import parse_message, parse_messages, validate_id
from protocol.wire import (
    Ack,
    Append,
    Baseline,
    ClientOp,
    ErrorFrame,
    Increment,
    Ping,
    Pong,
    ServerFrame,
    StartSegment,
    Subscribe,
    Unsubscribe,
    accept_transcript_update,
    decode_client_op,
    split_frames,
)

__all__ = [
    "Ack",
    "Append",
    "AttachmentPart",
    "Baseline",
    "Change",
    "ClientOp",
    "Consumer",
    "ContentPart",
    "ErrorFrame",
    "ImageUrl",
    "ImageUrlPart",
    "Increment",
    "InvalidChange",
    "InvalidFrame",
    "InvalidId",
    "InvalidMessage",
    "InvalidSegment",
    "InvalidSnapshot",
    "Message",
    "MessageLocator",
    "MessagesAppended",
    "Origin",
    "Ping",
    "Pong",
    "ProtocolError",
    "Segment",
    "SegmentStarted",
    "ServerFrame",
    "StartSegment",
    "Subscribe",
    "Subscription",
    "TextPart",
    "TranscriptEvent",
    "TranscriptRangeLocator",
    "TranscriptRecord",
    "TranscriptSnapshot",
    "TranscriptState",
    "Unsubscribe",
    "accept_transcript_update",
    "check_snapshot",
    "decode_client_op",
    "group_adjacent_pairs",
    "parse_message",
    "parse_messages",
    "split_frames",
    "validate_id",
]
