"""The whole reads of the HTTP API, written as they are made.

``GET /v1/transcripts/{id}``, ``GET .../events?after=`` and ``GET
.../chat?segment=all`` may answer with a whole transcript. Built in one piece
a 100 MB transcript was the whole of it in memory once as messages and again
as JSON, per request, encoded in one call on the loop: 9 concurrent reads
grew the server by 1.1 GB and stalled every client 1.24 s (issue 24).

Here the answer is the same JSON, written in pages: a page of messages (or
events) is read (from memory or the store, as ``Hub.read_messages`` and
``Hub.events_after`` do), encoded, written, and let go before the next is
read. A page aims at ``STREAM_PAGE_BYTES`` (how many messages or events it
holds follows the sizes seen so far), so a request holds about one page
however long the transcript, the loop runs between pages, and a client that
reads slowly holds the writer (the transport's flow control) instead of
growing a buffer. Small answers (up to ``STREAM_MIN_ITEMS`` messages or
events) are still built whole, with a ``Content-Length``.

A read from the first message on goes through the events (each append is
decoded once, however many messages it holds: an imported transcript is one
append of all its messages, which reading by ranges would decode again for
every page); a range from further on, or a store that no longer holds the
early events, is read by ranges.

What the stream shows is fixed when it starts: the head (revision, segments,
Views, length) is read first and the pages are the messages of that range
(messages never change) or the events up to that revision. If the
transcript is deleted (and perhaps created again) while a stream is being
written, the stream stops short: the status line went out already, so the
client sees the connection end before the JSON does, never a mix of two
histories.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Final

import msgspec
from starlette.responses import Response, StreamingResponse

from protocol import api
from protocol.types import Message, MessagesAppended, TranscriptEvent, TranscriptSnapshot
from server.errors import Refused
from server.live.hub import Hub
from server.store.base import StoreError
from server.web.problems import json_response

__all__ = [
    "STREAM_MIN_ITEMS",
    "STREAM_PAGE_BYTES",
    "StreamStopped",
    "chat_response",
    "events_response",
    "snapshot_response",
]

#: Bytes of encoded messages or events one page of a streamed answer aims at.
STREAM_PAGE_BYTES: Final = 1 << 20
#: Messages or events an answer holds before it is streamed rather than
#: built whole (a message is at most ``max_message_bytes``, 1 MiB by default).
STREAM_MIN_ITEMS: Final = 8
#: Messages or events of the first page; the next pages follow the sizes seen.
STREAM_FIRST_PAGE: Final = 1
#: Bytes written at once: a page is written in pieces this big, the loop
#: running between them.
STREAM_WRITE_BYTES: Final = 256 << 10
#: The most messages or events one page may hold (tiny ones).
STREAM_MAX_PAGE_ITEMS: Final = 8192

_encode: Final = msgspec.json.Encoder().encode
_MEDIA: Final = "application/json"


class StreamStopped(Exception):
    """A streamed answer could not go on: the transcript changed history (or
    went away) while it was written."""


class _Pager:
    """How many messages or events the next page should read: what the last
    page read and how many bytes it came to, scaled to ``STREAM_PAGE_BYTES``."""

    def __init__(self) -> None:
        self.size = STREAM_FIRST_PAGE

    def written(self, units: int, size: int) -> None:
        if size <= 0:
            self.size = min(STREAM_MAX_PAGE_ITEMS, self.size * 2)
        else:
            per_unit = max(1, size // max(1, units))
            self.size = max(1, min(STREAM_MAX_PAGE_ITEMS, STREAM_PAGE_BYTES // per_unit))


def _split(head: bytes, field: bytes) -> tuple[bytes, bytes]:
    """``head`` (an encoded object whose ``field`` is ``[]``) cut around
    that empty list: what goes before the items and what after."""
    marker = b'"' + field + b'":[]'
    at = head.index(marker) + len(marker) - 1
    return head[:at], head[at:]


def _stopped(transcript_id: str) -> StreamStopped:
    return StreamStopped(f"transcript {transcript_id!r} changed while it was streamed")


async def _joined(
    before: bytes,
    pages: AsyncIterator[tuple[int, Iterable[Any]]],
    pager: _Pager,
    after: bytes | Callable[[], bytes],
) -> AsyncIterator[bytes]:
    """``before``, the items of every page encoded and separated by commas,
    ``after`` (or what it returns once every page was written). ``pages``
    gives how many units (messages or events) it read and the items to
    write; ``pager`` hears how many bytes they came to."""
    yield before
    first = True
    async for units, items in pages:
        encoded = [_encode(item) for item in items]
        size = sum(map(len, encoded))
        pager.written(units, size)
        if not encoded:
            continue
        body = b",".join(encoded)
        del encoded
        if not first:
            yield b","
        first = False
        # In pieces, the loop running between them: a page of a large
        # append is megabytes, and the transport's buffer is shifted down
        # by what each send takes (a memmove of what is left).
        for at in range(0, len(body), STREAM_WRITE_BYTES):
            yield body[at : at + STREAM_WRITE_BYTES]
            await asyncio.sleep(0)
    yield after() if callable(after) else after


async def _range_pages(
    hub: Hub, transcript_id: str, epoch: str, start: int, stop: int, pager: _Pager
) -> AsyncIterator[tuple[int, tuple[Message, ...]]]:
    """Messages ``[start, stop)`` a page at a time, read as ranges
    (``Hub.read_messages``: from memory, older ones from the store)."""
    at = start
    while at < stop:
        try:
            found, _ = await hub.reads.read_messages(
                transcript_id, at, min(stop, at + pager.size), epoch=epoch
            )
        except (StoreError, Refused) as exc:
            raise _stopped(transcript_id) from exc
        messages = found.messages
        if not messages or found.epoch != epoch:
            raise _stopped(transcript_id)
        yield len(messages), messages
        at += len(messages)


async def _event_pages(
    hub: Hub,
    transcript_id: str,
    epoch: str,
    until: int,
    first: list[TranscriptEvent],
    pager: _Pager,
) -> AsyncIterator[tuple[int, list[TranscriptEvent]]]:
    """``first``, then the events after it a page at a time, up to revision
    ``until``. Raises ``StreamStopped`` when the history changed or stops
    short."""
    events: list[TranscriptEvent] | None = first
    while True:
        if not events or any(e.epoch != epoch for e in events):
            raise _stopped(transcript_id)
        kept = [e for e in events if e.revision <= until]
        yield len(kept), kept
        last = events[-1].revision
        if last >= until:
            return
        try:
            events = await hub.reads.events_after(transcript_id, last, limit=pager.size)
        except (StoreError, Refused) as exc:
            raise _stopped(transcript_id) from exc


async def _appended(
    events: AsyncIterator[tuple[int, list[TranscriptEvent]]], stop: int
) -> AsyncIterator[tuple[int, tuple[Message, ...]]]:
    """The messages ``[0, stop)`` that the appends among ``events`` hold, a
    page of events at a time (the units are still events)."""
    async for units, page in events:
        found: list[Message] = []
        reached = False
        for event in page:
            change = event.change
            if isinstance(change, MessagesAppended) and change.start < stop:
                found.extend(change.messages[: stop - change.start])
                reached = change.end >= stop
        yield units, tuple(found)
        if reached:
            return  # the events after hold messages past the range


async def _rendered(
    pages: AsyncIterator[tuple[int, tuple[Message, ...]]],
    render: Callable[[tuple[Message, ...]], Iterable[Any]],
) -> AsyncIterator[tuple[int, Iterable[Any]]]:
    async for units, messages in pages:
        yield units, render(messages)


async def _messages(
    hub: Hub, head: TranscriptSnapshot, start: int, stop: int, pager: _Pager
) -> AsyncIterator[tuple[int, tuple[Message, ...]]]:
    """Messages ``[start, stop)`` of the transcript ``head`` shows, a page at
    a time: through the events from the first message on when they are all
    held, else by ranges."""
    tid = head.transcript_id
    if start == 0 and head.revision > 0:
        first = await hub.reads.events_after(tid, 0, limit=pager.size)
        if first:
            return _appended(_event_pages(hub, tid, head.epoch, head.revision, first, pager), stop)
    return _range_pages(hub, tid, head.epoch, start, stop, pager)


async def snapshot_response(hub: Hub, transcript_id: str, start: int, end: int | None) -> Response:
    """``GET /v1/transcripts/{id}``: the ``TranscriptSnapshot`` of messages
    ``[start, end)``, streamed past ``STREAM_MIN_ITEMS`` messages. Raises
    ``ValueError`` for a range not within the transcript."""
    head = await hub.reads.head(transcript_id)
    stop = head.length if end is None else end
    if not 0 <= start <= stop <= head.length:
        raise ValueError(f"range [{start}, {stop}) is not within [0, {head.length}]")
    if stop - start <= STREAM_MIN_ITEMS:
        return json_response(await hub.reads.snapshot(transcript_id, start, end))
    before, after = _split(_encode(msgspec.structs.replace(head, start=start)), b"messages")
    pager = _Pager()
    pages = await _messages(hub, head, start, stop, pager)
    return StreamingResponse(_joined(before, pages, pager, after), media_type=_MEDIA)


async def chat_response(
    hub: Hub,
    transcript_id: str,
    *,
    active_only: bool,
    render: Callable[[tuple[Message, ...]], list[dict[str, Any]]],
    finish: Callable[[], tuple[list[dict[str, Any]], str | None]] | None = None,
    first: Callable[[TranscriptSnapshot], int] | None = None,
) -> Response:
    """``GET .../chat``: ``{"messages": render(messages)}`` of the active
    segment or of every message, streamed past ``STREAM_MIN_ITEMS``
    messages, with ``X-Transcript-Revision``. ``render`` works a page of
    messages at a time (a page's messages become that page's items);
    ``finish``, when given, returns the last items and a ``system`` string
    (Anthropic's), known once every page was rendered. ``first``, when
    given, says where the messages start instead (a window of the head)."""
    head = await hub.reads.head(transcript_id)
    start = (head.active_start if active_only else 0) if first is None else first(head)
    if head.length - start <= STREAM_MIN_ITEMS:
        snapshot = await hub.reads.snapshot(transcript_id, start, head.length)
        items = render(snapshot.messages)
        system: str | None = None
        if finish is not None:
            last, system = finish()
            items += last
        body = api.ChatBody(messages=items, system=msgspec.UNSET if system is None else system)
        response = json_response(body)
        response.headers["x-transcript-revision"] = str(snapshot.revision)
        return response
    pager = _Pager()
    pages = _rendered(await _messages(hub, head, start, head.length, pager), render)
    ending: list[str | None] = [None]

    async def then_finish() -> AsyncIterator[tuple[int, Iterable[Any]]]:
        async for page in pages:
            yield page
        if finish is not None:
            last, ending[0] = finish()
            yield 0, last

    def after() -> bytes:
        system = ending[0]
        return b"]}" if system is None else b'],"system":' + _encode(system) + b"}"

    return StreamingResponse(
        _joined(b'{"messages":[', then_finish(), pager, after),
        media_type=_MEDIA,
        headers={"x-transcript-revision": str(head.revision)},
    )


async def events_response(hub: Hub, transcript_id: str, after: int) -> Response | None:
    """``GET .../events?after=``: ``{"transcriptId", "events"}`` of the
    events after ``after`` up to the revision now, streamed past
    ``STREAM_MIN_ITEMS`` events; ``None`` when they are no longer held
    (the caller answers ``gone``)."""
    head = await hub.reads.head(transcript_id)
    if after > head.revision:
        return None
    if head.revision - after <= STREAM_MIN_ITEMS:
        events = await hub.reads.events_after(transcript_id, after)
        if events is None:
            return None
        return json_response(api.EventsBody(transcript_id=transcript_id, events=events))
    pager = _Pager()
    first = await hub.reads.events_after(transcript_id, after, limit=pager.size)
    if first is None:
        return None
    body = api.EventsBody(transcript_id=transcript_id, events=[])
    before, end = _split(_encode(body), b"events")
    pages = _event_pages(hub, transcript_id, head.epoch, head.revision, first, pager)
    return StreamingResponse(_joined(before, pages, pager, end), media_type=_MEDIA)
