"""The HTTP face of the Durable Streams protocol at ``/v1/stream/{path}``.

A stream's identity is its whole URL path (``/v1/stream/a/b``), which is what
``Stream-Forked-From`` names. Each method maps to one operation of
``server.streams.registry.StreamRegistry``; what the protocol says about headers,
status codes, ETags, cursors and the three read modes lives here. Errors are
answered as ``application/problem+json`` documents (RFC 9457: ``status``,
``title``, ``detail``), as the server's other HTTP errors, with the browser
security headers every answer carries.

A stream's name is the route's ``stream_path``: the request's path as the
ASGI server percent-decoded it, after ``/v1/stream/``. It is what the rights
are checked on (``server.web.access.HttpAccess``) and what the registry
knows, so one stream has one name, whatever the spelling of its URL (``%3F``
is a ``?`` of the name, not the start of a query). ``Stream-Forked-From``
names its source as a URL path, percent-decoded once the same way
(``source_path``), and creating a fork needs the right to read its source.

Why one module of over 600 lines: the protocol's HTTP surface (every method,
status code and ETag rule, and the catch-up and long-poll reads) is one
contract that the official conformance suite checks as a whole; its names and
shared rules are in ``headers``, the live SSE read in ``sse``, the decisions
behind it in the registry (``registry``) and the live readers' delivery in
``fanout``.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any, Final, NamedTuple, Protocol, TypeVar
from urllib.parse import unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Scope

from protocol import codes, rights
from protocol.rights import Grant
from server.auth import GRANT_KEY
from server.errors import Refused, failure_for
from server.streams.headers import (
    CATCH_UP_CACHE,
    CLOSED,
    DETACH_FORKS,
    EXPECTED_SEQ,
    EXPIRES_AT,
    FORK_OFFSET,
    FORK_SUB_OFFSET,
    FORKED_FROM,
    MAX_CURSOR,
    MAX_PATH,
    NEXT_OFFSET,
    PREFIX,
    PRODUCER_EPOCH,
    PRODUCER_ID,
    PRODUCER_SEQ,
    RECEIVED_SEQ,
    REQUEST_HEADERS,
    SECURITY,
    SEQ,
    SSE_ENCODING,
    TRANSCRIPTS,
    TTL,
    UP_TO_DATE,
    StreamSettings,
    response_cursor,
)
from server.streams.longpoll import Answer, Reply, SharedAnswers
from server.streams.model import (
    Stream,
    StreamError,
    StreamMessage,
    is_json,
    json_body,
    json_values_job,
    parse_expires_at,
    valid_offset,
)
from server.streams.registry import StreamAppend, StreamRegistry
from server.streams.sse import SSE_HEADERS, StreamSse, base64_encoded, page_of

__all__ = [
    "PREFIX",
    "ROUTE",
    "TRANSCRIPTS",
    "Prepared",
    "StreamSettings",
    "fast_long_poll",
    "long_poll",
    "long_poll_query",
    "routes",
]

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
#: A JSON-mode body up to this size is parsed on the loop (a few ms at
#: most); a larger one in a worker process (``server.web.offload``), which
#: counts its values before encoding any (``max_stream_append_values``).
JSON_INLINE_BYTES: Final = 256 * 1024
# ASCII digits only (``int()`` takes other scripts' digits too), and few
# enough for ``int()`` (it refuses over 4,300) and for what they count.
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]{0,15}")
_INTEGER: Final = re.compile(r"[0-9]{1,20}")
_CONTENT_TYPE: Final = re.compile(r"[\w.+-]+/[\w.+-]+")
MAX_SAFE_INTEGER: Final = 2**53 - 1


def stream_answer(
    status: int,
    headers: Mapping[str, str] | None = None,
    body: bytes | str = b"",
    media: str | None = None,
) -> Response:
    merged = {**SECURITY, **(headers or {})}
    if isinstance(body, str):
        body = body.encode()
        media = media or "text/plain; charset=utf-8"
    response = Response(body, status_code=status, headers=merged, media_type=media)
    given = {k.lower() for k in headers or ()}
    if media is None and "content-type" not in given and "content-type" in response.headers:
        del response.headers["content-type"]  # no body: no Content-Type invented for it
    return response


def refusal_answer(error: StreamError) -> Response:
    """A refusal as an ``application/problem+json`` document."""
    problem = {
        "type": "about:blank",
        "title": HTTPStatus(error.status).phrase,
        "status": error.status,
        "detail": error.reason,
    }
    body = json.dumps(problem, ensure_ascii=True).encode()
    return stream_answer(error.status, error.headers, body, "application/problem+json")


def problem_of(exc: Exception) -> Response:
    """An error with a ``protocol.codes`` code (``server.errors``) as its
    problem document, with this face's security headers."""
    failure = failure_for(exc)
    assert failure is not None, exc
    body = json.dumps(failure.problem(), ensure_ascii=True).encode()
    return stream_answer(failure.spec.http_status, None, body, "application/problem+json")


