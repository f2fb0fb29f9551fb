"""Machine-readable descriptions of the API, generated from the msgspec types
the server itself decodes and encodes (``msgspec.json.schema_components``):

- ``GET /v1/openapi.json``: OpenAPI 3.1 of the HTTP API (``protocol.api``,
  ``protocol.types``);
- ``GET /v1/schema.json``: JSON Schema (2020-12) of every WebSocket client op
  (``$defs/ClientOp``) and server frame (``$defs/ServerFrame``) of ``/v1/ws``.

Only the operation table below is written by hand (paths, parameters, which
type answers which status); ``tests/server/web/test_openapi.py`` checks real
responses and frames against both documents, so they cannot drift.

Why one module of over 600 lines: it is the OpenAPI document, mostly data (a schema per
route and per body), kept in one place so that it reads as the document it builds; the
logic is a few functions at the end.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from protocol import api, rights, wire
from protocol.limits import ID_PATTERN, MAX_IDEMPOTENCY_KEY_LENGTH, VIEW_NAME_PATTERN
from protocol.types import Message, TranscriptSnapshot
from server import package_version

__all__ = ["openapi_document", "openapi_json", "schema_document", "schema_json"]

_COMPONENTS = "#/components/schemas/{name}"
_DEFS = "#/$defs/{name}"
PROBLEM_JSON: Final = "application/problem+json"


@dataclass(frozen=True)
class Param:
    name: str
    where: str  # "query", "path" or "header"
    description: str
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})
    required: bool = False


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    #: status -> a msgspec type (JSON), a ``(media type, schema)`` pair, or
    #: ``None`` (no body). Error statuses answer ``api.Problem``.
    responses: dict[int, Any]
    body: Any = None  # a msgspec type, or {media type: schema} for raw bodies
    params: tuple[Param, ...] = ()
    #: Whether a request without a body is refused (a raw body always is).
    body_required: bool = False


#: What the server checks ids and View names against (``protocol.types``).
_ID_SCHEMA: Final = {"type": "string", "pattern": ID_PATTERN + r"(?!\n)"}
_NAME_SCHEMA: Final = {"type": "string", "pattern": VIEW_NAME_PATTERN + r"(?!\n)"}
_ID = Param("transcript_id", "path", "the transcript's id", _ID_SCHEMA, required=True)
_NAME = Param("name", "path", "the View's name", _NAME_SCHEMA, required=True)
_INT = {"type": "integer", "minimum": 0}
_PROBLEM = api.Problem
_START = Param("start", "query", "index of the first message (default 0)", _INT)

# The Durable Streams face (server.streams): the protocol's own headers and
# problem+json errors; its bodies are the stream's bytes, of its content type.
_STREAM = Param(
    "stream_path",
    "path",
    "the stream's path after /v1/stream/ (may hold slashes)",
    {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": "^[^\\x00-\\x1f\\x7f]+$"},
    required=True,
)
_DRAFT_PATH = "/v1/stream/transcripts/{transcript_id}/drafts/{draft_id}"
_DRAFT_ID = Param("draft_id", "path", "the draft's id", _ID_SCHEMA, required=True)
_ANY: tuple[str, dict[str, Any]] = ("*/*", {})
#: Where a Durable Streams read begins and how it waits for more.
_READ_FROM: Final = (
    Param("offset", "query", "-1 (the start), now (the tail) or an offset"),
    Param("live", "query", "long-poll or sse"),
    Param("cursor", "query", "the last Stream-Cursor"),
)


#: The streams face's refusals: RFC 9457 problem documents, without the
#: ``code`` of the transcripts' error table (the protocol's statuses say it).
_STREAM_PROBLEM: Final = (
    "application/problem+json",
    {
        "type": "object",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
        },
    },
)


def _plain(*statuses: int) -> dict[int, Any]:
    """The streams face's refusals (``_STREAM_PROBLEM``)."""
    return dict.fromkeys(statuses, _STREAM_PROBLEM)


def _header(name: str, description: str, pattern: str | None = None) -> Param:
    schema = {"type": "string"} if pattern is None else {"type": "string", "pattern": pattern}
    return Param(name, "header", description, schema)


def _preflight(path: str, params: tuple[Param, ...], summary: str) -> Operation:
    """The CORS preflight of a streams path."""
    return Operation("options", path, summary, {204: None, **_plain(400)}, params=params)


