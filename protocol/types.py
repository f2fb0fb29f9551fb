"""The model's vocabulary as frozen msgspec Structs.

Envelope fields are camelCase on the wire (``transcriptId``); message bodies
are chat-completions messages and keep their own snake_case names
(``tool_call_id``) verbatim. Every type encodes to JSON and MessagePack alike.

Nothing in here does I/O; see ``docs/architecture.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias

import msgspec
from msgspec import Meta, Struct
from msgspec.structs import force_setattr

from protocol.frozen import FrozenDict, freeze, freeze_object
from protocol.limits import ID_PATTERN, VIEW_NAME_PATTERN

# Python's ``$`` also matches before a trailing newline, so "a\n" would pass; the
# lookahead refuses it and, unlike ``\Z``, also means the same in a JSON Schema.
TranscriptId: TypeAlias = Annotated[str, Meta(pattern=ID_PATTERN + r"(?!\n)")]
NonNegative: TypeAlias = Annotated[int, Meta(ge=0)]
Positive: TypeAlias = Annotated[int, Meta(ge=1)]
Role: TypeAlias = Literal["user", "assistant", "system", "tool", "context"]
ViewName: TypeAlias = Annotated[str, Meta(pattern=VIEW_NAME_PATTERN + r"(?!\n)")]
#: A revision's rolling digest (``protocol.digest``): 32 lowercase hex digits.
Digest: TypeAlias = Annotated[str, Meta(pattern=r"^[0-9a-f]{32}$(?!\n)")]

__all__ = [
    "AttachmentPart",
    "Change",
    "ContentPart",
    "Digest",
    "ImageUrl",
    "ImageUrlPart",
    "Message",
    "MessageLocator",
    "MessagesAppended",
    "Origin",
    "Role",
    "Segment",
    "SegmentStarted",
    "TextPart",
    "TranscriptEvent",
    "TranscriptId",
    "TranscriptRangeLocator",
    "TranscriptRecord",
    "TranscriptSnapshot",
    "View",
    "ViewChanged",
    "ViewLeft",
    "ViewName",
]


# --- message bodies (verbatim chat-completions names) -----------------------

# ``gc=False`` on the values a transcript is made of: they never form reference
# cycles (strings, numbers, tuples and JSON-like dicts), so the cyclic garbage
# collector need not walk them. A server holding long transcripts otherwise
# pays for each full collection while holding the GIL (measured: loading
# 40,000 events paused the event loop 50-60 ms in the collector alone).


class TextPart(
    Struct, frozen=True, gc=False, forbid_unknown_fields=True, tag_field="type", tag="text"
):
    """``{"type": "text", "text": ...}``"""

    text: str


class ImageUrl(Struct, frozen=True, gc=False, omit_defaults=True, forbid_unknown_fields=True):
    """The ``image_url`` object of an image part (``url`` may be a data URI)."""

    url: str
    detail: str | None = None


class ImageUrlPart(
    Struct, frozen=True, gc=False, forbid_unknown_fields=True, tag_field="type", tag="image_url"
):
    """``{"type": "image_url", "image_url": {"url": ...}}``"""

    image_url: ImageUrl


class AttachmentPart(
    Struct, frozen=True, gc=False, forbid_unknown_fields=True, tag_field="type", tag="attachment"
):
    """``{"type": "attachment", "name": ..., "mime": ..., "content": ...}``

    ``content`` is text for text-like files and base64 for binary ones.
    """

    name: str
    mime: str
    content: str


ContentPart: TypeAlias = TextPart | ImageUrlPart | AttachmentPart


class Message(Struct, frozen=True, gc=False, omit_defaults=True, forbid_unknown_fields=True):
    """One chat message. Never changed once appended.

    ``tool_calls`` is accepted on assistant messages so that chat-completions
    tool use round-trips; it is kept verbatim.

    Frozen all the way down, however it was made (decoded, converted or built
    in Python): ``content`` is a tuple, ``metadata`` and each tool call a
    ``FrozenDict`` whose lists and objects are frozen too
    (``protocol.frozen``), so a message is hashable and nobody holding it can
    change what the transcript stores.
    """

    role: Role
    content: str | tuple[ContentPart, ...]
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: tuple[Mapping[str, Any], ...] | None = None
    metadata: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        # Runs on every decode, convert and construction: keep the common case
        # (string content, no metadata) to three type checks. What is not the
        # right shape is left as it is for validation to refuse.
        content: Any = self.content
        if type(content) is list:
            force_setattr(self, "content", tuple(content))
        metadata = self.metadata
        if metadata is not None and type(metadata) is not FrozenDict:
            frozen = freeze_object(metadata) if type(metadata) is dict else freeze(metadata)
            force_setattr(self, "metadata", frozen)
        calls = self.tool_calls
        if (
            calls is not None
            and isinstance(calls, list | tuple)
            and any(type(c) is not FrozenDict for c in calls)
        ):
            force_setattr(self, "tool_calls", tuple(freeze(call) for call in calls))

    def text(self) -> str:
        """The message's text: the string content, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


# --- changes and events ------------------------------------------------------


class Origin(Struct, frozen=True, gc=False, rename="camel"):
    """Who made a change: ``contextId`` names a connection or a request."""

    context_id: str


class MessagesAppended(
    Struct, frozen=True, gc=False, rename="camel", tag_field="kind", tag="messages-appended"
):
    """Messages ``start .. start+len(messages)-1`` were appended."""

    start: NonNegative
    messages: tuple[Message, ...]

    def __post_init__(self) -> None:
        if type(self.messages) is not tuple:
            force_setattr(self, "messages", tuple(self.messages))

    @property
    def end(self) -> int:
        return self.start + len(self.messages)


