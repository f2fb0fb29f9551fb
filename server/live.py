"""One transcript held in memory, and the decisions about its subscribers.

A ``LiveTranscript`` is the ``Transcript`` with a ``ChangeBuffer`` as its
``changes`` port, one pump task that loops ``await buffer.wait()`` /
``buffer.take()`` and pushes each event, encoded once, to every subscriber's
outbound queue in revision order, a window of recent encoded events for
resumes, the idempotency keys it remembers, and its baselines encoded once
per revision, window start and format, shared by every subscriber.

Memory: the transcript holds only its newest messages. It is loaded with the
newest ``live_messages`` (``Store.load_recent``) and, whenever it holds more
than 1.5 times that many, lets the oldest go (``Transcript.forget_before``).
Subscribers need nothing more of it: after their baseline they take
increments, and a baseline, range or export that starts earlier reads the
older messages from the store (they never change, so the two join exactly).

Baselines: while the transcript holds every message, a whole baseline is
built from its messages encoded once each in chunks (``server.baselines``),
shared by the baselines of every later revision and encoded a chunk per loop
turn the first time (``prepare_baseline``). Any other baseline (a window, or
a transcript no longer held whole) is encoded in one call from the snapshot
(``EncodedSnapshot.of``).

``lock`` is held by whoever changes the transcript (the committer, a segment
start, a View change, a catch-up or the backplane), so changes never
interleave.

What a subscribe with ``fromRevision`` gets is decided here without an await
(``plan_subscribe``, ``splice``): a baseline, the window's increments, or a
read of older events from the store first.

This module knows nothing of the hub or of appends: they use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from protocol.limits import DEFAULT_LIMITS, MessageLimits
from protocol.types import Message, TranscriptEvent, TranscriptSnapshot
from protocol.views import Window
from server.baselines import EncodedMessages
from server.changes import ChangeBuffer
from server.drafts import Drafts
from server.frames import EncodedDraft, EncodedEvent, EncodedSnapshot
from server.outbound import OutboundQueue
from server.store.base import LOADED_KEYS, Receipt, StoredState
from server.transcript import Transcript

log = logging.getLogger("tsync.live")

#: Encoded baselines kept per live transcript at its current revision (one per
#: window start: the whole, and the tails and segments subscribers ask for).
SNAPSHOTS_KEPT = 8


_encode = msgspec.json.Encoder().encode


def _message_bytes(messages: tuple[Message, ...]) -> int:
    return len(_encode(messages))


def held_bytes(snapshot: TranscriptSnapshot) -> int:
    """About the bytes the messages of ``snapshot`` take in memory (their
    compact JSON): what a live copy loaded from it counts against
    ``max_live_bytes``."""
    return _message_bytes(snapshot.messages)


class LiveTranscript:
    """One transcript in memory with its buffer, pump, subscribers and window."""

    def __init__(
        self,
        stored: StoredState,
        *,
        limits: MessageLimits = DEFAULT_LIMITS,
        event_window: int,
        remembered_keys: int = LOADED_KEYS,
        live_messages: int = 0,
        drafts: Drafts | None = None,
    ) -> None:
        self.buffer = ChangeBuffer()
        self.transcript = Transcript.restore_window(
            stored.snapshot, changes=self.buffer, limits=limits
        )
        self.id = stored.transcript_id
        self.created_at = stored.created_at
        #: About the bytes it holds (the messages it was loaded with, then each
        #: event's encoding; recounted when old messages are let go): what the
        #: hub counts against ``max_live_bytes``.
        self.size = held_bytes(stored.snapshot)
        #: Each subscriber and the window it subscribed with (``None``: whole).
        self.subscribers: dict[OutboundQueue, Window | None] = {}
        self.window: deque[EncodedEvent] = deque(maxlen=event_window)
        self._keep = live_messages
        self._receipts: OrderedDict[str, Receipt] = OrderedDict(stored.idempotency)
        self._remembered = remembered_keys
        #: Held by whoever changes the transcript, across the store's await.
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        #: Encoded baselines at ``_snapshots_revision``, by window start and format.
        self._snapshots: dict[tuple[int, bool], EncodedSnapshot] = {}
        self._snapshots_revision = -1
        #: The messages encoded for whole baselines, per format, while every
        #: message is held (``server.baselines``).
        self._encoded: dict[bool, EncodedMessages] = {}
        #: The transcript's drafts (``server.drafts``): never part of it.
        if drafts is None:
            drafts = Drafts(self.id, max_open=16, max_bytes=limits.max_message_bytes, ttl=30.0)
        self.drafts = drafts
        #: ``final`` frames of drafts committed by events not delivered yet,
        #: by revision: they leave right behind their increment.
        self._finals: dict[int, list[EncodedDraft]] = {}
        #: The revision of the last event pushed to the subscribers.
        self._delivered = stored.snapshot.revision
        #: HTTP readers waiting for the next delivery (Durable Streams'
        #: long-poll and SSE on a transcript), woken once it went out.
        self.watchers: set[asyncio.Future[None]] = set()
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
        self.size += sum(item.size for item in items)
        if items:
            self._delivered = items[-1].revision
        finals: list[EncodedDraft] = []
        if self._finals:
            for item in items:
                finals.extend(self._finals.pop(item.revision, ()))
        for queue in list(self.subscribers):
            # A subscription made after these events were captured but before
            # they were pumped already has them in its baseline: the queue
            # skips them. Events taken together leave together, and the
            # drafts they commit close right behind them, in the same flush.
            try:
                queue.push_increments(items, finals)
            except Exception:
                # A bug in one connection's queue: that subscription ends,
                # the others (and the committer or pump delivering) go on.
                log.exception("delivering to %s failed: its subscription ends", queue.id)
                with contextlib.suppress(Exception):
                    queue.end_subscription(self.id)
                self.leave(queue)
        self._wake_watchers()
        self._trim()

    def watch(self) -> asyncio.Future[None]:
        """A future done after the next delivery (or when this copy closes)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.watchers.add(future)
        future.add_done_callback(self.watchers.discard)
        return future

    def _wake_watchers(self) -> None:
        for future in list(self.watchers):
            if not future.done():
                future.set_result(None)

    def commit_draft(self, draft_id: str, revision: int, now: float) -> EncodedDraft | None:
        """The change of ``revision`` (applied, not delivered yet) commits
        the draft ``draft_id``: it closes now, and its ``final`` frame leaves
        right behind the increment. Returns that frame (``None``: the draft
        was not open)."""
        frame = self.drafts.commit(draft_id, revision, now)
        if frame is not None:
            if revision > self._delivered:
                self._finals.setdefault(revision, []).append(frame)
            else:
                # Delivered already (the retry of an append that landed): it
                # goes out alone, and a consumer waits for its revision.
                self.push_draft(frame)
        return frame

    def push_draft(self, frame: EncodedDraft) -> None:
        """Fan one draft update or close out to every subscriber."""
        for queue in list(self.subscribers):
            queue.push_draft(frame)

    def _trim(self) -> None:
        """Let the oldest messages go once more than 1.5 times ``live_messages``
        are held (amortised: one list shift per half a window of appends)."""
        keep = self._keep
        transcript = self.transcript
        if keep and transcript.length - transcript.held_start > keep + keep // 2:
            transcript.forget_before(transcript.length - keep)
            self.size = _message_bytes(transcript.messages(transcript.held_start))
            # Whole baselines now read the older messages from the store: the
            # encoded messages of the whole transcript are not kept for them.
            self._encoded.clear()

    # --- subscribers ----------------------------------------------------------------

    def join(self, queue: OutboundQueue, window: Window | None = None) -> bool:
        """Add a subscriber (or change its window); False if it was one already."""
        self.last_used = time.monotonic()
        known = queue in self.subscribers
        self.subscribers[queue] = window
        return not known

    def leave(self, queue: OutboundQueue) -> bool:
        """Remove a subscriber; False if it was none."""
        if queue in self.subscribers:
            del self.subscribers[queue]
            self.last_used = time.monotonic()
            return True
        return False

    def cached_snapshot(self, start: int, binary: bool = False) -> EncodedSnapshot | None:
        """The encoded snapshot of ``[start, length)`` at the current revision
        in one format, if one was made."""
        if self._snapshots_revision != self.transcript.revision:
            return None
        return self._snapshots.get((start, binary))

    def encoded_snapshot(
        self, start: int = 0, binary: bool = False, older: tuple[Message, ...] = ()
    ) -> EncodedSnapshot:
        """The snapshot of ``[start, length)`` now, encoded once per revision,
        window start and format and shared. ``older`` are the messages
        ``[start, held_start)`` when the transcript no longer holds them (read
        from the store by the caller); ``ValueError`` if they do not reach
        what it holds. A whole baseline of a transcript held whole encodes
        only what ``prepare_baseline`` left (at most a chunk after it), here,
        without yielding."""
        transcript = self.transcript
        revision = transcript.revision
        if self._snapshots_revision != revision:
            self._snapshots.clear()
            self._snapshots_revision = revision
        key = (start, binary)
        cached = self._snapshots.get(key)
        if cached is None:
            state = transcript.state
            if start == 0 and state.whole:
                encoded = self._messages(binary)
                encoded.encode_all(state)
                cached = encoded.snapshot(state)
            else:
                held = max(start, state.start)
                if start + len(older) < held:
                    raise ValueError(f"messages [{start}, {held}) are missing from the snapshot")
                messages = older[: held - start] + state.slice(held)
                cached = EncodedSnapshot.of(state.snapshot_of(start, messages), binary=binary)
            if len(self._snapshots) >= SNAPSHOTS_KEPT:
                del self._snapshots[next(iter(self._snapshots))]
            self._snapshots[key] = cached
        return cached

    def encodes_in_steps(self, start: int, binary: bool) -> bool:
        """Whether the baseline from ``start`` is a whole one of a transcript
        held whole with more than a chunk of messages not encoded yet: then
        ``prepare_baseline`` first."""
        state = self.transcript.state
        return start == 0 and state.whole and not self._messages(binary).fits_one_step(state)

    async def prepare_baseline(self, binary: bool, gate: asyncio.Semaphore) -> None:
        """Encode the messages a whole baseline needs now, a chunk at a time
        with the event loop running in between, holding ``gate`` (the bound on
        baselines encoding at once) when there is more than one chunk to do.
        Then ``encoded_snapshot`` has at most a chunk left to encode. Stops
        early when the transcript lets old messages go meanwhile."""
        if not self.encodes_in_steps(0, binary):
            return
        encoded = self._messages(binary)
        async with gate:
            while self._encoded.get(binary) is encoded:
                state = self.transcript.state
                if not state.whole or encoded.fits_one_step(state):
                    return
                encoded.encode_step(state)
                await asyncio.sleep(0)

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

    # The newest ``remembered_keys`` receipts (never more than the store
    # keeps: memory must not answer a retry the store would not), so that a retry of a recent append
    # needs no store lookup. The store keeps more, for longer, and is the
    # authority: an append with a key not found here is still recognised by
    # the store (``Store.append`` answers its first ack).

    def receipt(self, key: str | None) -> Receipt | None:
        """The receipt recorded for an idempotency key, if remembered here."""
        return None if key is None else self._receipts.get(key)

    def knows(self, key: str) -> bool:
        return key in self._receipts

    def remember(self, key: str | None, receipt: Receipt) -> None:
        """Remember ``key``'s receipt (the newest ``remembered_keys``)."""
        if key is None:
            return
        self._receipts[key] = receipt
        self._receipts.move_to_end(key)
        while len(self._receipts) > self._remembered:
            self._receipts.popitem(last=False)

    # --- lifecycle --------------------------------------------------------------------

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def evictable(self) -> bool:
        """Nobody subscribes to it, changes it or writes a draft of it now:
        it may leave memory."""
        return (
            not self.subscribers
            and not self.watchers
            and not self.lock.locked()
            and not self.drafts.open
        )

    def idle_since(self, cutoff: float) -> bool:
        """Unused since ``cutoff`` (a ``time.monotonic()``), with no subscriber,
        no writer and no open draft: it may leave memory."""
        return self.last_used < cutoff and self.evictable()

    async def close(self) -> None:
        """Stop the pump (deliver what is pending first if it matters)."""
        self._wake_watchers()
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
