"""A consumer's copy of the drafts of one transcript, and the updates they cause.

A draft is a message being written (an assistant's answer streamed token by
token). It is never part of the transcript: it never changes the revision,
and it ends either as real messages (``final``: the append that committed it
is revision R) or with nothing (``cancelled``, ``expired``). The server
numbers a draft's updates ``n`` = 1, 2, 3, ... and sends each as a ``delta``
(append to the text of update ``n`` - 1) or as a ``text`` (the whole text of
update ``n``; after a baseline or a resume, and instead of deltas a slow
connection fell behind on).

The rules a copy follows (``DraftCopy.take``), so that its text is always
the server's text of some update, never a mix:

- a ``delta`` whose ``n`` is the copy's ``n`` + 1 is appended;
- a ``text`` newer than the copy replaces it;
- anything older is ignored;
- a ``delta`` past ``n`` + 1 means updates were missed: the copy keeps its
  text and ignores deltas until the next ``text`` (the server sends one);
- ``final`` with revision R closes the draft together with the committed
  message: at once when the transcript's copy is at R already, else when it
  gets there (the increment, or a baseline), in the same step, so a reader
  never sees both the draft and its message, or neither;
- ``cancelled`` and ``expired`` close it at once.

After a resubscribe (a new connection, a ``seq`` gap, ``lagged``) the server
sends one ``text`` per open draft before answering the barrier ping: a draft
that none refreshed by then is no longer open on the server (it closed while
this consumer was away) and closes as ``gone``.

Nothing here does I/O; ``protocol.consumer`` drives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, Literal, TypeAlias

from protocol.ui_stream import UIMessageState, UIStreamError
from protocol.wire import DraftFrame

__all__ = ["ClosedAs", "DraftClosed", "DraftCopy", "DraftUpdated"]

#: How a draft ended, as a consumer saw it: the server's close states, and
#: ``gone`` (no longer open on the server after a resubscribe, or its
#: transcript was created again).
ClosedAs: TypeAlias = Literal["final", "cancelled", "expired", "gone"]

GONE: Final = "gone"


@dataclass(frozen=True, slots=True)
class DraftUpdated:
    """The text of a draft changed: ``delta`` was appended to it (``text``
    is ``None``), or it was replaced by ``text`` (``delta`` is ``None``).
    Its whole text is then ``subscription.drafts[draft_id].text``. The
    first update of a draft opens it."""

    kind: ClassVar[str] = "draft"
    transcript_id: str
    draft_id: str
    role: str
    n: int
    delta: str | None
    text: str | None


@dataclass(frozen=True, slots=True)
class DraftClosed:
    """A draft ended (``state``); ``text`` is the last text the copy had.
    ``final``: its message is in the copy now, as of ``revision`` (this
    update comes right after the one that applied it)."""

    kind: ClassVar[str] = "draft-closed"
    transcript_id: str
    draft_id: str
    role: str
    state: ClosedAs
    revision: int | None
    text: str


class DraftCopy:
    """One draft as a consumer holds it.

    ``n`` is the number of the update its text is as of (0: none yet);
    ``waiting`` is true after a missed update (deltas are ignored until the
    next ``text``); ``stale`` is true after a resubscribe until a ``text``
    refreshes it; ``final_revision`` is set while a ``final`` waits for the
    transcript's copy to reach its revision.
    """

    __slots__ = (
        "_parts",
        "draft_id",
        "final_revision",
        "n",
        "role",
        "stale",
        "ui",
        "ui_behind",
        "waiting",
    )

    def __init__(self, draft_id: str, role: str) -> None:
        self.draft_id = draft_id
        self.role = role
        self.n = 0
        self._parts: list[str] = []
        self.waiting = False
        self.stale = False
        self.final_revision: int | None = None
        #: A reply with parts: its ``UIMessage`` as of update ``n`` (folded
        #: from the frames' ``chunks`` and ``replay``); ``None`` for a draft
        #: of text alone. ``ui_behind``: an update's chunks were missed (its
        #: text came whole without them); the next ``replay`` mends it.
        self.ui: UIMessageState | None = None
        self.ui_behind = False

    def __repr__(self) -> str:
        return f"<DraftCopy {self.draft_id!r} n={self.n} {len(self.text)} chars>"

    @property
    def text(self) -> str:
        """The whole text (deltas are joined only when it is read)."""
        parts = self._parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    @property
    def message(self) -> dict[str, object] | None:
        """A reply with parts as the AI SDK's ``UIMessage`` (a copy), ``None``
        for a draft of text alone."""
        return None if self.ui is None else self.ui.message()

    def take(self, frame: DraftFrame) -> bool:
        """Apply an open draft's frame; True when the text (or a reply's
        parts) changed."""
        if frame.text is not None:
            if frame.n >= self.n:
                self.stale = False  # the server still has it
            if frame.n <= self.n:
                return False
            self._take_parts(frame, follows=frame.n == self.n + 1)
            self._parts = [frame.text]
            self.n = frame.n
            self.waiting = False
            return True
        if frame.n <= self.n or self.waiting:
            return False
        if frame.n != self.n + 1:
            self.waiting = True  # missed updates: wait for the next text
            return False
        assert frame.delta is not None  # accept_transcript_update checked the shape
        self._take_parts(frame, follows=True)
        self._parts.append(frame.delta)
        self.n = frame.n
        return True

    def _take_parts(self, frame: DraftFrame, *, follows: bool) -> None:
        """Fold a frame's ``replay`` (a new reply) or ``chunks`` (update
        ``n`` + 1 when ``follows``) into the reply."""
        if frame.replay is not None:
            self.ui = UIMessageState(self.draft_id)
            self.ui_behind = not self._fold(frame.replay)
            return
        if frame.chunks is None:
            return
        if self.ui is None:
            self.ui = UIMessageState(self.draft_id)
            self.ui_behind = self.n > 0  # parts began in an update this copy missed
        if not follows:
            self.ui_behind = True
        elif not self.ui_behind:
            self.ui_behind = not self._fold(frame.chunks)

    def _fold(self, chunks: list[dict[str, object]]) -> bool:
        assert self.ui is not None
        try:
            self.ui.apply_all(chunks)
        except UIStreamError:
            return False  # not what the server folded: wait for its replay
        return True