class SegmentStarted(
    Struct, frozen=True, gc=False, rename="camel", tag_field="kind", tag="segment-started"
):
    """``active_start`` moved from ``previous_start`` to ``start``; ``end`` = length then."""

    previous_start: NonNegative
    start: NonNegative
    end: NonNegative


class ViewChanged(
    Struct,
    frozen=True,
    gc=False,
    rename="camel",
    omit_defaults=True,
    tag_field="kind",
    tag="view-changed",
):
    """The View ``name`` was created or moved to ``[start, end)``; ``end``
    ``None`` means open (it follows the transcript) and is left out on the
    wire. Changes no message and no segment bound."""

    name: ViewName
    start: NonNegative
    end: NonNegative | None = None


class ViewLeft(
    Struct,
    frozen=True,
    gc=False,
    rename="camel",
    omit_defaults=True,
    tag_field="kind",
    tag="view-left",
):
    """The View ``name``, which covered ``[start, end)``, was left (``end``
    left out for an open View). Deletes nothing: the messages stay, and so do
    the segments."""

    name: ViewName
    start: NonNegative
    end: NonNegative | None = None


Change: TypeAlias = MessagesAppended | SegmentStarted | ViewChanged | ViewLeft


class TranscriptEvent(Struct, frozen=True, gc=False, rename="camel", omit_defaults=True):
    """The frozen fact of one accepted change, at ``revision``.

    ``digest`` is the transcript's rolling digest at ``revision``
    (``protocol.digest``); left out only by older peers and stores."""

    transcript_id: TranscriptId
    epoch: str
    revision: Positive
    occurred_at: int
    change: Change
    origin: Origin | None = None
    digest: Digest | None = None


class Segment(Struct, frozen=True):
    """A segment ``[start, end)``; ``end`` is ``None`` for the open one."""

    start: NonNegative
    end: NonNegative | None


class View(Struct, frozen=True, gc=False, omit_defaults=True):
    """A named range ``[start, end)`` over one transcript; ``end`` ``None``:
    open, it follows the transcript (``docs/protocol.md``, Views), and is left
    out on the wire (``null`` is read as open too)."""

    name: ViewName
    start: NonNegative
    end: NonNegative | None = None


class TranscriptSnapshot(Struct, frozen=True, rename="camel", omit_defaults=True):
    """The transcript fixed at ``revision``; ``messages`` are ``[start, end)``
    of a transcript of ``length`` messages.

    A snapshot is *whole* when it holds every message (``start == 0`` and
    ``end == length``), else *partial*: a range read over HTTP, or the window
    of a windowed subscription. ``segments`` and ``active_start`` are always
    those of the whole transcript. ``length`` is left out only by older peers;
    their snapshots are whole, so it defaults to ``end``. ``views`` are the
    Views now (by name), ``view_changes`` how many View changes the revision
    counts; both are left out when empty. ``digest`` is the rolling digest
    at ``revision`` (``protocol.digest``; left out by older peers). The
    invariants every snapshot must keep are checked by
    ``protocol.state.check_snapshot``.
    """

    transcript_id: TranscriptId
    epoch: str
    revision: NonNegative
    start: NonNegative
    messages: tuple[Message, ...]
    active_start: NonNegative
    segments: tuple[Segment, ...]
    # Always an int once made: None (absent on the wire) becomes ``end``.
    length: NonNegative = None  # type: ignore[assignment]
    views: tuple[View, ...] = ()
    view_changes: NonNegative = 0
    digest: Digest | None = None

    def __post_init__(self) -> None:
        if type(self.messages) is not tuple:
            force_setattr(self, "messages", tuple(self.messages))
        if type(self.segments) is not tuple:
            force_setattr(self, "segments", tuple(self.segments))
        if type(self.views) is not tuple:
            force_setattr(self, "views", tuple(self.views))
        length: int | None = self.length
        if length is None:
            force_setattr(self, "length", self.start + len(self.messages))

    @property
    def end(self) -> int:
        """Index one past the last message included."""
        return self.start + len(self.messages)

    @property
    def whole(self) -> bool:
        """Whether the snapshot holds every message of the transcript."""
        return self.start == 0 and self.start + len(self.messages) == self.length


class TranscriptRecord(Struct, frozen=True, rename="camel"):
    """What the observation port records of one change: ids and ranges, no bodies.

    For an append, ``[start, end)`` is the appended range; for a segment start
    it is the new segment's ``[start, end)`` (``end`` = length at that moment);
    for a View change (``name`` set) the View's range, an open end recorded
    as the length at that moment.
    """

    transcript_id: str
    revision: int
    kind: Literal["messages-appended", "segment-started", "view-changed", "view-left"]
    start: int
    end: int
    occurred_at: int = 0
    name: str | None = None


class MessageLocator(Struct, frozen=True, rename="camel"):
    """Where one message lives: forever the same message."""

    transcript_id: str
    index: NonNegative


class TranscriptRangeLocator(Struct, frozen=True, rename="camel"):
    """The range ``[start, end)`` of a transcript as fixed at ``revision``."""

    transcript_id: str
    start: NonNegative
    end: NonNegative
    revision: NonNegative


def to_builtins(obj: Any) -> Any:
    """Plain dicts/lists for a Struct (camelCase envelope, verbatim bodies)."""
    return msgspec.to_builtins(obj)
