"""One connection's outbound queue as state and rules: no socket, no task,
no clock.

``QueuePolicy`` holds what ``server.live.outbound.OutboundQueue`` decides
with, and the rules it decides by:

- what each subscription was sent: the revision up to which each followed
  transcript's frames were queued (``follows``, ``unfollow``...);
- the budget: every queued frame counts its real size; increments and
  answers against ``queue_max_frames`` and ``queue_max_bytes``; a baseline by
  what is left of it to send, on top of the byte budget (``_limit``), let in
  whatever its size behind nothing but answers and other baselines
  (``_fits``); acks, pongs, errors and presence frames past the limits by
  ``CONTROL_FRAME_SLACK`` frames or ``CONTROL_BYTES_SLACK`` bytes mean a
  client that reads nothing (``_control_fits``, ``_shared_fits``);
- lag: the queued data frames dropped and the subscriptions they were of
  forgotten, in one step (``_drop_lagged``); a new baseline drops its
  transcript's frames still waiting (``_drop_waiting``);
- draft slots: while frames wait, the updates of one open draft merge into
  one slot, and a close takes its slot's place at the end (``_queue_draft``).

The writers (``OutboundQueue``: the raw frame write and the ASGI task) take
frames off ``_queue`` and count them out with ``_count``; what to tell the
client and the hub (``lagged``, ``internal``, the 4008 close) is theirs. The
queue is a subclass so that the hot paths read the same slots as before.
"""

from __future__ import annotations

from typing import Final, Literal

from server.live.frames import (
    DraftSlot,
    EncodedDraft,
    EncodedEvent,
    EncodedSnapshot,
    Outbound,
)
from server.tuning import CONTROL_BYTES_SLACK, CONTROL_FRAME_SLACK

__all__ = ["MERGED", "QUEUED", "READS_NOTHING", "DraftVerdict", "QueuePolicy"]

#: What ``_queue_draft`` did with an update: merged it into its draft's slot,
#: queued it, or refused it (the client reads nothing: close it with 4008).
MERGED: Final = "merged"
QUEUED: Final = "queued"
READS_NOTHING: Final = "reads-nothing"
DraftVerdict = Literal["merged", "queued", "reads-nothing"]


