#!/usr/bin/env python3
"""The broadcast baseline: the practical ceiling of Python WebSocket fan-out.

A small ``websockets`` server that speaks just enough of the transcript-sync
protocol for ``tsync bench`` (subscribe -> ``baseline``, resume from
``fromRevision``, ``append`` -> ``ack``, ``ping`` -> ``pong``) and sends each
append to every subscriber as its own pre-encoded ``increment`` frame: one
WebSocket message, one socket write per subscriber per append, through
``websockets.broadcast`` with compression off. It validates nothing, stores
nothing on disk and never applies back-pressure, so it measures what the
``websockets`` library costs to push the same bytes to the same clients.

``seq`` is per connection, so the frame is encoded once per distinct next
``seq`` among the subscribers (once in total when they all subscribed before
the first append, as the harness does) and each group gets one broadcast.

Drafts (``tsync bench stream``) are broadcast per token: each ``draft`` op's
``delta`` (or ``text``) goes to every subscriber as its own ``draft`` frame,
numbered ``n`` = 1, 2, ... per draft, with no merging for slow readers and no
catch-up for late joiners; an ``append`` with ``draftId`` sends the draft's
``final`` frame right after its increment. This is what a pub/sub server
that carries each token as a message costs.

Transcripts are created on first use; ``GET /healthz`` says so
(``createsOnUse``) so the harness skips creating them over HTTP.

    python scripts/broadcast_baseline.py --port 8798

``--fault drop`` or ``--fault repeat`` makes it a fast but wrong server (every
50th increment is left out, or sent twice) to show that the harness fails
such a run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
import uuid

import msgspec
from websockets.asyncio.server import ServerConnection, broadcast, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response


class Op(msgspec.Struct):
    """Any client op; ``messages`` stays raw JSON (it is spliced, never re-encoded)."""

    op: str
    transcriptId: str = ""
    fromRevision: int | None = None
    epoch: str | None = None
    ref: str | int | None = None
    messages: list[msgspec.Raw] = []
    draftId: str | None = None
    role: str | None = None
    delta: str | None = None
    text: str | None = None
    cancel: bool = False


_decode_op = msgspec.json.Decoder(Op).decode
_encode = msgspec.json.encode


class Stream:
    """One transcript: its messages and encoded events, in memory."""

    def __init__(self, transcript_id: str) -> None:
        self.id = transcript_id
        self.id_json = _encode(transcript_id)
        self.epoch = uuid.uuid4().hex
        self.messages: list[msgspec.Raw] = []
        self.events: list[bytes] = []  # the event JSON of revision i + 1
        self.subscribers: set[ServerConnection] = set()
        self.drafts: dict[str, tuple[bytes, int]] = {}  # draft id -> (role JSON, last n)

    @property
    def revision(self) -> int:
        return len(self.events)

    def append(self, messages: list[msgspec.Raw]) -> bytes:
        start = len(self.messages)
        self.messages.extend(messages)
        event = b"".join(
            (
                b'{"transcriptId":',
                self.id_json,
                b',"epoch":"',
                self.epoch.encode(),
                b'","revision":',
                str(len(self.events) + 1).encode(),
                b',"occurredAt":',
                str(time.time_ns() // 1_000_000).encode(),
                b',"change":{"kind":"messages-appended","start":',
                str(start).encode(),
                b',"messages":[',
                b",".join(messages),
                b"]}}",
            )
        )
        self.events.append(event)
        return event

    def snapshot(self) -> bytes:
        return b"".join(
            (
                b'{"transcriptId":',
                self.id_json,
                b',"epoch":"',
                self.epoch.encode(),
                b'","revision":',
                str(self.revision).encode(),
                b',"start":0,"messages":[',
                b",".join(self.messages),
                b'],"activeStart":0,"segments":[{"start":0,"end":null}]}',
            )
        )


FAULT_EVERY = 50


class Baseline:
    def __init__(self, fault: str = "none") -> None:
        self.streams: dict[str, Stream] = {}
        self.seq: dict[ServerConnection, int] = {}
        self.fault = fault

    def stream(self, transcript_id: str) -> Stream:
        stream = self.streams.get(transcript_id)
        if stream is None:
            stream = self.streams[transcript_id] = Stream(transcript_id)
        return stream

    def frame(self, conn: ServerConnection, head: bytes, body: bytes) -> bytes:
        """``{"type":..,"seq":n,<body>`` with the connection's next seq."""
        seq = self.seq[conn] = self.seq[conn] + 1
        return b"".join((head, str(seq).encode(), body))

    async def handle(self, conn: ServerConnection) -> None:
        self.seq[conn] = 0
        try:
            async for message in conn:
                for line in message.splitlines() if isinstance(message, str) else [message]:
                    if line.strip():
                        await self.handle_op(conn, _decode_op(line))
        finally:
            del self.seq[conn]
            for stream in self.streams.values():
                stream.subscribers.discard(conn)

    async def handle_op(self, conn: ServerConnection, op: Op) -> None:
        ref = b"" if op.ref is None else b',"ref":' + _encode(op.ref)
        if op.op == "subscribe":
            stream = self.stream(op.transcriptId)
            since = op.fromRevision
            if since is not None and op.epoch == stream.epoch and since <= stream.revision:
                for event in stream.events[since:]:
                    await conn.send(
                        self.frame(
                            conn, b'{"type":"increment","seq":', b',"event":' + event + b"}"
                        ),
                        text=True,
                    )
            else:
                snapshot = stream.snapshot()
                await conn.send(
                    self.frame(
                        conn, b'{"type":"baseline","seq":', b',"snapshot":' + snapshot + b"}"
                    ),
                    text=True,
                )
            stream.subscribers.add(conn)
        elif op.op == "unsubscribe":
            self.stream(op.transcriptId).subscribers.discard(conn)
        elif op.op == "append":
            stream = self.stream(op.transcriptId)
            start = len(stream.messages)
            event = stream.append(op.messages)
            ack = b"".join(
                (
                    b',"transcriptId":',
                    stream.id_json,
                    b',"revision":',
                    str(stream.revision).encode(),
                    ref,
                    b',"start":',
                    str(start).encode(),
                    b',"count":',
                    str(len(op.messages)).encode(),
                    b"}",
                )
            )
            await conn.send(self.frame(conn, b'{"type":"ack","seq":', ack), text=True)
            self.fan_out(stream, event)
            if op.draftId is not None and op.draftId in stream.drafts:
                role, n = stream.drafts.pop(op.draftId)
                self._broadcast(
                    stream,
                    b'{"type":"draft","seq":',
                    self._draft_body(stream, op.draftId, role, n)
                    + b',"state":"final","revision":'
                    + str(stream.revision).encode()
                    + b"}",
                )
        elif op.op == "draft" and op.draftId is not None:
            self.draft(stream=self.stream(op.transcriptId), op=op)
            if op.ref is not None:
                body = b',"transcriptId":' + self.stream(op.transcriptId).id_json + ref + b"}"
                await conn.send(self.frame(conn, b'{"type":"ack","seq":', body), text=True)
        elif op.op == "ping":
            await conn.send(self.frame(conn, b'{"type":"pong","seq":', ref + b"}"), text=True)
        else:
            body = b',"code":"invalid-frame","message":"unknown op"' + ref + b"}"
            await conn.send(self.frame(conn, b'{"type":"error","seq":', body), text=True)

    @staticmethod
    def _draft_body(stream: Stream, draft_id: str, role: bytes, n: int) -> bytes:
        return b"".join(
            (
                b',"transcriptId":',
                stream.id_json,
                b',"draftId":',
                _encode(draft_id),
                b',"role":',
                role,
                b',"n":',
                str(n).encode(),
            )
        )

    def draft(self, stream: Stream, op: Op) -> None:
        """One token (or text, or cancel) to every subscriber as its own frame."""
        assert op.draftId is not None
        role, n = stream.drafts.get(op.draftId, (_encode(op.role or "assistant"), 0))
        if op.cancel:
            stream.drafts.pop(op.draftId, None)
            tail = b',"state":"cancelled"}'
        elif op.delta is not None or op.text is not None:
            n += 1
            stream.drafts[op.draftId] = (role, n)
            field = b',"delta":' if op.delta is not None else b',"text":'
            tail = field + _encode(op.delta if op.delta is not None else op.text) + b"}"
        else:
            stream.drafts[op.draftId] = (role, n)
            return
        self._broadcast(
            stream, b'{"type":"draft","seq":', self._draft_body(stream, op.draftId, role, n) + tail
        )

    def fan_out(self, stream: Stream, event: bytes) -> None:
        """One pre-encoded frame per distinct next seq, one broadcast per group."""
        copies = 1
        if self.fault != "none" and stream.revision % FAULT_EVERY == 0:
            copies = 0 if self.fault == "drop" else 2
        for _ in range(copies):
            self._broadcast(stream, b'{"type":"increment","seq":', b',"event":' + event + b"}")

    def _broadcast(self, stream: Stream, head: bytes, tail: bytes) -> None:
        groups: dict[int, list[ServerConnection]] = {}
        seqs = self.seq
        for conn in stream.subscribers:
            seq = seqs.get(conn)
            if seq is not None:
                seqs[conn] = seq + 1
                groups.setdefault(seq + 1, []).append(conn)
        for seq, conns in groups.items():
            frame = b"".join((head, str(seq).encode(), tail))
            broadcast(conns, frame, text=True)


def healthz(conn: ServerConnection, request: Request) -> Response | None:
    if request.path != "/healthz":
        return None
    body = json.dumps({"status": "ok", "server": "broadcast-baseline", "createsOnUse": True})
    headers = Headers([("Content-Type", "application/json")])
    return Response(200, "OK", headers, body.encode())


async def main(host: str, port: int, fault: str = "none") -> None:
    baseline = Baseline(fault)
    stop = asyncio.get_running_loop().create_future()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set_result, None)
    async with serve(
        baseline.handle,
        host,
        port,
        compression=None,
        max_size=None,
        process_request=healthz,
        ping_interval=20,
        ping_timeout=20,
    ):
        print(f"broadcast baseline on ws://{host}:{port}/v1/ws", flush=True)
        await stop


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8798)
    parser.add_argument(
        "--fault", choices=["none", "drop", "repeat"], default="none", help="misbehave on purpose"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = _args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(args.host, args.port, args.fault))
