"""The HTTP API (docs/protocol.md, section 3). JSON in and out; every error is an
``application/problem+json`` document (RFC 9457) with a ``code`` that matches
the WebSocket error codes."""

from __future__ import annotations

import functools
import logging
import re
import uuid
from typing import TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from protocol import api, codes, sdk_in
from protocol.errors import InvalidMessage, ProtocolError
from protocol.limits import MAX_ORIGIN_LENGTH
from protocol.types import Origin
from protocol.validation import validate_id, validate_idempotency_key
from server.errors import Refused
from server.live.hub import Hub
from server.store.base import AppendResult, StoreError
from server.web import access, http_reads, listing
from server.web.problems import json_response

log = logging.getLogger("tsync.http")
Body = TypeVar("Body", bound=msgspec.Struct)


def hub_of(request: Request) -> Hub:
    hub: Hub = request.app.state.hub
    return hub


#: What a client's ``X-Request-Id`` may be to become part of an origin.
_REQUEST_ID = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_ORIGIN_LENGTH - len('http:')}}}")


def origin_of(request: Request) -> Origin:
    """``http:<X-Request-Id>``, or ``http:<random>`` when the header is absent
    or not a short id: an HTTP change can never pass for a WebSocket one
    (``ws:...``), and a client cannot make events carry kilobytes of it."""
    request_id = request.headers.get("x-request-id")
    if request_id is None or not _REQUEST_ID.fullmatch(request_id):
        request_id = uuid.uuid4().hex[:12]
    return Origin(context_id=f"http:{request_id}")


#: What a state-changing request's body must be sent as (``server.web.origins``:
#: no "simple" cross-site request, which a page may send without asking, fits).
JSON_TYPES = ("application/json",)


def media_type(request: Request) -> str | None:
    """The request's ``Content-Type`` without its parameters, lower case."""
    header = request.headers.get("content-type")
    return header.partition(";")[0].strip().lower() if header is not None else None


