"""The HTTP API (contract section 4). JSON in and out; every error is an
``application/problem+json`` document (RFC 9457) whose ``code`` and status
come from the error table (``protocol.codes``), the same codes the WebSocket
answers with. Handlers translate requests into hub calls and nothing more."""

from __future__ import annotations

import logging
import secrets
import uuid
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from protocol import codes
from protocol.errors import ProtocolError
from protocol.types import Origin
from protocol.validation import validate_id, validate_idempotency_key
from server.errors import INTERNAL_FAILURE, Refused, failure_for
from server.hub import Hub
from server.metrics import CONTENT_TYPE_LATEST
from server.store.base import AppendResult, StoreError

log = logging.getLogger("tsync.http")
_json = msgspec.json.Encoder()
_decode = msgspec.json.Decoder()


def problem_response(exc: BaseException) -> Response:
    """``exc`` as a problem+json answer: its code, and the HTTP status the
    error table gives that code. An error without a code is a bug: logged,
    answered ``internal``."""
    failure = failure_for(exc)
    if failure is None:
        log.error("unhandled error", exc_info=exc)
        failure = INTERNAL_FAILURE
    return Response(
        _json.encode(failure.problem()),
        failure.spec.http_status,
        media_type="application/problem+json",
    )


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(_json.encode(obj), status, media_type="application/json")


def _hub(request: Request) -> Hub:
    hub: Hub = request.app.state.hub
    return hub


def _origin(request: Request) -> Origin:
    return Origin(context_id=request.headers.get("x-request-id") or f"http:{uuid.uuid4().hex[:12]}")


def check_auth(request: Request) -> None:
    token = _hub(request).config.token
    if token is None:
        return
    header = request.headers.get("authorization", "")
    offered = header[7:] if header.lower().startswith("bearer ") else ""
    if not secrets.compare_digest(offered.encode(), token.encode()):
        raise Refused(codes.UNAUTHORIZED, "missing or wrong bearer token")


async def read_body(request: Request) -> bytes:
    limit = _hub(request).config.max_http_body_bytes
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


async def read_json_object(request: Request, *, allow_empty: bool = False) -> dict[str, Any]:
    body = await read_body(request)
    if not body.strip() and allow_empty:
        return {}
    try:
        obj = _decode.decode(body)
    except msgspec.DecodeError as exc:
        raise Refused(codes.INVALID_FRAME, f"malformed JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise Refused(codes.INVALID_FRAME, "the body must be a JSON object")
    return obj


def _transcript_id(request: Request) -> str:
    return validate_id(request.path_params["transcript_id"])  # InvalidId: invalid-frame


def _int_param(request: Request, name: str, default: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Refused(codes.INVALID_FRAME, f"query parameter {name!r} must be an integer") from None
    if value < 0:
        raise Refused(codes.INVALID_FRAME, f"query parameter {name!r} must be >= 0")
    return value


def _optional_int(obj: dict[str, Any], key: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise Refused(codes.INVALID_FRAME, f"{key!r} must be a non-negative integer")
    return value


def ack_body(transcript_id: str, result: AppendResult) -> dict[str, Any]:
    receipt = result.receipt
    return {
        "transcriptId": transcript_id,
        "revision": receipt.revision,
        "start": receipt.start,
        "count": receipt.count,
        "duplicate": result.duplicate,
    }


# --- endpoints ----------------------------------------------------------------------


async def create_transcript(request: Request) -> Response:
    obj = await read_json_object(request, allow_empty=True)
    tid = obj.get("id")
    if tid is not None and not isinstance(tid, str):
        raise Refused(codes.INVALID_FRAME, "'id' must be a string")
    tid, epoch, revision = await _hub(request).create(
        tid, obj.get("messages") or [], origin=_origin(request)
    )
    return json_response({"transcriptId": tid, "epoch": epoch, "revision": revision}, 201)


async def list_transcripts(request: Request) -> Response:
    limit = _int_param(request, "limit", 100) or 100
    infos = await _hub(request).list(
        after=request.query_params.get("after"), limit=min(limit, 1000)
    )
    return json_response({"transcripts": infos})


async def get_transcript(request: Request) -> Response:
    tid = _transcript_id(request)
    start = _int_param(request, "start", 0) or 0
    end = _int_param(request, "end")
    snapshot = await _hub(request).snapshot(tid, 0, None)
    length = snapshot.end
    if (end is not None and end > length) or start > (length if end is None else end):
        raise Refused(codes.INVALID_FRAME, f"range [{start}, {end}) is not within [0, {length}]")
    if start or end is not None:
        snapshot = await _hub(request).snapshot(tid, start, end)
    return json_response(snapshot)


async def get_events(request: Request) -> Response:
    tid = _transcript_id(request)
    after = _int_param(request, "after", 0) or 0
    events = await _hub(request).events_after(tid, after)
    if events is None:
        raise Refused(
            codes.GONE, f"events after revision {after} are no longer held; load a snapshot"
        )
    return json_response({"transcriptId": tid, "events": events})


async def append_messages(request: Request) -> Response:
    tid = _transcript_id(request)
    obj = await read_json_object(request)
    if "messages" not in obj:
        raise Refused(codes.INVALID_BODY, "messages: missing")
    key = validate_idempotency_key(
        obj.get("idempotencyKey") or request.headers.get("idempotency-key")
    )
    result = await _hub(request).append(
        tid,
        obj["messages"],
        expected_revision=_optional_int(obj, "expectedRevision"),
        idempotency_key=key,
        origin=_origin(request),
        transport="http",
    )
    return json_response(ack_body(tid, result), 200 if result.duplicate else 201)


async def start_segment(request: Request) -> Response:
    tid = _transcript_id(request)
    obj = await read_json_object(request, allow_empty=True)
    result = await _hub(request).start_segment(
        tid, _optional_int(obj, "start"), origin=_origin(request), transport="http"
    )
    return json_response(ack_body(tid, result), 201)


async def delete_transcript(request: Request) -> Response:
    await _hub(request).delete(_transcript_id(request))
    return Response(status_code=204)


async def healthz(request: Request) -> Response:
    hub = _hub(request)
    return json_response({"status": "ok", "store": hub.store.name, **hub.stats()})


async def metrics(request: Request) -> Response:
    return Response(_hub(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


#: The errors answered as problems without a traceback in the log.
HANDLED: tuple[type[Exception], ...] = (Refused, ProtocolError, StoreError)
