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

Every draft of a transcript is a read-only text stream of its own:
``/v1/stream/transcripts/{id}/drafts/{draftId}``, ``text/plain;
charset=utf-8``, whose bytes are the draft's text (UTF-8) as it grows and
whose offsets are byte positions in it (``<epoch number>_<bytes>``). It is
closed when the draft is committed, cancelled or expires, and also when a
``text`` update rewrites what it holds instead of extending it (a stream is
append-only): then at the bytes the old and the new text share
(``server.live.drafts.OpenDraft.stream_closed``). Long-poll and SSE readers wake on
the draft's next update or close (``Hub.wait_draft``).

Why one module of over 600 lines: a transcript's events and its drafts are
one read-only face, read under the same offsets (the epoch number and a
position), rights (``_read_only``), refusals and long-poll and SSE rules; the
protocol's names are in ``server.streams.headers``, the SSE machinery in
``server.streams.sse`` and the shared long-poll answers in
``server.streams.longpoll``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Scope

from protocol.limits import ID_PATTERN
from protocol.types import TranscriptEvent
from server.errors import Refused, failure_for
from server.live.hub import Hub
from server.live.live_transcript import LiveTranscript
from server.streams.fanout import Fanout, Follower
from server.streams.headers import (
    CLOSED,
    CURSOR,
    NEXT_OFFSET,
    SECURITY,
    TRANSCRIPTS,
    UP_TO_DATE,
    StreamSettings,
    response_cursor,
)
from server.streams.http import (
    Prepared,
    long_poll_query,
    preflight_answer,
    problem_of,
    read_params,
    refusal_answer,
    stream_answer,
)
from server.streams.longpoll import Answer, Parked, Reply, SharedAnswers, Wait
from server.streams.model import StreamError, valid_offset
from server.streams.registry import StreamRegistry
from server.streams.sse import SSE_HEADERS, Body, FollowedSse, control_event, sse_data

__all__ = [
    "PAGES",
    "ROUTE",
    "WAITING",
    "fast_long_poll",
    "hand_back_parked",
    "long_poll",
    "ready_long_poll",
    "routes",
]

_ID: Final = re.compile(ID_PATTERN)
#: Events per answer at most (a catch-up read pages through a long history).
PAGE_EVENTS: Final = 1000
#: Bytes of events per answer (a GET's body, an SSE data event) at most,
#: past the first event: what one reader holds, whatever the events' size.
PAGE_BYTES: Final = 1 << 20
#: Events read first for a page; the next reads follow the sizes seen.
FIRST_READ: Final = 16
_ENCODER: Final = msgspec.json.Encoder()


@functools.lru_cache(maxsize=4096)
def epoch_number(epoch: str) -> int:
    """The epoch as 16 decimal digits, the same on every replica."""
    digits = "".join(str(int(c, 16) % 10) for c in epoch if c in "0123456789abcdefABCDEF")
    return int((digits or "0")[:16])


def offset_of(epoch: str, revision: int) -> str:
    return f"{epoch_number(epoch):016d}_{revision:016d}"


@functools.lru_cache(maxsize=1024)  # (every reader at one place sends the same offset)
def _revision(offset: str, epoch: str) -> int:
    """The revision an offset names; ``StreamError`` 400 if it is no offset,
    410 if it belongs to another incarnation of the transcript."""
    if not valid_offset(offset):  # ASCII digits, 16 and 16 (``int()`` takes others)
        raise StreamError(400, "Invalid offset format")
    number, _, revision = offset.partition("_")
    if int(number) != epoch_number(epoch):
        raise StreamError(410, "the transcript was created again since this offset")
    return int(revision)


def _hub(request: Request) -> Hub:
    hub: Hub = request.app.state.hub
    return hub


async def endpoint(request: Request) -> Response:
    transcript_id = request.path_params["transcript_id"]
    return await _read_only(
        request,
        {"transcript": transcript_id},
        "a transcript is read-only here: append with POST /v1/transcripts/{id}/messages",
        lambda: _read(request, transcript_id),
    )


