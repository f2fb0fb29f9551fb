"""``POST /v1/transcripts/{id}/replies``: a reply written from an AI SDK UI
message stream, from any language, with one request.

The body is the event stream ``toUIMessageStreamResponse()`` produces
(``text/event-stream``: ``data: {UIMessageChunk}`` events, ``data: [DONE]``
at the end), read as it arrives (``protocol.sse``): its chunks go into a
draft with parts of the transcript (``docs/protocol.md``, Drafts), batched
as they come, exactly as a WebSocket writer's ``chunks`` ops; at ``finish``
(or ``[DONE]``, or the end of the body) the reply is committed as the
UIMessage it became, and the answer comes then: 201 with the append's ack
(and the ``draftId``). So a Next.js route handler writes its reply into tsync
with one ``fetch(url, {method: "POST", body: stream, duplex: "half"})``.

- an ``abort`` or ``error`` chunk cancels the draft (200 ``{cancelled:
  true, reason}``), and so does a body that stops in the middle (the client
  went away) or a chunk that is not JSON or does not fit the reply (400,
  naming the chunk);
- a reader that stops the reply (a ``draft`` op with ``stop``) ends the
  request at once: what the draft held was committed by the stop, and the
  answer says so (200 ``{stopped: true, revision}``);
- ``?draftId=`` names the draft (default: ``reply-`` and a random id), so
  readers and the UI message id can be known before the first chunk.

The request needs the ``write`` right on the transcript, like an append.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from protocol import api, codes, wire
from protocol.sse import SSEDecoder, SSETooLong
from protocol.validation import validate_id
from server.errors import Refused
from server.live.hub import Hub
from server.web.http_api import hub_of, media_type, origin_of, transcript_id_of
from server.web.problems import json_response

__all__ = ["post_reply"]

#: What the body may be sent as (a page cannot send it without a preflight).
EVENT_STREAM_TYPES = ("text/event-stream",)
_decode = msgspec.json.Decoder().decode


class _Cancelled(Exception):
    """The stream ended the reply (``abort``, ``error``): drop the draft."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def post_reply(request: Request) -> Response:
    """See the module."""
    tid = transcript_id_of(request)
    media = media_type(request)
    if media not in EVENT_STREAM_TYPES:
        raise Refused(
            codes.UNSUPPORTED_MEDIA_TYPE,
            f"send the body as text/event-stream (a UI message stream), not {media or 'none'}",
        )
    given = request.query_params.get("draftId")
    draft_id = validate_id(given, what="draftId") if given is not None else None
    reply = _Reply(hub_of(request), tid, draft_id or f"reply-{uuid.uuid4().hex[:16]}")
    try:
        await reply.pipe(request)
        if not reply.opened:
            raise Refused(codes.INVALID_BODY, "the stream held no chunk to write a reply with")
        messages = await reply.hub.drafts.finished(tid, reply.draft_id)
        result = await reply.hub.writes.append(
            tid, messages, origin=origin_of(request), transport="http", draft_id=reply.draft_id
        )
    except _Cancelled as cancelled:
        await reply.cancel()
        answer = api.ReplyAnswer(tid, reply.draft_id, cancelled=True, reason=cancelled.reason)
        return json_response(answer, 200)
    except Refused as refused:
        if refused.code == codes.DRAFT_CLOSED:
            revision = await reply.hub.drafts.committed_as(tid, reply.draft_id)
            if revision is not None:  # a reader stopped it, and its stop committed it
                answer = api.ReplyAnswer(tid, reply.draft_id, revision, stopped=True)
                return json_response(answer, 200)
        await reply.cancel()
        raise
    except ClientDisconnect:
        await reply.cancel()
        raise
    receipt = result.receipt
    answer = api.ReplyAnswer(
        tid,
        reply.draft_id,
        receipt.revision,
        receipt.start,
        receipt.count,
        duplicate=result.duplicate,
    )
    return json_response(answer, 201)


class _Reply:
    """One request's reply: its draft and whether it was opened."""

    def __init__(self, hub: Hub, transcript_id: str, draft_id: str) -> None:
        self.hub = hub
        self.transcript_id = transcript_id
        self.draft_id = draft_id
        self.writer = f"http:{uuid.uuid4().hex[:12]}"  # what the drafts' budget charges
        self.opened = False

    async def pipe(self, request: Request) -> None:
        """Write the body's chunks into the draft until the reply finishes
        (``finish``, ``[DONE]``, the body's end). Raises ``_Cancelled`` for
        an ``abort`` or ``error`` chunk, ``Refused`` for what does not fit."""
        decoder = SSEDecoder()
        async for piece in request.stream():
            try:
                events = decoder.feed(piece)
            except SSETooLong as exc:
                raise Refused(codes.INVALID_BODY, str(exc)) from None
            batch: list[dict[str, Any]] = []
            done = False
            for data in events:
                if data.strip() == "[DONE]":
                    done = True
                    break
                chunk = _chunk(data)
                if chunk is None:
                    raise Refused(codes.INVALID_BODY, f"an event that is no chunk: {data:.80}")
                if chunk["type"] in ("abort", "error"):
                    await self.write(batch)
                    reason = chunk.get("reason") or chunk.get("errorText") or chunk["type"]
                    raise _Cancelled(str(reason))
                batch.append(chunk)
                if chunk["type"] == "finish":
                    done = True
                    break
            await self.write(batch)
            if done:
                return

    async def write(self, batch: list[dict[str, Any]]) -> None:
        if batch:
            await self.hub.drafts.write(
                wire.Draft(self.transcript_id, self.draft_id, chunks=batch), writer=self.writer
            )
            self.opened = True

    async def cancel(self) -> None:
        """Drop the draft, if this request opened it and it is still open."""
        if not self.opened:
            return
        # Closed already (stopped, committed, expired): nothing to cancel.
        with contextlib.suppress(Refused):
            await self.hub.drafts.write(
                wire.Draft(self.transcript_id, self.draft_id, cancel=True), writer=self.writer
            )


def _chunk(data: str) -> dict[str, Any] | None:
    try:
        chunk = _decode(data)
    except msgspec.DecodeError:
        return None
    if not isinstance(chunk, dict) or not isinstance(chunk.get("type"), str):
        return None
    return chunk