def _read_only(path: str, params: tuple[Param, ...], why: str) -> tuple[Operation, ...]:
    """The writes of a read-only stream, always 405 (``why``), and its preflight."""
    refusals = tuple(
        Operation(method, path, f"Always 405: {why}", _plain(400, 405), params=params)
        for method in ("put", "post", "delete")
    )
    return (*refusals, _preflight(path, params, "A CORS preflight"))


STREAM_OPERATIONS: Final = (
    Operation(
        "put",
        "/v1/stream/{stream_path}",
        "Durable Streams: create a stream (200 when it exists with this configuration), "
        "or fork one",
        {201: None, 200: None, **_plain(400, 404, 405, 409, 413, 429, 507)},
        body={"*/*": {}},  # any bytes: schemathesis has no "wrong type" of them
        params=(
            _STREAM,
            _header("Stream-TTL", "seconds of a sliding expiry", "^(0|[1-9][0-9]*)$"),
            _header("Stream-Expires-At", "an RFC 3339 expiry time"),
            _header("Stream-Closed", "true: create it closed"),
            _header("Stream-Forked-From", "the path of the stream to fork"),
            _header("Stream-Fork-Offset", "where the fork leaves its source"),
            _header("Stream-Fork-Sub-Offset", "values or bytes past that offset"),
        ),
    ),
    Operation(
        "post",
        "/v1/stream/{stream_path}",
        "Durable Streams: append (or close with Stream-Closed: true)",
        {200: None, 204: None, **_plain(400, 403, 404, 405, 409, 410, 413, 507)},
        body={"*/*": {}},  # any bytes: schemathesis has no "wrong type" of them
        params=(
            _STREAM,
            _header("Stream-Seq", "a writer sequence that must grow"),
            _header("Stream-Closed", "true: close the stream (after this body)"),
            _header("Producer-Id", "an idempotent producer"),
            _header("Producer-Epoch", "the producer's epoch", "^[0-9]+$"),
            _header("Producer-Seq", "the producer's request number", "^[0-9]+$"),
        ),
    ),
    Operation(
        "get",
        "/v1/stream/{stream_path}",
        "Durable Streams: read from an offset (catch-up, live=long-poll or live=sse)",
        {200: _ANY, 204: None, 304: None, **_plain(400, 404, 410)},
        params=(
            _STREAM,
            *_READ_FROM,
        ),
    ),
    Operation(
        "delete",
        "/v1/stream/{stream_path}",
        "Durable Streams: delete a stream (soft while forks read it)",
        {204: None, **_plain(400, 404, 405, 410)},
        params=(_STREAM,),
    ),
    _preflight("/v1/stream/{stream_path}", (_STREAM,), "Durable Streams: a CORS preflight"),
    Operation(
        "get",
        "/v1/stream/transcripts/{transcript_id}",
        "A transcript's events as a read-only Durable Stream (JSON mode; offsets are revisions)",
        {
            200: ("application/json", {"type": "array"}),
            204: None,
            304: None,
            **_plain(400, 404, 410),
        },
        params=(_ID, *_READ_FROM),
    ),
    *_read_only(
        "/v1/stream/transcripts/{transcript_id}",
        (_ID,),
        "a transcript is written through /v1/transcripts/{id}/messages",
    ),
    Operation(
        "get",
        _DRAFT_PATH,
        "A draft's text as it grows, a read-only Durable Stream (offsets are bytes of the text;"
        " closed when the draft is committed, cancelled or expires, or its text is rewritten)",
        {
            200: ("text/plain; charset=utf-8", {"type": "string"}),
            204: None,
            **_plain(400, 404, 410),
        },
        params=(_ID, _DRAFT_ID, *_READ_FROM),
    ),
    *_read_only(
        _DRAFT_PATH, (_ID, _DRAFT_ID), "a draft is written with the WebSocket protocol's draft op"
    ),
)