async def _read_only(
    request: Request,
    ids: dict[str, str],
    read_only: str,
    read: Callable[[], Awaitable[Response]],
) -> Response:
    """A read-only resource's answer: 400 unless each of ``ids`` (what it
    names: the id) is an id, a CORS preflight for OPTIONS, ``read()`` for
    GET and HEAD, 405 (``read_only`` says why) for anything else; a
    ``StreamError`` or an error of the transcript API as its problem."""
    try:
        for what, value in ids.items():
            if not _ID.fullmatch(value):
                raise StreamError(400, f"not a {what} id")
        if request.method == "OPTIONS":
            return preflight_answer(request)
        if request.method not in ("GET", "HEAD"):
            return refusal_answer(StreamError(405, read_only, {"allow": "GET, HEAD, OPTIONS"}))
        return await read()
    except Exception as exc:
        refusal = _refusal(exc)
        if refusal is None:
            raise
        return refusal


def _refusal(exc: Exception) -> Response | None:
    """A ``StreamError``, or an error of the transcript API, as its problem
    document; ``None`` for anything else."""
    if isinstance(exc, StreamError):
        return refusal_answer(exc)
    if failure_for(exc) is None:
        return None
    return problem_of(exc)


async def _read(request: Request, transcript_id: str) -> Response:
    hub = _hub(request)
    settings: StreamSettings = request.app.state.stream_settings
    if request.method == "HEAD":
        epoch, revision = await _where(hub, transcript_id)
        headers = {
            NEXT_OFFSET: offset_of(epoch, revision),
            "content-type": "application/json",
            "cache-control": "no-store",
        }
        return stream_answer(200, headers)
    given, live, cursor = read_params(request)
    if live == "long-poll":
        assert given is not None  # (read_params)
        reply = await long_poll(hub, settings, transcript_id, given, cursor)
        etag = reply.answer.etag
        if etag is not None and request.headers.get("if-none-match") == etag:
            return stream_answer(304, {"etag": etag})
        return Prepared(reply)
    epoch, revision = await _where(hub, transcript_id)
    offset = "-1" if given is None else given
    after = _after(offset, epoch, revision)
    if live == "sse":
        return _sse(request, hub, settings, transcript_id, epoch, after, cursor)
    if offset == "now":
        headers = {
            NEXT_OFFSET: offset_of(epoch, revision),
            UP_TO_DATE: "true",
            "cache-control": "no-store",
        }
        return stream_answer(200, headers, b"[]", "application/json")
    page = await _shared_page(hub, transcript_id, epoch, after)
    headers = {NEXT_OFFSET: offset_of(epoch, page.end), "content-type": "application/json"}
    if page.up_to_date:
        headers[UP_TO_DATE] = "true"
    headers["cache-control"] = "private, max-age=60, stale-while-revalidate=300"
    etag = page.etag
    assert etag is not None
    headers["etag"] = etag
    if request.headers.get("if-none-match") == etag:
        return stream_answer(304, {"etag": etag})
    return stream_answer(200, headers, page.body, "application/json")


async def _where(hub: Hub, transcript_id: str) -> tuple[str, int]:
    """The transcript's epoch and revision now (``TranscriptNotFound``)."""
    transcript = (await hub.load(transcript_id)).transcript
    return transcript.epoch, transcript.revision


def _after(offset: str, epoch: str, revision: int) -> int:
    """The revision a read from ``offset`` starts after (``StreamError``
    400 or 410 for an offset that is none, or not of this transcript)."""
    after = 0 if offset == "-1" else revision if offset == "now" else _revision(offset, epoch)
    if after > revision:
        raise StreamError(400, "an offset past the transcript's end")
    return after


