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
  one ``text`` frame per open draft and the close frame of every draft
  closed within ``draft_ttl_s``;
- ``Drafts.apply_remote`` takes an update another replica made.

Every update is one ``server.frames.EncodedDraft``: encoded once, fanned out
to every subscriber's queue like an increment. A draft's ``text`` frame of
its current update is encoded at most once too (late joiners and merged
slots of slow connections share it).

The hooks of the Redis backplane (helper C), both on ``server.hub.Hub``:

(a) ``Hub.draft_publisher: Callable[[wire.DraftFrame], None] | None``
    (``None`` when standalone). Called, synchronously and after the local
    fan-out, with the frame (``seq=0``) of every LOCAL update and close: a
    ``draft`` op's update, a commit's ``final``, a ``cancelled``, and the
    ``expired`` of a draft this replica's sweep closed. It must return at
    once (queue the publish). ``Hub.draft_text(transcript_id, draft_id)``
    gives the draft's whole text now as a ``text`` frame (for the key a
    late joiner on another replica reads), ``None`` when it is not open.
(b) ``Hub.apply_remote_draft(frame: wire.DraftFrame) -> bool``: an update or
    close another replica published. Applied to the local copy and fanned
    out to the local subscribers exactly like a local one, never passed to
    ``draft_publisher``. Returns False on a gap (a ``delta`` whose ``n`` does
    not follow the copy's, or that would open a draft at ``n`` > 1): the
    caller then applies the draft's current text (a ``text`` frame read
    from Redis). A transcript not held here ignores it (True): seed a copy
    with ``text`` frames when the hub starts holding it
    (``HoldListener.held``). Remote copies that hear nothing expire here on
    their own, ``REMOTE_DRAFT_GRACE_S`` after ``draft_ttl_s`` (their
    replica may have died), without being published.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

from protocol import codes, wire
from server.errors import Refused
from server.frames import EncodedDraft
from server.tuning import MAX_CLOSED_DRAFTS, REMOTE_DRAFT_GRACE_S

#: The role a draft is opened with when the op names none.
DEFAULT_ROLE: Final = "assistant"


