"""``/v1/ai/chat``: the AI SDK's ``WebSocketChatTransport`` served, so that an
unmodified ``useChat`` talks to tsync (docs/protocol.md, "The AI SDK's
transports").

The chat ``id`` is a transcript id. A ``send`` (``submit-message``) appends
the last of its ``messages`` (a UIMessage, ``format: "ui"``, its id the
idempotency key) and answers with the reply: the next draft an agent opens on
the transcript, as ``chunk`` frames numbered from 0 while it grows, then
``end`` when it is committed. A ``resume`` answers ``no-active``, or
``start`` and the reply being written from sequence 0. An ``abort`` stops the
reply (what it holds is committed; its writer is told).

Each request watches the transcript through an internal subscription (an
``OutboundQueue`` of its own, subscribed at the current revision): the draft
frames it gets are folded with ``DraftCopy`` and their ``chunks`` (or
``replay``, when it joins a reply being written) go out as chunk frames. A
marker queued right behind the subscription's catch-up tells apart the drafts
open before it (ignored by a ``send``; the ones a ``resume`` joins) from
those opened after.

Every client frame is checked as ``safeValidateWebSocketChatTransportRequest``
checks it (``protocol.ai_chat``); a bad one closes the socket with 1008.

A reply read by many costs per reader what it must and no more
(``tsync bench aichat``): each draft frame is decoded and its chunks encoded
once for every request that gets it (``_accept``, ``_encoded_chunks``), a
request that joined a reply of parts tracks the update numbers without
folding the chunks again (its copy was only needed to join), and under
``tsync serve`` the chunk frames of one update go out as pre-framed bytes in
one write (the ``tsync.raw_frames`` extension, as ``/v1/ws`` does), not one
ASGI ``send`` each.

Why one module of over 600 lines: one transport's protocol, its frames
checked, its requests (send, resume, abort) and the per-update sharing of
their encoding are one state machine over one socket; split, each half would
reach into the other's request state.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from protocol import ai_chat, codes, rights, sdk_in, wire
from protocol.drafts import DraftCopy
from protocol.errors import InvalidFrame
from protocol.types import Origin
from protocol.validation import validate_id
from server.auth import Authenticator, bearer
from server.errors import INTERNAL_FAILURE, Refused, failure_for
from server.live.frames import TEXT, ws_header
from server.live.hub import Hub
from server.live.outbound import RAW_FRAMES, OutboundQueue, RawFrames
from server.store.base import TranscriptExists, TranscriptNotFound
from server.tasks import cancel_and_wait
from server.web import access
from server.web.access import forbidden
from server.web.ws import close_reason, stop_draft

__all__ = ["ChatConnection", "ChatRequest", "ai_chat_endpoint"]

log = logging.getLogger("tsync.ai_chat")
_ids = itertools.count(1)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

PATH: Final = "/v1/ai/chat"
#: The ref of the pong queued behind a subscription's catch-up.
_CAUGHT_UP: Final = "ai-chat-caught-up"
#: The id of the text part of a reply written as text alone (no ``chunks``).
_TEXT_ID: Final = "text-1"
#: Updates whose encoded chunks (and decoded frames) are kept for the other
#: requests reading them.
_ENCODED_KEPT: Final = 256
_encoded: OrderedDict[int, tuple[list[dict[str, Any]], list[str]]] = OrderedDict()
_decoded: OrderedDict[bytes, wire.ServerFrame] = OrderedDict()
#: How every draft frame of a subscription begins; its ``seq`` (the
#: subscription's own) is all that differs between two readers' copies.
_DRAFT_HEAD: Final = b'{"type":"draft","seq":'


def _accept(raw: bytes | str) -> wire.ServerFrame:
    """``wire.accept_transcript_update``, a draft frame decoded once for
    every request that gets it (keyed by what follows its ``seq``, which no
    request reads)."""
    if not isinstance(raw, bytes) or not raw.startswith(_DRAFT_HEAD):
        return wire.accept_transcript_update(raw)
    key = raw[raw.find(b",", len(_DRAFT_HEAD)) :]
    frame = _decoded.get(key)
    if frame is None:
        frame = wire.accept_transcript_update(raw)
        _decoded[key] = frame
        if len(_decoded) > _ENCODED_KEPT:
            _decoded.popitem(last=False)
    return frame


def _encoded_chunks(chunks: list[dict[str, Any]]) -> list[str]:
    """The JSON of an update's chunks, encoded by the first request that
    sends them: the others get the very same list (``_accept`` decoded the
    frame once), which the cache holds, so an id is never taken for another's."""
    key = id(chunks)
    entry = _encoded.get(key)
    if entry is not None and entry[0] is chunks:
        return entry[1]
    encoded = [json.dumps(chunk, separators=(",", ":")) for chunk in chunks]
    _encoded[key] = (chunks, encoded)
    if len(_encoded) > _ENCODED_KEPT:
        _encoded.popitem(last=False)
    return encoded