async def long_poll(
    hub: Hub, settings: StreamSettings, transcript_id: str, offset: str, cursor: str | None
) -> Reply:
    """A long-poll read of the transcript from ``offset``: the page after
    it, waiting up to ``long_poll_s`` for the next change when there is
    none. Every reader of the same page (the readers one change wakes)
    gets the same answer, encoded once (``_Page``), but for its cursor;
    the 204 of a wait that saw nothing likewise."""
    epoch, revision = await _where(hub, transcript_id)
    after = _after(offset, epoch, revision)
    page = await _shared_page(hub, transcript_id, epoch, after)
    if not page.count:
        await hub.reads.wait_change(transcript_id, after, settings.long_poll_s)
        page = await _shared_page(hub, transcript_id, epoch, after)
        if not page.count:
            return Reply(_nothing(transcript_id, epoch, after), response_cursor(cursor))
    return Reply(page, response_cursor(cursor))


def _nothing(transcript_id: str, epoch: str, after: int) -> Answer:
    """The 204 of a wait from ``after`` that saw nothing, encoded once."""
    key = (transcript_id, epoch, after)
    nothing = NOTHING.get(key, None)
    if nothing is None:
        headers = {**SECURITY, NEXT_OFFSET: offset_of(epoch, after), UP_TO_DATE: "true"}
        nothing = NOTHING.put(key, Answer(204, headers, b""))
    return nothing


async def fast_long_poll(state: Any, scope: Scope) -> Reply | Response | None:
    """A long-poll read of a transcript for ``server.streams.longpoll.FastPath``
    (its rights checked): ``None``, before anything waited, when it is not
    one this answers as the endpoint would (then the app answers it)."""
    transcript_id: str = scope["path"][len(TRANSCRIPTS) :]
    if not _ID.fullmatch(transcript_id):
        return None
    query = long_poll_query(scope["query_string"])
    if query is None or query.offset is None:
        return None
    try:
        return await long_poll(
            state.hub, state.stream_settings, transcript_id, query.offset, query.cursor
        )
    except Exception as exc:
        refusal = _refusal(exc)
        if refusal is None:
            raise
        return refusal


def ready_long_poll(state: Any, scope: Scope) -> Reply | Wait | None:
    """The answer ``fast_long_poll`` would give at once, when it is built
    already (``PAGES``: another reader of the same offset asked first) and
    nothing needs loading or refusing; a ``Wait`` when the read is at the
    transcript's end (it waits, parked with the others there: ``_Waiting``);
    else ``None`` (the request goes the async way). Nothing is changed but
    the transcript's place among those held (as a read touches it):
    ``FastPath.answer_now`` answers from the HTTP protocol itself, with no
    task per request."""
    if state.lifecycle.draining:
        return None  # (a task each: the server's shutdown waits for them, then cancels them)
    transcript_id: str = scope["path"][len(TRANSCRIPTS) :]
    query = long_poll_query(scope["query_string"])
    if query is None or query.offset is None:
        return None
    live = state.hub.held(transcript_id)  # (only a valid id is ever held)
    if live is None:
        return None
    transcript = live.transcript
    epoch, revision = transcript.epoch, transcript.revision
    try:
        after = _after(query.offset, epoch, revision)
    except StreamError:
        return None  # (the async way answers the refusal)
    if after >= revision:
        return Wait(functools.partial(_park, state, (transcript_id, epoch, after)), query.cursor)
    key = (transcript_id, epoch, after, revision)
    page = PAGES.get(key, None)
    if not isinstance(page, _Page) or page.epoch != epoch:
        # The first reader of this page builds it (as ``_shared_page``
        # does), when the transcript's window holds it.
        found = _page_now(state.hub, live, after)
        if found is None:
            return None
        items, end = found
        page = _Page(transcript_id, epoch, after, items, end, revision)
        PAGES.put(key, page)
    if not page.count:
        return None
    return Reply(page, response_cursor(query.cursor))


#: The long-poll reads parked at a transcript's end, by transcript, epoch
#: and revision (``ready_long_poll``).
WAITING: Final[dict[tuple[str, str, int], _Waiting]] = {}


def hand_back_parked() -> None:
    """Every parked read to the app (at shutdown, once the app drains: each
    gets a task, which the server's graceful shutdown waits for and then
    cancels, as any request's)."""
    for waiting in list(WAITING.values()):
        waiting.hand_back()