def _utf8_length(text: str) -> int:
    # Tokens are mostly ASCII: encoded only when they are not.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class OpenDraft:
    """One open draft: its text (kept as parts, joined when read), the
    number ``n`` of its latest update, its size in UTF-8 bytes, and when it
    was last updated (``time.monotonic``). ``remote``: another replica
    writes it (its updates came through ``apply_remote``)."""

    __slots__ = (
        "_held",
        "_held_size",
        "_parts",
        "_text_frame",
        "draft_id",
        "n",
        "remote",
        "role",
        "sent_at",
        "size",
        "transcript_id",
        "updated",
    )

    def __init__(
        self, transcript_id: str, draft_id: str, role: str, now: float, *, remote: bool = False
    ) -> None:
        self.transcript_id = transcript_id
        self.draft_id = draft_id
        self.role = role
        self.n = 0
        self.size = 0
        self.updated = now
        self.remote = remote
        #: When its latest update was numbered (and went out).
        self.sent_at = now
        self._parts: list[str] = []
        self._text_frame: EncodedDraft | None = None
        #: Deltas written since, not numbered yet (``Drafts.coalesce``): in
        #: ``size``, not in ``text``; their bytes.
        self._held: list[str] = []
        self._held_size = 0

    def __repr__(self) -> str:
        return f"<OpenDraft {self.transcript_id}/{self.draft_id} n={self.n} {self.size} bytes>"

    @property
    def held(self) -> bool:
        """Whether deltas wait to go out as the next update."""
        return bool(self._held)

    @property
    def text(self) -> str:
        """The whole text as of update ``n`` (deltas are joined only when it
        is read; held deltas are not in it yet)."""
        parts = self._parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    def text_frame(self) -> EncodedDraft:
        """The ``text`` frame of the current update, encoded once per update."""
        cached = self._text_frame
        if cached is None or cached.frame.n != self.n:
            cached = self._text_frame = EncodedDraft(self._frame(text=self.text), self)
        return cached

    def _frame(
        self,
        *,
        delta: str | None = None,
        text: str | None = None,
        state: wire.DraftState = "open",
        revision: int | None = None,
    ) -> wire.DraftFrame:
        return wire.DraftFrame(
            seq=0,
            transcript_id=self.transcript_id,
            draft_id=self.draft_id,
            role=self.role,  # type: ignore[arg-type]  # a Role: checked when it was opened
            n=self.n,
            delta=delta,
            text=text,
            state=state,
            revision=revision,
        )

    def _add(self, delta: str, size: int, now: float) -> None:
        self._parts.append(delta)
        self.size = size
        self.n += 1
        self.updated = self.sent_at = now

    def _set(self, text: str, size: int, now: float) -> None:
        self._parts = [text] if text else []
        self.size = size + self._held_size  # held deltas follow the new text
        self.n += 1
        self.updated = self.sent_at = now

    def hold(self, delta: str, size: int, now: float) -> None:
        """Keep ``delta`` (the text is then ``size`` bytes with it) for the
        next update."""
        self._held.append(delta)
        self._held_size += size - self.size
        self.size = size
        self.updated = now

    def release(self, now: float) -> EncodedDraft | None:
        """The held deltas as one ``delta`` update (``None``: none held)."""
        if not self._held:
            return None
        delta = "".join(self._held)
        self._held = []
        self._held_size = 0
        return self.appended(delta, self.size, now)

    def appended(self, delta: str, size: int, now: float) -> EncodedDraft:
        """Append ``delta`` (the text is then ``size`` bytes): update ``n`` + 1."""
        self._add(delta, size, now)
        return EncodedDraft(self._frame(delta=delta), self)

    def replaced(self, text: str, size: int, now: float) -> EncodedDraft:
        """Replace the text with ``text`` (``size`` bytes): update ``n`` + 1
        (held deltas are dropped: the text replaces them too)."""
        self._held = []
        self._held_size = 0
        self._set(text, size, now)
        frame = self._text_frame = EncodedDraft(self._frame(text=text), self)
        return frame

    def close_frame(self, state: wire.DraftState, revision: int | None = None) -> EncodedDraft:
        """Its close (no text; ``revision`` for ``final`` only)."""
        return EncodedDraft(self._frame(state=state, revision=revision))


class ClosedDraft(NamedTuple):
    """A draft closed at ``closed_at`` (monotonic) and its close frame, kept
    for ``draft_ttl_s``: a late op on it is ``draft-closed``, and a consumer
    that resumes gets the frame."""

    frame: EncodedDraft
    closed_at: float


class Written(NamedTuple):
    """What a ``draft`` op did: ``n`` to acknowledge, and the frame to fan
    out (``None``: it changed nothing, a keep-alive, or its delta is held).
    ``flush_at``: the op began holding deltas; ``Drafts.flush`` them at this
    (monotonic) time."""

    n: int
    update: EncodedDraft | None
    flush_at: float | None = None


