"""Reads that join what a live copy holds with what the store holds.

A live transcript holds only its newest messages (``live_messages``); a
snapshot, a range of messages or a usage query that starts earlier reads the
older part from the store (an ``await``: messages never change, so it may be
read at any time) and joins it with what memory holds in one synchronous
step. When the store turns out to hold another history (the transcript was
deleted, or deleted and created again), the copy is reloaded and the read
measures again on the current one. Also here: the events after a revision
(window or store), Views and usage, and the waits of long-poll readers.

Given the hub as its ``Registry`` port (``server.live.ports``) by the hub.
"""

from __future__ import annotations

import asyncio
import contextlib

from protocol import codes
from protocol.state import TranscriptState
from protocol.types import Message, TranscriptEvent, TranscriptSnapshot, View
from protocol.usage import MessageUsage, message_usage, named_ranges, sized_usage
from protocol.views import Window, window_start
from server.errors import EpochChanged, Refused
from server.live.live_transcript import LiveTranscript
from server.live.ports import Registry
from server.live.usage_sizes import MessageSizes
from server.store.base import StoredRange, StoreError, TranscriptNotFound

__all__ = ["READ_ATTEMPTS", "USAGE_MEASURE_MESSAGES", "Reads", "Stale", "start_of"]

#: Reads of older messages one baseline or range may need: each retry means
#: the transcript let more messages go while the store answered.
READ_ATTEMPTS = 5
#: Messages whose sizes a usage query measures at once (a few milliseconds),
#: the loop running between chunks (``Reads.usage``).
USAGE_MEASURE_MESSAGES = 5000


def start_of(window: Window | None, state: TranscriptState) -> int:
    """Where a baseline of ``window`` starts in ``state`` now."""
    return window_start(
        window, length=state.length, active_start=state.active_start, views=state.views
    )


class Stale(Exception):
    """The store holds another history than this live copy (it was deleted,
    or deleted and created again): reload before going on."""


