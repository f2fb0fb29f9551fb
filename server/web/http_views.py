"""The HTTP API of long transcripts: message ranges, Views and MessageUsage.

- ``GET /v1/transcripts/{id}/messages?start=&end=&epoch=``: messages ``[start,
  end)``, at most ``MAX_READ_MESSAGES`` (``load_earlier`` of both clients);
  with ``epoch``, a transcript created again since answers 409
  ``epoch-changed`` instead of messages of another history.
- ``GET /v1/transcripts/{id}/views``; ``PUT`` / ``DELETE
  /v1/transcripts/{id}/views/{name}``: list, create or move, leave a View.
- ``GET /v1/transcripts/{id}/usage?segments=&views=``: ``protocol.usage``.

The transports translate only: the hub decides (``Hub.read_messages``,
``Writes.set_view``, ``Writes.leave_view``, ``Reads.usage``).
"""

from __future__ import annotations

import re
from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from protocol import api, codes
from protocol.errors import ProtocolError
from protocol.limits import MAX_READ_MESSAGES, MAX_VIEW_NAME_LENGTH
from server.errors import Refused
from server.store.base import AppendResult
from server.web.http_api import (
    hub_of,
    int_param,
    origin_of,
    read_json,
    transcript_id_of,
)
from server.web.problems import json_response

__all__ = ["get_messages", "get_presence", "get_usage", "get_views", "leave_view", "put_view"]


async def get_messages(request: Request) -> Response:
    tid = transcript_id_of(request)
    start = int_param(request, "start", 0) or 0
    end = int_param(request, "end")
    if end is not None and end < start:
        raise Refused(codes.INVALID_QUERY, f"end ({end}) is before start ({start})")
    epoch = request.query_params.get("epoch") or None
    stop = start + MAX_READ_MESSAGES if end is None else min(end, start + MAX_READ_MESSAGES)
    found, revision = await hub_of(request).reads.read_messages(tid, start, stop, epoch=epoch)
    return json_response(
        api.MessageRange(
            transcript_id=tid,
            epoch=found.epoch,
            revision=revision,
            start=found.start,
            end=found.end,
            length=found.length,
            messages=list(found.messages),
        )
    )


async def get_views(request: Request) -> Response:
    tid = transcript_id_of(request)
    revision, views = await hub_of(request).reads.views(tid)
    return json_response(api.ViewList(transcript_id=tid, revision=revision, views=list(views)))


_VIEW_NAME: Final = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_VIEW_NAME_LENGTH}}}")


def _view_name(request: Request) -> str:
    name: str = request.path_params["name"]
    if not _VIEW_NAME.fullmatch(name):
        raise Refused(
            codes.INVALID_VIEW,
            f"a View name is 1 to {MAX_VIEW_NAME_LENGTH} of [A-Za-z0-9._:-], not {name!r:.80}",
        )
    return name


async def put_view(request: Request) -> Response:
    tid = transcript_id_of(request)
    name = _view_name(request)
    body = await read_json(request, api.ViewBody)
    result = await hub_of(request).writes.set_view(
        tid, name, body.start, body.end, origin=origin_of(request), transport="http"
    )
    return json_response(_ack(tid, body.start, result), 200 if result.duplicate else 201)


async def leave_view(request: Request) -> Response:
    tid = transcript_id_of(request)
    result = await hub_of(request).writes.leave_view(
        tid, _view_name(request), origin=origin_of(request), transport="http"
    )
    return json_response(_ack(tid, 0, result))


def _ack(transcript_id: str, start: int, result: AppendResult) -> api.AckBody:
    return api.AckBody(
        transcript_id=transcript_id,
        revision=result.receipt.revision,
        start=start,
        count=0,
        duplicate=result.duplicate,
    )


def _names(request: Request, name: str) -> list[str] | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    return [part for part in (p.strip() for p in raw.split(",")) if part]


async def get_presence(request: Request) -> Response:
    """Who is on the transcript now (``server.live.presence``; this replica's
    view: other replicas' members as relayed)."""
    tid = transcript_id_of(request)
    hub = hub_of(request)
    await hub.reads.head(tid)  # not-found for a transcript that does not exist
    members, counts = hub.presence.members(tid)
    return json_response(api.PresenceBody(transcript_id=tid, members=members, counts=counts))


async def get_usage(request: Request) -> Response:
    tid = transcript_id_of(request)
    views = _names(request, "views")
    raw = _names(request, "segments")
    segments: str | list[int] | None
    if raw is None:
        # Nothing asked: every segment and every View. Only Views asked: those.
        segments = "all" if views is None else None
    elif raw in (["all"], ["active"]):
        segments = raw[0]
    elif all(part.isdigit() for part in raw):
        segments = [int(part) for part in raw]
    else:
        raise Refused(codes.INVALID_QUERY, "segments: 'all', 'active' or segment indices (0,2,...)")
    try:
        revision, usage = await hub_of(request).reads.usage(tid, segments=segments, views=views)
    except ProtocolError:
        raise  # invalid-view: no such View
    except ValueError as exc:  # no such segment
        raise Refused(codes.INVALID_QUERY, str(exc)) from None
    return json_response(
        api.UsageBody(
            transcript_id=tid,
            revision=revision,
            messages=usage.messages,
            bytes=usage.bytes,
            references=usage.references,
            ranges=list(usage.ranges),
            uses=list(usage.uses),
        )
    )
