"""Every error code and every close code, one row each.

This is the one place that says what an error means on each transport: its
wire code (the ``code`` of an ``error`` frame and of a problem+json answer),
its HTTP status, whether a client should try again, and, for the errors that
end a WebSocket connection, the close code. The server's WebSocket and HTTP
layers and both clients look errors up here; none of them decides on its own.

Close codes have one meaning each and say how to reconnect::

    1001  going-away        the server is shutting down       reconnect with backoff
    1007  invalid-data     a text message that is not UTF-8   fix the client first
    1008  policy           an Origin or Host not allowed      fix the page or the settings
    1009  message-too-big  a message over the hard cap (bytes  fix the client first
                           or fragments), or a fragment flood
    1011  keepalive        no pong in time (or a server bug)  reconnect with backoff
    1012  service-restart  the ASGI server itself stopped     reconnect with backoff
    1013  server-full      max_connections reached            reconnect with backoff
    4001  unauthorized     credentials refused or expired     get a new token, then reconnect
    4008  overflow         the client did not read its answers  reconnect and resume
    4010  message-timeout  a message took too long to arrive  reconnect with backoff

Every refusal of a WebSocket comes after the handshake, as a close code, so
that browsers (which never see a refused handshake's status) learn it too.

``tests/cases/errors.json`` is this table written out for other clients (the
browser client's tests read it); a test keeps it up to date.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec

#: What a client does after an error: ``no`` (the same request fails again:
#: fix it), ``later`` (try the same request again after a pause; appends keep
#: their idempotency key), ``resubscribe`` (subscribe again from the revision
#: it holds), ``new-token`` (get valid credentials first).
Retry = Literal["no", "later", "resubscribe", "new-token"]

#: What a client does after the server closed the connection: ``no`` (fix
#: the cause first), ``backoff`` (reconnect after a growing random pause),
#: ``resume`` (reconnect now and resubscribe from the revisions it holds),
#: ``new-token`` (reconnect only with new credentials).
Reconnect = Literal["no", "backoff", "resume", "new-token"]


class ErrorCode(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One error: its wire code, HTTP status, retry advice and meaning."""

    code: str
    #: The status of a problem+json answer with this code (WebSocket-only
    #: errors still have one, so that the table has no holes).
    http_status: int
    retry: Retry
    meaning: str
    #: When this error ends a WebSocket connection: the close code it uses.
    close_code: int | None = None


