"""The drafts' fan-out: a ``draft`` op, its delivery and its publication.

``server.live.drafts`` decides (a live transcript's open and recently closed
drafts, no I/O); this module sends what it decides: each update encoded once
to every subscriber of the transcript and to the other replicas (the
``publisher`` a ``ReplicaLink`` attaches), deltas held up to
``draft_coalesce_s`` by a timer, the drafts' catch-up behind every baseline
and resume, the ``final`` when the committer lands the append that commits a
draft, and a sweeper that expires idle drafts. The drafts of a transcript let
go from memory are parked here (a draft does not pin its transcript) and taken
back when it is loaded again.

Given the hub as its ``Registry`` port (``server.live.ports``) by the hub.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from protocol import codes, wire
from server.live.drafts import DraftBudget, DraftRules, Drafts
from server.live.frames import EncodedDraft
from server.live.live_transcript import LiveTranscript
from server.live.outbound import OutboundQueue
from server.live.ports import Registry
from server.tasks import cancel_and_wait
from server.tuning import (
    DRAFT_SWEEP_BATCH,
    DRAFT_SWEEPS_PER_TTL,
    MIN_DRAFT_SWEEP_S,
)

__all__ = ["DraftFanOut"]


def _draft_kind(frame: wire.DraftFrame) -> str:
    """The ``tsync_draft_updates`` label of a draft frame."""
    if frame.state != "open":
        return frame.state
    return "delta" if frame.delta is not None else "text"


class DraftFanOut:
    """The hub's drafts (``hub.drafts``)."""

    def __init__(self, hub: Registry) -> None:
        self.hub = hub
        config = hub.config
        #: Told every local draft update and close (the Redis backplane
        #: publishes them; ``None`` when standalone): ``Hub.attach``.
        self.publisher: Callable[[wire.DraftFrame], None] | None = None
        #: The open connections by id (``hub.subscriptions.connections``, set
        #: by the hub): a writer here of a draft another replica stopped is
        #: told at once.
        self.connections: Mapping[str, OutboundQueue] = {}
        #: The bytes every transcript's drafts hold (``max_draft_bytes``,
        #: ``max_connection_draft_bytes``).
        self.budget = DraftBudget(config.max_draft_bytes, config.max_connection_draft_bytes)
        #: What every transcript's drafts keep to.
        self.rules = DraftRules(
            max_open=config.max_drafts_per_transcript,
            max_bytes=config.max_message_bytes,
            ttl=config.draft_ttl_s,
            coalesce=config.draft_coalesce_s,
            max_closed=config.max_closed_drafts,
            max_parts=config.max_draft_parts,
        )
        #: The drafts of transcripts let go from memory while they had open
        #: or recently closed drafts, by id: taken back when the transcript
        #: is loaded again, expired by the sweeper meanwhile.
        self.parked: dict[str, Drafts] = {}
        self._sweeper: asyncio.Task[None] | None = None
        #: How many draft sweeps have run (tests wait on it instead of sleeping).
        self.sweeps = 0
        hub.metrics.drafts_open.set_function(self.open_count)
        # A child per kind, looked up once (``labels`` takes a lock: once per token).
        self._counters = {
            kind: hub.metrics.draft_updates.labels(kind)
            for kind in ("delta", "text", "final", "cancelled", "expired")
        }

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep(), name="draft-sweeper")

    async def stop(self) -> None:
        await cancel_and_wait([self._sweeper])

    def drafts_for(self, transcript_id: str, given: Drafts | None = None) -> Drafts:
        """The drafts a copy of ``transcript_id`` being held takes: ``given``
        (a reload of the same transcript keeps its own), else the parked ones,
        else new ones."""
        parked = self.parked.pop(transcript_id, None)
        if given is not None:
            if parked is not None:
                parked.drop()
            return given
        if parked is not None:
            return parked
        return Drafts(transcript_id, self.rules, self.budget)

    def park(self, live: LiveTranscript) -> None:
        """``live`` is let go from memory: send what its drafts hold, and keep
        its local drafts until they close or expire."""
        if live.drafts:
            self.flush_all(live)
            live.drafts.drop_remote()
            if live.drafts:
                self.parked[live.id] = live.drafts

    def drop_parked(self, transcript_id: str) -> None:
        """The transcript was deleted: its parked drafts go with it."""
        parked = self.parked.pop(transcript_id, None)
        if parked is not None:
            parked.drop()

    async def write(
        self, op: wire.Draft, *, writer: str | None = None, flush: bool = False
    ) -> tuple[int, int]:
        """Apply one ``draft`` op (open, ``delta``, ``text``, ``chunks``,
        ``cancel`` or a keep-alive); returns the transcript's revision and the
        draft's ``n``. Its frame goes to every subscriber (encoded once) and to
        the ``publisher``; a delta that came soon after the draft's last
        update waits up to ``draft_coalesce_s`` and goes out with the others
        that came meanwhile, as one update (``flush``: now, with this one).
        ``writer``: the connection that sent it, charged for the draft's
        bytes (``max_connection_draft_bytes``). Raises ``Refused``
        (``too-many-drafts``, ``draft-too-large``, ``draft-closed``) and
        ``TranscriptNotFound``; a refused op changes nothing."""
        live = await self.hub.load(op.transcript_id)
        # No await from here on: the op and its fan-out are one step.
        now = time.monotonic()
        written = live.drafts.write(op, now=now, writer=writer)
        live.touch()
        n = written.n
        if written.update is not None:
            self.send(live, written.update)
        if flush:
            update = live.drafts.flush(op.draft_id, now)
            if update is not None:
                self.send(live, update)
                n = update.frame.n
        elif written.flush_at is not None:
            asyncio.get_running_loop().call_later(
                max(0.0, written.flush_at - now), self._flush_later, live, op.draft_id
            )
        return live.transcript.revision, n

    async def stop_draft(
        self, transcript_id: str, draft_id: str, by: str
    ) -> tuple[list[dict[str, Any]], str | None]:
        """``Drafts.stop`` on the transcript's drafts: what the draft held back
        goes out first; returns the messages to commit in its place and the
        connection that wrote it last."""
        live = await self.hub.load(transcript_id)
        messages, writer, update = live.drafts.stop(draft_id, time.monotonic(), by)
        if update is not None:
            self.send(live, update)
        return messages, writer

    async def finished(self, transcript_id: str, draft_id: str) -> list[dict[str, Any]]:
        """``Drafts.finished``: what the draft held back goes out first;
        returns the messages to commit in its place."""
        live = await self.hub.load(transcript_id)
        messages, update = live.drafts.finished(draft_id, time.monotonic())
        if update is not None:
            self.send(live, update)
        return messages

    async def committed_as(self, transcript_id: str, draft_id: str) -> int | None:
        """``Drafts.committed_as`` on the transcript's drafts."""
        live = await self.hub.load(transcript_id)
        return live.drafts.committed_as(draft_id)

    def send(self, live: LiveTranscript, update: EncodedDraft) -> None:
        """A local update or close: to every subscriber, then to the other
        replicas."""
        self._fan_out(live, update)
        self._publish(update)

    def _flush_later(self, live: LiveTranscript, draft_id: str) -> None:
        """Send the deltas a draft held (``draft_coalesce_s`` passed)."""
        if self.hub.is_current(live):
            update = live.drafts.flush(draft_id, time.monotonic())
            if update is not None:
                self.send(live, update)

    def flush_all(self, live: LiveTranscript) -> None:
        """Send every held delta of ``live`` now (before a catch-up, whose
        ``text`` frames must be of updates every subscriber gets)."""
        for update in live.drafts.flush_all(time.monotonic()):
            self.send(live, update)

    def commit(self, live: LiveTranscript, draft_id: str, revision: int) -> None:
        """``CommitPort.commit_draft``: the append that commits the draft
        landed as ``revision`` (the committer calls it before answering).
        Deltas it held go out first: every reader's text is the whole draft
        when the message replaces it."""
        update = live.drafts.flush(draft_id, time.monotonic())
        if update is not None:
            self.send(live, update)
        frame = live.commit_draft(draft_id, revision, time.monotonic())
        if frame is not None:
            self._counters["final"].inc()
            self._publish(frame)

    def text(self, transcript_id: str, draft_id: str) -> wire.DraftFrame | None:
        """The ``text`` frame (``seq=0``) of an open draft as this replica
        holds it now; ``None`` when it is not open here (or the transcript is
        not held)."""
        live = self.hub.copy_of(transcript_id)
        frame = None if live is None else live.drafts.text(draft_id)
        return None if frame is None else frame.frame

    def apply_remote(self, frame: wire.DraftFrame) -> bool:
        """An update or close of a draft that another replica published:
        applied to the copy here and fanned out to the local subscribers like
        a local one, never published again. False on a gap (apply the
        draft's current ``text`` then). A transcript not held here ignores
        it."""
        live = self.hub.copy_of(frame.transcript_id)
        if live is None:
            return True
        held = live.drafts.open.get(frame.draft_id) if frame.state == "final" else None
        writer = None if held is None or held.remote else held.writer
        result = live.drafts.apply_remote(frame, time.monotonic())
        if result is False:
            return False
        if result is not None:
            self._fan_out(live, result)
        if writer is not None:
            self._tell_writer_stopped(writer, frame)
        return True

    def _tell_writer_stopped(self, writer: str, frame: wire.DraftFrame) -> None:
        """A draft written here was committed by another replica: only a stop
        there does that (``stop_draft``), so its writer is told at once, as a
        stop on this replica tells it, instead of on its next op."""
        told = self.connections.get(writer)
        if told is None:
            return
        told.push_error(
            codes.DRAFT_CLOSED,
            f"draft {frame.draft_id!r} was stopped on another replica: what it held is "
            f"committed as revision {frame.revision}; stop writing it",
            transcript_id=frame.transcript_id,
            revision=frame.revision,
        )

    def _fan_out(self, live: LiveTranscript, update: EncodedDraft) -> None:
        live.push_draft(update)
        self._counters[_draft_kind(update.frame)].inc()

    def _publish(self, update: EncodedDraft) -> None:
        publisher = self.publisher
        if publisher is not None:
            publisher(update.frame)

    def catch_up(
        self, live: LiveTranscript, queue: OutboundQueue, resumed_from: int | None = None
    ) -> None:
        """Right behind a baseline or a resume, in the same step: the
        ``text`` of each open draft and, after a resume from
        ``resumed_from``, the ``final`` of each draft committed since
        (``Drafts.catch_up``): never the closes of drafts this consumer
        cannot hold, and nothing that counts against a reading client."""
        if live.drafts:
            self.flush_all(live)
            for frame in live.drafts.catch_up(time.monotonic(), resumed_from):
                queue.push_draft(frame, catch_up=True)

    async def _sweep(self) -> None:
        """Expire the drafts idle for ``draft_ttl_s``, on the loop, a batch of
        transcripts at a time."""
        ttl = self.hub.config.draft_ttl_s
        while True:
            await asyncio.sleep(max(ttl / DRAFT_SWEEPS_PER_TTL, MIN_DRAFT_SWEEP_S))
            looked = 0
            for live in self.hub.copies():
                looked += 1
                if looked % DRAFT_SWEEP_BATCH == 0:
                    await asyncio.sleep(0)
                if not live.drafts or not self.hub.is_current(live):
                    continue
                local, remote = live.drafts.expire(time.monotonic())
                for frame in (*local, *remote):
                    self._fan_out(live, frame)
                for frame in local:
                    self._publish(frame)
            for transcript_id, drafts in list(self.parked.items()):
                # Let go from memory: nobody subscribes; only published.
                local, _ = drafts.expire(time.monotonic())
                for frame in local:
                    self._counters["expired"].inc()
                    self._publish(frame)
                if not drafts:
                    del self.parked[transcript_id]
            self.sweeps += 1

    def open_count(self) -> int:
        """Open drafts of the transcripts held here (``tsync_drafts_open``)."""
        held = sum(live.drafts.open_count() for live in self.hub.copies())
        return held + sum(drafts.open_count() for drafts in self.parked.values())