class Reads:
    """The hub's reads (``hub.reads``)."""

    def __init__(self, hub: Registry) -> None:
        self.hub = hub
        #: The encoded sizes of messages, kept between usage queries.
        self.sizes = MessageSizes()

    async def snapshot(
        self,
        transcript_id: str,
        start: int = 0,
        end: int | None = None,
        *,
        window: Window | None = None,
    ) -> TranscriptSnapshot:
        """The transcript now with messages ``[start, end)`` (default all), or
        from where ``window`` starts, read from memory and, for what it no
        longer holds, the store. ``ValueError`` unless ``0 <= start <= end
        <= length``; ``InvalidView`` for a window naming no View."""
        live = await self.hub.load(transcript_id)
        while True:
            state = live.transcript.state
            if window is not None:
                start = start_of(window, state)
            length = live.transcript.length
            stop = length if end is None else end
            if not 0 <= start <= stop <= length:
                raise ValueError(f"range [{start}, {stop}) is not within [0, {length}]")
            current, messages = await self.messages(live, start, stop)
            if current is live:
                return live.transcript.state.snapshot_of(start, messages)
            live = current  # reloaded: another history, measure again

    async def head(self, transcript_id: str) -> TranscriptSnapshot:
        """The transcript now without its messages (revision, segments, Views,
        length): what a streamed read starts with (``server.web.http_reads``)."""
        live = await self.hub.load(transcript_id)
        state = live.transcript.state
        return state.snapshot_of(state.length, ())

    async def read_messages(
        self, transcript_id: str, start: int, end: int, *, epoch: str | None = None
    ) -> tuple[StoredRange, int]:
        """Messages ``[start, end)`` (clamped to the length) as a
        ``StoredRange`` of the current revision, and that revision. Raises
        ``EpochChanged`` when ``epoch`` is given and is not the transcript's."""
        live = await self.hub.load(transcript_id)
        while True:
            transcript = live.transcript
            if epoch is not None and epoch != transcript.epoch:
                raise EpochChanged(transcript_id, epoch, transcript.epoch)
            length = transcript.length
            first, last = min(start, length), min(end, length)
            current, messages = await self.messages(live, first, last)
            if current is live:
                break
            live = current  # reloaded: another history, look again
        transcript = live.transcript
        found = StoredRange(
            transcript.epoch, transcript.revision, transcript.length, first, messages
        )
        return found, transcript.revision

    async def messages(
        self, live: LiveTranscript, start: int, end: int
    ) -> tuple[LiveTranscript, tuple[Message, ...]]:
        """Messages ``[start, end)`` (``end`` at most the length): what the
        live copy holds from memory, the older part from the store, and
        ``live``. When the store holds another history, ``live`` is reloaded
        and the current copy is returned with no messages: the caller, which
        measured the range on ``live``, measures again."""
        for _ in range(READ_ATTEMPTS):
            state = live.transcript.state
            if start >= state.start:
                return live, state.slice(start, end)
            try:
                older = await self.read_older(live, start, min(end, state.start))
            except Stale:
                return await self.refresh(live), ()
            held = live.transcript.state.start
            if older.end >= min(end, held):
                tail = live.transcript.state.slice(held, end) if end > held else ()
                return live, older.messages[: min(end, held) - start] + tail
        raise StoreError(
            f"transcript {live.id!r}: the store did not give messages [{start}, {end})"
        )

    async def read_older(self, live: LiveTranscript, start: int, end: int) -> StoredRange:
        """Messages the live copy no longer holds, from the store; ``Stale``
        when the store holds another history."""
        try:
            older = await self.hub.store.read_messages(live.id, start, end)
        except TranscriptNotFound:
            raise Stale from None
        if older.epoch != live.transcript.epoch or older.end < end:
            raise Stale
        return older

    async def refresh(self, live: LiveTranscript) -> LiveTranscript:
        """The current copy after ``live`` turned out stale: reloaded (its
        subscribers get a new baseline or ``not-found``). Raises
        ``TranscriptNotFound`` when the transcript is gone."""
        if self.hub.is_current(live):
            async with live.lock:
                if self.hub.is_current(live):
                    await self.hub.reload(live)
        return await self.hub.load(live.id)

    async def events_after(
        self, transcript_id: str, revision: int, *, limit: int | None = None
    ) -> list[TranscriptEvent] | None:
        """Events after ``revision`` (at most ``limit``) from the window or the
        store; ``None`` when they are no longer held."""
        live = await self.hub.load(transcript_id)
        current = live.transcript.revision
        if revision > current:
            return None  # a history this server never had: the caller needs a snapshot
        if revision == current:
            return []
        live.deliver_pending()
        start = live.window_start()
        if start is not None and start <= revision + 1:
            found = [item.event for item in live.recent_events if item.revision > revision]
            return found if limit is None else found[:limit]
        return await self.hub.store.events_after(transcript_id, revision, limit=limit)

    def events_held(
        self, live: LiveTranscript, revision: int, limit: int
    ) -> list[TranscriptEvent] | None:
        """``events_after`` of a transcript held in memory (``Hub.held``)
        when its window holds them: no load, no store read, no wait (a read
        answered at once: ``server.streams.transcripts.ready_long_poll``);
        ``None`` when they must be read from the store, or are no longer held."""
        current = live.transcript.revision
        if revision > current:
            return None
        if revision == current:
            return []
        live.deliver_pending()
        start = live.window_start()
        if start is None or start > revision + 1:
            return None
        return [item.event for item in live.recent_events if item.revision > revision][:limit]

    async def wait_change(self, transcript_id: str, revision: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the transcript to move past
        ``revision`` (here or, through the backplane, on another replica);
        whether it did. The copy stays in memory while someone waits."""
        live = await self.hub.load(transcript_id)
        if live.transcript.revision > revision:
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await live.watch()
        return self.hub.is_current(live) and live.transcript.revision > revision

    async def draft_stream(
        self, transcript_id: str, draft_id: str, start: int
    ) -> tuple[bytes, int, bool] | None:
        """A draft's Durable Stream from byte ``start`` (``Drafts.stream``):
        its bytes, its end, whether it is closed; ``None`` when the draft is
        neither open nor closed within ``draft_ttl_s``."""
        live = await self.hub.load(transcript_id)
        return live.drafts.stream(draft_id, start)

    async def wait_draft(self, transcript_id: str, draft_id: str, end: int, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the draft's stream to move past
        ``end`` bytes or close (its next update or close, here or, through
        the backplane, from another replica). The copy stays in memory while
        someone waits."""
        live = await self.hub.load(transcript_id)
        now = live.drafts.stream(draft_id, end)
        if now is None or now[1] != end or now[2]:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await live.watch_draft(draft_id)

    async def views(self, transcript_id: str) -> tuple[int, tuple[View, ...]]:
        """The revision and the Views of a transcript, ordered by name."""
        live = await self.hub.load(transcript_id)
        return live.transcript.revision, live.transcript.views()

    async def usage(
        self,
        transcript_id: str,
        *,
        segments: str | list[int] | None = "all",
        views: list[str] | None = None,
    ) -> tuple[int, MessageUsage]:
        """The revision, and how the chosen segments and Views use the
        messages (``protocol.usage``): from the sizes of the messages, kept
        between queries (``message_sizes``; each index holds a message of its
        own here, so sizes are all it takes), a query then costing its
        ranges' bounds; only the messages never measured are read. Raises
        ``InvalidView``, ``ValueError`` (no such segment, one asked twice),
        ``Refused`` (more than ``max_usage_ranges``)."""
        live = await self.hub.load(transcript_id)
        limit = self.hub.config.max_usage_ranges
        while True:
            state = live.transcript.state
            ranges = named_ranges(state, segments=segments, views=views)
            if len(ranges) > limit:
                raise Refused(
                    codes.INVALID_QUERY,
                    f"{len(ranges)} segments and Views asked, more than max_usage_ranges "
                    f"({limit}): ask for fewer (segments=0,2,...&views=a,b)",
                )
            high = max((r.end for r in ranges), default=0)
            current = await self._measure(live, high)
            if current is live:
                break
            live = current  # reloaded: another history, choose again
        sums = self.sizes.sums(live.id, state.epoch)
        if sums is not None and len(sums) > high:
            return state.revision, sized_usage(ranges, sums)
        # Longer than the sizes kept: measured for this query alone.
        low = min((r.start for r in ranges), default=0)
        current, messages = await self.messages(live, low, high)
        if current is not live:  # reloaded: another history, count again
            return await self.usage(transcript_id, segments=segments, views=views)
        return state.revision, await asyncio.to_thread(message_usage, ranges, messages, low)

    async def _measure(self, live: LiveTranscript, high: int) -> LiveTranscript:
        """Measure the sizes of messages ``[0, high)`` not measured yet, a
        chunk at a time (the loop runs between chunks), into
        ``message_sizes``; the copy the messages came from (another one
        when ``live`` was reloaded: the caller measures again)."""
        sizes = self.sizes
        epoch = live.transcript.epoch
        known = sizes.known(live.id, epoch)
        while known < high:
            stop = min(high, known + USAGE_MEASURE_MESSAGES)
            current, messages = await self.messages(live, known, stop)
            if current is not live:
                return current
            sizes.extend(live.id, epoch, known, messages)
            now = sizes.known(live.id, epoch)
            if now <= known:
                break  # not kept (over the budget): the caller measures its own
            known = now
        return live
