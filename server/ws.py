"""``/v1/ws``: the WebSocket endpoint (contract section 3).

The reader loop handles one client op at a time, in arrival order; every
answer and every error goes through the connection's queue so that ``seq``
numbers every frame. A bad frame gets an ``error`` frame and the connection
stays usable; nothing already accepted is affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

import msgspec

from protocol import wire
from protocol.errors import InvalidFrame, InvalidMessage
from protocol.types import Origin
from server.connection import Connection
from server.hub import Hub, RevisionConflict, TooManySubscriptions
from server.ratelimit import TokenBucket
from server.store.base import StoreUnavailable, TranscriptNotFound
from server.transcript import InvalidSegment

log = logging.getLogger("tsync.ws")
_ids = itertools.count(1)
#: Appends of one connection waiting for their commit before reading pauses.
MAX_APPENDS_IN_FLIGHT = 256
_lenient = msgspec.json.Decoder()


Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _authorized(scope: Scope, token: str | None) -> bool:
    if token is None:
        return True
    offered = ""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            header = value.decode("latin-1")
            if header.lower().startswith("bearer "):
                offered = header[7:]
            break
    else:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        offered = (query.get("token") or [""])[0]
    return secrets.compare_digest(offered.encode(), token.encode())


def _peer(scope: Scope) -> str | None:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else None


async def refuse(
    receive: Receive, send: Send, code: int, reason: str, scope: Scope | None = None
) -> None:
    """Turn a connection away before accepting it (the client sees the
    handshake refused) and log it: one line, no query string."""
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.close", "code": code, "reason": reason})
    log.info(
        "connection refused: %s",
        reason,
        extra={"code": code, "peer": _peer(scope) if scope is not None else None},
    )


async def websocket_endpoint(scope: Scope, receive: Receive, send: Send, hub: Hub) -> None:
    """``/v1/ws`` as a bare ASGI handler.

    It is served before Starlette's router and middleware (see
    ``server.application``): a long-lived connection then keeps no routing or
    middleware frames and no ``WebSocket`` wrapper alive, which is a good
    part of the memory an idle connection costs.
    """
    config = hub.config
    if not _authorized(scope, config.token):
        await refuse(receive, send, 1008, "unauthorized", scope)
        return
    if len(hub.connections) >= config.max_connections:
        await refuse(receive, send, 1013, "too many connections", scope)
        return
    if (await receive())["type"] != "websocket.connect":
        return
    offered = scope.get("subprotocols") or []
    binary = wire.SUBPROTOCOL_MSGPACK in offered and wire.SUBPROTOCOL_JSON not in offered[:1]
    chosen = (
        wire.SUBPROTOCOL_MSGPACK
        if binary
        else (wire.SUBPROTOCOL_JSON if wire.SUBPROTOCOL_JSON in offered else None)
    )
    await send({"type": "websocket.accept", "subprotocol": chosen})
    conn = Connection(
        f"c{next(_ids)}-{secrets.token_hex(3)}",
        send,
        binary=binary,
        queue_max_frames=config.queue_max_frames,
        queue_max_bytes=config.queue_max_bytes,
        write_batch_bytes=config.write_batch_bytes,
        metrics=hub.metrics,
        on_lagged=hub.on_lagged,
        flusher=hub.flusher,
    )
    hub.register(conn)
    conn.start()
    opened = time.monotonic()
    log.info(
        "connection opened",
        extra={"conn": conn.id, "peer": _peer(scope), "subprotocol": chosen},
    )
    handler = OpHandler(hub, conn)
    handled = 0
    disconnected = False
    code: int | None = None
    reason = ""
    try:
        while not conn.closed:
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
            if handled % 16 == 0:
                # Let the pump and the writers run now and then even when the
                # store answers without suspending: a burst of appends from
                # one client must not starve everyone else's deliveries. (Not
                # after every op: a reader that takes one op per loop turn
                # falls behind busy writers, and uvicorn then stops reading
                # the socket, pongs included.)
                await asyncio.sleep(0)
    except asyncio.CancelledError:
        # The ASGI server gave up waiting for the connection to end (hypercorn
        # does at the end of its graceful timeout): still say goodbye.
        code, reason = 1001, "server shutting down"
        raise
    finally:
        await handler.cancel()
        hub.unregister(conn)
        await conn.stop()
        if not disconnected:
            if code is None:
                code, reason = 1008, "outbound queue overflow"
            with contextlib.suppress(Exception):  # already gone
                await send({"type": "websocket.close", "code": code, "reason": reason})
        log.info(
            "connection closed",
            extra={
                "conn": conn.id,
                "code": code,
                "reason": reason,
                "ops": handled,
                "duration_s": round(time.monotonic() - opened, 3),
            },
        )


class OpHandler:
    """Turns client ops into hub calls and answers into frames."""

    __slots__ = ("bucket", "conn", "hub", "in_flight", "origin")

    def __init__(self, hub: Hub, conn: Connection) -> None:
        self.hub = hub
        self.conn = conn
        self.origin = Origin(context_id=conn.context_id)
        config = hub.config
        self.bucket = TokenBucket(config.max_ops_per_second, config.max_ops_burst)
        self.in_flight: list[asyncio.Task[None]] = []  # oldest first

    async def handle(self, data: str | bytes) -> None:
        limit = self.hub.config.max_frame_bytes
        if len(data) > limit:
            self.conn.push_error(
                wire.TOO_LARGE, f"frame of {len(data)} bytes is over the limit of {limit}"
            )
            return
        frames = wire.split_frames(data) if isinstance(data, str) or data[:1] == b"{" else [data]
        for frame in frames:
            await self._handle_one(frame)

    async def _handle_one(self, frame: str | bytes) -> None:
        conn = self.conn
        try:
            op = wire.decode_client_op(frame)
        except InvalidFrame as exc:
            conn.push_error(wire.INVALID_FRAME, _explain(frame, exc), ref=_ref_of(frame))
            return
        ref = op.ref
        transcript_id = getattr(op, "transcript_id", None)
        if not self.bucket.take():
            conn.push_error(
                wire.RATE_LIMITED,
                f"more than {self.bucket.rate:g} ops per second: slow down and retry",
                transcript_id=transcript_id,
                ref=ref,
            )
            return
        if isinstance(op, wire.Append) and op.transcript_id not in self.hub.live:
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
            self.in_flight.append(asyncio.create_task(self._run(op)))
            if len(self.in_flight) > MAX_APPENDS_IN_FLIGHT:
                await self.in_flight[0]  # back-pressure: stop reading for a moment
            return
        if isinstance(op, wire.StartSegment):
            await self.settle()  # after the appends sent before it
        await self._run(op)

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
        conn = self.conn
        ref = op.ref
        transcript_id = getattr(op, "transcript_id", None)
        try:
            await self._dispatch(op)
        except InvalidMessage as exc:
            conn.push_error(wire.INVALID_MESSAGE, str(exc), transcript_id=transcript_id, ref=ref)
        except TranscriptNotFound as exc:
            conn.push_error(wire.NOT_FOUND, str(exc), transcript_id=transcript_id, ref=ref)
        except RevisionConflict as exc:
            conn.push_error(
                wire.REVISION_CONFLICT,
                str(exc),
                transcript_id=transcript_id,
                ref=ref,
                revision=exc.current,
            )
        except InvalidSegment as exc:
            conn.push_error("invalid-segment", str(exc), transcript_id=transcript_id, ref=ref)
        except TooManySubscriptions as exc:
            conn.push_error(
                wire.TOO_MANY_SUBSCRIPTIONS, str(exc), transcript_id=transcript_id, ref=ref
            )
        except StoreUnavailable as exc:
            conn.push_error(
                wire.UNAVAILABLE, f"store unavailable: {exc}", transcript_id=transcript_id, ref=ref
            )
        except Exception:
            log.exception("op failed", extra={"conn": conn.id, "op": type(op).__name__})
            conn.push_error(
                wire.INTERNAL, "internal error (logged)", transcript_id=transcript_id, ref=ref
            )

    async def _dispatch(self, op: wire.ClientOp) -> None:
        hub, conn = self.hub, self.conn
        match op:
            case wire.Append():
                ack = await hub.append(
                    op.transcript_id,
                    op.messages,
                    expected_revision=op.expected_revision,
                    idempotency_key=op.idempotency_key,
                    origin=self.origin,
                )
                conn.push_control(
                    wire.Ack(
                        seq=0,
                        transcript_id=op.transcript_id,
                        revision=ack.ack.revision,
                        ref=op.ref,
                        start=ack.ack.start,
                        count=ack.ack.count,
                        duplicate=ack.duplicate,
                    )
                )
            case wire.Subscribe():
                await hub.subscribe(
                    conn, op.transcript_id, from_revision=op.from_revision, epoch=op.epoch
                )
            case wire.Unsubscribe():
                hub.unsubscribe(conn, op.transcript_id)
            case wire.StartSegment():
                ack = await hub.start_segment(op.transcript_id, op.start, origin=self.origin)
                conn.push_control(
                    wire.Ack(
                        seq=0,
                        transcript_id=op.transcript_id,
                        revision=ack.ack.revision,
                        ref=op.ref,
                        start=ack.ack.start,
                    )
                )
            case wire.Ping():
                conn.push_control(wire.Pong(seq=0, ref=op.ref))


def _ref_of(frame: str | bytes) -> Any:
    try:
        obj = _lenient.decode(frame)
    except Exception:
        return None
    ref = obj.get("ref") if isinstance(obj, dict) else None
    return ref if isinstance(ref, str | int) and not isinstance(ref, bool) else None


def _explain(frame: str | bytes, exc: InvalidFrame) -> str:
    """A reason a person can act on ("unknown op", "missing field")."""
    try:
        obj = _lenient.decode(frame)
    except Exception:
        return f"malformed JSON: {exc}"
    if not isinstance(obj, dict):
        return "a frame must be a JSON object"
    op = obj.get("op")
    if op is None:
        return 'missing field "op"'
    if op not in ("subscribe", "unsubscribe", "append", "startSegment", "ping"):
        return f"unknown op {op!r}"
    return f"invalid {op!r} op: {exc}"