async def read_body(request: Request) -> bytes:
    limit = hub_of(request).config.max_http_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Refused(codes.TOO_LARGE, f"body of {declared} bytes is over the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(codes.TOO_LARGE, f"body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_body_as(request: Request, allowed: tuple[str, ...]) -> bytes:
    """The body of a state-changing request, which must be sent as one of
    ``allowed`` (415 ``unsupported-media-type``; checked before the body is
    read). No type at all is let through for an empty body, and for a
    request that does not come from a web page (no ``Origin``): a page's
    request without a type is one another site could send without asking."""
    media = media_type(request)
    if media is None or media in allowed:
        body = await read_body(request)
        if media is not None or not body or "origin" not in request.headers:
            return body
    raise Refused(
        codes.UNSUPPORTED_MEDIA_TYPE,
        f"send the body as {' or '.join(allowed)}, not {media or 'without a Content-Type'}",
    )


async def read_json(request: Request, body_type: type[Body], *, allow_empty: bool = False) -> Body:
    """The request body decoded as ``body_type``: ``invalid-json`` when it is
    not JSON, ``invalid-body`` when it is JSON of the wrong shape (the
    message says where), an empty body is ``body_type()`` if ``allow_empty``
    (empty: no bytes at all; whitespace is JSON that is not there)."""
    body = await read_body_as(request, JSON_TYPES)
    if not body:
        if allow_empty:
            return body_type()
        raise Refused(codes.INVALID_JSON, "the body is empty; expected a JSON object")
    try:
        return msgspec.json.decode(body, type=body_type)
    except msgspec.ValidationError as exc:  # a DecodeError too: catch it first
        raise Refused(codes.INVALID_BODY, f"the body does not fit: {exc}") from None
    except msgspec.DecodeError as exc:
        raise Refused(codes.INVALID_JSON, f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise Refused(codes.INVALID_JSON, "the body nests objects or lists too deeply") from None


def transcript_id_of(request: Request) -> str:
    return validate_id(request.path_params["transcript_id"])  # InvalidId: invalid-frame


def refuse_repeated_query(request: Request) -> None:
    """A query parameter given more than once is ``invalid-query``: which of
    its values counts would be a guess (every route, ``server.web.application``)."""
    seen: set[str] = set()
    for name, _ in request.query_params.multi_items():
        if name in seen:
            raise Refused(codes.INVALID_QUERY, f"query parameter {name!r} is given more than once")
        seen.add(name)


def int_param(request: Request, name: str, default: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Refused(codes.INVALID_QUERY, f"query parameter {name!r} must be an integer") from None
    if value < 0:
        raise Refused(codes.INVALID_QUERY, f"query parameter {name!r} must be >= 0")
    return value


def ack_body(transcript_id: str, result: AppendResult) -> api.AckBody:
    receipt = result.receipt
    return api.AckBody(
        transcript_id=transcript_id,
        revision=receipt.revision,
        start=receipt.start,
        count=receipt.count,
        duplicate=result.duplicate,
    )


# --- endpoints ----------------------------------------------------------------------


async def create_transcript(request: Request) -> Response:
    body = await read_json(request, api.CreateBody, allow_empty=True)
    tid, epoch, revision = await hub_of(request).writes.create(
        body.id, body.messages or [], origin=origin_of(request)
    )
    return json_response(api.Created(transcript_id=tid, epoch=epoch, revision=revision), 201)


async def list_transcripts(request: Request) -> Response:
    limit = int_param(request, "limit", 100) or 100
    order = request.query_params.get("order", "id")  # present but empty is refused
    if order not in listing.ORDERS:
        raise Refused(codes.INVALID_QUERY, "query parameter 'order' must be 'id' or 'updated'")
    by_id = hub_of(request).list_transcripts
    infos = await access.list_readable(
        by_id if order == "id" else functools.partial(listing.newest_first, by_id),
        access.grant_of(request),
        after=request.query_params.get("after"),
        limit=min(limit, 1000),
    )
    return json_response(
        api.TranscriptList(
            transcripts=[
                api.TranscriptSummary(
                    transcript_id=i.transcript_id,
                    epoch=i.epoch,
                    revision=i.revision,
                    length=i.length,
                    created_at=i.created_at,
                    updated_at=i.updated_at,
                    title=i.title,
                    preview=i.preview,
                )
                for i in infos
            ]
        )
    )


async def get_transcript(request: Request) -> Response:
    tid = transcript_id_of(request)
    start = int_param(request, "start", 0) or 0
    end = int_param(request, "end")
    try:
        # Streamed past a few messages (server.web.http_reads): a long transcript
        # is never whole in memory, nor encoded in one call on the loop.
        return await http_reads.snapshot_response(hub_of(request), tid, start, end)
    except ProtocolError:
        raise
    except ValueError as exc:  # the range is not within the transcript
        raise Refused(codes.INVALID_QUERY, str(exc)) from None


async def get_events(request: Request) -> Response:
    tid = transcript_id_of(request)
    after = int_param(request, "after", 0) or 0
    response = await http_reads.events_response(hub_of(request), tid, after)
    if response is None:
        raise Refused(
            codes.GONE, f"events after revision {after} are no longer held; load a snapshot"
        )
    return response


async def append_messages(request: Request) -> Response:
    tid = transcript_id_of(request)
    body = await read_json(request, api.AppendBody)
    key = validate_idempotency_key(body.idempotency_key)
    header = request.headers.get("idempotency-key")
    if header is not None:
        # A bad header is refused even beside a good body key, and two keys
        # that differ are refused: which one counts would be a guess.
        from_header = validate_idempotency_key(header)
        if key is not None and key != from_header:
            raise InvalidMessage("idempotencyKey", "differs from the Idempotency-Key header")
        key = from_header
    chat_format = request.query_params.get("format")
    if chat_format is not None and chat_format not in sdk_in.SDK_FORMATS:
        raise Refused(
            codes.INVALID_QUERY,
            f"query parameter 'format' must be one of {', '.join(sdk_in.SDK_FORMATS)}",
        )
    messages = sdk_in.from_sdk(chat_format, body.messages, body.system)
    result = await hub_of(request).writes.append(
        tid,
        messages,
        expected_revision=body.expected_revision,
        idempotency_key=key,
        origin=origin_of(request),
        transport="http",
        draft_id=body.draft_id,
    )
    # 201 only when this request appended something: a replay or an empty batch is 200.
    created = not result.duplicate and bool(result.receipt.count)
    return json_response(ack_body(tid, result), 201 if created else 200)


async def start_segment(request: Request) -> Response:
    tid = transcript_id_of(request)
    body = await read_json(request, api.SegmentBody, allow_empty=True)
    result = await hub_of(request).writes.start_segment(
        tid, body.start, origin=origin_of(request), transport="http"
    )
    return json_response(ack_body(tid, result), 201)


async def delete_transcript(request: Request) -> Response:
    await hub_of(request).delete(transcript_id_of(request))
    return Response(status_code=204)


async def auth_info(request: Request) -> Response:
    """``GET /v1/auth``: who the credentials name and what they allow
    (``?transcriptId=``: on that transcript)."""
    transcript_id = request.query_params.get("transcriptId")
    if transcript_id is not None:
        transcript_id = validate_id(transcript_id)
    return json_response(access.auth_info(access.grant_of(request), transcript_id))


#: The errors answered as problems without a traceback in the log.
HANDLED: tuple[type[Exception], ...] = (Refused, ProtocolError, StoreError)
