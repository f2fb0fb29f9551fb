"""One transcript held in memory, and the decisions about its subscribers.

A ``LiveTranscript`` is the ``Transcript`` with a ``ChangeBuffer`` as its
``changes`` port, one pump task that loops ``await buffer.wait()`` /
``buffer.take()`` and pushes each event, encoded once, to every subscriber's
outbound queue in revision order, a window of recent encoded events for
resumes, the idempotency keys it remembers, and its messages encoded for
baselines (``server.baselines``: once each, a chunk at a time). ``lock`` is
held by whoever changes the transcript (the committer, a segment start, a
catch-up or the backplane), so changes never interleave.

What a subscribe with ``fromRevision`` gets is decided here without an await
(``plan_subscribe``, ``splice``): a baseline, the window's increments, or a
read of older events from the store first.

This module knows nothing of the hub or of appends: they use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import NamedTuple

from protocol.types import TranscriptEvent
from server.baselines import EncodedMessages
from server.changes import ChangeBuffer
from server.frames import EncodedEvent, EncodedSnapshot
from server.outbound import OutboundQueue
from server.store.base import Receipt, StoredTranscript
from server.transcript import Transcript


class LiveTranscript:
    """One transcript in memory with its buffer, pump, subscribers and window."""

    def __init__(
        self, stored: StoredTranscript, *, event_window: int, idempotency_retention: int
    ) -> None:
        self.buffer = ChangeBuffer()
        self.transcript = Transcript.restore(
            stored.events, id=stored.transcript_id, epoch=stored.epoch, changes=self.buffer
        )
        self.id = stored.transcript_id
        self.created_at = stored.created_at
        self.subscribers: dict[OutboundQueue, None] = {}
        self.window: deque[EncodedEvent] = deque(maxlen=event_window)
        self._receipts: OrderedDict[str, Receipt] = OrderedDict(stored.idempotency)
        self._retention = idempotency_retention
        #: Held by whoever changes the transcript, across the store's await.
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        #: The messages encoded for baselines, and the last baseline, per format.
        self._encoded: dict[bool, EncodedMessages] = {}
        self._baselines: dict[bool, EncodedSnapshot] = {}
        self.pump = asyncio.create_task(self._pump(), name=f"pump-{self.id}")

    # --- fan-out ------------------------------------------------------------------

    async def _pump(self) -> None:
        buffer = self.buffer
        while True:
            await buffer.wait()
            self._deliver(buffer.take())

    def deliver_pending(self) -> None:
        """Deliver now whatever the buffer holds (before reading the window or
        taking a snapshot for a subscriber, so it gets nothing twice)."""
        if len(self.buffer):
            self._deliver(self.buffer.take())

    def _deliver(self, events: Sequence[TranscriptEvent]) -> None:
        items = [EncodedEvent(event) for event in events]
        self.window.extend(items)
        for queue in list(self.subscribers):
            # A subscription made after these events were captured but before
            # they were pumped already has them in its baseline: the queue
            # skips them. Events taken together leave together.
            queue.push_increments(items)

    # --- subscribers ----------------------------------------------------------------

    def join(self, queue: OutboundQueue) -> bool:
        """Add a subscriber; False if it was one already."""
        self.last_used = time.monotonic()
        if queue in self.subscribers:
            return False
        self.subscribers[queue] = None
        return True

    def leave(self, queue: OutboundQueue) -> bool:
        """Remove a subscriber; False if it was none."""
        if self.subscribers.pop(queue, 0) is None:
            self.last_used = time.monotonic()
            return True
        return False

    async def prepare_baseline(self, binary: bool, gate: asyncio.Semaphore) -> None:
        """Encode the messages a baseline needs now, a chunk at a time with
        the event loop running in between, holding ``gate`` (the bound on
        baselines encoding at once) when there is more than one chunk to do.
        Then ``encoded_snapshot`` has at most a chunk left to encode."""
        encoded = self._messages(binary)
        state = self.transcript.state
        if encoded.fits_one_step(state):
            return
        async with gate:
            while not encoded.fits_one_step(state):
                encoded.encode_step(state)
                await asyncio.sleep(0)

    def encoded_snapshot(self, binary: bool = False) -> EncodedSnapshot:
        """The baseline now, once per revision and format, shared (after
        ``prepare_baseline``, or for a transcript known to be small: what is
        not encoded yet is encoded here, without yielding)."""
        cached = self._baselines.get(binary)
        state = self.transcript.state
        if cached is None or cached.revision != state.revision:
            encoded = self._messages(binary)
            encoded.encode_all(state)
            cached = self._baselines[binary] = encoded.snapshot(state)
        return cached

    def _messages(self, binary: bool) -> EncodedMessages:
        encoded = self._encoded.get(binary)
        if encoded is None:
            encoded = self._encoded[binary] = EncodedMessages(binary=binary)
        return encoded

    def average_event_bytes(self) -> float:
        """The mean size of the increments in the window (0 when empty): what
        a resume's increments are expected to weigh before they are read."""
        window = self.window
        return sum(item.size for item in window) / len(window) if window else 0.0

    def window_start(self) -> int | None:
        """The oldest revision the window holds, ``None`` when empty."""
        return self.window[0].revision if self.window else None

    # --- idempotency ------------------------------------------------------------------

    def receipt(self, key: str | None) -> Receipt | None:
        """The receipt recorded for an idempotency key, if remembered."""
        return None if key is None else self._receipts.get(key)

    def knows(self, key: str) -> bool:
        return key in self._receipts

    def remember(self, key: str | None, receipt: Receipt) -> None:
        """Remember ``key``'s receipt (the newest ``idempotency_retention``)."""
        if key is None:
            return
        self._receipts[key] = receipt
        self._receipts.move_to_end(key)
        while len(self._receipts) > self._retention:
            self._receipts.popitem(last=False)

    # --- lifecycle --------------------------------------------------------------------

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def idle_since(self, cutoff: float) -> bool:
        """Unused since ``cutoff`` (a ``time.monotonic()``), with no subscriber
        and no writer: it may leave memory."""
        return not self.subscribers and self.last_used < cutoff and not self.lock.locked()

    async def close(self) -> None:
        """Stop the pump (deliver what is pending first if it matters)."""
        self.pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.pump