OPERATIONS: Final = (
    Operation(
        "post",
        "/v1/transcripts",
        "Create a transcript, optionally with its first messages (one append: revision 1)",
        {201: api.Created, 400: _PROBLEM, 409: _PROBLEM, 413: _PROBLEM, 422: _PROBLEM},
        body=api.CreateBody,
    ),
    Operation(
        "get",
        "/v1/transcripts",
        "List transcripts ordered by id, or the most recently updated first",
        {200: api.TranscriptList, 400: _PROBLEM},
        params=(
            Param(
                "order",
                "query",
                "`id` (default) or `updated`: the most recently updated first",
                {"type": "string", "enum": ["id", "updated"]},
            ),
            Param("after", "query", "only ids after this one (the last id of the previous page)"),
            Param("limit", "query", "most transcripts (default 100, at most 1000)", _INT),
        ),
    ),
    Operation(
        "post",
        "/v1/transcripts/import",
        "Make a transcript from an .lmml narrative or an .lmmlz bundle",
        {201: api.Imported, 400: _PROBLEM, 409: _PROBLEM, 413: _PROBLEM, 422: _PROBLEM},
        body={
            "text/markdown": {"type": "string"},
            "application/zip": {"type": "string", "contentMediaType": "application/zip"},
        },
        params=(
            Param("filename", "query", "the file's name (.lmml or .lmmlz)"),
            Param(
                "id",
                "query",
                "id of the new transcript (absent or empty: generated)",
                {"type": "string", "pattern": f"^(?:{ID_PATTERN[1:-1]})?$(?!\\n)"},
            ),
            Param("maxEmbedBytes", "query", "largest embedded file kept inline", _INT),
        ),
    ),
    Operation(
        "get",
        "/v1/transcripts/{transcript_id}",
        "The transcript's snapshot now, or of the range [start, end)",
        {200: TranscriptSnapshot, 400: _PROBLEM, 404: _PROBLEM},
        params=(
            _ID,
            _START,
            Param("end", "query", "index after the last message (default: the length)", _INT),
        ),
    ),
    Operation(
        "delete",
        "/v1/transcripts/{transcript_id}",
        "Delete a transcript; its subscribers get not-found",
        {204: None, 400: _PROBLEM, 404: _PROBLEM},
        params=(_ID,),
    ),
    Operation(
        "get",
        "/v1/transcripts/{transcript_id}/events",
        "The events after revision R, or 410 when they are no longer held",
        {200: api.EventsBody, 400: _PROBLEM, 404: _PROBLEM, 410: _PROBLEM},
        params=(_ID, Param("after", "query", "the revision R the caller has (default 0)", _INT)),
    ),
    Operation(
        "post",
        "/v1/transcripts/{transcript_id}/messages",
        "Append one batch of messages, all or nothing (201; 200 for an idempotent replay)",
        {
            200: api.AckBody,
            201: api.AckBody,
            400: _PROBLEM,
            404: _PROBLEM,
            409: _PROBLEM,
            413: _PROBLEM,
            422: _PROBLEM,
        },
        body=api.AppendBody,
        body_required=True,
        params=(
            _ID,
            Param(
                "format",
                "query",
                "absent: the transcript's own messages; openai (chat-completions messages,"
                " as the openai SDK returns them), anthropic (Messages API messages, with"
                " the body's system) or ui (the AI SDK's UIMessages): converted as"
                " docs/protocol.md says (SDK input, UI messages)",
                {"enum": ["openai", "anthropic", "ui"]},
            ),
            Param(
                "Idempotency-Key",
                "header",
                "the same as the body's idempotencyKey (both given: they must be the same)",
                {"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY_LENGTH},
            ),
        ),
    ),
    Operation(
        "get",
        "/v1/transcripts/{transcript_id}/messages",
        "Messages [start, end): at most 1000 (end is lowered to start + 1000)",
        {200: api.MessageRange, 400: _PROBLEM, 404: _PROBLEM, 409: _PROBLEM},
        params=(
            _ID,
            _START,
            Param("end", "query", "index after the last message (default: start + 1000)", _INT),
            Param(
                "epoch",
                "query",
                "the epoch the caller's copy has: another one answers 409 epoch-changed",
            ),
        ),
    ),
    Operation(
        "get",
        "/v1/transcripts/{transcript_id}/views",
        "The transcript's Views, ordered by name",
        {200: api.ViewList, 400: _PROBLEM, 404: _PROBLEM},
        params=(_ID,),
    ),
    Operation(
        "put",
        "/v1/transcripts/{transcript_id}/views/{name}",
        "Create the View or move it to [start, end) (201; 200 when it already was so)",
        {200: api.AckBody, 201: api.AckBody, 400: _PROBLEM, 404: _PROBLEM, 422: _PROBLEM},
        body=api.ViewBody,
        body_required=True,
        params=(_ID, _NAME),
    ),
    Operation(
        "delete",
        "/v1/transcripts/{transcript_id}/views/{name}",
        "Leave the View (deletes no message; duplicate: true when there was none)",
        {200: api.AckBody, 400: _PROBLEM, 404: _PROBLEM, 422: _PROBLEM},
        params=(_ID, _NAME),
    ),
    Operation(
        "get",
        "/v1/transcripts/{transcript_id}/usage",
        "How segments and Views use the messages, each message counted once",
        {200: api.UsageBody, 400: _PROBLEM, 404: _PROBLEM, 422: _PROBLEM},
        params=(
            _ID,
            Param(
                "segments",
                "query",
                "all, active, or segment indices separated by commas (default: all, or none "
                "when views is given)",
            ),
            Param("views", "query", "View names separated by commas (default: every View)"),
        ),
    ),
    Operation(
        "get",
        "/v1/transcripts/{transcript_id}/presence",
        "Who is on the transcript now: its members (null above presence_max_members) and "
        "counts by kind",
        {200: api.PresenceBody, 400: _PROBLEM, 404: _PROBLEM},
        params=(_ID,),
    ),
    Operation(
        "post",
        "/v1/transcripts/{transcript_id}/segments",
        "Start a segment at start (default: the length)",
        {201: api.AckBody, 400: _PROBLEM, 404: _PROBLEM, 422: _PROBLEM},
        body=api.SegmentBody,
        params=(_ID,),
    ),
    Operation(
        "get",
        "/v1/transcripts/{transcript_id}/chat",
        "The messages as the body of a chat API call (OpenAI or Anthropic)",
        {200: api.ChatBody, 400: _PROBLEM, 404: _PROBLEM},
        params=(
            _ID,
            Param("segment", "query", "active (default) or all", {"enum": ["active", "all"]}),
            Param(
                "format",
                "query",
                "openai (default: chat-completions messages) or anthropic (Messages API"
                " messages and system)",
                {"enum": ["openai", "anthropic"]},
            ),
            Param(
                "context",
                "query",
                "omit (default) or system: how context messages are rendered",
                {"enum": ["omit", "system"]},
            ),
        ),
    ),
    Operation(
        "get",
        "/v1/transcripts/{transcript_id}/ui-messages",
        "The messages as the AI SDK's UIMessages (useChat({messages}))",
        {200: api.UIMessagesBody, 400: _PROBLEM, 404: _PROBLEM},
        params=(
            _ID,
            Param("segment", "query", "all (default) or active", {"enum": ["all", "active"]}),
            Param("tail", "query", "the last N messages", {"type": "integer", "minimum": 0}),
            Param(
                "from",
                "query",
                "the messages from this index on",
                {"type": "integer", "minimum": 0},
            ),
            Param(
                "context",
                "query",
                "omit (default) or system: how context messages are shown",
                {"enum": ["omit", "system"]},
            ),
        ),
    ),
    Operation(
        "post",
        "/v1/transcripts/{transcript_id}/replies",
        "Write a reply from an AI SDK UI message stream (server-sent events); answered"
        " when it is committed",
        {
            200: api.ReplyAnswer,
            201: api.ReplyAnswer,
            400: _PROBLEM,
            404: _PROBLEM,
            409: _PROBLEM,
            413: _PROBLEM,
            415: _PROBLEM,
        },
        body={"text/event-stream": {"type": "string"}},
        params=(
            _ID,
            Param(
                "draftId",
                "query",
                "the draft's id (default: reply- and a random id)",
                _ID_SCHEMA,
            ),
        ),
    ),
    Operation(
        "post",
        "/v1/ai/chat",
        "The AI SDK's DefaultChatTransport: append the last of `messages` (a UIMessage) to the"
        " transcript `id` and answer with the reply an agent writes, as a UI message stream",
        {
            200: ("text/event-stream", {"type": "string"}),
            400: _PROBLEM,
            401: _PROBLEM,
        },
        body={"application/json": {"type": "object"}},
    ),
    Operation(
        "get",
        "/v1/ai/chat/{transcript_id}/stream",
        "The AI SDK's reconnect: the reply being written as a UI message stream, from its start",
        {
            200: ("text/event-stream", {"type": "string"}),
            204: None,
            400: _PROBLEM,
            403: _PROBLEM,
        },
        params=(_ID,),
    ),
    Operation(
        "get",
        "/v1/transcripts/{transcript_id}/export.lmml",
        "The transcript as an LMML narrative",
        {200: ("text/markdown", {"type": "string"}), 400: _PROBLEM, 404: _PROBLEM},
        params=(_ID,),
    ),
    Operation(
        "get",
        "/v1/transcripts/{transcript_id}/export.lmmlz",
        "The transcript as an LMML bundle (zip)",
        {
            200: ("application/zip", {"type": "string", "contentMediaType": "application/zip"}),
            400: _PROBLEM,
            404: _PROBLEM,
        },
        params=(_ID,),
    ),
    Operation(
        "get",
        "/v1/auth",
        "Who the caller's credentials name and what they allow (on one transcript with "
        "?transcriptId=)",
        {200: api.AuthInfo, 400: _PROBLEM},
        params=(
            Param(
                "transcriptId", "query", "a transcript to say the caller's rights on", _ID_SCHEMA
            ),
        ),
    ),
    *STREAM_OPERATIONS,
    Operation("get", "/healthz", "Liveness: the process answers", {200: api.Health}),
    Operation(
        "get",
        "/readyz",
        "Readiness: the store answers and the server is not draining",
        {200: api.Readiness, 503: api.Readiness},
    ),
    Operation(
        "get",
        "/metrics",
        "Prometheus metrics (text format)",
        {200: ("text/plain", {"type": "string"})},
    ),
    Operation(
        "get", "/v1/openapi.json", "This document", {200: ("application/json", {"type": "object"})}
    ),
    Operation(
        "get",
        "/v1/schema.json",
        "JSON Schema of the WebSocket ops and frames of /v1/ws",
        {200: ("application/json", {"type": "object"})},
    ),
)

_TITLES: Final = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "bad request (invalid-json, invalid-body, or a bad parameter)",
    401: "unauthorized: no credentials, or ones that are not valid (WWW-Authenticate: Bearer)",
    403: "forbidden: the credentials do not allow this (transcriptId names the transcript), or "
    "a page of an origin or a Host the server does not allow",
    404: "not-found",
    409: "conflict, revision-conflict or epoch-changed",
    410: "gone: the events are no longer held; load a snapshot",
    413: "too-large",
    415: "unsupported-media-type: the body is not sent as application/json (the LMML types "
    "on import)",
    422: "invalid-message, invalid-segment, invalid-view or invalid-lmml",
    503: "unavailable",
}


