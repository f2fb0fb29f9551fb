"""The HTTP API's request and response bodies (``docs/protocol.md`` section 3).

The server decodes requests into these types and encodes its answers from
them, and ``GET /v1/openapi.json`` is generated from them, so the document
and the server cannot disagree. Message bodies stay plain data in requests
(``messages: list[Any]``): ``protocol.validation`` checks them afterwards so
that an error names the message path.

Request bodies refuse unknown fields: a misspelt ``expectedRevison`` must not
turn a guarded append into an unguarded one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct, field

from protocol.types import Digest, Message, NonNegative, TranscriptEvent, TranscriptId, View
from protocol.usage import RangeUsage, UseRun
from protocol.wire import DraftId, IdempotencyKey, Member, PresenceCounts

__all__ = [
    "AckBody",
    "AppendBody",
    "AuthInfo",
    "ChatBody",
    "CreateBody",
    "Created",
    "EventsBody",
    "Health",
    "Imported",
    "MessageRange",
    "Problem",
    "Readiness",
    "SegmentBody",
    "TranscriptList",
    "TranscriptRights",
    "TranscriptSummary",
    "UsageBody",
    "ViewBody",
    "ViewList",
]

# --- requests ---------------------------------------------------------------------


class CreateBody(Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``POST /v1/transcripts``: an id (generated when omitted) and first messages."""

    id: TranscriptId | None = None
    messages: list[Any] | None = None


