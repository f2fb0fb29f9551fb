"""``/v1/ws``: the WebSocket endpoint (docs/protocol.md, section 2).

The reader loop handles one client op at a time, in arrival order; every
answer and every error goes through the connection's queue so that ``seq``
numbers every frame. A bad frame gets an ``error`` frame and the connection
stays usable; nothing already accepted is affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from protocol import codes, rights, sdk_in, wire
from protocol.errors import InvalidFrame
from protocol.limits import MAX_REF_LENGTH
from protocol.presence import presence_change
from protocol.types import Origin
from protocol.validation import accept_decoded
from server.errors import INTERNAL_FAILURE, Refused, failure_for
from server.live.hub import Hub
from server.live.outbound import RAW_FRAMES, OutboundQueue
from server.tuning import CLOSE_SEND_TIMEOUT_S, MAX_APPENDS_IN_FLIGHT, OPS_PER_YIELD
from server.web import access
from server.web.access import OPEN, ConnectionAccess, forbidden
from server.web.ratelimit import TokenBucket

log = logging.getLogger("tsync.ws")
_ids = itertools.count(1)


Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _peer(scope: Scope) -> str | None:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else None


async def refuse(receive: Receive, send: Send, code: int, scope: Scope | None = None) -> None:
    """Turn a connection away with a close code (after the handshake, so that
    every client, browsers included, learns what to do) and log it: one
    line, no query string."""
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    await _close(send, code)
    _log_refused(code, scope)


def _log_refused(code: int, scope: Scope | None, why: str | None = None) -> None:
    row = codes.close(code)
    log.info(
        "connection refused: %s",
        why or (row.reason if row else code),
        # A flood of refused connections must not flood the log (server.logs).
        extra={"code": code, "peer": _peer(scope) if scope is not None else None, "_repeat": True},
    )


async def websocket_endpoint(scope: Scope, receive: Receive, send: Send, hub: Hub) -> None:
    """``/v1/ws`` as a bare ASGI handler.

    It is served before Starlette's router and middleware (see
    ``server.web.application``): a long-lived connection then keeps no routing or
    middleware frames and no ``WebSocket`` wrapper alive, which is a good
    part of the memory an idle connection costs.
    """
    if (await receive())["type"] != "websocket.connect":
        return
    config = hub.config
    offered = scope.get("subprotocols") or []
    binary = wire.SUBPROTOCOL_MSGPACK in offered and wire.SUBPROTOCOL_JSON not in offered[:1]
    chosen = (
        wire.SUBPROTOCOL_MSGPACK
        if binary
        else (wire.SUBPROTOCOL_JSON if wire.SUBPROTOCOL_JSON in offered else None)
    )
    try:
        connection = access.admit(scope, config)
    except access.Turnaway as away:
        # After the handshake: a close code says what to do to every client,
        # browsers included (they never learn why a handshake failed).
        await send({"type": "websocket.accept", "subprotocol": chosen})
        await _close(send, away.close_code, away.why)
        _log_refused(away.close_code, scope, away.why)
        return
    await send({"type": "websocket.accept", "subprotocol": chosen})
    if hub.subscriptions.is_full():
        # After the handshake: a close code says "try again later" to every
        # client, browsers included (they never learn why a handshake failed).
        await _close(send, codes.CLOSE_SERVER_FULL)
        _log_refused(codes.CLOSE_SERVER_FULL, scope)
        return
    # Read (credentials, Origin) and never read again: the handshake's headers
    # would be held for the connection's life, about 1 KiB of ~12.
    scope["headers"] = []
    # The raw frame write of ``tsync serve``'s protocol (server.web.ws_protocol);
    # under other ASGI servers frames go through ``send``.
    raw = (scope.get("extensions") or {}).get(RAW_FRAMES)
    queue = hub.subscriptions.connect(
        f"c{next(_ids)}-{secrets.token_hex(3)}", send, binary=binary, raw=raw
    )
    queue.start()
    connection.arm(functools.partial(_close_unauthorized, queue))
    opened = time.monotonic()
    log.info(
        "connection opened",
        extra={
            "conn": queue.id,
            "peer": _peer(scope),
            "subprotocol": chosen,
            "sub": connection.sub,
        },
    )
    handler = OpHandler(hub, queue, connection, getattr(raw, "inbound_waiting", None))
    handled = 0
    disconnected = False
    code: int | None = None
    reason = ""
    try:
        while not queue.closed:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                disconnected = True
                code = message.get("code", 1005)
                reason = message.get("reason") or ""
                break
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            await handler.handle(data)
            handled += 1
            if handled % OPS_PER_YIELD == 0:
                await asyncio.sleep(0)  # let the pump and the writers run (server.tuning)
    except asyncio.CancelledError:
        # The ASGI server gave up waiting for the connection to end (hypercorn
        # does at the end of its graceful timeout): still say goodbye.
        code = codes.CLOSE_GOING_AWAY
        raise
    finally:
        connection.disarm()
        await handler.cancel()
        hub.subscriptions.disconnect(queue)
        await queue.stop()
        if not disconnected:
            if code is None:
                code = codes.CLOSE_OVERFLOW
            row = codes.close(code)
            reason = row.reason if row else ""
            # Already gone, or not reading (its socket buffer is full): then
            # the keepalive ends the TCP connection.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(_close(send, code), CLOSE_SEND_TIMEOUT_S)
        log.info(
            "connection closed",
            extra={
                "conn": queue.id,
                "code": code,
                "reason": reason,
                "ops": handled,
                "duration_s": round(time.monotonic() - opened, 3),
            },
        )


#: The most bytes a close frame's reason may hold (RFC 6455: 125 - the code).
MAX_CLOSE_REASON_BYTES = 123


def close_reason(code: int, why: str | None = None) -> str:
    """The reason a close with ``code`` gives: the error table's, then why
    this connection got it (``unauthorized: the token has expired``, as the
    HTTP answer's detail says), cut to what a close frame holds."""
    row = codes.close(code)
    reason = row.reason if row else ""
    if why:
        reason = f"{reason}: {why}" if reason else why
    data = reason.encode()
    if len(data) > MAX_CLOSE_REASON_BYTES:
        reason = data[: MAX_CLOSE_REASON_BYTES - 3].decode(errors="ignore") + "..."
    return reason


async def _close(send: Send, code: int, why: str | None = None) -> None:
    """Close with ``code`` and its reason (``close_reason``)."""
    await send({"type": "websocket.close", "code": code, "reason": close_reason(code, why)})


async def _close_unauthorized(queue: OutboundQueue, why: str) -> None:
    """The connection's credentials expired (or never came): let what is
    queued leave for a moment (the ``unauthorized`` error, say), then 4001
    with ``why``."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(queue.drain(), 1.0)
    code = codes.CLOSE_UNAUTHORIZED
    with contextlib.suppress(Exception):  # already gone
        await queue.send_close(code, close_reason(code, why))


def _ack(op: Any, revision: int, **fields: Any) -> wire.Ack:
    """The ``ack`` of a write op at ``revision`` (``fields``: what that op's
    ack adds: ``start``, ``count``, ``duplicate``, ``draftId`` and ``n``)."""
    return wire.Ack(seq=0, transcript_id=op.transcript_id, revision=revision, ref=op.ref, **fields)


class OpHandler:
    """Turns client ops into hub calls and answers into frames."""

    __slots__ = ("access", "bucket", "hub", "in_flight", "inbound_waiting", "origin", "queue")

    def __init__(
        self,
        hub: Hub,
        queue: OutboundQueue,
        access: ConnectionAccess = OPEN,
        inbound_waiting: Callable[[], bool] | None = None,
    ) -> None:
        self.hub = hub
        self.queue = queue
        self.access = access
        #: Whether more messages from the client wait to be read (``tsync
        #: serve``'s protocol knows; under other ASGI servers ``None``).
        self.inbound_waiting = inbound_waiting
        self.origin = Origin(context_id=queue.context_id)
        config = hub.config
        self.bucket = TokenBucket(config.max_ops_per_second, config.max_ops_burst)
        self.in_flight: list[asyncio.Task[None]] = []  # oldest first

    async def handle(self, data: str | bytes) -> None:
        limit = self.hub.config.max_frame_bytes
        size = _byte_length(data, limit)
        if size > limit:
            self.queue.push_error(
                wire.TOO_LARGE, f"frame of {size} bytes is over the limit of {limit}"
            )
            return
        frames = wire.split_frames(data) if isinstance(data, str) or data[:1] == b"{" else [data]
        last = len(frames) - 1
        for i, frame in enumerate(frames):
            await self._handle_one(frame, alone=i == last)

    async def _handle_one(self, frame: str | bytes, alone: bool = False) -> None:
        """``alone``: no other op of the same message follows this one."""
        queue = self.queue
        op: wire.ClientOp | None = self._plain_append(frame)
        if op is None:
            try:
                op = wire.decode_client_op(frame)
            except InvalidFrame as exc:
                reason, ref = _explain(frame, exc)
                queue.push_error(wire.INVALID_FRAME, reason, ref=ref)
                return
        ref = op.ref
        transcript_id = getattr(op, "transcript_id", None)
        if not self.bucket.take():
            queue.push_error(
                wire.RATE_LIMITED,
                f"more than {self.bucket.rate:g} ops per second: slow down and retry",
                transcript_id=transcript_id,
                ref=ref,
            )
            return
        try:
            self.access.check(op)  # in arrival order: before any op is pipelined
        except Refused as refused:
            queue.push_error(refused.code, refused.message, transcript_id=transcript_id, ref=ref)
            return
        if isinstance(op, wire.Append) and not self.hub.is_loaded(op.transcript_id):
            # The transcript must be loaded first: later appends would find
            # it loaded and queue up ahead of this one. Wait for it instead.
            await self.settle()
            await self._run(op)
            return
        if isinstance(op, wire.Append):
            # Appends are pipelined: the next ops are read while this one
            # waits for its commit, so appends that arrive together are
            # committed together. Their acks come back in order (each task
            # queues its append in its first step, in creation order).
            self._forget_done()
            waiting = self.inbound_waiting
            if alone and not self.in_flight and waiting is not None and not waiting():
                # Nothing to pipeline it with (no other op read or waiting,
                # none in flight): run it here, without a task and its step.
                await self._run(op)
                return
            self.in_flight.append(asyncio.create_task(self._run(op)))
            if len(self.in_flight) > MAX_APPENDS_IN_FLIGHT:
                await self.in_flight[0]  # back-pressure: stop reading for a moment
            return
        if isinstance(op, wire.StartSegment | wire.SetView | wire.LeaveView):
            await self.settle()  # after the appends sent before it
        await self._run(op)

    def _plain_append(self, frame: str | bytes) -> wire.Append | None:
        """The common append (JSON, the transcript's own message shape, plain
        text and flat metadata) decoded straight into validated ``Message``
        structs: one decode instead of a decode to dicts, a walk and a
        conversion (issue 42). ``None`` for every other frame, and for any
        such append that the fast path does not accept: ``decode_client_op``
        and ``parse_messages`` then read it as before, errors included."""
        plain = wire.decode_plain_append(frame)
        if plain is None:
            return None
        batch = accept_decoded(plain.messages, self.hub.config.message_limits)
        if batch is None:
            return None
        messages: Any = batch  # already validated: ``Writes`` takes it as it is
        return wire.Append(
            transcript_id=plain.transcript_id,
            messages=messages,
            expected_revision=plain.expected_revision,
            idempotency_key=plain.idempotency_key,
            ref=plain.ref,
            draft_id=plain.draft_id,
        )

    def _forget_done(self) -> None:
        done = 0
        for task in self.in_flight:
            if not task.done():
                break
            done += 1
        if done:
            del self.in_flight[:done]

    async def settle(self) -> None:
        """Wait until every append in flight has been answered."""
        while self.in_flight:
            await self.in_flight.pop(0)

    async def cancel(self) -> None:
        """The connection is gone: stop waiting for answers nobody reads (the
        commits themselves go on in the hub)."""
        for task in self.in_flight:
            task.cancel()
        await asyncio.gather(*self.in_flight, return_exceptions=True)
        self.in_flight.clear()

    async def _run(self, op: wire.ClientOp) -> None:
        queue = self.queue
        ref = op.ref
        transcript_id = getattr(op, "transcript_id", None)
        try:
            await self._dispatch(op)
        except Exception as exc:
            failure = failure_for(exc)
            if failure is None:
                log.exception("op failed", extra={"conn": queue.id, "op": type(op).__name__})
                failure = INTERNAL_FAILURE
            queue.push_error(
                failure.code,
                failure.message,
                transcript_id=transcript_id,
                ref=ref,
                revision=failure.fields.get("revision"),
            )

    async def _stop_draft(self, op: wire.Draft) -> None:
        """A ``draft`` op with ``stop``: ``stop_draft``, then answer the stopper."""
        by = self.access.sub or self.queue.id
        receipt = await stop_draft(
            self.hub, op.transcript_id, op.draft_id, by, self.origin, self.queue
        )
        self.queue.push_control(
            _ack(op, receipt.revision, start=receipt.start, count=receipt.count)
        )

    async def _dispatch(self, op: wire.ClientOp) -> None:
        hub, queue = self.hub, self.queue
        match op:
            case wire.Append():
                result = await hub.writes.append(
                    op.transcript_id,
                    sdk_in.from_sdk(op.format, op.messages, op.system),
                    expected_revision=op.expected_revision,
                    idempotency_key=op.idempotency_key,
                    origin=self.origin,
                    draft_id=op.draft_id,
                )
                receipt = result.receipt
                queue.push_control(
                    _ack(
                        op,
                        receipt.revision,
                        start=receipt.start,
                        count=receipt.count,
                        duplicate=result.duplicate,
                    )
                )
            case wire.Subscribe(window=window):
                await hub.subscriptions.subscribe(
                    queue,
                    op.transcript_id,
                    from_revision=op.from_revision,
                    epoch=op.epoch,
                    window=window,
                )
                if op.presence:
                    hub.presence.watch(queue, op.transcript_id)
                else:
                    hub.presence.unwatch(queue, op.transcript_id)
            case wire.Unsubscribe():
                hub.subscriptions.unsubscribe(queue, op.transcript_id)
            case wire.Presence():
                self._presence(op)
                if op.ref is not None:
                    queue.push_control(wire.Pong(seq=0, ref=op.ref))
            case wire.StartSegment():
                result = await hub.writes.start_segment(
                    op.transcript_id, op.start, origin=self.origin
                )
                queue.push_control(_ack(op, result.receipt.revision, start=result.receipt.start))
            case wire.SetView() | wire.LeaveView():
                if isinstance(op, wire.SetView):
                    result = await hub.writes.set_view(
                        op.transcript_id, op.name, op.start, op.end, origin=self.origin
                    )
                else:
                    result = await hub.writes.leave_view(
                        op.transcript_id, op.name, origin=self.origin
                    )
                queue.push_control(_ack(op, result.receipt.revision, duplicate=result.duplicate))
            case wire.Draft(stop=True):
                await self._stop_draft(op)
            case wire.Draft():
                try:
                    revision, n = await hub.drafts.write(
                        op,
                        writer=queue.id,
                        flush=op.ref is not None,  # its ack's n counts every delta sent
                    )
                except Refused as stopping:
                    # A token for a draft being stopped: the stop tells the writer,
                    # with the commit's revision, as soon as it lands.
                    if op.ref is None and stopping.fields.get("stopping"):
                        return
                    raise
                if op.ref is not None:  # tokens are too frequent to ack each
                    queue.push_control(_ack(op, revision, draft_id=op.draft_id, n=n))
            case wire.Ping():
                queue.push_control(wire.Pong(seq=0, ref=op.ref))
            case wire.Auth():
                self.access.refresh(op.token)
                # New rights: what they no longer let it read, it no longer follows.
                for transcript_id in self.access.unreadable(queue.followed()):
                    hub.subscriptions.unsubscribe(queue, transcript_id)
                    refused = forbidden(self.access.grant, "read", transcript_id)
                    queue.push_error(refused.code, refused.message, transcript_id=transcript_id)
                queue.push_control(wire.Pong(seq=0, ref=op.ref))

    def _presence(self, op: wire.Presence) -> None:
        """State, change or end this connection's presence (``server.live.presence``;
        the op's rules: ``protocol.presence.presence_change``)."""
        queue, registry = self.queue, self.hub.presence
        transcript_id = op.transcript_id
        grant = self.access.grant
        member = presence_change(
            op,
            registry.member(queue, transcript_id),
            member_id=queue.id,
            follows=queue.follows(transcript_id),
            sub=self.access.sub,
            may_write=grant is None or grant.satisfies(rights.WRITE, transcript_id),
        )
        if member is None:
            registry.leave(queue, transcript_id)
        else:
            registry.state(queue, transcript_id, member)


async def stop_draft(
    hub: Hub,
    transcript_id: str,
    draft_id: str,
    by: str,
    origin: Origin,
    stopper: OutboundQueue | None = None,
) -> Any:
    """Stop a draft: commit what it holds as its message (marked stopped),
    then tell the connection that wrote it, at once (a ``draft-closed`` error
    naming the transcript: its client stops reading the model's stream),
    unless that is ``stopper``. Returns the commit's receipt. (The ``draft``
    op's ``stop`` and ``/v1/ai/chat``'s ``abort``.)"""
    messages, writer = await hub.drafts.stop_draft(transcript_id, draft_id, by)
    result = await hub.writes.append(
        transcript_id, messages, origin=origin, draft_id=draft_id, stopping=True
    )
    revision = result.receipt.revision
    told = hub.subscriptions.connections.get(writer) if writer is not None else None
    if told is not None and told is not stopper:
        told.push_error(
            codes.DRAFT_CLOSED,
            f"draft {draft_id!r} was stopped by {by}: what it held is committed as "
            f"revision {revision}; stop writing it",
            transcript_id=transcript_id,
            revision=revision,
        )
    return result.receipt


def _byte_length(data: str | bytes, limit: int) -> int:
    """The size of an inbound message in bytes (a text message arrives as a
    ``str``: counting its characters would let 3-byte characters triple the
    limit). Exact up to ``limit``; encoding happens only for a string that
    might pass it."""
    if isinstance(data, bytes):
        return len(data)
    if len(data) > limit or len(data) * 4 <= limit:
        return len(data)  # too long already, or short enough whatever it holds
    return len(data.encode("utf-8", "surrogatepass"))


_INT64: Final = 1 << 63


def _explain(frame: str | bytes, exc: InvalidFrame) -> tuple[str, str | int | None]:
    """A reason a person can act on ("unknown op", "missing field") and the
    frame's ``ref`` to echo when it is a valid one, the same whichever form
    the frame came in (JSON or MessagePack, read as ``decode_client_op``
    read it). Nothing of the frame is quoted at length: a client that sends
    megabytes gets a short answer."""
    try:
        obj = wire.decode_plain(frame)
    except Exception:
        return f"malformed {wire.frame_format(frame)}: {exc}", None
    if not isinstance(obj, dict):
        return "a frame must be an object (a JSON object or MessagePack map)", None
    ref = obj.get("ref")
    if isinstance(ref, bool) or not (
        (isinstance(ref, str) and len(ref) <= MAX_REF_LENGTH)
        or (isinstance(ref, int) and -_INT64 <= ref < _INT64)
    ):
        ref = None
    op = obj.get("op")
    if op is None:
        return 'missing field "op"', ref
    if op not in wire.OP_NAMES:
        shown = repr(op[:60] + ("..." if len(op) > 60 else "")) if isinstance(op, str) else "?"
        return f"unknown op {shown}", ref
    return f"invalid {op!r} op: {exc}", ref