def _messages_are_messages(schema: dict[str, Any], ref: str) -> None:
    """Request ``messages`` are decoded as plain data (so that validation can
    name the path) and then checked as ``Message``: say so in the schema."""
    schema["properties"]["messages"]["items"] = {"$ref": ref}


#: The types whose ``end`` is left out for an open View (``omit_defaults``):
#: the server never sends ``"end": null`` (``docs/protocol.md``, Views).
_OPEN_END_TYPES: Final = ("View", "ViewChanged", "ViewLeft")
_OPEN_END: Final = {
    "type": "integer",
    "minimum": 0,
    "description": "the View's end; absent: the View is open (it follows the transcript)",
}


def _admits_null(schema: dict[str, Any]) -> bool:
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    return any(_admits_null(s) for s in schema.get("anyOf", ()) if isinstance(s, dict))


def _say_what_is_sent(defs: dict[str, Any]) -> None:
    """Fix what msgspec's schemas say that the server does not do: a
    ``default: null`` on a field that is never null (``TranscriptSnapshot.length``
    is filled in when absent; such a default is invalid OpenAPI), and an open
    View's ``end``, which is left out, never ``null``."""
    for schema in defs.values():
        for prop in schema.get("properties", {}).values():
            if "default" in prop and prop["default"] is None and not _admits_null(prop):
                del prop["default"]
    for name in _OPEN_END_TYPES:
        if name in defs:
            defs[name]["properties"]["end"] = dict(_OPEN_END)