class CloseCode(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One WebSocket close code: the reason the server sends and what to do."""

    code: int
    reason: str
    reconnect: Reconnect
    meaning: str


# --- error codes (docs/protocol.md, Errors and close codes) ----------------------------

INVALID_FRAME: Final = "invalid-frame"
INVALID_MESSAGE: Final = "invalid-message"
INVALID_SEGMENT: Final = "invalid-segment"
INVALID_VIEW: Final = "invalid-view"
INVALID_LMML: Final = "invalid-lmml"
INVALID_JSON: Final = "invalid-json"
INVALID_BODY: Final = "invalid-body"
INVALID_QUERY: Final = "invalid-query"
NOT_FOUND: Final = "not-found"
METHOD_NOT_ALLOWED: Final = "method-not-allowed"
CONFLICT: Final = "conflict"
REVISION_CONFLICT: Final = "revision-conflict"
EPOCH_CHANGED: Final = "epoch-changed"
GONE: Final = "gone"
REQUEST_TIMEOUT: Final = "request-timeout"
TOO_LARGE: Final = "too-large"
TOO_COSTLY: Final = "too-costly"
UNSUPPORTED_MEDIA_TYPE: Final = "unsupported-media-type"
LAGGED: Final = "lagged"
UNAUTHORIZED: Final = "unauthorized"
FORBIDDEN: Final = "forbidden"
RATE_LIMITED: Final = "rate-limited"
TOO_MANY_SUBSCRIPTIONS: Final = "too-many-subscriptions"
TOO_MANY_DRAFTS: Final = "too-many-drafts"
DRAFT_TOO_LARGE: Final = "draft-too-large"
DRAFT_CLOSED: Final = "draft-closed"
UNAVAILABLE: Final = "unavailable"
INTERNAL: Final = "internal"

# --- close codes ------------------------------------------------------------------------

CLOSE_GOING_AWAY: Final = 1001
CLOSE_INVALID_DATA: Final = 1007
CLOSE_POLICY: Final = 1008
CLOSE_MESSAGE_TOO_BIG: Final = 1009
CLOSE_KEEPALIVE: Final = 1011
CLOSE_SERVICE_RESTART: Final = 1012
CLOSE_SERVER_FULL: Final = 1013
CLOSE_UNAUTHORIZED: Final = 4001
CLOSE_OVERFLOW: Final = 4008
CLOSE_MESSAGE_TIMEOUT: Final = 4010

_ERRORS: Final = (
    ErrorCode(
        code=INVALID_FRAME,
        http_status=400,
        retry="no",
        meaning="a WebSocket op is malformed: not JSON, not an object, no or an unknown "
        "`op`, a missing or mistyped field, or a bad transcript id (also a bad id in an "
        "HTTP path)",
    ),
    ErrorCode(
        code=INVALID_MESSAGE,
        http_status=422,
        retry="no",
        meaning="a message breaks the model's rules; the error names the path "
        "(`messages[2].content[0].type`)",
    ),
    ErrorCode(
        code=INVALID_SEGMENT,
        http_status=422,
        retry="no",
        meaning="a segment start outside `active_start < start <= length`",
    ),
    ErrorCode(
        code=INVALID_VIEW,
        http_status=422,
        retry="no",
        meaning="a View outside `0 <= start <= end <= length`, a bad View name, or no such "
        "View (a `subscribe` whose window names one: the subscription ends)",
    ),
    ErrorCode(
        code=INVALID_LMML,
        http_status=422,
        retry="no",
        meaning="an imported `.lmml` or `.lmmlz` file cannot be read; nothing was created",
    ),
    ErrorCode(
        code=INVALID_JSON,
        http_status=400,
        retry="no",
        meaning="an HTTP request body is not JSON",
    ),
    ErrorCode(
        code=INVALID_BODY,
        http_status=400,
        retry="no",
        meaning="an HTTP request body is JSON but not what the endpoint takes "
        "(not an object, a missing or mistyped field)",
    ),
    ErrorCode(
        code=INVALID_QUERY,
        http_status=400,
        retry="no",
        meaning="a query parameter has a value the endpoint does not take",
    ),
    ErrorCode(
        code=NOT_FOUND,
        http_status=404,
        retry="no",
        meaning="no such transcript (or it was deleted while subscribed), or no such route",
    ),
    ErrorCode(
        code=METHOD_NOT_ALLOWED,
        http_status=405,
        retry="no",
        meaning="the route exists but not with this HTTP method",
    ),
    ErrorCode(
        code=CONFLICT,
        http_status=409,
        retry="no",
        meaning="the thing exists already (creating a transcript id that is taken)",
    ),
    ErrorCode(
        code=REVISION_CONFLICT,
        http_status=409,
        retry="no",
        meaning="`expectedRevision` did not match; `revision` holds the current one",
    ),
    ErrorCode(
        code=EPOCH_CHANGED,
        http_status=409,
        retry="no",
        meaning="the transcript was deleted and created again since the `epoch` given: the "
        "copy that asked belongs to a history that no longer exists; take a new baseline",
    ),
    ErrorCode(
        code=GONE,
        http_status=410,
        retry="no",
        meaning="the events asked for are no longer held; load a snapshot instead",
    ),
    ErrorCode(
        code=REQUEST_TIMEOUT,
        http_status=408,
        retry="later",
        meaning="an HTTP request's headers or body did not arrive within "
        "`http_header_timeout_s` / `http_body_timeout_s`; the connection is closed",
    ),
    ErrorCode(
        code=TOO_LARGE,
        http_status=413,
        retry="no",
        meaning="an inbound WebSocket message over `max_frame_bytes`, an HTTP body over "
        "`max_http_body_bytes`, a presence state over 1 KiB of JSON, or a connection's "
        "presence over `max_connection_presence_bytes`",
        close_code=CLOSE_MESSAGE_TOO_BIG,
    ),
    ErrorCode(
        code=TOO_COSTLY,
        http_status=422,
        retry="no",
        meaning="an import or export would take the server longer than `offload_budget_s`; it "
        "was stopped and nothing was created",
    ),
    ErrorCode(
        code=UNSUPPORTED_MEDIA_TYPE,
        http_status=415,
        retry="no",
        meaning="an HTTP body of a media type the endpoint does not read",
    ),
    ErrorCode(
        code=LAGGED,
        http_status=409,
        retry="resubscribe",
        meaning="this connection's outbound queue overflowed: the subscription named by "
        "`transcriptId` was dropped; resubscribe from your revision (WebSocket only)",
    ),
    ErrorCode(
        code=UNAUTHORIZED,
        http_status=401,
        retry="new-token",
        meaning="no credentials, or credentials that are malformed, badly signed, expired or "
        "for another audience; a WebSocket without valid ones is closed with 4001",
        close_code=CLOSE_UNAUTHORIZED,
    ),
    ErrorCode(
        code=FORBIDDEN,
        http_status=403,
        retry="no",
        meaning="the credentials are valid but do not allow this on the transcript named "
        "(`transcriptId`), or a browser request came from an Origin or Host the server does "
        "not allow",
        close_code=CLOSE_POLICY,
    ),
    ErrorCode(
        code=RATE_LIMITED,
        http_status=429,
        retry="later",
        meaning="more ops than `max_ops_per_second` allows; the op was not carried out",
    ),
    ErrorCode(
        code=TOO_MANY_SUBSCRIPTIONS,
        http_status=429,
        retry="no",
        meaning="more than `max_subscriptions_per_connection` (WebSocket only)",
    ),
    ErrorCode(
        code=TOO_MANY_DRAFTS,
        http_status=429,
        retry="later",
        meaning="the transcript has `max_drafts_per_transcript` open drafts already, or "
        "remembers `max_closed_drafts` closes, or the drafts would pass `max_draft_bytes` "
        "(server-wide) or `max_connection_draft_bytes` (this connection's); the message names "
        "which. The op was not applied (retry once drafts are committed, cancelled or expired, "
        "or a close is forgotten)",
    ),
    ErrorCode(
        code=DRAFT_TOO_LARGE,
        http_status=413,
        retry="no",
        meaning="a draft's text would pass `max_message_bytes` (UTF-8 bytes); the update was "
        "not applied and the draft stays as it was",
    ),
    ErrorCode(
        code=DRAFT_CLOSED,
        http_status=409,
        retry="no",
        meaning="the draft was committed, cancelled or expired: it takes no more updates "
        "(write a new draft under another `draftId`); a draft a reader stopped tells its "
        "writer so at once, with the `revision` that committed what it held",
    ),
    ErrorCode(
        code=UNAVAILABLE,
        http_status=503,
        retry="later",
        meaning="the store could not be reached, or the server is at a limit (its import and "
        "export workers are all busy, or it holds as many transcripts as it may); nothing was "
        "applied; retry later (HTTP says when in `Retry-After`) with the same idempotency key",
    ),
    ErrorCode(
        code=INTERNAL,
        http_status=500,
        retry="later",
        meaning="a bug, logged on the server; clients treat unknown codes like this one",
    ),
)

_CLOSES: Final = (
    CloseCode(
        code=CLOSE_GOING_AWAY,
        reason="server shutting down",
        reconnect="backoff",
        meaning="the server is shutting down; queues were drained for a moment first (also "
        "the answer to a connection attempt while it drains)",
    ),
    CloseCode(
        code=CLOSE_INVALID_DATA,
        reason="invalid UTF-8",
        reconnect="no",
        meaning="a text message that is not valid UTF-8 (logged as one line)",
    ),
    CloseCode(
        code=CLOSE_POLICY,
        reason="policy violation",
        reconnect="no",
        meaning="the connection came from an `Origin` (a web page) or through a `Host` the "
        "server does not allow (`allowed_origins`, `allowed_hosts`)",
    ),
    CloseCode(
        code=CLOSE_MESSAGE_TOO_BIG,
        reason="message too big",
        reconnect="no",
        meaning="an inbound message over the hard cap `ws_hard_max_bytes` (sent by the "
        "WebSocket layer, which does not read it), in more than `ws_max_fragments` fragments, "
        "or fragments faster than `ws_max_fragments_per_s`",
    ),
    CloseCode(
        code=CLOSE_KEEPALIVE,
        reason="keepalive ping timeout",
        reconnect="backoff",
        meaning="the connection did not answer a ping within `ping_timeout_s` (sent by the "
        "WebSocket layer)",
    ),
    CloseCode(
        code=CLOSE_SERVICE_RESTART,
        reason="service restart",
        reconnect="backoff",
        meaning="the ASGI server is stopping and closed the connection itself: plain "
        "`uvicorn server.app:app` does so at shutdown before the app can drain (`tsync serve` "
        "drains and sends 1001)",
    ),
    CloseCode(
        code=CLOSE_SERVER_FULL,
        reason="too many connections",
        reconnect="backoff",
        meaning="the server holds `max_connections` connections already",
    ),
    CloseCode(
        code=CLOSE_UNAUTHORIZED,
        reason="unauthorized",
        reconnect="new-token",
        meaning="the credentials are missing, refused or expired: at once for bad ones at "
        "the handshake, after `auth_timeout_s` when none came, at `exp` when no `auth` op "
        "brought a new token",
    ),
    CloseCode(
        code=CLOSE_OVERFLOW,
        reason="outbound queue overflow",
        reconnect="resume",
        meaning="the client did not read even its acks and errors while its queue was full, "
        "or let its increments pass `queue_max_bytes` behind a baseline it had not read",
    ),
    CloseCode(
        code=CLOSE_MESSAGE_TIMEOUT,
        reason="message not completed in time",
        reconnect="backoff",
        meaning="an inbound message was still incomplete `ws_message_timeout_s` after its "
        "first byte arrived (a stalled or hostile sender holding server memory)",
    ),
)

#: Every error by its code.
ERRORS: Final[Mapping[str, ErrorCode]] = {row.code: row for row in _ERRORS}
#: Every close code the server (or its WebSocket layer) sends, by number.
CLOSES: Final[Mapping[int, CloseCode]] = {row.code: row for row in _CLOSES}


def error(code: str) -> ErrorCode:
    """The row of ``code``; an unknown code reads as ``internal`` (contract)."""
    return ERRORS.get(code) or ERRORS[INTERNAL]


def code_for_status(status: int) -> str:
    """The first code with this HTTP status (for an answer that names none:
    a proxy's, say); ``internal`` when none has it."""
    return next((row.code for row in _ERRORS if row.http_status == status), INTERNAL)


def code_for_close(close_code: int) -> str:
    """The error a close code ends a connection with (``unauthorized`` for
    4001, ``forbidden`` for 1008, ...); ``internal`` for one no error uses."""
    return next((row.code for row in _ERRORS if row.close_code == close_code), INTERNAL)


def close(code: int) -> CloseCode | None:
    """The row of a close code, ``None`` for one this server never sends."""
    return CLOSES.get(code)


def table() -> dict[str, Any]:
    """The whole table as plain data (what ``tests/cases/errors.json`` holds)."""
    return {
        "errors": msgspec.to_builtins(_ERRORS),
        "closes": msgspec.to_builtins(_CLOSES),
    }


_RETRY_TEXT: Final[Mapping[str, str]] = {
    "no": "no: fix the request",
    "later": "later, the same request",
    "resubscribe": "resubscribe from your revision",
    "new-token": "with a new token",
}
_RECONNECT_TEXT: Final[Mapping[str, str]] = {
    "no": "not before fixing the cause",
    "backoff": "yes, with backoff",
    "resume": "yes, now, resuming from your revisions",
    "new-token": "only with a new token",
}


def render_markdown() -> str:
    """The two tables as the Markdown docs/protocol.md holds between its
    ``error-codes`` markers (a test compares them)."""
    lines = [
        "| code | HTTP | retry | meaning |",
        "|---|---|---|---|",
        *(
            f"| `{row.code}` | {row.http_status} | {_RETRY_TEXT[row.retry]} | {row.meaning} |"
            for row in _ERRORS
        ),
        "",
        "| close code | reason | reconnect? | meaning |",
        "|---|---|---|---|",
        *(
            f"| {row.code} | `{row.reason}` | {_RECONNECT_TEXT[row.reconnect]} | {row.meaning} |"
            for row in _CLOSES
        ),
    ]
    return "\n".join(lines) + "\n"
