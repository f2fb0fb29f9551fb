"""Connections and subscriptions: subscribe, baseline, resume, unsubscribe.

Subscribing is synchronous with respect to the transcript: pending events are
delivered first, then the baseline at revision R (or the increments after
``fromRevision``) is queued and the connection joins the subscribers, all
without an ``await`` in between, so the first increment it gets next is R+1:
no gap, no repeat. ``server.live.live_transcript.plan_subscribe`` decides
which; this module carries the decision out, with the reads a baseline of a
window needs (``server.live.reads``) and the drafts' catch-up right behind
(``server.live.draft_fanout``).

Given the hub as its ``Registry`` port (``server.live.ports``) by the hub.
"""

from __future__ import annotations

import asyncio

from protocol.views import Window
from server.errors import TooManySubscriptions
from server.live.draft_fanout import DraftFanOut
from server.live.frames import EncodedEvent, EncodedSnapshot
from server.live.live_transcript import (
    CatchUpFirst,
    FetchThenSplice,
    LiveTranscript,
    SendBaseline,
    SendFromWindow,
    plan_subscribe,
    splice,
)
from server.live.outbound import OutboundQueue, RawFrames, Send, WriteDelay
from server.live.ports import Registry
from server.live.presence import PresenceRegistry
from server.live.reads import READ_ATTEMPTS, Reads, Stale, start_of
from server.store.base import StoreError
from server.tuning import BASELINE_ENCODES_AT_ONCE, RESUME_FETCHES_AT_ONCE

__all__ = ["Subscriptions"]