class QueuePolicy:
    """The queue of one connection and the revision each of its
    subscriptions was queued up to, with the budget, lag and draft-slot
    rules (module docstring). Pure: nothing here writes or waits."""

    # Thousands of these live at once: no per-instance __dict__.
    __slots__ = (
        "_baseline_bytes",
        "_draft_items",
        "_draft_slots",
        "_max_bytes",
        "_max_frames",
        "_queue",
        "_queued_bytes",
        "_sent",
        "_stream",
        "_stream_sent",
    )

    def __init__(self, *, queue_max_frames: int, queue_max_bytes: int) -> None:
        #: transcript id -> the revision its frames have been queued up to.
        self._sent: dict[str, int] = {}
        # A list, not a deque: an empty deque costs ~600 bytes per connection
        # and the writer takes whole batches off the front anyway.
        self._queue: list[Outbound] = []
        #: Bytes of the queued increments and answers, and of the queued
        #: baselines not sent yet.
        self._queued_bytes = 0
        self._baseline_bytes = 0
        #: Draft frames queued (they count against no bound), and the slot
        #: of each open draft queued, by (transcript id, draft id); made on
        #: the first draft frame that has to wait.
        self._draft_items = 0
        self._draft_slots: dict[tuple[str, str], DraftSlot] | None = None
        #: The next fragment of the baseline at the head being streamed, or None.
        self._stream: int | None = None
        #: Bytes of that baseline written so far.
        self._stream_sent = 0
        self._max_frames = queue_max_frames
        self._max_bytes = queue_max_bytes

    # --- subscriptions ------------------------------------------------------------

    def follows(self, transcript_id: str) -> bool:
        """Whether this connection is subscribed to ``transcript_id``."""
        return transcript_id in self._sent

    def followed(self) -> list[str]:
        """The transcripts this connection is subscribed to."""
        return list(self._sent)

    @property
    def subscription_count(self) -> int:
        return len(self._sent)

    def unfollow(self, transcript_id: str) -> bool:
        """Stop sending ``transcript_id``'s increments; False if not subscribed.
        (Frames already queued still go out: the consumer handles repeats.)"""
        return self._sent.pop(transcript_id, None) is not None

    # --- the budget -----------------------------------------------------------------

    def _counted_bytes(self) -> int:
        """Queued bytes not sent yet (a streaming baseline's rest included)."""
        return self._queued_bytes + self._baseline_bytes

    def _limit(self) -> int:
        """The byte budget now: ``queue_max_bytes`` on top of what is left
        to send of the baselines queued."""
        return self._max_bytes + self._baseline_bytes

    def _count(self, item: Outbound, sign: int) -> None:
        if item.draft:
            # Counted apart: draft frames take no room from increments.
            self._draft_items += sign
            if sign < 0 and isinstance(item, DraftSlot) and self._draft_slots:
                key = (item.transcript_id, item.update.draft_id)
                if self._draft_slots.get(key) is item:
                    del self._draft_slots[key]  # it went out: the next update waits anew
        elif item.baseline:
            self._baseline_bytes += sign * item.size
        else:
            self._queued_bytes += sign * item.size

    def _recount(self) -> None:
        q = self._queue
        self._queued_bytes = sum(item.size for item in q if not (item.baseline or item.draft))
        self._baseline_bytes = sum(item.size for item in q if item.baseline)
        if self._stream is not None:
            self._baseline_bytes -= self._stream_sent
        self._draft_items = sum(1 for item in q if item.draft)
        if self._draft_slots:
            kept = {id(item) for item in q if isinstance(item, DraftSlot)}
            self._draft_slots = {
                key: slot for key, slot in self._draft_slots.items() if id(slot) in kept
            }

    def _fits(self, item: EncodedEvent | EncodedSnapshot) -> bool:
        if not item.baseline:
            return self.has_room(1, item.size)
        # A baseline fits behind answers and other baselines whatever its
        # size (one per transcript: it replaced that transcript's frames),
        # behind increments only within the budget.
        if len(self._queue) - self._draft_items >= self._max_frames:
            return False
        counted = self._counted_bytes()
        if counted + item.size <= self._limit():
            return True
        return not any(queued.data and not queued.baseline for queued in self._queue)

    def has_room(self, frames: int, size: int) -> bool:
        """Whether ``frames`` more data frames of ``size`` bytes fit the queue."""
        return (
            len(self._queue) - self._draft_items + frames <= self._max_frames
            and self._counted_bytes() + size <= self._limit()
        )

    def room(self, frame_bytes: float) -> int:
        """How many more data frames of ``frame_bytes`` each fit the queue."""
        frames = self._max_frames - (len(self._queue) - self._draft_items)
        space = self._limit() - self._counted_bytes()
        return max(0, min(frames, int(space // max(frame_bytes, 1.0))))

    @property
    def queued(self) -> tuple[int, int]:
        """(frames, bytes) waiting to be written."""
        return len(self._queue), self._queued_bytes + self._baseline_bytes

    def _control_fits(self, size: int) -> bool:
        """Whether an answer (ack, pong, error) of ``size`` bytes may still
        be queued: past the limits by the slack, the client reads nothing."""
        return (
            len(self._queue) - self._draft_items < self._max_frames + CONTROL_FRAME_SLACK
            and self._counted_bytes() + size <= self._limit() + CONTROL_BYTES_SLACK
        )

    def _shared_fits(self, size: int) -> bool:
        """Whether a shared (presence) frame of ``size`` bytes may still be
        queued (bytes only: its sender makes at most one a second)."""
        return self._counted_bytes() + size <= self._limit() + CONTROL_BYTES_SLACK

    # --- dropping -------------------------------------------------------------------

    def _drop_lagged(self, transcript_ids: set[str]) -> set[str]:
        """Drop every queued data frame (but the head of a baseline being
        streamed) and the draft frames of their transcripts and of
        ``transcript_ids``, and forget those subscriptions. Returns the
        transcripts that were followed: each is owed a ``lagged`` error."""
        kept: list[Outbound] = []
        streaming = self._stream is not None
        for i, item in enumerate(self._queue):
            if item.data and item.transcript_id is not None and not (i == 0 and streaming):
                transcript_ids.add(item.transcript_id)
            else:
                kept.append(item)
        # The draft frames of the lagged transcripts go with their increments
        # (the resubscribe brings each open draft's text); the others stay.
        self._queue = [
            item for item in kept if not (item.draft and item.transcript_id in transcript_ids)
        ]
        self._recount()
        lagged = {t for t in transcript_ids if t in self._sent}
        for transcript_id in lagged:
            del self._sent[transcript_id]
        return lagged

    def _drop_waiting(self, transcript_id: str) -> None:
        """Forget the frames of ``transcript_id`` that have not started to go
        out (a new baseline supersedes them; its drafts follow it anew)."""
        q = self._queue
        if not any(item.transcript_id == transcript_id and (item.data or item.draft) for item in q):
            return
        streaming = self._stream is not None
        kept = [
            item
            for i, item in enumerate(q)
            if not ((item.data or item.draft) and item.transcript_id == transcript_id)
            or (i == 0 and streaming)
        ]
        self._queue = kept
        self._recount()

    def _forget(self, transcript_id: str | None, queued: Outbound | None = None) -> bool:
        """Drop ``queued`` (an item of the queue that cannot be sent), the
        frames of ``transcript_id`` still waiting, and its subscription.
        Returns whether it was followed (then it is owed an error)."""
        if queued is not None:
            for i, item in enumerate(self._queue):
                if item is queued:
                    del self._queue[i]
                    self._count(item, -1)
                    break
        if transcript_id is None:
            return False
        self._drop_waiting(transcript_id)
        return self._sent.pop(transcript_id, None) is not None

    # --- draft slots ----------------------------------------------------------------

    def _queue_draft(self, update: EncodedDraft, *, catch_up: bool) -> DraftVerdict:
        """Queue one draft update or close behind the frames waiting: an
        update of a draft that has a slot merges into it; a close takes its
        slot's place at the end (behind the increment of a commit); a new
        update gets a slot. Past ``queue_max_frames`` and
        ``CONTROL_FRAME_SLACK`` draft frames (one per open draft and a close
        per draft ended) the client reads nothing, unless ``catch_up``."""
        slots = self._draft_slots
        key = (update.transcript_id, update.draft_id)
        if slots is not None:
            slot = slots.get(key)
            if slot is not None:
                if not update.closes:
                    slot.merge(update)
                    return MERGED
                # The close goes last, in order behind the commit's increment.
                del slots[key]
                self._remove(slot)
        if not catch_up and self._draft_items >= self._max_frames + CONTROL_FRAME_SLACK:
            return READS_NOTHING
        item: EncodedDraft | DraftSlot = update
        if not update.closes:
            item = DraftSlot(update)
            if slots is None:
                slots = self._draft_slots = {}
            slots[key] = item
        self._queue.append(item)
        self._count(item, 1)
        return QUEUED

    def _remove(self, slot: DraftSlot) -> None:
        """Take a draft slot out of the queue (its draft closed)."""
        for i, item in enumerate(self._queue):
            if item is slot:
                del self._queue[i]
                self._count(item, -1)
                return

    # --- a baseline streamed in fragments ------------------------------------------------

    def _streamed(self, head: EncodedSnapshot, index: int, size: int, last: bool) -> None:
        """Fragment ``index`` of the baseline at the head (``size`` bytes)
        went to the transport; after the ``last``, the baseline is done."""
        if last:
            self._stream = None
            self._queue.pop(0)
            self._count(head, -1)
            self._baseline_bytes += self._stream_sent
            self._stream_sent = 0
        else:
            self._stream = index + 1
            # What is left of it counts; the rest went to the transport.
            sent = min(size, head.size - self._stream_sent)
            self._stream_sent += sent
            self._baseline_bytes -= sent