# --- what a subscribe gets ------------------------------------------------------------


class SendBaseline(NamedTuple):
    """Send a fresh baseline; ``reason`` says why (for metrics and tests)."""

    reason: str


class SendFromWindow(NamedTuple):
    """The window holds every increment after ``fromRevision`` (or there is none)."""


class FetchThenSplice(NamedTuple):
    """Read at most ``limit`` events after ``after`` from the store, then
    ``splice`` them with the window."""

    after: int
    limit: int


class CatchUpFirst(NamedTuple):
    """The consumer holds more than this copy (another replica served it):
    catch up with the store, then plan again."""


SubscribePlan = SendBaseline | SendFromWindow | FetchThenSplice | CatchUpFirst


def plan_subscribe(
    from_revision: int | None,
    epoch: str | None,
    *,
    current_epoch: str,
    current_revision: int,
    window_start: int | None,
    max_resume_events: int,
    caught_up: bool = False,
    room: int | None = None,
) -> SubscribePlan:
    """What a subscribe with ``fromRevision``/``epoch`` gets from a transcript
    at ``current_revision`` whose window starts at ``window_start``.

    ``caught_up``: a catch-up already ran for this subscribe; a consumer still
    ahead then holds a history this server does not have. ``room``: how many
    increments the connection's queue can take now (``None``: no bound); a
    resume that needs more is a baseline, decided before any event is read.
    """
    if from_revision is None:
        return SendBaseline("no fromRevision")
    if epoch != current_epoch:
        return SendBaseline("another epoch")
    if from_revision > current_revision:
        return SendBaseline("ahead of the store") if caught_up else CatchUpFirst()
    if current_revision - from_revision > max_resume_events:
        return SendBaseline("too far behind")
    if room is not None and current_revision - from_revision > room:
        return SendBaseline("more than the queue holds")
    if from_revision == current_revision or (
        window_start is not None and window_start <= from_revision + 1
    ):
        return SendFromWindow()
    return FetchThenSplice(from_revision, max_resume_events)


def splice(
    from_revision: int,
    older: Sequence[TranscriptEvent],
    window: Sequence[EncodedEvent],
    current_revision: int,
) -> list[EncodedEvent] | None:
    """The increments ``from_revision``+1 .. ``current_revision`` taken from
    ``older`` (events read from the store) and then the window, without a gap
    or a repeat; ``None`` when the two do not cover the whole range (send a
    baseline instead)."""
    items: list[EncodedEvent] = []
    sent = from_revision
    for event in older:
        if event.revision == sent + 1:
            items.append(EncodedEvent(event))
            sent = event.revision
    for item in window:
        if item.revision == sent + 1:
            items.append(item)
            sent = item.revision
    return items if sent == current_revision else None