class Subscriptions:
    """The hub's connections and their subscriptions (``hub.subscriptions``)."""

    def __init__(
        self, hub: Registry, reads: Reads, drafts: DraftFanOut, presence: PresenceRegistry
    ) -> None:
        self.hub = hub
        self.reads = reads
        self.drafts = drafts
        #: Told when a connection unsubscribes or closes (its member leaves).
        self.presence = presence
        #: The open connections' outbound queues, by connection id.
        self.connections: dict[str, OutboundQueue] = {}
        #: Wakes the writers of queues with new increments (``write_delay_ms``).
        self.write_delay = WriteDelay(hub.config.write_delay_ms / 1000)
        #: Bounds on the heavy parts of subscribing, server-wide.
        self.baseline_encodes = asyncio.Semaphore(BASELINE_ENCODES_AT_ONCE)
        self.resume_fetches = asyncio.Semaphore(RESUME_FETCHES_AT_ONCE)

    async def stop(self) -> None:
        """Stop every connection's writer (the server is stopping)."""
        self.write_delay.cancel()
        for queue in list(self.connections.values()):
            await queue.stop()

    def connect(
        self, conn_id: str, send: Send, *, binary: bool = False, raw: RawFrames | None = None
    ) -> OutboundQueue:
        """The outbound queue of a new connection, registered (start its writer
        with ``queue.start()``; ``disconnect`` it when the connection ends).
        ``raw``: the connection's raw frame write, when the ASGI server offers
        one (``server.web.ws_protocol``)."""
        config = self.hub.config
        queue = OutboundQueue(
            conn_id,
            send,
            binary=binary,
            queue_max_frames=config.queue_max_frames,
            queue_max_bytes=config.queue_max_bytes,
            write_batch_bytes=config.write_batch_bytes,
            metrics=self.hub.metrics,
            on_lagged=self._on_lagged,
            write_delay=self.write_delay,
            raw=raw,
        )
        self.connections[conn_id] = queue
        self.hub.metrics.connections.set(len(self.connections))
        return queue

    def is_full(self) -> bool:
        """Whether ``max_connections`` connections are open."""
        return len(self.connections) >= self.hub.config.max_connections

    def disconnect(self, queue: OutboundQueue) -> None:
        """The connection ended: drop its subscriptions and its registration."""
        self.connections.pop(queue.id, None)
        for transcript_id in queue.followed():
            self.unsubscribe(queue, transcript_id)
        self.presence.forget(queue)
        self.hub.metrics.connections.set(len(self.connections))

    def _on_lagged(self, queue: OutboundQueue, transcript_ids: set[str]) -> None:
        # The queue already forgot these subscriptions; the transcripts follow.
        for transcript_id in transcript_ids:
            live = self.hub.copy_of(transcript_id)
            if live is not None and live.leave(queue):
                self.hub.metrics.subscriptions.dec()

    async def subscribe(
        self,
        queue: OutboundQueue,
        transcript_id: str,
        *,
        from_revision: int | None = None,
        epoch: str | None = None,
        window: Window | None = None,
    ) -> str:
        """Subscribe ``queue``; returns how it was served: ``baseline``,
        ``resume`` or ``current``. A subscribe of a transcript the connection
        already follows replaces that subscription. A baseline holds only
        ``window`` (``protocol.views.Window``) of the transcript; raises
        ``InvalidView`` when it names a View the transcript does not have."""
        limit = self.hub.config.max_subscriptions_per_connection
        if not queue.follows(transcript_id) and queue.subscription_count >= limit:
            raise TooManySubscriptions(limit)
        live = await self.hub.load(transcript_id)
        caught_up = False
        while True:
            live.deliver_pending()
            transcript = live.transcript
            plan = plan_subscribe(
                from_revision,
                epoch,
                current_epoch=transcript.epoch,
                current_revision=transcript.revision,
                window_start=live.window_start(),
                max_resume_events=self.hub.config.max_resume_events,
                caught_up=caught_up,
                room=queue.room(live.average_event_bytes()),
            )
            match plan:
                case CatchUpFirst():
                    # Another replica served the consumer more than this copy
                    # holds: catch up so that it can resume here.
                    async with live.lock:
                        await self.hub.catch_up(live)
                    live = await self.hub.load(transcript_id)
                    caught_up = True
                    continue
                case SendFromWindow():
                    assert from_revision is not None  # a plan without one is a baseline
                    items = splice(from_revision, (), live.recent_events, transcript.revision)
                    mode = self._resume(live, queue, from_revision, items, window)
                    if mode is not None:
                        return mode
                    break
                case FetchThenSplice(after=after, limit=fetch_limit):
                    async with self.resume_fetches:
                        older = await self.hub.store.events_after(
                            transcript_id, after, limit=fetch_limit
                        )
                    if older is None or not self.hub.is_current(live):
                        live = await self.hub.load(transcript_id)
                        live.deliver_pending()
                        break
                    # The window may have moved on during the await.
                    live.deliver_pending()
                    items = splice(after, older, live.recent_events, live.transcript.revision)
                    mode = self._resume(live, queue, after, items, window)
                    if mode is not None:
                        return mode
                    break
                case SendBaseline():
                    break
        # A resume answered with a baseline of the same epoch: the consumer
        # may hold drafts committed since its revision (their finals follow).
        same = from_revision is not None and epoch == live.transcript.epoch
        return await self.send_baseline(live, queue, window, from_revision if same else None)

    def _join(self, live: LiveTranscript, queue: OutboundQueue, window: Window | None) -> None:
        if live.join(queue, window):
            self.hub.metrics.subscriptions.inc()

    async def send_baseline(
        self,
        live: LiveTranscript,
        queue: OutboundQueue,
        window: Window | None,
        resumed_from: int | None = None,
    ) -> str:
        """Queue a baseline of ``window`` and join ``queue`` to the subscribers
        (``resumed_from``: in answer to a resume from that revision)."""
        while True:
            snapshot = await self._baseline(live, window, queue.binary)
            if snapshot is None:
                live = await self.hub.load(live.id)  # reloaded meanwhile: the current copy
                continue
            break
        # No await from here on (``_baseline`` returned right after its last
        # synchronous step): the snapshot is of the current revision.
        if self.connections.get(queue.id) is not queue:
            return "baseline"  # the connection went away while the store answered
        # Join before queueing: if the queue overflows, the lag handling then
        # sees (and drops) this subscription too.
        self._join(live, queue, window)
        queue.push_baseline(snapshot)
        self.drafts.catch_up(live, queue, resumed_from)
        self.hub.metrics.subscribes.labels("baseline").inc()
        return "baseline"

    async def _baseline(
        self, live: LiveTranscript, window: Window | None, binary: bool
    ) -> EncodedSnapshot | None:
        """The encoded baseline of ``window`` at the current revision in one
        format, made in one synchronous step after any encoding a chunk at a
        time of a big transcript (``LiveTranscript.prepare_baseline``) or of
        the older messages the store gives (``LiveTranscript.encode_older``):
        each message once per window start and format, shared by every
        connection. ``None`` when ``live`` is no longer the current copy."""
        prepared = None  # holds the shared encoding alive until it is used
        for _ in range(READ_ATTEMPTS):
            if not self.hub.is_current(live):
                return None
            live.deliver_pending()
            state = live.transcript.state
            start = start_of(window, state)
            cached = live.cached_snapshot(start, binary)
            if cached is not None:
                return cached
            if live.encodes_in_steps(start, binary):
                # Encoded a chunk per loop turn; then at most one chunk is
                # left for the synchronous step (the next time round).
                await live.prepare_baseline(binary, self.baseline_encodes)
                continue
            if not live.older_missing(start, binary):
                return live.encoded_snapshot(start, binary)
            try:
                prepared = await live.encode_older(
                    start,
                    binary,
                    lambda first, end: self.reads.read_older(live, first, end),
                    self.baseline_encodes,
                )
            except Stale:
                await self.reads.refresh(live)
                return None
        del prepared
        raise StoreError(f"transcript {live.id!r}: the store did not give its older messages")

    def _resume(
        self,
        live: LiveTranscript,
        queue: OutboundQueue,
        from_revision: int,
        items: list[EncodedEvent] | None,
        window: Window | None,
    ) -> str | None:
        """Queue the increments after ``from_revision`` and join; ``None``
        (nothing done) when they do not join up or would overflow the queue
        (and lag it before the writer could send any: no progress): send a
        baseline instead (one frame: always progress)."""
        # No await from here on: the increments queued and the join are one step.
        if items is None or not queue.has_room(len(items), sum(item.size for item in items)):
            return None
        self._join(live, queue, window)
        queue.push_resume(live.id, from_revision, items)
        self.drafts.catch_up(live, queue, from_revision)
        mode = "resume" if items else "current"
        self.hub.metrics.subscribes.labels(mode).inc()
        return mode

    def unsubscribe(self, queue: OutboundQueue, transcript_id: str) -> bool:
        """Stop ``queue``'s subscription; False if there was none."""
        had = queue.unfollow(transcript_id)
        self.presence.forget(queue, transcript_id)
        live = self.hub.copy_of(transcript_id)
        if live is not None and live.leave(queue):
            self.hub.metrics.subscriptions.dec()
        return had