def _park(state: Any, key: tuple[str, str, int], parked: Parked) -> None:
    waiting = WAITING.get(key)
    if waiting is None:
        waiting = WAITING[key] = _Waiting(state.hub, key)
    waiting.join(parked, state.stream_settings.long_poll_s)


class _Waiting:
    """The long-poll reads parked at one transcript's end, with one task
    waiting for them all (not a task and a wait per reader): when the
    transcript moves on, every one of them gets the page after (built once)
    in one pass; a read whose ``long_poll_s`` ran out first gets the 204, as
    ``long_poll`` answers. Anything else (the transcript deleted, its
    events no longer held) hands every read back to the app, whose
    ``long_poll`` answers it."""

    __slots__ = ("hub", "key", "parked", "task")

    def __init__(self, hub: Hub, key: tuple[str, str, int]) -> None:
        self.hub = hub
        self.key = key
        #: In the order they came: the order of their deadlines.
        self.parked: list[Parked] = []
        self.task: asyncio.Task[None] | None = None

    def join(self, parked: Parked, wait_s: float) -> None:
        loop = asyncio.get_running_loop()
        parked.deadline = loop.time() + wait_s
        self.parked.append(parked)
        if self.task is None:
            self.task = loop.create_task(self._wait())

    def _leave(self) -> None:
        if WAITING.get(self.key) is self:
            del WAITING[self.key]

    def hand_back(self) -> None:
        self._leave()
        parked = list(self.parked)
        self.parked.clear()
        if self.task is not None:
            self.task.cancel()
        for each in parked:
            each.hand_back()

    async def _wait(self) -> None:
        hub, (transcript_id, epoch, after) = self.hub, self.key
        parked = self.parked
        loop = asyncio.get_running_loop()
        try:
            while parked:
                left = parked[0].deadline - loop.time()
                changed = left > 0 and await hub.reads.wait_change(transcript_id, after, left)
                page = await _shared_page(hub, transcript_id, epoch, after)
                if page.count:
                    self._leave()
                    for each in parked:
                        each.answer(Reply(page, response_cursor(each.cursor)))
                    parked.clear()
                    return
                # A change with nothing to read (as ``long_poll`` answers it):
                # a 204 for all; else for those whose wait ran out.
                due = len(parked) if changed else 0
                now = loop.time() + _DEADLINE_SLACK_S
                while due < len(parked) and parked[due].deadline <= now:
                    due += 1
                if due:
                    nothing = _nothing(transcript_id, epoch, after)
                    for each in parked[:due]:
                        each.answer(Reply(nothing, response_cursor(each.cursor)))
                    del parked[:due]
        except Exception:
            self._leave()
            for each in parked:
                each.hand_back()
            parked.clear()
        finally:
            self._leave()


#: A parked read whose wait ends this soon is answered with the others
#: (the loop's timers may fire a clock tick early).
_DEADLINE_SLACK_S: Final = 0.001


async def _events(hub: Hub, transcript_id: str, after: int, limit: int) -> list[TranscriptEvent]:
    events = await hub.reads.events_after(transcript_id, after, limit=limit)
    if events is None:
        raise StreamError(410, "these events are no longer held: read GET /v1/transcripts/{id}")
    return events