class _Closed(Exception):
    """The client's frame was bad: the socket is closed with 1008."""


async def ai_chat_endpoint(scope: Scope, receive: Receive, send: Send, hub: Hub) -> None:
    """``/v1/ai/chat`` as a bare ASGI WebSocket handler."""
    if (await receive())["type"] != "websocket.connect":
        return
    try:
        connection = access.admit(scope, hub.config)
    except access.Turnaway as away:
        await send({"type": "websocket.accept"})
        await send(
            {
                "type": "websocket.close",
                "code": away.close_code,
                "reason": close_reason(away.close_code, away.why),
            }
        )
        return
    await send({"type": "websocket.accept"})
    if hub.subscriptions.is_full():  # each request holds a subscription
        code = codes.CLOSE_SERVER_FULL
        await send({"type": "websocket.close", "code": code, "reason": close_reason(code)})
        return
    chat = ChatConnection(hub, send, connection.grant, connection.authenticator)
    chat.raw = scope.get("extensions", {}).get(RAW_FRAMES)
    try:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                break
            data = message.get("text")
            if data is None:
                data = (message.get("bytes") or b"").decode("utf-8", "replace")
            try:
                chat.handle(data)
            except _Closed as closed:
                await chat.close(codes.CLOSE_POLICY, str(closed))
                break
    finally:
        await chat.cancel()