def source_path(header: str) -> str:
    """The path ``Stream-Forked-From`` names: the URL path percent-decoded
    once, as the ASGI server decodes a request's (``StreamError`` 400 when
    it is no stream path)."""
    path = unquote(header)
    name = path[len(PREFIX) :] if path.startswith(PREFIX) else ""
    if not 0 < len(name) <= MAX_PATH or _CONTROL.search(name):
        raise StreamError(400, f"{FORKED_FROM} names no stream path ({PREFIX}...)")
    return path


def _registry(request: Request) -> StreamRegistry:
    registry: StreamRegistry = request.app.state.streams
    return registry


def _settings(request: Request) -> StreamSettings:
    settings: StreamSettings = request.app.state.stream_settings
    return settings


def _closed_header(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


async def _body(request: Request, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise StreamError(413, f"the body is over {limit} bytes (max_http_body_bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


async def endpoint(request: Request) -> Response:
    """Every method on ``/v1/stream/{path}``."""
    try:
        name: str = request.path_params["stream_path"]
        path = PREFIX + name
        if not 0 < len(name) <= MAX_PATH or _CONTROL.search(name):
            raise StreamError(400, f"a stream path is 1 to {MAX_PATH} characters, none a control")
        if path.startswith(TRANSCRIPTS):
            # Reserved for transcripts (server.streams.transcripts), whose ids
            # have no slash: nothing else is made or found under it.
            if request.method in ("GET", "HEAD"):
                raise StreamError(404, "Stream not found")
            raise StreamError(405, "reserved for transcripts", {"allow": "GET, HEAD, OPTIONS"})
        match request.method:
            case "PUT":
                return await _create(request, path)
            case "POST":
                return await _append(request, path)
            case "GET":
                return await _read(request, path)
            case "HEAD":
                return await _head(request, path)
            case "DELETE":
                detach = _closed_header(request.headers.get(DETACH_FORKS))
                await _registry(request).delete(path, detach_forks=detach)
                return stream_answer(204)
            case "OPTIONS":
                return preflight_answer(request)
        allow = {"allow": "GET, HEAD, PUT, POST, DELETE, OPTIONS"}
        return refusal_answer(StreamError(405, "Method not allowed", allow))
    except StreamError as error:
        return refusal_answer(error)
    except Refused as refused:
        return problem_of(refused)


def preflight_answer(request: Request) -> Response:
    """A CORS preflight: which methods and headers a page may use. Whether
    its origin may is the server's CORS setting (``cors_origins``), whose
    middleware answers preflights from allowed origins before this does."""
    return stream_answer(
        204,
        {
            "access-control-allow-methods": "GET, HEAD, PUT, POST, DELETE, OPTIONS",
            "access-control-allow-headers": REQUEST_HEADERS,
            "access-control-max-age": "600",
        },
    )


# --- create -------------------------------------------------------------------------------


async def _create(request: Request, path: str) -> Response:
    headers = request.headers
    forked_from = headers.get(FORKED_FROM)
    if forked_from is not None:
        forked_from = source_path(forked_from)
        _may_read(request, forked_from[len(PREFIX) :])
    content_type = headers.get("content-type")
    if not content_type or not _CONTENT_TYPE.match(content_type.strip()):
        content_type = None if forked_from else "application/octet-stream"
    ttl = headers.get(TTL)
    expires = headers.get(EXPIRES_AT)
    if ttl is not None and expires is not None:
        raise StreamError(400, "Cannot specify both Stream-TTL and Stream-Expires-At")
    ttl_s: int | None = None
    if ttl is not None:
        if not _DECIMAL.fullmatch(ttl):
            raise StreamError(400, "Invalid Stream-TTL value")
        ttl_s = int(ttl)
    expires_ts: float | None = None
    if expires is not None:
        try:
            expires_ts = parse_expires_at(expires)
        except ValueError:
            raise StreamError(400, "Invalid Stream-Expires-At timestamp") from None
    fork_offset = headers.get(FORK_OFFSET)
    sub_header = headers.get(FORK_SUB_OFFSET)
    sub = 0
    if forked_from is None and (fork_offset is not None or sub_header is not None):
        raise StreamError(400, f"{FORK_OFFSET} and {FORK_SUB_OFFSET} need {FORKED_FROM}")
    if fork_offset is not None and not valid_offset(fork_offset):
        raise StreamError(400, "Invalid Stream-Fork-Offset format")
    if sub_header is not None:
        if not _DECIMAL.fullmatch(sub_header):
            raise StreamError(400, "Invalid Stream-Fork-Sub-Offset format")
        sub = int(sub_header)
        if sub > 0 and fork_offset is None:
            raise StreamError(400, f"a {FORK_SUB_OFFSET} above 0 needs a {FORK_OFFSET}")
    body = await _body(request, _settings(request).max_body_bytes)
    kind = content_type
    if kind is None and forked_from is not None and len(body) > JSON_INLINE_BYTES:
        source = await _registry(request).get(forked_from)  # a fork takes its source's type
        kind = source.content_type if source is not None else None
    values = await _json_values(request, body, kind, allow_empty=True)
    stream, created = await _registry(request).create(
        path,
        content_type=content_type,
        ttl_s=ttl_s,
        expires_at=expires,
        expires_at_ts=expires_ts,
        body=body,
        closed=_closed_header(headers.get(CLOSED)),
        forked_from=forked_from,
        fork_offset=fork_offset,
        fork_sub_offset=sub,
        values=values,
    )
    answer = {
        "content-type": stream.content_type or "application/octet-stream",
        NEXT_OFFSET: stream.tail,
    }
    if created:
        # The path as it was sent (percent-encoded ASCII): a header holds no other text.
        raw = request.scope.get("raw_path") or path.encode("ascii", "backslashreplace")
        answer["location"] = f"{request.url.scheme}://{request.url.netloc}{raw.decode('ascii')}"
    if stream.closed:
        answer[CLOSED] = "true"
    return stream_answer(201 if created else 200, answer)


def _may_read(request: Request, name: str) -> None:
    """A fork reads its source: ``Refused`` (403) unless the caller may."""
    # What HttpAccess admitted the request with (a request it did not see
    # has none: a bug, which fails closed).
    grant: Grant = request.scope[GRANT_KEY]
    if not grant.satisfies(rights.READ, name):
        who = f"the token of {grant.sub!r}" if grant.sub else "this token"
        raise Refused(
            codes.FORBIDDEN, f"{who} may not read stream {name!r}, the source of this fork"
        )


# --- append and close ------------------------------------------------------------------------


def _producer(request: Request) -> tuple[str, int, int] | None:
    producer_id = request.headers.get(PRODUCER_ID)
    epoch = request.headers.get(PRODUCER_EPOCH)
    seq = request.headers.get(PRODUCER_SEQ)
    given = [h is not None for h in (producer_id, epoch, seq)]
    if not any(given):
        return None
    if not all(given):
        raise StreamError(
            400,
            "All producer headers (Producer-Id, Producer-Epoch, Producer-Seq) must be provided"
            " together",
        )
    assert producer_id is not None and epoch is not None and seq is not None
    if producer_id == "":
        raise StreamError(400, "Invalid Producer-Id: must not be empty")
    values: list[int] = []
    for name, text in ((PRODUCER_EPOCH, epoch), (PRODUCER_SEQ, seq)):
        if not _INTEGER.fullmatch(text) or int(text) > MAX_SAFE_INTEGER:
            raise StreamError(400, f"Invalid {name}: must be a non-negative integer")
        values.append(int(text))
    return producer_id, values[0], values[1]


async def _append(request: Request, path: str) -> Response:
    producer = _producer(request)
    close = _closed_header(request.headers.get(CLOSED))
    body = await _body(request, _settings(request).max_body_bytes)
    registry = _registry(request)
    if not body:
        if not close:
            raise StreamError(400, "Empty body")
        return _appended(await registry.close(path, producer), producer, body=False)
    content_type = request.headers.get("content-type")
    if not content_type:
        raise StreamError(400, "Content-Type header is required")
    values = await _json_values(request, body, content_type, allow_empty=False)
    result = await registry.append(
        path,
        body,
        content_type=content_type,
        stream_seq=request.headers.get(SEQ),
        producer=producer,
        close=close,
        values=values,
    )
    return _appended(result, producer, body=True)


_T = TypeVar("_T")


class _Offload(Protocol):
    """What this face needs of the app's worker processes
    (``server.web.offload.Offload``, which the app assembles: a face does not
    import the other)."""

    async def run(self, what: str, fn: Callable[..., _T], *args: Any) -> _T: ...


async def _json_values(
    request: Request, body: bytes, content_type: str | None, *, allow_empty: bool
) -> tuple[str, ...] | None:
    """The JSON values of a large JSON-mode body, parsed in a worker
    process: on the loop, 15 MiB of a flat array held every connection for
    seconds. ``None`` for the rest (the registry parses a small body, and
    a body for a stream of another type is refused there)."""
    if len(body) <= JSON_INLINE_BYTES or not is_json(content_type):
        return None
    offload: _Offload | None = getattr(request.app.state, "offload", None)
    if offload is None:  # an app without its lifespan (some tests)
        return None
    max_values = _registry(request).limits.max_append_values
    try:
        status, reason, values = await offload.run(
            "reading a JSON body", json_values_job, body, allow_empty, max_values
        )
    except Refused as refused:
        busy = refused.code == codes.UNAVAILABLE
        raise StreamError(
            503 if busy else 413, refused.message, {"retry-after": "1"} if busy else None
        ) from None
    if status:
        raise StreamError(status, reason)
    return values


def _appended(
    result: StreamAppend, producer: tuple[str, int, int] | None, *, body: bool
) -> Response:
    stream = result.stream
    outcome = result.producer
    if result.refused_closed:
        return refusal_answer(
            StreamError(409, "Stream is closed", {CLOSED: "true", NEXT_OFFSET: stream.tail})
        )
    if outcome is not None and outcome.status != "accepted":
        assert producer is not None
        match outcome.status:
            case "duplicate":
                headers = {
                    PRODUCER_EPOCH: str(producer[1]),
                    PRODUCER_SEQ: str(outcome.seq),
                }
                if stream.closed:
                    headers[CLOSED] = "true"
                    headers[NEXT_OFFSET] = stream.tail
                return stream_answer(204, headers)
            case "stale_epoch":
                stale = {PRODUCER_EPOCH: str(outcome.epoch)}
                return refusal_answer(StreamError(403, "Stale producer epoch", stale))
            case "invalid_epoch_seq":
                return refusal_answer(StreamError(400, "New epoch must start with sequence 0"))
            case _:
                gap = {EXPECTED_SEQ: str(outcome.expected), RECEIVED_SEQ: str(outcome.seq)}
                return refusal_answer(StreamError(409, "Producer sequence gap", gap))
    headers = {NEXT_OFFSET: result.message.offset if result.message else stream.tail}
    if producer is not None:
        headers[PRODUCER_EPOCH] = str(producer[1])
        headers[PRODUCER_SEQ] = str(producer[2])
    if stream.closed:
        headers[CLOSED] = "true"
    # New data from a producer is 200 (its duplicates are 204); everything else 204.
    return stream_answer(200 if producer is not None and body else 204, headers)


# --- metadata ----------------------------------------------------------------------------------


async def _head(request: Request, path: str) -> Response:
    stream = await _registry(request).live(path)
    headers = {NEXT_OFFSET: stream.tail, "cache-control": "no-store"}
    if stream.content_type:
        headers["content-type"] = stream.content_type
    if stream.closed:
        headers[CLOSED] = "true"
    if stream.ttl_s is not None:
        headers[TTL] = str(stream.ttl_s)
    if stream.expires_at is not None:
        headers[EXPIRES_AT] = stream.expires_at
    headers["etag"] = _etag(stream, "-1", stream.tail, stream.closed)
    return stream_answer(200, headers)


def _etag(stream: Stream, start: str, end: str, closed: bool) -> str:
    name = base64.b64encode(stream.path.encode()).decode()
    return f'"{name}:{start}:{end}{":c" if closed else ""}"'


# --- reads -------------------------------------------------------------------------------------


class ReadParams(NamedTuple):
    """A read's query: ``offset`` as given (``None`` when absent), the
    ``live`` mode and the client's ``cursor``."""

    offset: str | None
    live: str | None
    cursor: str | None


def read_params(request: Request) -> ReadParams:
    """The query of a read of any stream (generic, transcript, draft),
    refused as the protocol says: one ``offset`` at most, not empty, and
    the live modes only with one. What an offset may look like is the
    stream's own rule."""
    return query_params(request.query_params)


def query_params(params: QueryParams) -> ReadParams:
    """``read_params`` of a query already parsed."""
    offsets = params.getlist("offset")
    if len(offsets) > 1:
        raise StreamError(400, "Multiple offset parameters not allowed")
    offset = offsets[0] if offsets else None
    if offset == "":
        raise StreamError(400, "Empty offset parameter")
    cursor = params.get("cursor")
    if cursor is not None and len(cursor) > MAX_CURSOR:
        raise StreamError(400, f"a cursor is at most {MAX_CURSOR} characters")
    live = params.get("live")
    if live in ("long-poll", "sse") and offset is None:
        raise StreamError(
            400, f"{'SSE' if live == 'sse' else 'Long-poll'} requires offset parameter"
        )
    return ReadParams(offset, live, cursor)


async def _read(request: Request, path: str) -> Response:
    registry = _registry(request)
    stream = await registry.live(path)
    offset, live, cursor = read_params(request)
    if offset not in (None, "-1", "now") and not valid_offset(offset):
        raise StreamError(400, "Invalid offset format")
    await registry.touch(stream)
    if live == "sse":
        start = stream.tail if offset == "now" else offset
        assert start is not None
        return _sse(request, registry, stream, start, cursor)
    if offset == "now" and live != "long-poll":
        headers = {NEXT_OFFSET: stream.tail, UP_TO_DATE: "true", "cache-control": "no-store"}
        if stream.closed:
            headers[CLOSED] = "true"
        return stream_answer(200, headers, b"[]" if stream.json else b"", stream.content_type)
    if live == "long-poll":
        assert offset is not None  # (read_params)
        reply = await long_poll(registry, _settings(request), stream, offset, cursor)
        etag = reply.answer.etag
        if etag is not None and request.headers.get("if-none-match") == etag:
            return stream_answer(304, {"etag": etag, **SECURITY})
        return Prepared(reply)
    position = stream.tail if offset == "now" else (None if offset in (None, "-1") else offset)
    messages, up_to_date = page_of(
        registry.read(stream, position), _settings(request).read_chunk_bytes
    )
    end = messages[-1].offset if messages else (position or stream.tail)
    if not messages and position is None:
        end = stream.tail
    headers = {NEXT_OFFSET: end}
    if stream.content_type:
        headers["content-type"] = stream.content_type
    headers["cache-control"] = CATCH_UP_CACHE
    if up_to_date:
        headers[UP_TO_DATE] = "true"
    at_end = stream.closed and up_to_date and end == stream.tail
    if at_end:
        headers[CLOSED] = "true"
    etag = _etag(stream, offset or "-1", end, at_end)
    headers["etag"] = etag
    if request.headers.get("if-none-match") == etag:
        return stream_answer(304, {"etag": etag, **SECURITY})
    body = json_body(messages) if stream.json else b"".join(m.data for m in messages)
    return stream_answer(200, headers, body, stream.content_type)


#: Long-poll answers, each encoded once for every reader that asks for it.
ANSWERS: Final = SharedAnswers()


async def long_poll(
    registry: StreamRegistry,
    settings: StreamSettings,
    stream: Stream,
    offset: str,
    cursor: str | None,
) -> Reply:
    """The answer to a long-poll read of ``stream`` from ``offset`` (``now``
    or ``-1`` included), waiting for the next append when there is nothing
    to read. The readers that append wakes all get the same answer but for
    their response cursor, so it is built and encoded once
    (``server.streams.longpoll``), as the fan-out encodes an SSE event
    once for all its readers. ``StreamError`` when the store cannot answer."""
    position = stream.tail if offset == "now" else (None if offset == "-1" else offset)
    messages = registry.read(stream, position)
    if not messages and (position == stream.tail or offset == "now"):
        if stream.closed:
            closed = {NEXT_OFFSET: stream.tail, UP_TO_DATE: "true", CLOSED: "true"}
            return Reply(Answer(204, {**SECURITY, **closed}, b""), None)
        assert position is not None
        waited = await registry.wait(stream, position, settings.long_poll_s)
        await registry.touch(stream)
        if not waited.messages:
            ended = waited.closed or stream.closed
            key: tuple[object, ...] = (stream.path, "204", position, ended)
            answer = ANSWERS.get(key, stream)
            if answer is None:
                headers = {**SECURITY, NEXT_OFFSET: position, UP_TO_DATE: "true"}
                if ended:
                    headers[CLOSED] = "true"
                answer = ANSWERS.put(key, Answer(204, headers, b"", stream))
            return Reply(answer, response_cursor(cursor))
        messages = waited.messages
    last = messages[-1].offset if messages else None
    key = (stream.path, offset, position, last, stream.tail, stream.closed)
    answer = ANSWERS.get(key, stream)
    if answer is None:
        answer = ANSWERS.put(key, _long_pollpage_of(stream, offset, position, messages, settings))
    return Reply(answer, response_cursor(cursor))


def _long_pollpage_of(
    stream: Stream,
    offset: str,
    position: str | None,
    messages: list[StreamMessage],
    settings: StreamSettings,
) -> Answer:
    page, up_to_date = page_of(messages, settings.read_chunk_bytes)
    end = page[-1].offset if page else (position or stream.tail)
    headers = {**SECURITY, NEXT_OFFSET: end}
    if stream.content_type:
        headers["content-type"] = stream.content_type
    if up_to_date:
        headers[UP_TO_DATE] = "true"
    at_end = stream.closed and up_to_date and end == stream.tail
    if at_end:
        headers[CLOSED] = "true"
    headers["etag"] = _etag(stream, offset, end, at_end)
    body = json_body(page) if stream.json else b"".join(m.data for m in page)
    return Answer(200, headers, body, stream)


async def fast_long_poll(state: Any, scope: Scope) -> Reply | Response | None:
    """A long-poll read for ``server.streams.longpoll.FastPath``, the
    request admitted (its rights checked): ``None`` when it is not one
    that this answers as the endpoint would (a bad path, query or offset,
    a stream that is not there...), before anything waited: then the app
    answers it."""
    name: str = scope["path"][len(PREFIX) :]
    if not 0 < len(name) <= MAX_PATH or _CONTROL.search(name):
        return None
    params = long_poll_query(scope["query_string"])
    if params is None:
        return None
    offset, _, cursor = params
    assert offset is not None
    if offset not in ("-1", "now") and not valid_offset(offset):
        return None
    registry: StreamRegistry = state.streams
    try:
        stream = await registry.live(PREFIX + name)
    except (StreamError, Refused):
        return None
    try:
        await registry.touch(stream)
        return await long_poll(registry, state.stream_settings, stream, offset, cursor)
    except StreamError as error:
        return refusal_answer(error)
    except Refused as refused:
        return problem_of(refused)


#: The query a long-poll reader sends (``offset``, ``live``, ``cursor`` in
#: that order): what ``long_poll_query`` splits, but read in one step.
_USUAL_LONG_POLL: Final = re.compile(
    rb"offset=([^&%%+]+)&live=long-poll(?:&cursor=([^&%%+]{0,%d}))?" % MAX_CURSOR
)


def long_poll_query(raw: bytes) -> ReadParams | None:
    """A reader's usual long-poll query (``offset``, ``live=long-poll``,
    ``cursor``; each at most once, nothing escaped, nothing else) as
    ``query_params`` reads it, split here without a ``QueryParams``; ``None``
    for anything else, which the app answers (or refuses) as always."""
    usual = _USUAL_LONG_POLL.fullmatch(raw)
    if usual is not None:  # (what every reader sends, read in one step)
        offset_bytes, cursor_bytes = usual.groups()
        return ReadParams(
            offset_bytes.decode("latin-1"),
            "long-poll",
            None if cursor_bytes is None else cursor_bytes.decode("latin-1"),
        )
    if b"%" in raw or b"+" in raw:
        return None
    offset = live = cursor = None
    for part in raw.decode("latin-1").split("&"):
        key, _, value = part.partition("=")
        if key == "offset" and offset is None:
            offset = value
        elif key == "live" and live is None:
            live = value
        elif key == "cursor" and cursor is None:
            cursor = value
        else:
            return None
    if not offset or live != "long-poll" or (cursor is not None and len(cursor) > MAX_CURSOR):
        return None
    return ReadParams(offset, live, cursor)


class Prepared(Response):
    """A long-poll answer already encoded (``long_poll``)."""

    def __init__(self, reply: Reply) -> None:
        self.status_code = reply.answer.status
        self.background = None
        self.body = reply.answer.body
        # A list of its own: middlewares may add to the headers they send.
        self.raw_headers = reply.answer.asgi_headers(reply.cursor)


def _sse(
    request: Request, registry: StreamRegistry, stream: Stream, start: str, cursor: str | None
) -> Response:
    headers = dict(SSE_HEADERS)
    if base64_encoded(stream):
        headers[SSE_ENCODING] = "base64"
    return StreamSse(registry, stream, start, cursor, _settings(request), headers)


class _AnyPath(Convertor[str]):
    """A stream path, newlines included: Starlette's ``path`` convertor stops
    at one, and such a request would miss this face for the app's 404 (the
    face itself refuses control characters with its own 400)."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("streampath", _AnyPath())

#: The route's template (what the request log and metrics name).
ROUTE: Final = "/v1/stream/{stream_path:streampath}"

routes: Final = [
    Route(
        ROUTE,
        endpoint,
        methods=["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"],
    )
]
