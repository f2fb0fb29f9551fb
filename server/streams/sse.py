"""The live SSE read of a Durable Stream (``StreamSse``) and what every
live SSE read shares (``FollowedSse``: a generic stream's, and a
transcript's in ``server.streams.transcripts``): the events' encoding (each
data event made once for every reader by ``server.streams.fanout``), the
control events, the keep-alive, the cut after ``sse_max_s``, and writes of
about ``SEND_BYTES`` each once the reader took the one before.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from server.extensions import RAW_BODY
from server.streams.fanout import SEND_BYTES, Fanout, Follower
from server.streams.headers import SECURITY, StreamSettings, response_cursor
from server.streams.model import Stream, StreamError, StreamMessage, json_body, media_type
from server.streams.registry import StreamRegistry

__all__ = [
    "SSE_HEADERS",
    "Body",
    "FollowedSse",
    "StreamSse",
    "base64_encoded",
    "control_event",
    "page_of",
    "sse_data",
]


def page_of(messages: list[StreamMessage], limit: int) -> tuple[list[StreamMessage], bool]:
    """At most ``limit`` bytes of whole messages (at least one); whether that
    was all of them (``Stream-Up-To-Date``)."""
    size = 0
    for index, message in enumerate(messages):
        size += len(message.data)
        if size > limit and index > 0:
            return messages[:index], False
    return messages, True


#: Sends bytes of a streamed answer's body (``FollowedSse``).
Body = Callable[[bytes], Awaitable[None]]

#: The headers of every live SSE read (these streams' and a transcript's).
SSE_HEADERS: Final = {
    **SECURITY,
    # Exactly this, no charset parameter: what EventSource and the protocol expect.
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}


def base64_encoded(stream: Stream) -> bool:
    kind = media_type(stream.content_type)
    return not (kind.startswith("text/") or kind == "application/json")


def _sse_event(stream: Stream, message: StreamMessage, cursor: str | None) -> bytes:
    """One message's data event and the control event after it, together:
    a reader never sees one without the other in a read."""
    return _sse_data_event(stream, message) + _sse_control_event(stream, message.offset, cursor)


def _sse_data_event(stream: Stream, message: StreamMessage) -> bytes:
    """One message's data event: the same for every reader (the fan-out
    encodes it once, whatever the readers' cursors)."""
    if stream.json:
        payload = json_body([message]).decode()
    elif base64_encoded(stream):
        payload = base64.b64encode(message.data).decode()
    else:
        payload = message.data.decode("utf-8", errors="replace")
    return b"event: data\n" + sse_data(payload)


_CTRL: Final = b"event: control\n"


def _sse_control_event(stream: Stream, offset: str, cursor: str | None) -> bytes:
    """The control event after the data event that ends at ``offset``."""
    return control_event(_control(stream, offset, cursor))


def control_event(control: str) -> bytes:
    """A control event whose data is ``control`` (its JSON)."""
    return _CTRL + sse_data(control)