class _PageItems:
    """The events after revision ``after``, each encoded, up to
    ``PAGE_BYTES`` (past the first) and ``PAGE_EVENTS``, and the revision
    of the last (``end``), as they are read: a few at a time first, then as
    many as the sizes seen say fit (``want``), so that a page of large
    events never reads a thousand of them."""

    __slots__ = ("end", "items", "size", "want")

    def __init__(self, after: int) -> None:
        self.items: list[bytes] = []
        self.size = 0
        self.end = after
        self.want = min(FIRST_READ, PAGE_EVENTS)

    def add(self, events: list[TranscriptEvent]) -> bool:
        """Take the events read (``want`` asked for); whether the page is
        complete (else read ``want`` more after ``end``)."""
        items = self.items
        for event in events:
            item = _ENCODER.encode(event)
            if items and self.size + len(item) > PAGE_BYTES:
                return True
            items.append(item)
            self.size += len(item)
            self.end = event.revision
        if len(events) < self.want or len(items) >= PAGE_EVENTS:
            return True
        want = max(1, (PAGE_BYTES - self.size) // max(1, self.size // len(items)) + 1)
        self.want = min(want, PAGE_EVENTS - len(items))
        return False


async def _page(hub: Hub, transcript_id: str, after: int) -> tuple[list[bytes], int]:
    """``_PageItems`` read through the hub (its window, else the store)."""
    page = _PageItems(after)
    while not page.add(await _events(hub, transcript_id, page.end, page.want)):
        pass
    return page.items, page.end


def _page_now(hub: Hub, live: LiveTranscript, after: int) -> tuple[list[bytes], int] | None:
    """``_page``, when the transcript's window in memory holds it all (no
    read waits); else ``None``."""
    page = _PageItems(after)
    while True:
        events = hub.reads.events_held(live, page.end, page.want)
        if events is None:
            return None
        if page.add(events):
            return page.items, page.end


class _Page(Answer):
    """A page of a transcript's events, encoded once for every reader that
    reads the same (``_shared_page``): the JSON array (``body``) and, as an
    ``Answer``, the long-poll answer of it but for the cursor; the SSE data
    event made of it when an SSE reader asks."""

    __slots__ = ("_event", "count", "end", "epoch", "offset", "up_to_date")

    def __init__(
        self, transcript_id: str, epoch: str, after: int, items: list[bytes], end: int, current: int
    ) -> None:
        self.count = len(items)
        self.end = end
        self.epoch = epoch
        #: The offset after it (``Stream-Next-Offset``).
        self.offset = offset_of(epoch, end)
        #: Whether it reaches the revision the transcript had when it was read.
        self.up_to_date = end >= current
        headers = {**SECURITY, NEXT_OFFSET: self.offset}
        headers["content-type"] = "application/json"
        if self.up_to_date:
            headers[UP_TO_DATE] = "true"
        headers["etag"] = f'"{transcript_id}:{epoch}:{after}:{end}"'
        super().__init__(200, headers, _array(items))
        self._event: bytes | None = None

    def sse_event(self) -> bytes:
        if self._event is None:
            self._event = b"event: data\n" + sse_data(self.body.decode())
        return self._event


#: Pages read lately, by transcript, epoch, start and the transcript's
#: revision when read (a page of those is the same for every reader: the
#: readers one change wakes all ask for it at once); ``built`` and
#: ``shared`` count them (for the tests).
PAGES: Final = SharedAnswers(max_entries=256, max_bytes=8 * 1024 * 1024)
#: The 204s of long-poll reads that waited for nothing, by transcript,
#: epoch and start.
NOTHING: Final = SharedAnswers(max_entries=256)


async def _shared_page(hub: Hub, transcript_id: str, epoch: str, after: int) -> _Page:
    """``_page`` of the events after ``after``, encoded once for every
    reader (long-poll, SSE, the JS client's HTTP fallback) that reads the
    same while the transcript is at the same revision; a new revision (or
    epoch: the transcript made again) is another page."""
    now, current = await _where(hub, transcript_id)
    key = (transcript_id, now, after, current)
    page = PAGES.get(key, None)
    if isinstance(page, _Page) and page.epoch == epoch:
        return page
    items, end = await _page(hub, transcript_id, after)
    page = _Page(transcript_id, epoch, after, items, end, current)
    if now != epoch:
        PAGES.built += 1
        return page
    PAGES.put(key, page)
    return page


def _array(items: list[bytes]) -> bytes:
    """The JSON array of encoded items (what the encoder makes of their list)."""
    return b"[" + b",".join(items) + b"]"


class _Followed:
    """A transcript its SSE readers follow, in the generic streams' fan-out
    (``server.streams.fanout``: each page of events written raw to every
    reader in one step, its data event encoded once): ``path`` (under
    ``TRANSCRIPTS``, which no generic stream has), the epoch read, and the
    offset of the revision the transcript was at when the last page was
    read (``tail``: a control event there says ``upToDate``). One task per
    transcript waits for its changes (``_watch``), not one per reader."""

    __slots__ = ("closed", "epoch", "path", "tail", "task", "transcript_id")

    def __init__(self, transcript_id: str, epoch: str, revision: int) -> None:
        self.transcript_id = transcript_id
        self.path = TRANSCRIPTS + transcript_id
        self.epoch = epoch
        self.tail = offset_of(epoch, revision)
        #: A transcript is never closed.
        self.closed = False
        self.task: asyncio.Task[None] | None = None


#: The transcripts followed, by fan-out (one per server) and path.
_FOLLOWED: weakref.WeakKeyDictionary[Fanout, dict[str, _Followed]] = weakref.WeakKeyDictionary()


def _data_event(source: _Followed, page: _Page) -> bytes:
    return page.sse_event()


def _control(offset: str, cursor: str | None, up_to_date: bool) -> bytes:
    control: dict[str, object] = {
        "streamNextOffset": offset,
        "streamCursor": response_cursor(cursor),
    }
    if up_to_date:
        control["upToDate"] = True
    return control_event(json.dumps(control, separators=(",", ":")))


def _control_event(source: _Followed, offset: str, cursor: str | None) -> bytes:
    return _control(offset, cursor, offset == source.tail)


def _at(offset: str) -> int:
    """The revision of one of this face's own offsets."""
    return int(offset.partition("_")[2])


async def _watch(hub: Hub, settings: StreamSettings, fanout: Fanout, source: _Followed) -> None:
    """Deliver every change of ``source``'s transcript to its readers while
    it has any: each page once, to every reader at the revision it starts
    after (``Fanout.deliver``; the others are woken and read what they
    missed themselves). Ends with the last reader, or when the transcript
    is gone or made again (its readers are woken: they end)."""
    path, transcript_id, epoch = source.path, source.transcript_id, source.epoch
    revision = _at(source.tail)
    try:
        while fanout.follows(path):
            await hub.reads.wait_change(transcript_id, revision, settings.long_poll_s)
            now, current = await _where(hub, transcript_id)
            if now != epoch:
                fanout.wake(path)
                return
            while revision < current and fanout.follows(path):
                page = await _shared_page(hub, transcript_id, epoch, revision)
                if not page.count:
                    break
                source.tail = offset_of(epoch, max(current, page.end))
                fanout.deliver(source, page, offset_of(epoch, revision))
                revision = page.end
    except (StreamError, Refused):
        fanout.wake(path)  # deleted or no longer held: the readers end, and are told
    finally:
        followed = _FOLLOWED.get(fanout, {})
        if followed.get(path) is source:
            del followed[path]


class _TranscriptSse(FollowedSse):
    """A transcript read with ``live=sse``: the pages after ``after`` (each
    sent once the reader took the one before), then each change as the
    fan-out writes it."""

    def __init__(
        self,
        hub: Hub,
        fanout: Fanout,
        settings: StreamSettings,
        transcript_id: str,
        epoch: str,
        after: int,
        cursor: str | None,
    ) -> None:
        super().__init__(fanout, TRANSCRIPTS + transcript_id, settings, dict(SSE_HEADERS))
        self.hub = hub
        self.transcript_id = transcript_id
        self.epoch = epoch
        self.after = after
        self.cursor = cursor

    def follower(self, raw: Any) -> Follower[_Followed, _Page]:
        offset = offset_of(self.epoch, self.after)
        return Follower(raw, self.cursor, _data_event, _control_event, offset)

    async def follow(self, body: Body, follower: Follower[Any, Any]) -> None:
        hub, transcript_id, epoch, cursor = self.hub, self.transcript_id, self.epoch, self.cursor
        revision = self.after
        try:
            while True:
                # One page (``PAGE_BYTES``) at a time: the next is read once
                # the reader took this one (``body`` waits for it). A data
                # event and its control leave in one write.
                page = await _shared_page(hub, transcript_id, epoch, revision)
                revision = page.end
                data = page.sse_event() if page.count else b""
                await body(data + _control(page.offset, cursor, page.up_to_date))
                if page.up_to_date:
                    break
            follower.offset = offset_of(epoch, revision)
            self._follow(follower, revision)
            while True:
                timed_out = await self.woken(follower)
                if timed_out is None:
                    return
                # What the fan-out did not bring (it started after this
                # reader's revision, or woke it for another reason): a page
                # at a time, queued behind what is queued.
                now, current = await _where(hub, transcript_id)
                if now != epoch:
                    return
                offset = follower.offset
                if _at(offset) < current:
                    page = await _shared_page(hub, transcript_id, epoch, _at(offset))
                    if page.count and follower.offset == offset:  # not delivered meanwhile
                        follower.offset = page.offset
                        events = [page.sse_event(), _control(page.offset, cursor, page.up_to_date)]
                        self.fanout.queue(self.path, follower, events)
                        if not page.up_to_date:
                            follower.wake.set()
                if not await self.send_queued(body, follower):
                    return
                if timed_out and not follower.pending:
                    if time.monotonic() >= self.deadline:
                        return
                    offset = follower.offset
                    await body(_control(offset, cursor, _at(offset) >= current))
        except (StreamError, Refused):
            return  # deleted or no longer held: the reader reconnects and is told

    def _follow(self, follower: Follower[Any, Any], revision: int) -> None:
        """Join the transcript's readers (its watching task started with the first)."""
        fanout = self.fanout
        fanout.follow(self.path, follower)
        followed = _FOLLOWED.setdefault(fanout, {})
        source = followed.get(self.path)
        if source is None or source.epoch != self.epoch:
            source = followed[self.path] = _Followed(self.transcript_id, self.epoch, revision)
            source.task = asyncio.create_task(_watch(self.hub, self.settings, fanout, source))
        follower.wake.set()  # a look at what it may have missed meanwhile

    def released(self) -> None:
        """The last reader gone: its transcript's watching task ends now, not
        when its wait for a change times out (``long_poll_s`` later). Taken out
        of ``_FOLLOWED`` at once, so that a reader joining next starts a new one."""
        fanout = self.fanout
        if fanout.follows(self.path):
            return
        source = _FOLLOWED.get(fanout, {}).pop(self.path, None)
        if source is not None and source.task is not None:
            source.task.cancel()


def _sse(
    request: Request,
    hub: Hub,
    settings: StreamSettings,
    transcript_id: str,
    epoch: str,
    after: int,
    cursor: str | None,
) -> Response:
    registry: StreamRegistry = request.app.state.streams
    return _TranscriptSse(hub, registry.fanout, settings, transcript_id, epoch, after, cursor)


# --- drafts ------------------------------------------------------------------------

TEXT: Final = "text/plain; charset=utf-8"


async def draft_endpoint(request: Request) -> Response:
    transcript_id = request.path_params["transcript_id"]
    draft_id = request.path_params["draft_id"]
    return await _read_only(
        request,
        {"transcript": transcript_id, "draft": draft_id},
        "a draft is read-only here: write it with the WebSocket protocol's draft op",
        lambda: _read_draft(request, transcript_id, draft_id),
    )


async def _draft(
    hub: Hub, transcript_id: str, draft_id: str, start: int
) -> tuple[bytes, int, bool]:
    found = await hub.reads.draft_stream(transcript_id, draft_id, start)
    if found is None:
        raise StreamError(404, "no such draft: never opened, or closed more than draft_ttl_s ago")
    return found


#: A start past any draft's end: reads its end and no byte.
_END: Final = 1 << 62


async def _read_draft(request: Request, transcript_id: str, draft_id: str) -> Response:
    hub = _hub(request)
    settings: StreamSettings = request.app.state.stream_settings
    epoch = (await hub.reads.head(transcript_id)).epoch
    if request.method == "HEAD":
        _, end, closed = await _draft(hub, transcript_id, draft_id, _END)
        headers = {NEXT_OFFSET: offset_of(epoch, end), "content-type": TEXT}
        headers["cache-control"] = "no-store"
        if closed:
            headers[CLOSED] = "true"
        return stream_answer(200, headers)
    given, live, cursor = read_params(request)
    offset = "-1" if given is None else given
    # An offset is a byte of the text: ``_revision``'s format and rules.
    start = 0 if offset == "-1" else _END if offset == "now" else _revision(offset, epoch)
    data, end, closed = await _draft(hub, transcript_id, draft_id, start)
    if offset == "now":
        start = end
    if start > end:
        if not closed:
            raise StreamError(400, "an offset past the draft's end")
        start = end  # its text was rewritten past this reader: it ends here
    if live == "sse":
        return _draft_sse(hub, settings, transcript_id, draft_id, epoch, start, cursor)
    if live == "long-poll" and not data:
        if closed:
            headers = {NEXT_OFFSET: offset_of(epoch, end), UP_TO_DATE: "true", CLOSED: "true"}
            return stream_answer(204, headers)
        await hub.reads.wait_draft(transcript_id, draft_id, end, settings.long_poll_s)
        data, end, closed = await _draft(hub, transcript_id, draft_id, start)
        if start > end:  # rewritten meanwhile: it closed before this reader
            start = end
        if not data and not closed:
            headers = {
                NEXT_OFFSET: offset_of(epoch, start),
                UP_TO_DATE: "true",
                CURSOR: response_cursor(cursor),
            }
            return stream_answer(204, headers)
    headers = {NEXT_OFFSET: offset_of(epoch, end), UP_TO_DATE: "true", "content-type": TEXT}
    # Every answer reaches the text's end, which grows: nothing to cache.
    headers["cache-control"] = "no-store"
    if live == "long-poll":
        headers[CURSOR] = response_cursor(cursor)
    if closed:
        headers[CLOSED] = "true"
    return stream_answer(200, headers, data, TEXT)


def _draft_sse(
    hub: Hub,
    settings: StreamSettings,
    transcript_id: str,
    draft_id: str,
    epoch: str,
    start: int,
    cursor: str | None,
) -> Response:
    async def events() -> AsyncIterator[bytes]:
        position = start
        deadline = time.monotonic() + settings.sse_max_s
        while True:
            try:
                data, end, closed = await _draft(hub, transcript_id, draft_id, position)
            except (StreamError, Refused):
                return  # forgotten or deleted: the reader reconnects and is told
            position = min(position, end)
            out = b""
            if data:
                position = end
                text = data.decode("utf-8", errors="replace")
                out = b"event: data\n" + _text_data(text)
            control: dict[str, object] = {"streamNextOffset": offset_of(epoch, position)}
            if closed:
                control["streamClosed"] = True
            else:
                control["streamCursor"] = response_cursor(cursor)
            control["upToDate"] = True
            # A data event and its control leave in one write.
            yield out + control_event(json.dumps(control, separators=(",", ":")))
            if closed:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            await hub.reads.wait_draft(
                transcript_id, draft_id, position, min(remaining, settings.long_poll_s)
            )

    return StreamingResponse(events(), headers=SSE_HEADERS)


def _text_data(text: str) -> bytes:
    """``sse_data`` for a draft's text: each line after ``data: ``, since a
    reader drops one space after the colon (a token's own leading space
    stays). ``sse_data`` writes ``data:`` with none, as the conformance
    suite demands of every other stream."""
    lines = re.split(r"\r\n|\r|\n", text)
    return ("\n".join(f"data: {line}" for line in lines) + "\n\n").encode()


_METHODS: Final = ["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"]
#: The route's template (what the request log and metrics name).
ROUTE: Final = "/v1/stream/transcripts/{transcript_id}"

routes: Final = [
    Route(ROUTE, endpoint, methods=_METHODS),
    Route(
        "/v1/stream/transcripts/{transcript_id}/drafts/{draft_id}",
        draft_endpoint,
        methods=_METHODS,
    ),
]
