"""The committer: appends queued on a live transcript, committed in runs.

``Writes.append`` (``server.live.writes``) queues a ``PendingAppend`` here and
awaits its future. One committer task per live transcript (holding its lock) takes everything queued
and commits it: simple appends in runs through ``Store.append_many`` (one
transaction or one round trip, so the store's latency is paid once per run,
not once per append), and an append that needs more care (a key seen before,
an expected revision that differs, an empty batch) alone. Which queued
appends go into one run is ``plan_run``, a pure function.

Each append of a run is planned on top of the ones before it (its revision
and its start); the store stores only a prefix of the run (each append at
the revision and position it was planned for, nothing after one that was
not), so a run overtaken by another replica's append is acknowledged up to
where it landed, and the rest is planned again after catching up with the
store: an ack always names where its messages are stored, and the acks of a
run come in the order they were stored.

An append to an idle transcript (no committer task, nothing queued, its lock
free) on a store that can start a write without a task (``SubmitsAppends``:
SQLite, memory) is committed inline instead (``AppendCommitter.append``), in
the caller's task: no task is made, and the ack leaves in the step that
delivers the increments (on SQLite: the step the commit's answer reaches the
caller; the memory store answers at once, and the caller then gives the loop
one step before it acks, so that appending in a loop cannot starve the writers).
Anything that needs more care (a key seen before, an expected revision that
differs, a refused or overtaken write) goes through the queue as before.

A caller that goes away (its connection closed) cannot cut a store write in
half: a queued append is committed by the committer task, not the caller's;
an inline one shields the store's future (no task) and, when cancelled while
the write is under way, finishes the commit (applies it, delivers its
increments, remembers its key) before it lets the cancellation through, so a
retry with its key is answered as a duplicate.

This module never imports the hub: what it needs from it (is this copy still
the live one, catch up with other replicas, queue an append on the current
copy) comes through the small ``CommitPort``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from protocol.types import (
    Message,
    MessagesAppended,
    Origin,
    SegmentStarted,
    TranscriptEvent,
    ViewChanged,
    ViewLeft,
)
from server.errors import RevisionConflict
from server.live.live_transcript import LiveTranscript
from server.metrics import Metrics
from server.model.transcript import Transcript
from server.store.base import (
    AppendResult,
    Receipt,
    RevisionMismatch,
    Store,
    StoreUnavailable,
    SubmitsAppends,
)

log = logging.getLogger("tsync.appends")


def _future() -> asyncio.Future[AppendResult]:
    return asyncio.get_running_loop().create_future()


@dataclass(slots=True, eq=False)
class PendingAppend:
    """An append waiting for its commit; ``future`` gets its result.
    ``draft_id``: the draft it commits (closed when it succeeds)."""

    messages: tuple[Message, ...]
    expected_revision: int | None
    key: str | None
    origin: Origin | None
    transport: str
    draft_id: str | None = None
    future: asyncio.Future[AppendResult] = field(init=False, default_factory=_future)

    def succeed(self, result: AppendResult) -> None:
        if not self.future.done():
            self.future.set_result(result)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)
            # The caller may be gone (cancelled): its error is then nobody's
            # and must not be logged as never retrieved. Marked here rather
            # than by a done callback, which the loop would schedule (a
            # handle and a callback) for every append, failed or not.
            self.future.exception()


class AppendRequest(Protocol):
    """What planning looks at in a queued append."""

    @property
    def messages(self) -> Sequence[object]: ...
    @property
    def expected_revision(self) -> int | None: ...
    @property
    def key(self) -> str | None: ...


def plan_run(
    queued: Sequence[AppendRequest], *, revision: int, known: Callable[[str], bool]
) -> int:
    """How many appends from the front of ``queued`` can be committed together
    on a transcript at ``revision`` without looking anything up: each one
    non-empty, with a key neither ``known`` (remembered) nor used earlier in
    the run, and an expected revision (if any) that will be the current one
    when its turn comes. 0: the first one must go alone."""
    keys: set[str] = set()
    count = 0
    for p in queued:
        if not p.messages:
            break
        if p.key is not None and (p.key in keys or known(p.key)):
            break
        if p.expected_revision is not None and p.expected_revision != revision:
            break
        count += 1
        revision += 1
        if p.key is not None:
            keys.add(p.key)
    return count


class CommitPort(Protocol):
    """What the committer needs from the registry of live transcripts."""

    def is_current(self, live: LiveTranscript) -> bool:
        """Whether ``live`` is still the copy in use (not reloaded or forgotten)."""
        ...

    async def caught_up(self, live: LiveTranscript, *, mismatch: bool = False) -> bool:
        """Apply what other replicas stored (``live.lock`` held); False when
        ``live`` was replaced meanwhile."""
        ...

    async def requeue(self, pending: PendingAppend, transcript_id: str) -> None:
        """Queue ``pending`` again on the transcript's current copy."""
        ...

    def commit_draft(self, live: LiveTranscript, draft_id: str, revision: int) -> None:
        """The append that commits ``draft_id`` landed as ``revision``: close
        the draft (its ``final`` leaves right behind the increment)."""
        ...