class FollowedSse(Response):
    """A live SSE response whose events a ``Fanout`` writes (its
    ``Follower``, made by ``follower``): the head sent, the reader's going
    away watched, ``follow`` run (the subclass's reading), the follower let
    go, the body ended. A generic stream's (``StreamSse``) and a
    transcript's (``server.streams.transcripts``)."""

    def __init__(
        self, fanout: Fanout, path: str, settings: StreamSettings, headers: dict[str, str]
    ) -> None:
        super().__init__(headers=headers)
        # No Content-Length (Response would say 0): the body is sent chunked.
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.fanout = fanout
        self.path = path
        self.settings = settings
        self.deadline = 0.0

    def follower(self, raw: Any) -> Follower[Any, Any]:
        """The follower of this reader (``raw``: its raw write, if any)."""
        raise NotImplementedError

    async def follow(self, body: Body, follower: Follower[Any, Any]) -> None:
        """Catch up, then follow (``fanout.follow``) until the response ends;
        ``body`` sends bytes of it."""
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        follower = self.follower(scope.get("extensions", {}).get(RAW_BODY))

        async def disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            follower.gone = True
            follower.wake.set()

        async def body(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        self.deadline = time.monotonic() + self.settings.sse_max_s
        watcher = asyncio.create_task(disconnect())
        try:
            await self.follow(body, follower)
        except StreamError:  # the store cannot answer now: the reader resumes later
            pass
        finally:
            watcher.cancel()
            self.fanout.unfollow(self.path, follower)
            self.released()
        if not follower.gone:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def released(self) -> None:
        """This reader no longer follows the stream (called once, after
        ``fanout.unfollow``): what the last reader's going lets go of."""

    async def woken(self, follower: Follower[Any, Any]) -> bool | None:
        """Wait until ``follower`` has something to do (or ``long_poll_s``,
        for a keep-alive control event): whether the wait timed out;
        ``None`` when the response ends now (past ``sse_max_s``, cut: what
        is queued is dropped, the reader goes on from the last offset it
        got in a new request, or the reader went away)."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return None
        timed_out = False
        try:
            async with asyncio.timeout(min(remaining, self.settings.long_poll_s)):
                await follower.wake.wait()
        except TimeoutError:
            timed_out = True
        follower.wake.clear()
        return None if follower.over() else timed_out

    async def send_queued(self, body: Body, follower: Follower[Any, Any]) -> bool:
        """Send what is queued for ``follower``; ``False`` when the response
        ends now (cut, or the reader went away). Queued events stay queued
        while they are sent, so that an event delivered meanwhile queues
        behind them (not raw, ahead); sent in writes of about ``SEND_BYTES``
        (a data event and its control event always together), each once the
        reader took the one before."""
        while follower.pending:
            count = _send_count(follower.pending)
            await body(b"".join(follower.pending[:count]))
            self.fanout.sent(self.path, follower, count)
            if follower.over():
                return False
        return True


class StreamSse(FollowedSse):
    """A live SSE read: what the reader missed, then each append as it is
    made, written by ``server.streams.fanout`` (encoded once for every
    reader); ends after ``sse_max_s``, when the stream is closed (after its
    final control event), deleted or expired, when the store cannot answer,
    or when the reader falls too far behind (it reads again from its offset)."""

    def __init__(
        self,
        registry: StreamRegistry,
        stream: Stream,
        start: str,
        cursor: str | None,
        settings: StreamSettings,
        headers: dict[str, str],
    ) -> None:
        super().__init__(registry.fanout, stream.path, settings, headers)
        self.registry = registry
        self.stream = stream
        self.start = start
        self.cursor = cursor

    def follower(self, raw: Any) -> Follower[Any, Any]:
        return Follower(raw, self.cursor, _sse_data_event, _sse_control_event, self.start)

    async def follow(self, body: Body, follower: Follower[Any, Any]) -> None:
        registry, stream, cursor = self.registry, self.stream, self.cursor
        fanout = registry.fanout
        offset = None if self.start == "-1" else self.start
        if not await registry.still(stream):
            return
        if not registry.read(stream, offset):  # nothing to catch up: say where it is
            offset = offset or stream.tail
            await body(_sse_control_event(stream, offset, cursor))
        # Catch up page by page (``read_chunk_bytes`` of messages each), each
        # page written once the reader took the one before (``send`` waits
        # for the socket to drain): a reader holds one page, however much it
        # has to read and however slowly. Nothing waits between the last
        # read and following.
        while True:
            if not await registry.still(stream):
                return
            messages, _ = page_of(registry.read(stream, offset), self.settings.read_chunk_bytes)
            if not messages:
                break
            offset = messages[-1].offset
            await body(b"".join([_sse_event(stream, m, cursor) for m in messages]))
            del messages
        tail = offset or stream.tail
        if stream.closed and tail == stream.tail:
            return
        follower.offset = tail
        registry.fanout.follow(stream.path, follower)
        while True:
            timed_out = await self.woken(follower)
            if timed_out is None or not await registry.still(stream):
                return
            # What the fan-out did not bring: appends another replica made
            # (a shared store's copy learns of them here). Queued behind
            # anything already queued, so that the order holds; a page at
            # a time (the next once it is sent).
            missed, all_read = page_of(
                registry.read(stream, follower.offset), self.settings.read_chunk_bytes
            )
            if missed:
                follower.offset = missed[-1].offset
                follower.closed_sent = stream.closed and follower.offset == stream.tail
                fanout.queue(stream.path, follower, [_sse_event(stream, m, cursor) for m in missed])
                if not all_read:
                    follower.wake.set()
            del missed
            if not await self.send_queued(body, follower):
                return
            await registry.touch(stream)
            if stream.closed and follower.offset == stream.tail:
                if not follower.closed_sent:
                    await body(_sse_control_event(stream, follower.offset, cursor))
                return
            if timed_out and not follower.pending:
                if time.monotonic() >= self.deadline:
                    return
                await body(_sse_control_event(stream, follower.offset, cursor))


def _send_count(pending: list[bytes]) -> int:
    """How many of the queued events go in the next write: about
    ``SEND_BYTES`` (one event larger alone), and never a data event
    without the control event after it."""
    count = size = 0
    for event in pending:
        if count and size + len(event) > SEND_BYTES and not event.startswith(_CTRL):
            break
        count += 1
        size += len(event)
    return count


def _control(stream: Stream, offset: str, cursor: str | None) -> str:
    control: dict[str, object] = {"streamNextOffset": offset}
    if stream.closed and offset == stream.tail:
        control["streamClosed"] = True
        control["upToDate"] = True
    else:
        control["streamCursor"] = response_cursor(cursor)
        if offset == stream.tail:
            control["upToDate"] = True
    return json.dumps(control, separators=(",", ":"))


def sse_data(payload: str) -> bytes:
    """Every line of ``payload`` as its own ``data:`` line (CR, LF and CRLF
    all end a line in SSE: none can smuggle an event boundary in). A reader
    drops one space after the colon, so a line that starts with one gets one
    more (``data:  upon`` reads `` upon``); others are written ``data:line``
    as the conformance suite expects."""
    lines = re.split(r"\r\n|\r|\n", payload)
    return (
        "\n".join(f"data: {line}" if line.startswith(" ") else f"data:{line}" for line in lines)
        + "\n\n"
    ).encode()
