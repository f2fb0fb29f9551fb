"""Every transcript as a read-only Durable Stream: ``/v1/stream/transcripts/{id}``.

A JSON-mode stream whose items are the transcript's events in order (the
objects ``GET /v1/transcripts/{id}/events`` gives). An offset is a revision:
``<epoch number>_<revision>`` (16 digits each), where the epoch number is
derived from the transcript's epoch, so a reader resumes exactly where it left
off, and an offset of a history that was deleted (a transcript created again
under the same id) is answered ``410 Gone`` instead of being read against the
new one. ``offset=-1`` starts with the first event (every message so far);
``now`` with the next. Long-poll and SSE readers wait for the transcript's own
delivery (``Hub.wait_change``: a change here or on another replica).

Writes go through the transcript API (``POST /v1/transcripts/{id}/messages``,
with its validation, ``expectedRevision`` and idempotency keys): this face
answers them ``405``. A transcript is never closed. Its drafts are not part of
it and are not in this stream.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Final

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from protocol import codes
from protocol.limits import ID_PATTERN
from protocol.types import TranscriptEvent
from server.errors import Refused, failure_for
from server.hub import Hub
from server.streams.http import (
    CURSOR,
    NEXT_OFFSET,
    SECURITY,
    UP_TO_DATE,
    StreamSettings,
    _answer,
    _preflight,
    _sse_data,
    response_cursor,
)
from server.streams.model import StreamError

__all__ = ["routes"]

_ID: Final = re.compile(ID_PATTERN)
#: Events per answer at most (a catch-up read pages through a long history).
PAGE_EVENTS: Final = 1000
_ENCODER: Final = msgspec.json.Encoder()


def epoch_number(epoch: str) -> int:
    """The epoch as 16 decimal digits, the same on every replica."""
    digits = "".join(str(int(c, 16) % 10) for c in epoch if c in "0123456789abcdefABCDEF")
    return int((digits or "0")[:16])


def offset_of(epoch: str, revision: int) -> str:
    return f"{epoch_number(epoch):016d}_{revision:016d}"


def _revision(offset: str, epoch: str) -> int:
    """The revision an offset names; ``StreamError`` 400 if it is no offset,
    410 if it belongs to another incarnation of the transcript."""
    number, sep, revision = offset.partition("_")
    if not sep or not number.isdigit() or not revision.isdigit():
        raise StreamError(400, "Invalid offset format")
    if int(number) != epoch_number(epoch):
        raise StreamError(410, "the transcript was created again since this offset")
    return int(revision)


def _hub(request: Request) -> Hub:
    hub: Hub = request.app.state.hub
    return hub


async def endpoint(request: Request) -> Response:
    try:
        if not _ID.fullmatch(request.path_params["transcript_id"]):
            raise StreamError(400, "not a transcript id")
        if request.method == "OPTIONS":
            return _preflight(request)
        if request.method not in ("GET", "HEAD"):
            return _answer(
                405,
                {"allow": "GET, HEAD, OPTIONS"},
                "a transcript is read-only here: append with POST /v1/transcripts/{id}/messages",
            )
        return await _read(request, request.path_params["transcript_id"])
    except StreamError as error:
        return _answer(error.status, error.headers, error.reason)
    except Exception as exc:  # the transcript API's errors, in this face's plain text
        failure = failure_for(exc)
        if failure is None:
            raise
        return _answer(codes.error(failure.code).http_status, None, failure.message)


async def _read(request: Request, transcript_id: str) -> Response:
    hub = _hub(request)
    settings: StreamSettings = request.app.state.stream_settings
    head = await hub.head(transcript_id)
    epoch = head.epoch
    if request.method == "HEAD":
        headers = {
            NEXT_OFFSET: offset_of(epoch, head.revision),
            "content-type": "application/json",
            "cache-control": "no-store",
        }
        return _answer(200, headers)
    offsets = request.query_params.getlist("offset")
    if len(offsets) > 1:
        raise StreamError(400, "Multiple offset parameters not allowed")
    offset = offsets[0] if offsets else "-1"
    if offset == "":
        raise StreamError(400, "Empty offset parameter")
    live = request.query_params.get("live")
    cursor = request.query_params.get("cursor")
    if live in ("long-poll", "sse") and not offsets:
        raise StreamError(400, f"{live} requires offset parameter")
    after = 0 if offset == "-1" else head.revision if offset == "now" else _revision(offset, epoch)
    if after > head.revision:
        raise StreamError(400, "an offset past the transcript's end")
    if live == "sse":
        return _sse(hub, settings, transcript_id, epoch, after, cursor)
    if offset == "now" and live != "long-poll":
        headers = {
            NEXT_OFFSET: offset_of(epoch, head.revision),
            UP_TO_DATE: "true",
            "cache-control": "no-store",
        }
        return _answer(200, headers, b"[]", "application/json")
    events = await _events(hub, transcript_id, after)
    if live == "long-poll" and not events:
        await hub.wait_change(transcript_id, after, settings.long_poll_s)
        events = await _events(hub, transcript_id, after)
        if not events:
            headers = {
                NEXT_OFFSET: offset_of(epoch, after),
                UP_TO_DATE: "true",
                CURSOR: response_cursor(cursor),
            }
            return _answer(204, headers)
    end = events[-1].revision if events else after
    current = (await hub.head(transcript_id)).revision
    headers = {NEXT_OFFSET: offset_of(epoch, end), "content-type": "application/json"}
    if end >= current:
        headers[UP_TO_DATE] = "true"
    if live == "long-poll":
        headers[CURSOR] = response_cursor(cursor)
    else:
        headers["cache-control"] = "private, max-age=60, stale-while-revalidate=300"
    etag = f'"{transcript_id}:{epoch}:{after}:{end}"'
    headers["etag"] = etag
    if request.headers.get("if-none-match") == etag:
        return _answer(304, {"etag": etag})
    return _answer(200, headers, _ENCODER.encode(events), "application/json")


async def _events(hub: Hub, transcript_id: str, after: int) -> list[TranscriptEvent]:
    events = await hub.events_after(transcript_id, after, limit=PAGE_EVENTS)
    if events is None:
        raise StreamError(410, "these events are no longer held: read GET /v1/transcripts/{id}")
    return events


def _sse(
    hub: Hub,
    settings: StreamSettings,
    transcript_id: str,
    epoch: str,
    after: int,
    cursor: str | None,
) -> Response:
    async def events() -> AsyncIterator[bytes]:
        revision = after
        deadline = time.monotonic() + settings.sse_max_s
        while True:
            try:
                found = await _events(hub, transcript_id, revision)
                current = (await hub.head(transcript_id)).revision
            except (StreamError, Refused):
                return  # deleted or no longer held: the reader reconnects and is told
            data = b""
            if found:
                revision = found[-1].revision
                data = b"event: data\n" + _sse_data(_ENCODER.encode(found).decode())
            control: dict[str, object] = {
                "streamNextOffset": offset_of(epoch, revision),
                "streamCursor": response_cursor(cursor),
            }
            if revision >= current:
                control["upToDate"] = True
            # A data event and its control leave in one write.
            yield data + b"event: control\n" + _sse_data(json.dumps(control, separators=(",", ":")))
            if revision < current:
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            await hub.wait_change(transcript_id, revision, min(remaining, settings.long_poll_s))

    headers = {
        **SECURITY,
        "content-type": "text/event-stream",
        "cache-control": "no-cache",
        "x-accel-buffering": "no",
    }
    return StreamingResponse(events(), headers=headers)


routes: Final = [
    Route(
        "/v1/stream/transcripts/{transcript_id}",
        endpoint,
        methods=["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"],
    )
]