def _content(kind: Any) -> dict[str, Any]:
    if isinstance(kind, tuple):
        media, schema = kind
        return {media: {"schema": schema}}
    media = PROBLEM_JSON if kind is _PROBLEM else "application/json"
    return {media: {"schema": {"$ref": _COMPONENTS.format(name=kind.__name__)}}}


@functools.cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the HTTP API (built once)."""
    types: list[Any] = [Message]
    for op in OPERATIONS:
        if isinstance(op.body, type):
            types.append(op.body)
        types.extend(k for k in op.responses.values() if isinstance(k, type))
    _, components = msgspec.json.schema_components(
        list(dict.fromkeys(types)), ref_template=_COMPONENTS
    )
    for name in ("CreateBody", "AppendBody"):
        _messages_are_messages(components[name], _COMPONENTS.format(name="Message"))
    _say_what_is_sent(components)

    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        entry: dict[str, Any] = {
            "summary": op.summary,
            "operationId": f"{op.method}{op.path.replace('/', '_').replace('.', '_')}",
            "responses": {
                str(status): {"description": _TITLES.get(status, "error")}
                | ({} if kind is None else {"content": _content(kind)})
                for status, kind in op.responses.items()
            }
            | {"default": {"description": "an error", "content": _content(_PROBLEM)}},
        }
        if op.params:
            entry["parameters"] = [
                {
                    "name": p.name,
                    "in": p.where,
                    "description": p.description,
                    "required": p.required,
                    "schema": p.schema,
                }
                for p in op.params
            ]
        if isinstance(op.body, type):
            entry["requestBody"] = {"required": op.body_required, "content": _content(op.body)}
        elif op.body is not None:
            entry["requestBody"] = {
                "required": True,
                "content": {media: {"schema": s} for media, s in op.body.items()},
            }
        need = rights.route_rule(op.method.upper(), op.path).need
        entry["x-tsync-needs"] = need
        if need == rights.PUBLIC:
            entry["security"] = []
        else:
            for status in (401, 403):
                entry["responses"][str(status)] = {
                    "description": _TITLES[status],
                    "content": _content(_PROBLEM),
                }
        if op.body is not None:
            entry["responses"]["415"] = {"description": _TITLES[415], "content": _content(_PROBLEM)}
        paths.setdefault(op.path, {})[op.method] = entry

    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "transcript-sync",
            "version": package_version(),
            "description": "Real-time sync of append-only LLM chat transcripts. This document "
            "covers the HTTP API; the WebSocket protocol of /v1/ws is described by the JSON "
            "Schema at /v1/schema.json and in docs/protocol.md.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the static token or a JWT (see docs/protocol.md, "
                    "Credentials); x-tsync-needs says which right an operation needs",
                }
            },
        },
        # A server started with credentials wants them; one without wants nothing.
        "security": [{"bearer": []}, {}],
    }


@functools.cache
def schema_document() -> dict[str, Any]:
    """JSON Schema of the WebSocket protocol: ``$defs/ClientOp`` (what a
    client sends) and ``$defs/ServerFrame`` (what the server sends); one
    WebSocket text message may hold several, separated by newlines."""
    (client_op, server_frame), defs = msgspec.json.schema_components(
        [wire.ClientOp, wire.ServerFrame], ref_template=_DEFS
    )
    _messages_are_messages(defs["Append"], _DEFS.format(name="Message"))
    _say_what_is_sent(defs)
    defs["ClientOp"] = {"title": "ClientOp", "description": "A client op."} | client_op
    defs["ServerFrame"] = {"title": "ServerFrame", "description": "A server frame."} | server_frame
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "/v1/schema.json",
        "title": f"transcript-sync WebSocket protocol ({wire.SUBPROTOCOL_JSON})",
        "description": "Every frame of /v1/ws is a ClientOp (client to server) or a "
        "ServerFrame (server to client). The same objects travel as MessagePack under "
        f"{wire.SUBPROTOCOL_MSGPACK}.",
        "oneOf": [
            {"$ref": _DEFS.format(name="ClientOp")},
            {"$ref": _DEFS.format(name="ServerFrame")},
        ],
        "$defs": defs,
    }


@functools.cache
def _encoded(which: str) -> bytes:
    document = openapi_document() if which == "openapi" else schema_document()
    return msgspec.json.encode(document)


async def openapi_json(request: Request) -> Response:
    return Response(_encoded("openapi"), media_type="application/json")


async def schema_json(request: Request) -> Response:
    return Response(_encoded("schema"), media_type="application/json")