class AppendCommitter:
    """Commits the appends queued on live transcripts (one task per transcript)."""

    def __init__(self, store: Store, metrics: Metrics, port: CommitPort) -> None:
        self.store = store
        self.metrics = metrics
        self.port = port
        self._queued: dict[LiveTranscript, list[PendingAppend]] = {}
        self._tasks: dict[LiveTranscript, asyncio.Task[None]] = {}
        #: Starts a write without a task (``SubmitsAppends``), if the store can.
        self._submit_appends = store.submit_appends if isinstance(store, SubmitsAppends) else None

    async def append(self, live: LiveTranscript, pending: PendingAppend) -> AppendResult:
        """Commit ``pending`` on ``live`` and return its result (or raise its
        error): inline when ``live`` is idle and the append is a simple one,
        else through the queue and the committer task."""
        submit = self._submit_appends
        if (
            submit is None
            or live in self._tasks
            or self._queued.get(live)
            or live.lock.locked()
            or not self.port.is_current(live)
            or plan_run((pending,), revision=live.transcript.revision, known=live.knows) != 1
        ):
            return await self._queue(live, pending)
        try:
            (event,) = live.transcript.prepare_appends([(pending.messages, pending.origin)])
        except Exception:
            return await self._queue(live, pending)  # alone there: it fails precisely
        # Free, so this takes it at once (no wait, no step of the loop).
        await live.lock.acquire()
        cancelled = False
        waited = True
        try:
            future = submit([(event, pending.key)])
            waited = not future.done()
            if not waited:
                # The store answered at once (memory): deliver at the next
                # turn of the loop, from a callback queued before the
                # capture's wake-up (``_accepted`` below), so that the buffer
                # is empty when that wake-up looks and the pump is not woken
                # for nothing (it was, once per append, when this task
                # delivered after its ``sleep(0)``: the wake-up came first).
                asyncio.get_running_loop().call_soon(live.deliver_pending)
            while not future.done():
                try:
                    await asyncio.shield(future)
                except asyncio.CancelledError:
                    # The write is under way: finish the commit, then give in.
                    cancelled = True
            (outcome,) = future.result()  # raises StoreUnavailable: nothing landed
            if isinstance(outcome, RevisionMismatch):
                # Overtaken by another replica: the committer catches up and
                # plans it again (it waits for the lock held here).
                self.metrics.replans.inc()
                self.submit(live, pending)
            elif isinstance(outcome, Exception):
                raise outcome
            else:
                self._accepted(live, pending, event, outcome)
                if waited:
                    live.deliver_pending()
        finally:
            live.lock.release()
            if cancelled:  # the commit is finished (or requeued): give in now
                raise asyncio.CancelledError
        if not waited:
            # The store answered at once (memory): still give the loop a step,
            # as the queue did, or a caller appending in a loop would starve
            # the writers that drain what it delivers; the delivery queued
            # above runs in that step, so that what the other appends of
            # this step applied leaves with it, as one message per
            # subscriber (a burst from one writer, pipelined, is as many
            # inline appends in one step). Still before the ack.
            await asyncio.sleep(0)
        return await pending.future  # done, unless requeued

    async def _queue(self, live: LiveTranscript, pending: PendingAppend) -> AppendResult:
        self.submit(live, pending)
        # Not shielded: if the caller is cancelled the future is, and the
        # committer, which owns the commit, skips answering it.
        return await pending.future  # raises what the append raised

    def submit(self, live: LiveTranscript, pending: PendingAppend) -> None:
        """Queue ``pending`` on ``live`` and make sure its committer runs."""
        self._queued.setdefault(live, []).append(pending)
        task = self._tasks.get(live)
        if task is None or task.done():
            # Unnamed: one is made per append to an idle transcript, and naming
            # it cost 4% of the server's CPU in the chatroom profile.
            self._tasks[live] = asyncio.create_task(self._run(live))

    def busy(self, live: LiveTranscript) -> bool:
        """Whether appends are queued on or being committed to ``live`` (or
        anything else holds its lock: an inline commit, a change)."""
        return bool(self._queued.get(live)) or live in self._tasks or live.lock.locked()

    async def stop(self) -> None:
        """Cancel every committer; what was queued fails ``unavailable``."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, live: LiveTranscript) -> None:
        failure: BaseException = StoreUnavailable("server shutting down")
        try:
            async with live.lock:
                while self._queued.get(live):
                    await self._commit_queued(live)
        except Exception as exc:  # a bug: say so, and fail what waits with it
            log.exception("the committer of transcript %s failed", live.id)
            failure = exc
        finally:
            # Left over when cancelled (shutdown), even before the lock, or
            # after a bug above.
            for p in self._queued.pop(live, ()):
                p.fail(failure)
            if self._tasks.get(live) is asyncio.current_task():
                del self._tasks[live]

    async def _commit_queued(self, live: LiveTranscript) -> None:
        """Commit every append queued on ``live`` (under its lock), resolving
        each one's future."""
        batch = self._queued.pop(live)
        i = 0
        alone = False  # send batch[i] alone (the store refused it in a run)
        try:
            while i < len(batch):
                if not self.port.is_current(live):
                    # A catch-up replaced this copy: the rest goes to the new one.
                    for p in batch[i:]:
                        await self.port.requeue(p, live.id)
                    i = len(batch)
                    return
                count = (
                    0
                    if alone
                    else plan_run(batch[i:], revision=live.transcript.revision, known=live.knows)
                )
                alone = False
                if count == 0:
                    p = batch[i]
                    try:
                        alone_result = await self._commit_alone(live, p)
                    except Exception as exc:
                        p.fail(exc)
                    else:
                        if alone_result is None:  # the copy was replaced: start over there
                            await self.port.requeue(p, live.id)
                        else:
                            self._succeed(live, p, alone_result)
                            live.deliver_pending()
                    i += 1
                    continue
                run, start = batch[i : i + count], i
                try:
                    events = live.transcript.prepare_appends([(p.messages, p.origin) for p in run])
                except Exception:
                    # The entity refused one of them (it checks again, with the
                    # same configured limits): each goes alone, so that only
                    # that one fails.
                    alone = True
                    continue
                try:
                    results = await self.store.append_many(
                        [(e, p.key) for p, e in zip(run, events, strict=True)]
                    )
                except Exception as exc:  # the store is unavailable: none of them landed
                    for p in run:
                        p.fail(exc)
                    i += len(run)
                    continue
                # The store stored a prefix of the run (``Store.append_many``):
                # each one up to the first that was not stored, none after it.
                overtaken = False
                for p, event, result in zip(run, events, results, strict=True):
                    if isinstance(result, RevisionMismatch):
                        overtaken = True  # another replica's change landed first
                        break
                    if isinstance(result, Exception):
                        p.fail(result)
                        i += 1
                        break  # the rest was planned on top of this one: plan again
                    self._accepted(live, p, event, result)
                    i += 1
                    if result.duplicate:
                        break  # the next ones were planned on a revision that did not happen
                # The run's increments go out now, together, from this task
                # (before the acks, whose callers wake up next): the pump
                # need not wake for them.
                live.deliver_pending()
                if overtaken:
                    self.metrics.replans.inc(len(run) - (i - start))
                    # Plan the rest again on the stored state: apply what the
                    # other replicas stored (a copy that cannot catch up is
                    # replaced, and the rest goes to the new one above).
                    try:
                        await self.port.caught_up(live, mismatch=True)
                    except Exception:
                        # The store failed meanwhile (or the transcript is
                        # gone): the next append goes alone, which catches up
                        # again and fails only that one if it cannot.
                        alone = True
        finally:
            # Cancelled (shutdown) half-way: what is left goes back in the queue.
            rest = [p for p in batch[i:] if not p.future.done()]
            if rest:
                self._queued[live] = rest + self._queued.get(live, [])

    def _accepted(
        self, live: LiveTranscript, p: PendingAppend, event: TranscriptEvent, result: AppendResult
    ) -> None:
        if result.duplicate:
            self.metrics.duplicates.inc()
        else:
            live.transcript.apply(event)
            self.metrics.appended(p.transport, "messages-appended")
        live.remember(p.key, result.receipt)
        self._succeed(live, p, result)

    def _succeed(self, live: LiveTranscript, p: PendingAppend, result: AppendResult) -> None:
        """Answer ``p``, closing the draft it commits in the same step (only
        an append that succeeded closes its draft)."""
        if p.draft_id is not None:
            self.port.commit_draft(live, p.draft_id, result.receipt.revision)
        p.succeed(result)

    async def _commit_alone(self, live: LiveTranscript, p: PendingAppend) -> AppendResult | None:
        """One append on its own (under ``live.lock``): replays, conflicts,
        catching up with other replicas. ``None`` when ``live`` was replaced."""
        caught_up = False
        while True:
            if not self.port.is_current(live):
                return None
            replay = live.receipt(p.key)
            if replay is not None:
                self.metrics.duplicates.inc()
                return AppendResult(replay, duplicate=True)
            transcript = live.transcript
            expected = p.expected_revision
            if expected is not None and expected != transcript.revision:
                if p.key is not None:
                    # A retry of an append that landed long ago (its key is no
                    # longer in memory) expects the revision it had then.
                    recorded = await self.store.recorded(live.id, p.key)
                    if recorded is not None:
                        self.metrics.duplicates.inc()
                        return AppendResult(recorded, duplicate=True)
                if expected > transcript.revision and not caught_up:
                    # This copy may trail a change made through another replica.
                    caught_up = True
                    await self.port.caught_up(live)
                    continue
                raise RevisionConflict(live.id, expected, transcript.revision)
            event = transcript.prepare_append(p.messages, origin=p.origin)
            if event is None:  # an empty batch changes nothing
                return AppendResult(Receipt(transcript.revision, transcript.length, 0))
            try:
                result = await self.store.append(event, idempotency_key=p.key)
            except RevisionMismatch:
                # Another replica moved the transcript on: catch up and retry.
                self.metrics.replans.inc()
                await self.port.caught_up(live, mismatch=True)
                continue
            if not result.duplicate:
                transcript.apply(event)
                self.metrics.appended(p.transport, "messages-appended")
            live.remember(p.key, result.receipt)
            return result

    async def commit_change(
        self,
        live: LiveTranscript,
        prepare: Callable[[Transcript], TranscriptEvent | None],
        transport: str,
    ) -> AppendResult | None:
        """Commit the one change ``prepare`` builds on ``live`` (a segment
        start, a View change; the caller holds ``live.lock``), catching up
        with the store when another replica moved on. ``prepare`` raises what
        refuses the change, or returns ``None`` when it would change nothing:
        then the result repeats the current revision as a ``duplicate``.
        ``None`` when ``live`` was replaced by a catch-up (start over)."""
        while True:
            transcript = live.transcript
            event = prepare(transcript)
            if event is None:
                return AppendResult(Receipt(transcript.revision, 0, 0), duplicate=True)
            try:
                result = await self.store.append(event)
            except RevisionMismatch:
                if not await self.port.caught_up(live, mismatch=True):
                    return None
                continue
            live.transcript.apply(event)
            self.metrics.appended(transport, _KINDS[type(event.change)])
            return result


#: The metrics label of each kind of change.
_KINDS: Final[dict[type, str]] = {
    MessagesAppended: "messages-appended",
    SegmentStarted: "segment-started",
    ViewChanged: "view-changed",
    ViewLeft: "view-left",
}