class ChatConnection:
    """One ``/v1/ai/chat`` connection: its requests, by ``requestId``."""

    def __init__(
        self,
        hub: Hub,
        send: Send,
        grant: rights.Grant | None,
        authenticator: Authenticator | None,
    ) -> None:
        self.hub = hub
        self._send = send
        self._lock = asyncio.Lock()
        self.grant = grant
        self.authenticator = authenticator
        self.id = f"ai{next(_ids)}-{secrets.token_hex(3)}"
        self.origin = Origin(context_id=f"ai:{self.id}")
        self.requests: dict[str, ChatRequest] = {}
        #: The stops aborts started (they run on after the connection ends).
        self.stops: set[asyncio.Task[None]] = set()
        self.closed = False
        #: ``tsync serve``'s pre-framed write (None elsewhere: frames go through ``send``).
        self.raw: RawFrames | None = None

    async def frame(self, frame: dict[str, Any]) -> None:
        """Send one server frame (one at a time: requests share the socket)."""
        if self.closed:
            return
        async with self._lock:
            with contextlib.suppress(Exception):  # gone: its reader ends the connection
                await self._send({"type": "websocket.send", "text": json.dumps(frame)})

    async def texts(self, texts: list[str]) -> None:
        """Send server frames already encoded (JSON texts), in one write when
        the connection takes pre-framed bytes."""
        if self.closed or not texts:
            return
        async with self._lock:
            raw = self.raw
            if raw is None:
                for text in texts:
                    with contextlib.suppress(Exception):  # gone: its reader ends it
                        await self._send({"type": "websocket.send", "text": text})
                return
            if not raw.raw_ready() and not await raw.raw_writable():
                return  # closed
            parts: list[bytes] = []
            for text in texts:
                data = text.encode()
                parts += (ws_header(TEXT, len(data)), data)
            raw.raw_writelines(parts)

    async def close(self, code: int, why: str) -> None:
        if self.closed:
            return
        self.closed = True
        async with self._lock:
            with contextlib.suppress(Exception):
                await self._send(
                    {"type": "websocket.close", "code": code, "reason": close_reason(code, why)}
                )

    def handle(self, data: str) -> None:
        """One client frame: validated, then an abort acts at once and a send
        or resume runs as a task of its own. Raises ``_Closed``."""
        limit = self.hub.config.max_frame_bytes
        if len(data) > limit and len(data.encode()) > limit:
            raise _Closed(f"frame over the limit of {limit} bytes")
        try:
            value = json.loads(data)
        except ValueError:
            raise _Closed("Invalid frame: not JSON") from None
        try:
            frame = ai_chat.check_request(value)
        except ai_chat.InvalidRequest as exc:
            raise _Closed(f"Invalid frame: {exc}") from None
        request_id: str = frame["requestId"]
        if frame["type"] == "abort":
            request = self.requests.get(request_id)
            if request is not None:
                request.abort()
            return
        if request_id in self.requests:
            raise _Closed(f"Invalid frame: request {request_id!r} is already active")
        request = ChatRequest(self, request_id, frame)
        self.requests[request_id] = request
        request.task = asyncio.create_task(request.run(), name=f"ai-chat-{request_id}")

    def grant_for(self, frame: dict[str, Any]) -> rights.Grant:
        """The connection's credentials, else the frame's ``Authorization``
        header (the transport's ``headers`` travel inside its frames)."""
        grant = self.grant
        if grant is not None:
            if grant.expired(time.time()):
                raise Refused(
                    codes.UNAUTHORIZED, "the token has expired: connect again with a new one"
                )
            return grant
        token = bearer(
            [(k.lower().encode(), v.encode()) for k, v in frame.get("headers", {}).items()]
        )
        if self.authenticator is None or token is None:
            raise Refused(
                codes.UNAUTHORIZED,
                "no credentials: connect with ?token= or send `Authorization: Bearer <token>` "
                "in the transport's headers",
            )
        return self.authenticator.verify(token)

    async def cancel(self) -> None:
        self.closed = True
        tasks = [r.task for r in self.requests.values() if r.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _Inbox:
    """The internal subscription's raw frame write (``RawFrames``): every frame
    is taken as it is written, so that the queue never holds a draft's
    updates back and merges them (a reply written and committed at once
    would then reach the request as its ``final`` alone)."""

    def __init__(self, inbox: asyncio.Queue[bytes | str]) -> None:
        self.inbox = inbox
        self.partial = bytearray()
        self.open = True

    def raw_ready(self) -> bool:
        return self.open

    def raw_write(self, data: bytes) -> None:
        """Unframe ``data`` (whole server frames: unmasked, maybe fragmented)."""
        view = memoryview(data)
        at = 0
        while at + 2 <= len(view):
            first, size = view[at], view[at + 1] & 0x7F
            at += 2
            if size == 126:
                size = int.from_bytes(view[at : at + 2], "big")
                at += 2
            elif size == 127:
                size = int.from_bytes(view[at : at + 8], "big")
                at += 8
            opcode = first & 0x0F
            if opcode in (0, 1, 2):
                self.partial += view[at : at + size]
                if first & 0x80:
                    self.inbox.put_nowait(bytes(self.partial))
                    self.partial.clear()
            at += size

    def raw_writelines(self, parts: Sequence[bytes | memoryview]) -> None:
        self.raw_write(b"".join(parts))

    async def raw_writable(self) -> bool:
        return self.open

    def raw_fail(self, code: int) -> None:
        self.open = False


class ChatRequest:
    """One ``send`` or ``resume``: the reply it streams."""

    def __init__(self, chat: ChatConnection, request_id: str, frame: dict[str, Any]) -> None:
        self.chat = chat
        self.hub = chat.hub
        self.request_id = request_id
        self.frame = frame
        self.task: asyncio.Task[None] | None = None
        self.transcript_id: str = frame["id"]
        self.grant: rights.Grant | None = None
        #: Drafts open before the catch-up marker (a send ignores them).
        self.before: set[str] = set()
        self.caught_up = False
        self.copy: DraftCopy | None = None
        self.text_only = False
        self.message_id = ""
        self.seq = 0
        #: Set when the reply is joined; its result when it ends.
        self.joined = asyncio.Event()
        self.ended: asyncio.Future[dict[str, Any] | None] = (
            asyncio.get_running_loop().create_future()
        )
        self.queue: OutboundQueue | None = None
        self.inbox: asyncio.Queue[bytes | str] = asyncio.Queue()
        self.pump: asyncio.Task[None] | None = None
        self.aborted = False
        #: The start of this request's chunk frames (JSON), to the sequence.
        self.chunk_head = f'{{"type":"chunk","requestId":{json.dumps(request_id)},"sequence":'

    # -- the request --

    async def run(self) -> None:
        try:
            if self.frame["type"] == "resume":
                await self._resume()
            else:
                await self._send()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = failure_for(exc)
            if failure is None:
                log.exception("ai chat request failed")
                failure = INTERNAL_FAILURE
            await self._error(f"{failure.code}: {failure.message}")
        finally:
            await self._unsubscribe()
            self.chat.requests.pop(self.request_id, None)

    async def _error(self, text: str) -> None:
        if not self.aborted:
            await self.chat.frame(
                {"type": "error", "requestId": self.request_id, "errorText": text}
            )

    def _check(self, need: rights.Need) -> None:
        assert self.grant is not None
        if not self.grant.satisfies(need, self.transcript_id):
            raise forbidden(self.grant, need, self.transcript_id)

    async def _send(self) -> None:
        frame = self.frame
        if frame["trigger"] == "regenerate-message":
            await self._error(
                "regenerate-message is not supported: a transcript is append-only, so a reply "
                "cannot be replaced; send a new message instead"
            )
            return
        message = frame["messages"][-1]
        if message.get("role") != "user":
            await self._error("the last of messages must be the user's new message")
            return
        self.grant = self.chat.grant_for(frame)
        validate_id(self.transcript_id, what="id")
        self._check(rights.AI_CHAT_FRAMES["send"].need)
        self._check(rights.READ)
        messages = sdk_in.from_ui([message])
        try:
            await self._subscribe()
        except TranscriptNotFound:
            if not self.grant.satisfies(rights.ADMIN, self.transcript_id):
                raise
            with contextlib.suppress(TranscriptExists):  # created meanwhile by another
                await self.hub.writes.create(self.transcript_id, origin=self.chat.origin)
            await self._subscribe()
        await self.hub.writes.append(
            self.transcript_id,
            messages,
            idempotency_key=message["id"] or None,
            origin=self.chat.origin,
        )
        timeout = self.hub.config.ai_reply_timeout_s
        try:
            await asyncio.wait_for(self.joined.wait(), timeout)
        except TimeoutError:
            if not self.aborted:
                await self._error(
                    f"no agent replied within {timeout:g} s: the message is kept in the "
                    "transcript; an agent may still answer it"
                )
            return
        await self._finish()

    async def _resume(self) -> None:
        self.grant = self.chat.grant_for(self.frame)
        self._check(rights.AI_CHAT_FRAMES["resume"].need)
        try:
            await self._subscribe()
        except TranscriptNotFound:
            await self.chat.frame({"type": "no-active", "requestId": self.request_id})
            return
        await self.joined.wait()  # or the marker found nothing to join
        if self.copy is None:
            await self.chat.frame({"type": "no-active", "requestId": self.request_id})
            return
        await self._finish()

    async def _finish(self) -> None:
        ended = await self.ended
        if ended is not None:
            await self.chat.frame(ended)

    def abort(self) -> None:
        """The client gave up the request: stop the reply it streams (what
        it holds is committed), or stop waiting for one."""
        if self.aborted:
            return
        self.aborted = True
        if self.copy is not None and not self.ended.done() and self.grant is not None:
            draft_id = self.copy.draft_id
            task = asyncio.create_task(self._stop(draft_id), name=f"ai-chat-stop-{draft_id}")
            self.chat.stops.add(task)
            task.add_done_callback(self.chat.stops.discard)
        if self.task is not None:
            self.task.cancel()

    async def _stop(self, draft_id: str) -> None:
        try:
            self._check(rights.AI_CHAT_FRAMES["abort"].need)
            by = (self.grant.sub if self.grant is not None else None) or self.chat.id
            await stop_draft(self.hub, self.transcript_id, draft_id, by, self.chat.origin)
        except Exception as exc:
            log.info("ai chat abort could not stop %s: %s", draft_id, exc)

    # -- the internal subscription --

    async def _subscribe(self) -> None:
        hub = self.hub
        live = await hub.load(self.transcript_id)
        transcript = live.transcript
        if self.queue is None:
            self.queue = hub.subscriptions.connect(
                f"{self.chat.id}-{self.request_id}", self._take, raw=_Inbox(self.inbox)
            )
            self.queue.start()
            self.pump = asyncio.create_task(self._pump(), name=f"ai-chat-pump-{self.request_id}")
        await hub.subscriptions.subscribe(
            self.queue,
            self.transcript_id,
            from_revision=transcript.revision,
            epoch=transcript.epoch,
        )
        self.queue.push_control(wire.Pong(seq=0, ref=_CAUGHT_UP))

    async def _unsubscribe(self) -> None:
        await cancel_and_wait([self.pump])
        queue = self.queue
        if queue is not None:
            self.queue = None
            self.hub.subscriptions.disconnect(queue)
            await queue.stop()

    async def _take(self, message: dict[str, Any]) -> None:
        """What the internal subscription sends through ``send`` (it writes
        through ``_Inbox`` whenever it can)."""
        data = message.get("text")
        if data is not None:
            self.inbox.put_nowait(data)

    async def _pump(self) -> None:
        """The internal subscription's frames, in order."""
        while True:
            message = await self.inbox.get()
            for raw in wire.split_frames(message):  # a commit's final rides with its increment
                try:
                    frame = _accept(raw)
                except InvalidFrame:
                    continue
                try:
                    await self._on_frame(frame)
                except Exception:
                    log.exception("ai chat: a draft frame failed")
                    self._end(self._error_frame("internal: the reply could not be read"))

    async def _on_frame(self, frame: wire.ServerFrame) -> None:
        if isinstance(frame, wire.Pong) and frame.ref == _CAUGHT_UP:
            self.caught_up = True
            if self.frame["type"] == "resume" and self.copy is None:
                self.joined.set()  # nothing to join: no-active
            return
        if isinstance(frame, wire.ErrorFrame) and frame.transcript_id == self.transcript_id:
            self._end(self._error_frame(f"{frame.code}: {frame.message}"))
            return
        if not isinstance(frame, wire.DraftFrame) or frame.transcript_id != self.transcript_id:
            return
        if self.copy is None:
            if not self._joins(frame):
                return
            await self._join(frame)
            return
        if frame.draft_id != self.copy.draft_id or self.ended.done():
            return
        if frame.state != "open":
            await self._close(frame)
            return
        await self._update(frame)

    def _joins(self, frame: wire.DraftFrame) -> bool:
        if frame.state != "open" or frame.role != "assistant":
            return False
        if self.frame["type"] == "resume":
            return not self.caught_up  # a reply being written when it asked
        if not self.caught_up:
            self.before.add(frame.draft_id)
            return False
        return frame.draft_id not in self.before

    async def _join(self, frame: wire.DraftFrame) -> None:
        copy = DraftCopy(frame.draft_id, frame.role)
        copy.take(frame)
        self.copy = copy
        if self.frame["type"] == "resume":
            await self.chat.frame({"type": "start", "requestId": self.request_id})
        if copy.ui is not None:
            self.message_id = copy.ui.id
            chunks = copy.ui.chunks()
            if not (chunks and chunks[0].get("type") == "start"):
                chunks.insert(0, {"type": "start", "messageId": self.message_id})
        else:
            self.text_only = True
            self.message_id = frame.draft_id
            chunks = [
                {"type": "start", "messageId": self.message_id},
                {"type": "start-step"},
                {"type": "text-start", "id": _TEXT_ID},
            ]
            if copy.text:
                chunks.append({"type": "text-delta", "id": _TEXT_ID, "delta": copy.text})
        self.joined.set()
        await self._chunks(chunks)

    async def _update(self, frame: wire.DraftFrame) -> None:
        copy = self.copy
        assert copy is not None
        follows = frame.n == copy.n + 1 and frame.replay is None
        if not self.text_only:
            # A reply of parts: its chunks go on as they come; the copy only
            # counts the updates (its fold was for joining).
            if frame.n <= copy.n:
                return
            if not follows or frame.chunks is None:
                if frame.chunks is None and frame.replay is None and follows:
                    copy.n = frame.n
                    return  # text joined to parts it already has
                self._end(self._error_frame("fell behind the reply: resume to read it whole"))
                return
            copy.n = frame.n
            await self._chunks(frame.chunks, shared=True)
            return
        before = copy.text
        if not copy.take(frame):
            return
        if copy.ui is not None:
            self._end(self._error_frame("the reply changed from text to parts"))
            return
        delta = copy.text[len(before) :] if copy.text.startswith(before) else None
        if delta is None:
            self._end(self._error_frame("the reply's text was replaced"))
            return
        if delta:
            await self._chunks([{"type": "text-delta", "id": _TEXT_ID, "delta": delta}])

    async def _close(self, frame: wire.DraftFrame) -> None:
        if frame.state == "final":
            if self.text_only:
                await self._chunks(
                    [
                        {"type": "text-end", "id": _TEXT_ID},
                        {"type": "finish-step"},
                        {"type": "finish"},
                    ]
                )
            self._end({"type": "end", "requestId": self.request_id})
        else:
            self._end(self._error_frame(f"the reply was {frame.state} before it was committed"))

    def _error_frame(self, text: str) -> dict[str, Any]:
        return {"type": "error", "requestId": self.request_id, "errorText": text}

    def _end(self, frame: dict[str, Any] | None) -> None:
        self.joined.set()
        if not self.ended.done():
            self.ended.set_result(None if self.aborted else frame)

    async def _chunks(self, chunks: list[dict[str, Any]], shared: bool = False) -> None:
        """Send ``chunks`` as chunk frames; ``shared``: a draft frame's own
        list, which every request reading the draft gets."""
        if self.aborted:
            return
        if shared and self.chat.raw is not None:
            head = self.chunk_head
            encoded = _encoded_chunks(chunks)
            texts = []
            for chunk, text in zip(chunks, encoded, strict=True):
                if chunk.get("type") == "start" and not isinstance(chunk.get("messageId"), str):
                    text = json.dumps({**chunk, "messageId": self.message_id})
                texts.append(f'{head}{self.seq},"chunk":{text}}}')
                self.seq += 1
            await self.chat.texts(texts)
            return
        for chunk in chunks:
            if chunk.get("type") == "start" and not isinstance(chunk.get("messageId"), str):
                chunk = {**chunk, "messageId": self.message_id}
            await self.chat.frame(
                {
                    "type": "chunk",
                    "requestId": self.request_id,
                    "sequence": self.seq,
                    "chunk": chunk,
                }
            )
            self.seq += 1
