"""Changes: create, append, segment starts and Views, through the committer.

``append`` validates a batch and queues it on the transcript's committer
(``server.live.appends``: appends that queue up while the store is busy are
committed together and their increments leave together); a segment start or
a View change is one change committed under the transcript's lock on its
current copy. ``create`` writes a new transcript straight to the store.

Given the hub as its ``Registry`` port (``server.live.ports``) by the hub.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from protocol.types import Message, Origin, TranscriptEvent
from protocol.validation import parse_messages, validate_id
from protocol.views import InvalidView
from server.live.appends import AppendCommitter, PendingAppend
from server.live.ports import Registry
from server.model.transcript import Transcript
from server.store.base import AppendResult, NewTranscript

__all__ = ["Writes", "now_ms"]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Writes:
    """The hub's changes (``hub.writes``)."""

    def __init__(self, hub: Registry, committer: AppendCommitter) -> None:
        self.hub = hub
        self.committer = committer

    async def create(
        self,
        transcript_id: str | None,
        messages: object = (),
        *,
        origin: Origin | None = None,
    ) -> tuple[str, str, int]:
        """Create a transcript (initial messages are revision 1); returns
        ``(id, epoch, revision)``. Raises ``TranscriptExists``."""
        tid = validate_id(transcript_id) if transcript_id is not None else uuid.uuid4().hex
        parsed = self._parse(messages)
        epoch = uuid.uuid4().hex
        draft = Transcript(id=tid, epoch=epoch, limits=self.hub.config.message_limits)
        first = draft.prepare_append(parsed, origin=origin) if parsed else None
        await self.hub.store.create(NewTranscript(tid, epoch, now_ms(), first))
        if first is not None:
            self.hub.metrics.appended("create", "messages-appended")
        return tid, epoch, 1 if first is not None else 0

    def _parse(self, messages: object) -> tuple[Message, ...]:
        if isinstance(messages, tuple) and all(isinstance(m, Message) for m in messages):
            return messages
        limits = self.hub.config.message_limits
        return parse_messages(
            messages,
            max_messages=limits.max_messages_per_batch,
            max_message_bytes=limits.max_message_bytes,
            max_depth=limits.max_depth,
        )

    async def append(
        self,
        transcript_id: str,
        messages: object,
        *,
        expected_revision: int | None = None,
        idempotency_key: str | None = None,
        origin: Origin | None = None,
        transport: str = "ws",
        draft_id: str | None = None,
        stopping: bool = False,
    ) -> AppendResult:
        """Append one batch, all or nothing; the result's ``receipt`` is what
        to acknowledge, ``duplicate`` whether the key had been seen. Raises
        ``InvalidMessage``, ``RevisionConflict``, ``TranscriptNotFound``,
        ``StoreUnavailable``. ``draft_id``: the batch commits that draft (it
        closes in the same step; a refused append leaves it open; a draft a
        reader stopped is ``draft-closed``: its stop commits it, ``stopping``).

        Appends to one transcript that queue up while the store is busy are
        committed together (``server.live.appends``) and their increments leave
        together.
        """
        started = time.perf_counter()
        parsed = self._parse(messages)
        live = await self.hub.load(transcript_id)
        if draft_id is not None:
            # ``stopping``: the append of a reader's stop (the others are refused).
            live.drafts.check_commit(draft_id, by_stop=stopping)
        pending = PendingAppend(
            parsed, expected_revision, idempotency_key, origin, transport, draft_id
        )
        result = await self.committer.append(live, pending)  # raises what the append raised
        self.hub.metrics.append_latency.observe(time.perf_counter() - started)
        return result

    async def start_segment(
        self,
        transcript_id: str,
        start: int | None = None,
        *,
        origin: Origin | None = None,
        transport: str = "ws",
    ) -> AppendResult:
        """Start a segment. Raises ``InvalidSegment`` and the errors of ``append``."""
        return await self._change(
            transcript_id,
            lambda transcript: transcript.prepare_segment(start, origin=origin),
            transport,
        )

    async def set_view(
        self,
        transcript_id: str,
        name: str,
        start: int,
        end: int | None = None,
        *,
        origin: Origin | None = None,
        transport: str = "ws",
    ) -> AppendResult:
        """Create or move a View; ``duplicate`` when it already had that range
        (nothing changed). Raises ``InvalidView`` and the errors of ``append``."""
        return await self._change(
            transcript_id,
            lambda transcript: self._prepare_view(transcript, name, start, end, origin),
            transport,
        )

    def _prepare_view(
        self, transcript: Transcript, name: str, start: int, end: int | None, origin: Origin | None
    ) -> TranscriptEvent | None:
        limit = self.hub.config.max_views_per_transcript
        views = transcript.state.views
        if name not in views and len(views) >= limit:
            raise InvalidView(
                f"transcript {transcript.id!r} has {limit} Views, its max_views_per_transcript: "
                "leave one before setting another"
            )
        return transcript.prepare_view(name, start, end, origin=origin)

    async def leave_view(
        self, transcript_id: str, name: str, *, origin: Origin | None = None, transport: str = "ws"
    ) -> AppendResult:
        """Leave a View; ``duplicate`` when there was none (nothing changed)."""
        return await self._change(
            transcript_id,
            lambda transcript: transcript.prepare_leave_view(name, origin=origin),
            transport,
        )

    async def _change(
        self,
        transcript_id: str,
        prepare: Callable[[Transcript], TranscriptEvent | None],
        transport: str,
    ) -> AppendResult:
        """Commit the one change ``prepare`` builds (a segment start, a View
        change) under the transcript's lock, on its current copy."""
        while True:
            live = await self.hub.load(transcript_id)
            async with live.lock:
                if not self.hub.is_current(live):
                    continue
                result = await self.committer.commit_change(live, prepare, transport)
            if result is not None:
                return result