class Drafts:
    """The open and recently closed drafts of one transcript.

    ``max_open``: open drafts at once (``max_drafts_per_transcript``);
    ``max_bytes``: a draft's text in UTF-8 bytes (``max_message_bytes``);
    ``ttl``: seconds an open draft lives without an update, and a closed one
    is remembered (``draft_ttl_s``); ``coalesce``: a delta written less than
    this many seconds after the draft's latest update is held and goes out
    with the others held then as one update, ``coalesce`` after that update
    (``draft_coalesce_s``; 0: every delta is its own update). Times are
    ``time.monotonic()`` values passed in, so that tests drive the clock.
    """

    __slots__ = ("closed", "coalesce", "max_bytes", "max_open", "open", "transcript_id", "ttl")

    def __init__(
        self,
        transcript_id: str,
        *,
        max_open: int,
        max_bytes: int,
        ttl: float,
        coalesce: float = 0.0,
    ) -> None:
        self.transcript_id = transcript_id
        self.max_open = max_open
        self.max_bytes = max_bytes
        self.ttl = ttl
        self.coalesce = coalesce
        self.open: dict[str, OpenDraft] = {}
        #: Closed drafts by id, oldest close first.
        self.closed: dict[str, ClosedDraft] = {}

    def __bool__(self) -> bool:
        """Whether there is anything to sweep or send (open or recently closed)."""
        return bool(self.open or self.closed)

    def text(self, draft_id: str) -> EncodedDraft | None:
        """The ``text`` frame of an open draft now, ``None`` when not open."""
        draft = self.open.get(draft_id)
        return None if draft is None else draft.text_frame()

    # --- local writes -----------------------------------------------------------------

    def write(
        self,
        draft_id: str,
        *,
        now: float,
        role: str | None = None,
        delta: str | None = None,
        text: str | None = None,
        cancel: bool = False,
    ) -> Written:
        """Apply one ``draft`` op (at most one of ``delta``, ``text``,
        ``cancel``: ``wire.check_draft_op`` refused the others). Raises
        ``Refused`` and then changes nothing."""
        draft = self.open.get(draft_id)
        if draft is None:
            closed = self.closed.get(draft_id)
            if closed is not None:
                state = closed.frame.frame.state
                raise Refused(
                    codes.DRAFT_CLOSED,
                    f"draft {draft_id!r} of transcript {self.transcript_id!r} was {state} "
                    "already: write a new draft under another draftId",
                )
            if cancel:
                # Never opened here (its first token may still be on the way):
                # remember it, so that a late token opens no ghost draft.
                never = OpenDraft(self.transcript_id, draft_id, role or DEFAULT_ROLE, now)
                self._remember(draft_id, never, "cancelled", now)
                return Written(0, None)
            if len(self.open) >= self.max_open:
                raise Refused(
                    codes.TOO_MANY_DRAFTS,
                    f"transcript {self.transcript_id!r} has {len(self.open)} open drafts, the "
                    f"most it may (max_drafts_per_transcript); commit, cancel or let one expire",
                )
            size = self._check_size(draft_id, 0, delta if delta is not None else text)
            draft = OpenDraft(self.transcript_id, draft_id, role or DEFAULT_ROLE, now)
            self.open[draft_id] = draft
            if delta is not None:
                return Written(1, draft.appended(delta, size, now))
            return Written(1, draft.replaced(text or "", size, now))
        if cancel:
            return Written(draft.n, self._close(draft, "cancelled", None, now))
        # Written here (a writer that moved from another replica): from now on
        # this replica's to expire and to relay.
        draft.remote = False
        if delta is not None:
            size = self._check_size(draft_id, draft.size, delta)
            if not delta:
                draft.updated = now
                return Written(draft.n, None)
            if self.coalesce and (draft.held or now - draft.sent_at < self.coalesce):
                first = not draft.held
                draft.hold(delta, size, now)
                return Written(draft.n, None, draft.sent_at + self.coalesce if first else None)
            return Written(draft.n + 1, draft.appended(delta, size, now))
        if text is not None:
            size = self._check_size(draft_id, 0, text)
            return Written(draft.n + 1, draft.replaced(text, size, now))
        draft.updated = now  # keep-alive
        return Written(draft.n, None)

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
        total = size + _utf8_length(more)
        if total > self.max_bytes:
            raise Refused(
                codes.DRAFT_TOO_LARGE,
                f"draft {draft_id!r} would be {total} bytes of UTF-8, over the limit of "
                f"{self.max_bytes} (max_message_bytes); the update was not applied",
            )
        return total

    def commit(self, draft_id: str, revision: int, now: float) -> EncodedDraft | None:
        """The append with this ``draftId`` landed as ``revision``: close the
        draft ``final``; its frame (``None`` when it was not open: then it is
        only remembered as committed, so that late tokens are refused)."""
        draft = self.open.get(draft_id)
        if draft is None:
            if draft_id not in self.closed:
                ghost = OpenDraft(self.transcript_id, draft_id, DEFAULT_ROLE, now)
                self._remember(draft_id, ghost, "final", now, revision)
            return None
        return self._close(draft, "final", revision, now)

    def _close(
        self, draft: OpenDraft, state: wire.DraftState, revision: int | None, now: float
    ) -> EncodedDraft:
        del self.open[draft.draft_id]
        return self._remember(draft.draft_id, draft, state, now, revision)

    def _remember(
        self,
        draft_id: str,
        draft: OpenDraft,
        state: wire.DraftState,
        now: float,
        revision: int | None = None,
    ) -> EncodedDraft:
        return self._remember_frame(draft_id, draft.close_frame(state, revision), now)

    def _remember_frame(self, draft_id: str, frame: EncodedDraft, now: float) -> EncodedDraft:
        self.closed.pop(draft_id, None)
        self.closed[draft_id] = ClosedDraft(frame, now)
        while len(self.closed) > MAX_CLOSED_DRAFTS:
            del self.closed[next(iter(self.closed))]
        return frame

    # --- time -------------------------------------------------------------------------

    def expire(self, now: float) -> tuple[list[EncodedDraft], list[EncodedDraft]]:
        """Close the drafts idle for ``ttl`` (remote copies: ``ttl`` +
        ``REMOTE_DRAFT_GRACE_S``) as ``expired`` and forget the closes older
        than ``ttl``. Returns the close frames of the local drafts and those
        of the remote copies (only the first are published)."""
        local: list[EncodedDraft] = []
        remote: list[EncodedDraft] = []
        if self.open:
            cutoff = now - self.ttl
            for draft in list(self.open.values()):
                if draft.updated < (cutoff - REMOTE_DRAFT_GRACE_S if draft.remote else cutoff):
                    frame = self._close(draft, "expired", None, now)
                    (remote if draft.remote else local).append(frame)
        closed = self.closed
        cutoff = now - self.ttl
        while closed:
            first = next(iter(closed))
            if closed[first].closed_at >= cutoff:
                break
            del closed[first]
        return local, remote

    def catch_up(self, now: float) -> list[EncodedDraft]:
        """What a subscriber gets right behind its baseline or resume: the
        ``text`` of every open draft, then the close of every draft closed
        within ``ttl`` (a consumer ignores closes of drafts it does not hold)."""
        frames = [draft.text_frame() for draft in self.open.values()]
        cutoff = now - self.ttl
        frames.extend(c.frame for c in self.closed.values() if c.closed_at >= cutoff)
        return frames

    # --- other replicas -----------------------------------------------------------------

    def apply_remote(
        self, frame: wire.DraftFrame, now: float
    ) -> EncodedDraft | Literal[False] | None:
        """Apply an update or close another replica made. Returns the frame
        to fan out locally, ``None`` when it changes nothing here (old, or a
        close of a draft not open here, which is remembered as closed all the
        same), ``False`` on a gap (a ``delta`` that does not follow the copy:
        apply the current ``text`` instead)."""
        draft_id = frame.draft_id
        draft = self.open.get(draft_id)
        if frame.state != "open":
            if draft is None:
                if draft_id not in self.closed:
                    # Never open here: remembered all the same, so that a late
                    # token written to this replica opens no ghost draft.
                    self._remember_frame(draft_id, EncodedDraft(frame), now)
                return None
            del self.open[draft_id]
            return self._remember_frame(draft_id, EncodedDraft(frame), now)
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
        if frame.text is not None:
            draft._set(frame.text, _utf8_length(frame.text), now)
        elif frame.n == draft.n + 1:
            assert frame.delta is not None  # the shape of an open draft's frame
            draft._add(frame.delta, draft.size + _utf8_length(frame.delta), now)
        else:
            return False
        draft.n = frame.n
        draft.remote = True
        shared = EncodedDraft(frame, draft)
        if frame.text is not None:
            draft._text_frame = shared
        return shared
