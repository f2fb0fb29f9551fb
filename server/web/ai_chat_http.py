"""``POST /v1/ai/chat`` and ``GET /v1/ai/chat/{transcript_id}/stream``: the AI
SDK's ``DefaultChatTransport`` served (docs/protocol.md, "The AI SDK's
transports").

The POST takes the body the transport sends (``id``, ``messages``,
``trigger``, ``messageId`` and the caller's own fields), checked as a ``send``
frame of ``/v1/ai/chat`` is, and answers with the reply as a UI message
stream (server-sent events, ``x-vercel-ai-ui-message-stream: v1``, ``data:
[DONE]`` at the end); the GET is the transport's reconnect: 204 when no reply
is being written, else the reply from its start. Both run the WebSocket
face's requests (``server.web.ai_chat``) with their frames turned into
events. A client that goes away does not stop the reply (it may reconnect).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from protocol import ai_chat, codes
from protocol.validation import validate_id
from server.errors import Refused
from server.live.hub import Hub
from server.tasks import cancel_and_wait
from server.web import access
from server.web.ai_chat import ChatConnection, ChatRequest

__all__ = ["post_chat", "resume_stream"]

HEADERS: Final = {
    "cache-control": "no-cache",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
DONE: Final = b"data: [DONE]\n\n"


class _Sink(ChatConnection):
    """A request's frames, kept for the response to turn into events."""

    def __init__(self, hub: Hub, request: Request) -> None:
        super().__init__(hub, _nowhere, access.grant_of(request), None)
        self.out: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def frame(self, frame: dict[str, Any]) -> None:
        self.out.put_nowait(frame)


async def _nowhere(message: dict[str, Any]) -> None:
    return None


def _event(value: Any) -> bytes:
    return b"data: " + json.dumps(value, separators=(",", ":")).encode() + b"\n\n"


async def _run(request: Request, frame: dict[str, Any]) -> tuple[_Sink, asyncio.Task[None]]:
    sink = _Sink(request.app.state.hub, request)
    chat_request = ChatRequest(sink, "http", frame)
    task = asyncio.create_task(chat_request.run(), name="ai-chat-http")
    chat_request.task = task
    return sink, task


async def _events(
    sink: _Sink, task: asyncio.Task[None], first: dict[str, Any] | None = None
) -> AsyncIterator[bytes]:
    """The request's frames as a UI message stream, then ``[DONE]``."""
    try:
        while True:
            frame = first if first is not None else await sink.out.get()
            first = None
            kind = frame["type"]
            if kind == "chunk":
                yield _event(frame["chunk"])
            elif kind == "error":
                yield _event({"type": "error", "errorText": frame.get("errorText", "")})
                break
            elif kind in ("end", "no-active"):
                break
        yield DONE
    finally:
        await cancel_and_wait([task])


def _stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers=HEADERS)


async def post_chat(request: Request) -> Response:
    """``POST /v1/ai/chat``: what ``DefaultChatTransport`` sends."""
    try:
        body = json.loads(await request.body())
    except ValueError:
        raise Refused(codes.INVALID_JSON, "the body must be JSON") from None
    if not isinstance(body, dict):
        raise Refused(codes.INVALID_BODY, "the body must be a JSON object")
    frame = {
        "type": "send",
        "requestId": "http",
        "headers": {},
        "body": {},
        **{k: body[k] for k in ("id", "messages", "trigger", "messageId") if k in body},
    }
    try:
        ai_chat.check_request(frame)
    except ai_chat.InvalidRequest as exc:
        raise Refused(codes.INVALID_BODY, str(exc)) from None
    sink, task = await _run(request, frame)
    return _stream(_events(sink, task))


async def resume_stream(request: Request) -> Response:
    """``GET /v1/ai/chat/{id}/stream``: 204, or the reply being written."""
    frame = {
        "type": "resume",
        "requestId": "http",
        "id": validate_id(request.path_params["transcript_id"]),
        "headers": {},
        "body": {},
    }
    sink, task = await _run(request, frame)
    first = await sink.out.get()
    if first["type"] == "no-active":
        await cancel_and_wait([task])
        return Response(status_code=204)
    return _stream(_events(sink, task, None if first["type"] == "start" else first))
