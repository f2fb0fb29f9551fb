"""The drafts of one live transcript: messages being written, shared live.

A draft (``docs/protocol.md``, Drafts) is never part of the transcript: it
never changes the revision, the store never sees it, and it lives only here,
beside the ``LiveTranscript`` that holds ``Drafts`` as ``live.drafts``. This
module keeps the registry and decides; it does no I/O and never awaits (the
hub fans out what it returns and runs the expiry sweep):

- ``Drafts.write`` applies a ``draft`` op (open, ``delta``, ``text``,
  ``cancel``, keep-alive) or refuses it with a ``Refused`` of the error
  table (``too-many-drafts``, ``draft-too-large``, ``draft-closed``);
- ``Drafts.commit`` closes a draft as ``final`` when an ``append`` with its
  ``draftId`` landed as revision R (the hub sends that frame right behind
  the increment, in the same flush);
- ``Drafts.expire`` closes the drafts idle for ``draft_ttl_s`` and forgets
  closes older than that;
- ``Drafts.catch_up`` is what a subscriber gets after its baseline or resume:
  one ``text`` frame per open draft and, after a resume from revision R only,
  the ``final`` of each draft committed after R (at most one per increment
  the resume brings: never a backlog a writer can grow);
- ``DraftBudget`` counts the bytes drafts hold, server-wide
  (``max_draft_bytes``) and per writing connection
  (``max_connection_draft_bytes``); an update past either is refused.
- ``Drafts.apply_remote`` takes an update another replica made;
- ``Drafts.stream`` is a draft's Durable Stream (``server.streams.transcripts``):
  its text in UTF-8 as it grows, closed when the draft closes or a ``text``
  rewrites it (then frozen at what both texts share); a close keeps the
  stream's bytes for ``ttl`` (counted in the budget) for readers behind.

Every update is one ``server.live.frames.EncodedDraft``: encoded once, fanned out
to every subscriber's queue like an increment. A draft's ``text`` frame of
its current update is encoded at most once too (late joiners and merged
slots of slow connections share it).

The hooks of the Redis backplane (helper C), both on ``server.live.hub.Hub``:

(a) ``ReplicaLink.publish_draft: Callable[[wire.DraftFrame], None] | None``
    (``None`` when standalone). Called, synchronously and after the local
    fan-out, with the frame (``seq=0``) of every LOCAL update and close: a
    ``draft`` op's update, a commit's ``final``, a ``cancelled``, and the
    ``expired`` of a draft this replica's sweep closed. It must return at
    once (queue the publish). ``Hub.draft_text(transcript_id, draft_id)``
    gives the draft's whole text now as a ``text`` frame (for the key a
    late joiner on another replica reads), ``None`` when it is not open.
(b) ``DraftFanOut.apply_remote(frame: wire.DraftFrame) -> bool``: an update or
    close another replica published. Applied to the local copy and fanned
    out to the local subscribers exactly like a local one, never passed to
    ``publish_draft``. A reply with parts folds the frame's ``chunks`` (or
    ``replay``) into the copy's ``ui``. Returns False on a gap (a ``delta``
    or ``chunks`` whose ``n`` does not follow the copy's, chunks that do not
    fold, or a delta that would open a draft at ``n`` > 1): the
    caller then applies the draft's current text (a ``text`` frame read
    from Redis). A transcript not held here ignores it (True): seed a copy
    with ``text`` frames when the hub starts holding it
    (``ReplicaLink.held``). Remote copies that hear nothing expire here on
    their own, ``REMOTE_DRAFT_GRACE_S`` after ``draft_ttl_s`` (their
    replica may have died), without being published.

Why one module of over 600 lines: the rules of drafts (open, write, coalesce, commit,
cancel, expire, catch-up, another replica's updates, the memory budget) are one state
machine whose invariants hold across every op, pure and checked by one property test;
its I/O lives in ``server.live.draft_fanout``, and one draft's copy and the byte budget
in ``server.live.draft_copy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from protocol import codes, wire
from protocol.ui_stream import UIMessageState, UIStreamError
from server.errors import Refused
from server.live.draft_copy import (
    CHUNKS_ENCODER,
    DEFAULT_ROLE,
    PART_CHUNKS,
    UI_BYTES_HELD,
    ClosedDraft,
    DraftBudget,
    OpenDraft,
    Written,
    messages_of,
    utf8_length,
)
from server.live.frames import EncodedDraft
from server.tuning import CLOSED_DRAFT_COST, OPEN_DRAFT_COST, REMOTE_DRAFT_GRACE_S

__all__ = [
    "DEFAULT_ROLE",
    "UI_BYTES_HELD",
    "ClosedDraft",
    "DraftBudget",
    "DraftRules",
    "Drafts",
    "OpenDraft",
    "Written",
]


@dataclass(frozen=True, slots=True)
class DraftRules:
    """What every transcript's drafts keep to (the server's settings, one
    object for all of them).

    ``max_open``: open drafts at once (``max_drafts_per_transcript``);
    ``max_bytes``: a draft's text in UTF-8 bytes (``max_message_bytes``);
    ``ttl``: seconds an open draft lives without an update, and a closed one
    is remembered (``draft_ttl_s``); ``coalesce``: a delta written less than
    this many seconds after the draft's latest update is held and goes out
    with the others held then as one update, ``coalesce`` after that update
    (``draft_coalesce_s``; 0: every delta is its own update);
    ``max_closed``: closes remembered at once (``max_closed_drafts``): every
    close is remembered for the whole ``ttl``, and while this many are,
    opening a draft or cancelling one that is not open is refused instead
    (a commit and the close of an open draft are always remembered: a
    writer cannot make the registry forget a close); ``max_parts``: parts of
    a reply with parts (``max_draft_parts``).
    """

    max_open: int
    max_bytes: int
    ttl: float
    coalesce: float = 0.0
    max_closed: int = 1024
    max_parts: int = 1000


class Drafts:
    """The open and recently closed drafts of one transcript, kept to
    ``rules``; ``budget``: the server's ``DraftBudget`` (``None``: nothing is
    counted). Times are ``time.monotonic()`` values passed in, so that tests
    drive the clock.
    """

    __slots__ = ("budget", "closed", "open", "rules", "transcript_id")

    def __init__(
        self, transcript_id: str, rules: DraftRules, budget: DraftBudget | None = None
    ) -> None:
        self.transcript_id = transcript_id
        self.rules = rules
        self.budget = budget
        self.open: dict[str, OpenDraft] = {}
        #: Closed drafts by id, oldest close first.
        self.closed: dict[str, ClosedDraft] = {}

    def __bool__(self) -> bool:
        """Whether there is anything to sweep or send (open or recently closed)."""
        return bool(self.open or self.closed)

    def open_count(self) -> int:
        """How many drafts are open."""
        return len(self.open)

    def open_draft(self, draft_id: str) -> OpenDraft | None:
        """The open draft ``draft_id``, ``None`` when it is not open."""
        return self.open.get(draft_id)

    def open_drafts(self) -> list[OpenDraft]:
        """The open drafts, oldest first."""
        return list(self.open.values())

    def text(self, draft_id: str) -> EncodedDraft | None:
        """The ``text`` frame of an open draft now, ``None`` when not open."""
        draft = self.open.get(draft_id)
        return None if draft is None else draft.text_frame()

    # --- local writes -----------------------------------------------------------------

    def write(self, op: wire.Draft, *, now: float, writer: str | None = None) -> Written:
        """Apply one ``draft`` op (at most one of ``delta``, ``text``,
        ``chunks``, ``cancel``: ``wire.check_draft_op`` refused the others;
        an op with ``stop`` goes to ``stop``, not here) that the connection
        ``writer`` sent. Raises ``Refused`` and then changes nothing."""
        draft_id, role, delta, text = op.draft_id, op.role, op.delta, op.text
        self._check_not_stopped(draft_id)
        if op.chunks is not None:
            return self._write_chunks(draft_id, op.chunks, now=now, role=role, writer=writer)
        draft = self.open.get(draft_id)
        if draft is not None and draft.ui is not None and (delta is not None or text is not None):
            raise Refused(
                codes.INVALID_FRAME,
                f"draft {draft_id!r} is a reply with parts: write it with chunks, not "
                "delta or text",
            )
        if draft is None:
            self._check_not_closed(draft_id)
            self._check_closed_room(draft_id)
            if op.cancel:
                # Never opened here (its first token may still be on the way):
                # remember it, so that a late token opens no ghost draft.
                self._check_budget(draft_id, CLOSED_DRAFT_COST, None, 0)
                self._remember(draft_id, ClosedDraft("cancelled", now))
                return Written(0, None)
            self._check_open_room()
            size = self._check_size(draft_id, 0, delta if delta is not None else text)
            draft = self._open(draft_id, role, writer, OPEN_DRAFT_COST + size, now)
            if delta is not None:
                return Written(1, draft.appended(delta, size, now))
            return Written(1, draft.replaced(text or "", size, now))
        if op.cancel:
            return Written(draft.n, self._close(draft, "cancelled", None, now))
        if delta is not None:
            size = self._check_size(draft_id, draft.size, delta)
            self._take_over(draft, writer, size)
            if not delta:
                draft.updated = now
                return Written(draft.n, None)
            waits = self._coalesced(draft, now)
            if waits is not None:
                draft.hold(delta, size, now)
                return waits
            return Written(draft.n + 1, draft.appended(delta, size, now))
        if text is not None:
            size = self._check_size(draft_id, 0, text)
            self._take_over(draft, writer, size)
            return Written(draft.n + 1, draft.replaced(text, size, now))
        self._take_over(draft, writer, draft.size)
        draft.updated = now  # keep-alive
        return Written(draft.n, None)

    def _write_chunks(
        self,
        draft_id: str,
        chunks: list[dict[str, Any]],
        *,
        now: float,
        role: str | None,
        writer: str | None,
    ) -> Written:
        """A ``draft`` op with ``chunks``: a reply with parts (the first such
        op opens it, or turns an open draft that holds no text yet into one).
        The chunks are checked whole against the reply so far, its size
        (``max_message_bytes``) and its parts (``max_draft_parts``) before
        anything changes."""
        draft = self.open.get(draft_id)
        if draft is None:
            self._check_opening(draft_id)
            ui = UIMessageState(draft_id)
            held: list[dict[str, Any]] = []
            size = 0
        else:
            if draft.ui is None and (draft.size or draft.held):
                raise Refused(
                    codes.INVALID_FRAME,
                    f"draft {draft_id!r} holds text: write it with delta or text, or write "
                    "a reply with parts under another draftId",
                )
            ui = draft.ui or UIMessageState(draft_id)
            held = draft.held_chunks
            size = draft.ui_size
        try:
            ui.check(held + chunks)
        except UIStreamError as exc:
            raise Refused(
                codes.INVALID_FRAME, f"draft {draft_id!r}: {exc}; nothing was applied"
            ) from None
        size += len(CHUNKS_ENCODER.encode(chunks)) if chunks else 0
        if size > self.rules.max_bytes:
            raise Refused(
                codes.DRAFT_TOO_LARGE,
                f"draft {draft_id!r} would be {size} bytes of chunks, over the limit of "
                f"{self.rules.max_bytes} (max_message_bytes); the update was not applied",
            )
        parts = len(ui.parts) + sum(
            1 for c in held + chunks if c["type"] in PART_CHUNKS or c["type"].startswith("data-")
        )
        if parts > self.rules.max_parts:
            raise Refused(
                codes.DRAFT_TOO_LARGE,
                f"draft {draft_id!r} would have {parts} parts, over the limit of "
                f"{self.rules.max_parts} (max_draft_parts); the update was not applied",
            )
        if draft is None:
            draft = self._open(draft_id, role, writer, OPEN_DRAFT_COST + UI_BYTES_HELD * size, now)
            draft.ui, draft.ui_size = ui, size
            return Written(1, draft.folded(chunks, now))
        self._take_over(draft, writer, UI_BYTES_HELD * size)
        draft.ui, draft.ui_size = ui, size
        if not chunks:
            draft.updated = now
            return Written(draft.n, None)
        waits = self._coalesced(draft, now)
        if waits is not None:
            draft.hold_chunks(chunks, now)
            return waits
        return Written(draft.n + 1, draft.folded(chunks, now))

    def _coalesced(self, draft: OpenDraft, now: float) -> Written | None:
        """What holding a delta (or chunks) written now answers, ``None`` when
        it goes out at once: it waits with the others held since the draft's
        last update, to go out ``DraftRules.coalesce`` after that update (the
        first one held says when). The caller then holds it."""
        coalesce = self.rules.coalesce
        if not coalesce or (not draft.held and now - draft.sent_at >= coalesce):
            return None
        return Written(draft.n, None, None if draft.held else draft.sent_at + coalesce)

    def _check_not_stopped(self, draft_id: str) -> None:
        draft = self.open.get(draft_id)
        if draft is not None and draft.stopped_by is not None:
            # ``stopping``: its writer is told with the commit's revision as
            # soon as it lands (a ref-less op's refusal need not be sent).
            raise Refused(
                codes.DRAFT_CLOSED,
                f"draft {draft_id!r} of transcript {self.transcript_id!r} was stopped by "
                f"{draft.stopped_by}: what it held is being committed; stop writing it",
                stopping=True,
            )

    def check_commit(self, draft_id: str, *, by_stop: bool = False) -> None:
        """Refuse an append that would commit a draft a reader stopped (its
        writer's commit, sent before it heard of the stop): the stop commits
        what the draft held, once (``draft-closed``, with the stop's
        ``revision`` once it landed). ``by_stop``: the stop's own append."""
        if by_stop:
            return
        self._check_not_stopped(draft_id)
        closed = self.closed.get(draft_id)
        if closed is not None and closed.stopped_by is not None and closed.final is not None:
            revision = closed.final.frame.revision
            raise Refused(
                codes.DRAFT_CLOSED,
                f"draft {draft_id!r} of transcript {self.transcript_id!r} was stopped by "
                f"{closed.stopped_by}: what it held is committed as revision {revision}",
                revision=revision,
            )

    def stop(
        self, draft_id: str, now: float, by: str
    ) -> tuple[list[dict[str, Any]], str | None, EncodedDraft | None]:
        """A reader stops an open draft (``by`` names who): it takes no more
        updates, and what it holds is the message to commit in its place,
        marked ``stopped`` in its metadata (a reply with parts: its
        ``UIMessage`` as ``from_ui_message`` maps it, ``stopped`` in the
        UIMessage's metadata too). Returns those messages, the connection
        that wrote it last (to tell) and the update of what it held back
        (``None``: nothing). Raises ``draft-closed`` when it is not open or
        is being stopped already; then nothing changes."""
        draft = self._open_to_end(draft_id)
        update = draft.release(now)
        draft.stopped_by = by
        return messages_of(draft, stopped=True), draft.writer, update

    def finished(
        self, draft_id: str, now: float
    ) -> tuple[list[dict[str, Any]], EncodedDraft | None]:
        """A reply with parts whose writer finished it: the messages to
        commit in its place (its ``UIMessage`` as ``from_ui_message`` maps
        it), and the update of what it held back. Raises ``draft-closed``
        when it is not open (a reader stopped it, say)."""
        draft = self._open_to_end(draft_id)
        update = draft.release(now)
        return messages_of(draft, stopped=False), update

    def _open_to_end(self, draft_id: str) -> OpenDraft:
        """The open draft a stop or a finish ends; ``draft-closed`` when it is
        not open, or a stop is ending it already."""
        self._check_not_stopped(draft_id)
        draft = self.open.get(draft_id)
        if draft is None:
            closed = self.closed.get(draft_id)
            raise Refused(
                codes.DRAFT_CLOSED,
                f"draft {draft_id!r} of transcript {self.transcript_id!r} "
                + (f"was {closed.state} already" if closed else "is not open")
                + ": there is nothing to end",
            )
        return draft

    def committed_as(self, draft_id: str) -> int | None:
        """The revision that committed ``draft_id`` within ``ttl`` (``None``:
        not committed, or forgotten)."""
        closed = self.closed.get(draft_id)
        if closed is None or closed.final is None:
            return None
        return closed.final.frame.revision

    def _check_not_closed(self, draft_id: str) -> None:
        closed = self.closed.get(draft_id)
        if closed is not None:
            raise Refused(
                codes.DRAFT_CLOSED,
                f"draft {draft_id!r} of transcript {self.transcript_id!r} was "
                f"{closed.state} already: write a new draft under another draftId",
            )

    def _check_opening(self, draft_id: str) -> None:
        """Refuse to open ``draft_id``: closed already, too many closes
        remembered, or too many open."""
        self._check_not_closed(draft_id)
        self._check_closed_room(draft_id)
        self._check_open_room()

    def _check_open_room(self) -> None:
        """Refuse one more open draft past ``max_open``."""
        if len(self.open) >= self.rules.max_open:
            raise Refused(
                codes.TOO_MANY_DRAFTS,
                f"transcript {self.transcript_id!r} has {len(self.open)} open drafts, the "
                f"most it may (max_drafts_per_transcript); commit, cancel or let one expire",
            )

    def _take_over(self, draft: OpenDraft, writer: str | None, size: int) -> None:
        """``writer`` changes ``draft`` to ``size`` bytes: check and charge it
        for the whole draft (a writer that reconnected goes on with its
        draft). Written here (a writer that moved from another replica): from
        now on this replica's to expire and to relay."""
        cost = OPEN_DRAFT_COST + size
        if writer is None:
            writer = draft.writer
        mine = cost - draft.cost if writer == draft.writer else cost
        self._check_budget(draft.draft_id, cost - draft.cost, writer, mine)
        self._charge(draft, writer, cost)
        draft.remote = False

    def _check_budget(self, draft_id: str, more: int, writer: str | None, mine: int) -> None:
        if self.budget is not None:
            self.budget.check(self.transcript_id, draft_id, more, writer, mine)

    def _open(
        self, draft_id: str, role: str | None, writer: str | None, cost: int, now: float
    ) -> OpenDraft:
        """Open ``draft_id`` for ``writer`` at ``cost`` (checked against the
        budget first), empty: the caller gives it its first text or chunks."""
        self._check_budget(draft_id, cost, writer, cost)
        draft = OpenDraft(self.transcript_id, draft_id, role or DEFAULT_ROLE, now)
        self._charge(draft, writer, cost)
        self.open[draft_id] = draft
        return draft

    def _charge(self, draft: OpenDraft, writer: str | None, cost: int) -> None:
        """Charge ``draft`` to ``writer`` at ``cost`` (0: release it)."""
        budget = self.budget
        if budget is not None:
            if draft.cost:
                budget.charge(draft.writer, -draft.cost)
            if cost:
                budget.charge(writer, cost)
        draft.writer = writer
        draft.cost = cost

    def _check_closed_room(self, draft_id: str) -> None:
        """Refuse to open or cancel one more draft while ``max_closed``
        closes are remembered: no close is forgotten before ``ttl``."""
        if len(self.closed) >= self.rules.max_closed:
            raise Refused(
                codes.TOO_MANY_DRAFTS,
                f"draft {draft_id!r}: transcript {self.transcript_id!r} remembers "
                f"{len(self.closed)} drafts closed in the last draft_ttl_s, the most it may "
                "(max_closed_drafts); retry once they are forgotten",
            )

    def flush(self, draft_id: str, now: float) -> EncodedDraft | None:
        """The held deltas of an open draft as its next update (``None``:
        none held, or it is not open)."""
        draft = self.open.get(draft_id)
        return None if draft is None else draft.release(now)

    def flush_all(self, now: float) -> list[EncodedDraft]:
        """``flush`` every open draft (before a catch-up or a commit, whose
        frames must hold every delta written so far)."""
        return [f for d in self.open.values() if d.held and (f := d.release(now)) is not None]

    def _check_size(self, draft_id: str, size: int, more: str | None) -> int:
        """The size after adding ``more`` to ``size`` bytes; ``draft-too-large``
        past ``max_bytes``."""
        if not more:
            return size
        total = size + utf8_length(more)
        if total > self.rules.max_bytes:
            raise Refused(
                codes.DRAFT_TOO_LARGE,
                f"draft {draft_id!r} would be {total} bytes of UTF-8, over the limit of "
                f"{self.rules.max_bytes} (max_message_bytes); the update was not applied",
            )
        return total

    def commit(self, draft_id: str, revision: int, now: float) -> EncodedDraft | None:
        """The append with this ``draftId`` landed as ``revision``: close the
        draft ``final``; its frame (``None`` when it was not open: then it is
        only remembered as committed, so that late tokens are refused)."""
        draft = self.open.get(draft_id)
        if draft is None:
            if draft_id not in self.closed:
                self._remember(draft_id, ClosedDraft("final", now))
            return None
        return self._close(draft, "final", revision, now)

    def _close(
        self, draft: OpenDraft, state: wire.DraftState, revision: int | None, now: float
    ) -> EncodedDraft:
        del self.open[draft.draft_id]
        self._charge(draft, None, 0)
        frame = draft.close_frame(state, revision)
        final = frame if state == "final" else None
        self._remember(
            draft.draft_id, ClosedDraft(state, now, final, draft.stream(0)[0], draft.stopped_by)
        )
        return frame

    def _remember(self, draft_id: str, entry: ClosedDraft) -> None:
        closed = self.closed
        before = closed.pop(draft_id, None)
        closed[draft_id] = entry
        if self.budget is not None:
            self.budget.charge(None, entry.cost - (0 if before is None else before.cost))

    def stream(self, draft_id: str, start: int) -> tuple[bytes, int, bool] | None:
        """The Durable Stream of a draft from byte ``start``: its bytes, its
        end and whether it is closed (committed, cancelled, expired, or its
        text rewritten); ``None`` when the draft is neither open nor closed
        within ``ttl``. A start past a closed stream's end reads as its end."""
        draft = self.open.get(draft_id)
        if draft is not None:
            return draft.stream(start)
        closed = self.closed.get(draft_id)
        if closed is None:
            return None
        text = closed.text or b""
        return text[start:], len(text), True

    def drop(self) -> None:
        """Forget everything (the transcript is gone): release what the
        drafts were charged."""
        for draft in self.open.values():
            self._charge(draft, None, 0)
        if self.budget is not None:
            self.budget.charge(None, -sum(c.cost for c in self.closed.values()))
        self.open.clear()
        self.closed.clear()

    def drop_remote(self) -> None:
        """Forget the copies of other replicas' drafts (this replica stops
        hearing about them; it copies them anew when it holds the transcript
        again)."""
        for draft_id, draft in list(self.open.items()):
            if draft.remote:
                self._charge(draft, None, 0)
                del self.open[draft_id]

    # --- time -------------------------------------------------------------------------

    def expire(self, now: float) -> tuple[list[EncodedDraft], list[EncodedDraft]]:
        """Close the drafts idle for ``ttl`` (remote copies: ``ttl`` +
        ``REMOTE_DRAFT_GRACE_S``) as ``expired`` and forget the closes older
        than ``ttl``. Returns the close frames of the local drafts and those
        of the remote copies (only the first are published)."""
        local: list[EncodedDraft] = []
        remote: list[EncodedDraft] = []
        if self.open:
            cutoff = now - self.rules.ttl
            for draft in list(self.open.values()):
                if draft.updated < (cutoff - REMOTE_DRAFT_GRACE_S if draft.remote else cutoff):
                    frame = self._close(draft, "expired", None, now)
                    (remote if draft.remote else local).append(frame)
        closed = self.closed
        cutoff = now - self.rules.ttl
        forgotten = 0
        while closed:
            first = next(iter(closed))
            if closed[first].closed_at >= cutoff:
                break
            forgotten += closed.pop(first).cost
        if forgotten and self.budget is not None:
            self.budget.charge(None, -forgotten)
        return local, remote

    def catch_up(self, now: float, resumed_from: int | None = None) -> list[EncodedDraft]:
        """What a subscriber gets right behind its baseline or resume: the
        ``text`` of every open draft, and after a resume from revision
        ``resumed_from`` (``None``: a baseline) the ``final`` of each draft
        committed after it within ``ttl``: the consumer may hold such a draft
        and gets its message in this resume (the final of revision R came
        with increment R). No other close: nobody gets a close of a draft it
        cannot hold, and a resume gets at most one per increment it brings."""
        frames = [draft.text_frame() for draft in self.open.values()]
        if resumed_from is not None and self.closed:
            cutoff = now - self.rules.ttl
            for closed in self.closed.values():
                final = closed.final
                if (
                    final is not None
                    and closed.closed_at >= cutoff
                    and (final.frame.revision or 0) > resumed_from
                ):
                    frames.append(final)
        return frames

    # --- other replicas -----------------------------------------------------------------

    def apply_remote(
        self, frame: wire.DraftFrame, now: float
    ) -> EncodedDraft | Literal[False] | None:
        """Apply an update or close another replica made. Returns the frame
        to fan out locally, ``None`` when it changes nothing here (old, or a
        close of a draft not open here, which is remembered as closed all the
        same), ``False`` on a gap (a ``delta``, or ``chunks``, that does not
        follow the copy, or chunks that do not fold into it: apply the
        current ``text`` instead). Never refused: its bytes are charged to
        the total (the writing replica bounds them).

        A reply with parts: ``chunks`` are folded into the copy's ``ui``,
        a ``replay`` makes it anew, so that the copy's ``text_frame`` gives
        its late joiners a ``replay``; an update with neither makes the copy
        a draft of text alone (a replica that relays no chunks wrote it)."""
        draft_id = frame.draft_id
        draft = self.open.get(draft_id)
        if frame.state != "open":
            final = EncodedDraft(frame) if frame.state == "final" else None
            if draft is None:
                if draft_id not in self.closed:
                    # Never open here: remembered all the same, so that a late
                    # token written to this replica opens no ghost draft.
                    self._remember(draft_id, ClosedDraft(frame.state, now, final))
                return None
            del self.open[draft_id]
            self._charge(draft, None, 0)
            shared = final or EncodedDraft(frame)
            self._remember(draft_id, ClosedDraft(frame.state, now, final, draft.stream(0)[0]))
            return shared
        if draft is None:
            if draft_id in self.closed:
                return None  # closed here already: a late update
            if frame.text is None and frame.n != 1:
                return False
            draft = OpenDraft(self.transcript_id, draft_id, frame.role, now, remote=True)
            self.open[draft_id] = draft
        if frame.n <= draft.n:
            draft.updated = now
            return None
        if frame.text is None and frame.n != draft.n + 1:
            return False
        ui = _remote_ui(draft, frame)
        if ui is False:
            return False
        if frame.text is not None:
            draft._set(frame.text, utf8_length(frame.text), now)
        else:
            assert frame.delta is not None  # the shape of an open draft's frame
            draft._add(frame.delta, draft.size + utf8_length(frame.delta), now)
        if ui is None:
            draft.ui, draft.ui_size = None, 0
        else:
            draft.ui, draft.ui_size = ui
        draft.n = frame.n
        draft.remote = True
        # Charged as the writing replica charges it (a reply: its chunks' bytes
        # held three times, its text among them).
        held = draft.size if draft.ui is None else UI_BYTES_HELD * draft.ui_size
        self._charge(draft, None, OPEN_DRAFT_COST + held)
        shared = EncodedDraft(frame, draft)
        if frame.text is not None and frame.chunks is None:
            draft._text_frame = shared  # a text frame of this update, as a late joiner's
        return shared


def _remote_ui(
    draft: OpenDraft, frame: wire.DraftFrame
) -> tuple[UIMessageState, int] | Literal[False] | None:
    """The reply with parts of ``draft``'s copy after the remote update
    ``frame`` (an open draft's, newer than the copy) and the bytes of the
    chunks it took: ``frame.replay`` folded anew, or ``frame.chunks`` folded
    into the copy's reply (they follow it only when ``frame`` is update
    ``n`` + 1); ``None`` for a draft of text alone; ``False`` when the
    chunks do not follow or do not fold (a gap: read the stored reply).
    The copy's reply is changed only when ``frame`` is taken."""
    chunks = frame.replay if frame.replay is not None else frame.chunks
    if chunks is None:
        return None
    if frame.replay is not None:
        ui, size = UIMessageState(draft.draft_id), 0
    elif frame.n != draft.n + 1 or (draft.ui is None and draft.size):
        return False
    else:
        ui, size = draft.ui or UIMessageState(draft.draft_id), draft.ui_size
    try:
        ui.check(chunks)
    except UIStreamError:
        return False
    ui.apply_all(chunks)
    return ui, size + len(CHUNKS_ENCODER.encode(chunks))