class AppendBody(Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``POST /v1/transcripts/{id}/messages``: one batch, all or nothing;
    with ``draft_id`` it commits that draft (it closes in the same step).
    With ``?format=openai|anthropic`` the messages are in that API's shape
    (what its SDK returns) and converted by ``protocol.sdk_in``."""

    messages: list[Any]
    expected_revision: NonNegative | None = None
    idempotency_key: IdempotencyKey | None = None
    draft_id: DraftId | None = None
    #: Anthropic's system prompt, with ``?format=anthropic`` only: appended
    #: first, as a system message (``protocol.sdk_in``).
    system: Any = None


class SegmentBody(Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``POST /v1/transcripts/{id}/segments``: where the new segment starts
    (default: the transcript's length)."""

    start: NonNegative | None = None


class ViewBody(Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``PUT /v1/transcripts/{id}/views/{name}``: the View's range (``end``
    absent or ``null``: open, it follows the transcript)."""

    start: NonNegative
    end: NonNegative | None = None


# --- responses --------------------------------------------------------------------


class Created(Struct, frozen=True, rename="camel"):
    """A new transcript (revision 1 when it was created with messages, else 0)."""

    transcript_id: str
    epoch: str
    revision: NonNegative


class ImportedFrom(Struct, frozen=True, rename="camel"):
    """The transcript an imported LMML export was written from, as its first
    line names it: its id, revision and digest there, and the digest of the
    exported messages, which the import checked the messages against."""

    transcript_id: str
    revision: NonNegative
    digest: Digest
    messages_digest: Digest


class Imported(Struct, frozen=True, rename="camel", omit_defaults=True):
    """A transcript made from an LMML file: ``count`` messages, and what the
    importer had to say about the file. ``digest``: the new transcript's at
    ``revision``; ``source``: the transcript the file was exported from, when
    it names one and its messages were checked against it (see
    ``ImportedFrom``)."""

    transcript_id: str
    epoch: str
    revision: NonNegative
    count: NonNegative
    warnings: list[str]
    digest: Digest | None = None
    source: ImportedFrom | None = None


class AckBody(Struct, frozen=True, rename="camel"):
    """An accepted append (``start``, ``count``) or segment start (``start`` is
    the new active start, ``count`` 0). ``duplicate``: an idempotency key
    matched and this repeats the first answer."""

    transcript_id: str
    revision: NonNegative
    start: NonNegative
    count: NonNegative
    duplicate: bool


class TranscriptSummary(Struct, frozen=True, rename="camel"):
    """One line of the list: times are milliseconds since the Unix epoch;
    ``title`` is the first user message's text and ``preview`` the last
    message's, both on one line and trimmed (``protocol.summary``), ``null``
    when there is none."""

    transcript_id: str
    epoch: str
    revision: NonNegative
    length: NonNegative
    created_at: int
    updated_at: int
    title: str | None = None
    preview: str | None = None


class TranscriptList(Struct, frozen=True, rename="camel"):
    """Transcripts ordered by id; ask again with ``?after=<last id>`` for more."""

    transcripts: list[TranscriptSummary]


class EventsBody(Struct, frozen=True, rename="camel"):
    """The events after the revision asked for, oldest first."""

    transcript_id: str
    events: list[TranscriptEvent]


class MessageRange(Struct, frozen=True, rename="camel"):
    """``GET /v1/transcripts/{id}/messages?start=&end=``: messages ``[start,
    end)`` of the transcript of ``epoch`` (at ``revision``, ``length``
    messages long). ``end`` may be lower than asked: a read returns at most
    ``MAX_READ_MESSAGES``."""

    transcript_id: str
    epoch: str
    revision: NonNegative
    start: NonNegative
    end: NonNegative
    length: NonNegative
    messages: list[Message]


class ViewList(Struct, frozen=True, rename="camel"):
    """The Views of a transcript at ``revision``, ordered by name."""

    transcript_id: str
    revision: NonNegative
    views: list[View]


class UsageBody(Struct, frozen=True, rename="camel"):
    """``GET /v1/transcripts/{id}/usage``: how the ranges asked for use the
    messages (``protocol.usage.message_usage``): distinct messages and their
    bytes counted once, however many ranges share them."""

    transcript_id: str
    revision: NonNegative
    messages: NonNegative
    bytes: NonNegative
    references: NonNegative
    ranges: list[RangeUsage]
    uses: list[UseRun]


class PresenceBody(Struct, frozen=True, rename="camel"):
    """``GET /v1/transcripts/{id}/presence``: who is on the transcript now
    (``members`` is ``null`` above the server's ``presence_max_members``:
    counts only)."""

    transcript_id: str
    members: list[Member] | None
    counts: PresenceCounts


class ReplyAnswer(Struct, frozen=True, rename="camel", omit_defaults=True):
    """What ``POST .../replies`` answers: the reply committed (``revision``,
    ``start``, ``count``, ``duplicate`` as an append's ack), cancelled by its
    stream (``cancelled``, ``reason``), or stopped by a reader, whose stop
    committed what it held (``stopped``, ``revision``)."""

    transcript_id: str
    draft_id: str
    revision: NonNegative | None = None
    start: NonNegative | None = None
    count: NonNegative | None = None
    duplicate: bool = False
    cancelled: bool = False
    stopped: bool = False
    reason: str | None = None


class UIMessagesBody(Struct, frozen=True, rename="camel"):
    """The transcript (or a window of it) as the AI SDK's ``UIMessage``s
    (``protocol.ui_messages``), from the message at ``start`` on."""

    messages: list[dict[str, Any]]


class ChatBody(Struct, frozen=True, omit_defaults=True):
    """Messages ready for a model call: chat-completions ``messages``
    (``format=openai``), or Anthropic's ``messages`` and ``system``
    (``format=anthropic``; ``system`` only when the transcript has one)."""

    messages: list[dict[str, Any]]
    system: str | msgspec.UnsetType = msgspec.UNSET


class Health(Struct, frozen=True):
    """Liveness: the process answers. Counts of what it holds now."""

    status: Literal["ok"]
    store: str
    connections: NonNegative
    live: NonNegative
    subscriptions: NonNegative
    #: The process that answered (one of the workers of ``tsync serve --workers``).
    pid: int | None = None


class Readiness(Struct, frozen=True, omit_defaults=True):
    """Readiness: 200 ``ready``, or 503 with the reason (store unreachable,
    draining for a shutdown)."""

    status: Literal["ready", "unready"]
    reason: str | None = None


class Problem(Struct, frozen=True, omit_defaults=True):
    """An error (``application/problem+json``, RFC 9457). ``code`` is the same
    vocabulary as the WebSocket ``error`` frame; ``path`` comes with
    ``invalid-message``, ``revision`` with ``revision-conflict``, ``epoch``
    (the transcript's) with ``epoch-changed``, ``transcriptId`` with ``forbidden``
    (the transcript the right is missing on)."""

    type: str
    title: str
    status: Annotated[int, Meta(ge=400, le=599)]
    code: str
    detail: str
    path: str | None = None
    revision: NonNegative | None = None
    epoch: str | None = None
    transcript_id: str | None = field(default=None, name="transcriptId")


class TranscriptRights(Struct, frozen=True, rename="camel"):
    """What the caller may do with one transcript."""

    transcript_id: TranscriptId
    read: bool
    write: bool


class AuthInfo(Struct, frozen=True, rename="camel", omit_defaults=True):
    """``GET /v1/auth``: who the caller's credentials name and what they allow.

    ``sub`` is ``null`` for the static token and on a server that asks for no
    credentials; ``expiresAt`` (milliseconds since the Unix epoch) is ``null``
    for credentials that never expire. ``read`` and ``write`` are the patterns
    of the transcript ids the caller may read and write (``admin`` may do
    everything); ``transcript`` answers for the id of ``?transcriptId=``.
    """

    sub: str | None
    expires_at: int | None
    admin: bool
    read: list[str]
    write: list[str]
    transcript: TranscriptRights | None = None
