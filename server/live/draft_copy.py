"""One draft as the transcript's ``Drafts`` hold it (``server.live.drafts``):
``OpenDraft`` (its text or reply with parts, its update number, the encoded
frames late joiners share, its Durable Stream's bytes), the ``DraftBudget``
that counts the bytes every draft holds, what a closed draft leaves behind
(``ClosedDraft``) and what a write did (``Written``). Pure: no I/O, no
awaiting; the rules that change these live in ``server.live.drafts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, NamedTuple

import msgspec

from protocol import codes, ui_messages, wire
from protocol.ui_stream import UIMessageState
from server.errors import Refused
from server.live.frames import EncodedDraft
from server.tuning import CLOSED_DRAFT_COST

#: The role a draft is opened with when the op names none.
DEFAULT_ROLE: Final = "assistant"

_UTF8: Final = "utf-8"
#: Lone surrogates (which JSON may carry) survive the round trip.
_ERRORS: Final = "surrogatepass"


def utf8_length(text: str) -> int:
    # Tokens are mostly ASCII: encoded only when they are not.
    return len(text) if text.isascii() else len(text.encode(_UTF8, _ERRORS))


def _encode(text: str) -> bytes:
    return text.encode(_UTF8, _ERRORS)


CHUNKS_ENCODER: Final = msgspec.json.Encoder()

#: What a reply with parts holds for each byte of the chunks it took: the
#: folded message, its compacted log and the text of its text parts.
UI_BYTES_HELD: Final = 3
#: Chunk types that may add a part to a reply (counted against ``max_parts``).
PART_CHUNKS: Final = frozenset(
    {
        "text-start",
        "reasoning-start",
        "tool-input-start",
        "tool-input-available",
        "tool-input-error",
        "file",
        "reasoning-file",
        "source-url",
        "source-document",
        "custom",
        "steering-message",
        "start-step",
    }
)
#: Chunks that leave the text of a reply's text parts as it is: every chunk
#: that may add a part but a text part's start, and these.
_TEXT_KEPT: Final = (PART_CHUNKS - {"text-start"}) | frozenset(
    {
        "text-end",
        "reasoning-delta",
        "reasoning-end",
        "tool-input-delta",
        "tool-approval-request",
        "tool-approval-response",
        "tool-output-available",
        "tool-output-error",
        "tool-output-denied",
        "finish-step",
        "message-metadata",
        "finish",
        "abort",
        "error",
    }
)


def _joined_text(ui: UIMessageState) -> str:
    """The text of a reply's text parts, joined (what a text consumer shows)."""
    return "".join(part["text"] for part in ui.parts if part["type"] == "text")


def _text_growth(ui: UIMessageState, chunks: Sequence[dict[str, Any]]) -> str | None:
    """What folding ``chunks`` in appends to the reply's joined text, when
    all they do to it is append (deltas to its last text part); ``None`` when
    it cannot tell without folding (the caller joins the text again)."""
    last: Any = None
    for part in reversed(ui.parts):
        if part["type"] == "text":
            last = next((k for k, v in ui.active_text.items() if v is part), None)
            break
    grown: list[str] = []
    for chunk in chunks:
        kind = chunk["type"]
        if kind == "text-delta":
            if chunk["id"] != last or last is None:
                return None
            grown.append(chunk["delta"])
        elif kind == "text-start":
            last = chunk["id"]
        elif kind.startswith("data-"):
            continue
        elif kind not in _TEXT_KEPT:
            return None
    return "".join(grown)


class DraftBudget:
    """The bytes the drafts of this server hold: each open draft costs its
    text's UTF-8 bytes and ``OPEN_DRAFT_COST``, charged to the connection
    that wrote it last (``writer``) and to the total; each remembered close
    costs ``CLOSED_DRAFT_COST`` and the bytes of the text it keeps (for its
    Durable Stream), charged to the total only. ``max_bytes``
    (``max_draft_bytes``) bounds the total, ``max_per_writer``
    (``max_connection_draft_bytes``) each writer's share: an update past
    either is refused (``too-many-drafts``, naming the setting). What must be
    kept whatever it costs (a commit's close, another replica's update) is
    charged without a check: it only makes later writes wait longer."""

    __slots__ = ("by_writer", "max_bytes", "max_per_writer", "total")

    def __init__(self, max_bytes: int, max_per_writer: int) -> None:
        self.max_bytes = max_bytes
        self.max_per_writer = max_per_writer
        self.total = 0
        self.by_writer: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<DraftBudget {self.total}/{self.max_bytes} bytes, {len(self.by_writer)} writers>"

    def check(
        self, transcript_id: str, draft_id: str, more: int, writer: str | None, mine: int
    ) -> None:
        """Refuse ``more`` bytes for the total and ``mine`` more for
        ``writer``'s share (``None``: no writer to charge) when either would
        pass its bound; growth only is checked (what shrinks always fits)."""
        if more > 0 and self.total + more > self.max_bytes:
            raise Refused(
                codes.TOO_MANY_DRAFTS,
                f"draft {draft_id!r} of transcript {transcript_id!r}: the drafts on this "
                f"server hold {self.total} bytes, the most they may (max_draft_bytes); "
                "retry once drafts are committed, cancelled or expired",
            )
        if writer is not None and mine > 0:
            held = self.by_writer.get(writer, 0)
            if held + mine > self.max_per_writer:
                raise Refused(
                    codes.TOO_MANY_DRAFTS,
                    f"draft {draft_id!r} of transcript {transcript_id!r}: the drafts this "
                    f"connection wrote hold {held} bytes, the most they may "
                    "(max_connection_draft_bytes); commit or cancel one first",
                )

    def charge(self, writer: str | None, amount: int) -> None:
        """Add ``amount`` bytes (negative: release them) to the total and to
        ``writer``'s share."""
        self.total += amount
        if writer is not None:
            held = self.by_writer.get(writer, 0) + amount
            if held > 0:
                self.by_writer[writer] = held
            else:
                self.by_writer.pop(writer, None)


class OpenDraft:
    """One open draft: its text (UTF-8 in a growable buffer: a token costs
    its bytes, not an object), the number ``n`` of its latest update, its
    size in UTF-8 bytes, and when it was last updated (``time.monotonic``).
    ``remote``: another replica writes it (its updates came through
    ``apply_remote``). ``writer``: the connection charged for it
    (``DraftBudget``), ``cost`` what it is charged."""

    __slots__ = (
        "_buffer",
        "_held",
        "_held_chunks",
        "_held_size",
        "_text",
        "_text_frame",
        "cost",
        "draft_id",
        "n",
        "remote",
        "role",
        "sent_at",
        "size",
        "stopped_by",
        "stream_closed",
        "transcript_id",
        "ui",
        "ui_size",
        "updated",
        "writer",
    )

    def __init__(
        self, transcript_id: str, draft_id: str, role: str, now: float, *, remote: bool = False
    ) -> None:
        #: A reply with parts (written with ``chunks``): its ``UIMessage`` as
        #: the AI SDK folds it, and the bytes of the chunks it took (the
        #: compact JSON each came as, a bound on what its log holds);
        #: ``None`` for a draft of text alone.
        self.ui: UIMessageState | None = None
        self.ui_size = 0
        #: Who stopped it (``Drafts.stop``): it takes no more updates while
        #: its commit is under way.
        self.stopped_by: str | None = None
        #: The chunks of the held deltas (a reply with parts), in order.
        self._held_chunks: list[dict[str, Any]] = []
        self.transcript_id = transcript_id
        self.draft_id = draft_id
        self.role = role
        self.n = 0
        self.size = 0
        self.updated = now
        self.remote = remote
        self.writer: str | None = None
        self.cost = 0
        #: When its latest update was numbered (and went out).
        self.sent_at = now
        #: The text as of update ``n``: ``_text`` when it was set whole or
        #: read since the last delta, and ``_buffer`` (UTF-8) once a delta was
        #: added to it; one of them at least (``None``: not made).
        self._buffer: bytearray | None = None
        self._text: str | None = ""
        self._text_frame: EncodedDraft | None = None
        #: Deltas written since, not numbered yet (``DraftRules.coalesce``): in
        #: ``size``, not in ``text``; UTF-8, and their bytes.
        self._held = bytearray()
        self._held_size = 0
        #: Its Durable Stream (the text as it grows, UTF-8) once a ``text``
        #: update did not extend it: closed, and frozen at the bytes the old
        #: and the new text shared (a copy, at most the text's size, kept
        #: while the draft is open: not counted in the ``DraftBudget``);
        #: ``None`` while every update extended it.
        self.stream_closed: bytes | None = None

    def __repr__(self) -> str:
        return f"<OpenDraft {self.transcript_id}/{self.draft_id} n={self.n} {self.size} bytes>"

    @property
    def held(self) -> bool:
        """Whether deltas (or chunks) wait to go out as the next update."""
        return bool(self._held_size or self._held_chunks)

    @property
    def text(self) -> str:
        """The whole text as of update ``n`` (held deltas are not in it yet)."""
        text = self._text
        if text is None:
            assert self._buffer is not None  # one of them is always there
            text = self._text = self._buffer.decode(_UTF8, _ERRORS)
        return text

    def utf8(self, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the text as of update ``n``, in UTF-8
        (only those are copied)."""
        buffer = self._buffer
        if buffer is not None:
            return bytes(buffer[start:end])
        return _encode(self.text)[start:end]

    def stream(self, start: int) -> tuple[bytes, int, bool]:
        """Its Durable Stream from byte ``start``: the bytes, the stream's
        end, whether it is closed (``stream_closed``)."""
        frozen = self.stream_closed
        if frozen is not None:
            return frozen[start:], len(frozen), True
        end = self.size - self._held_size
        return (self.utf8(start, end) if start < end else b""), end, False

    def text_frame(self) -> EncodedDraft:
        """The ``text`` frame of the current update, encoded once per update."""
        cached = self._text_frame
        if cached is None or cached.frame.n != self.n:
            replay = None if self.ui is None else self._replay()
            cached = self._text_frame = EncodedDraft(
                self._frame(text=self.text, replay=replay), self
            )
        return cached

    def _replay(self) -> list[dict[str, Any]]:
        """The reply as of update ``n``, as compacted chunks (held chunks are
        not folded in until they go out as the next update)."""
        assert self.ui is not None
        return self.ui.chunks()

    def _frame(
        self,
        *,
        delta: str | None = None,
        text: str | None = None,
        state: wire.DraftState = "open",
        revision: int | None = None,
        chunks: list[dict[str, Any]] | None = None,
        replay: list[dict[str, Any]] | None = None,
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
            chunks=chunks,
            replay=replay,
        )

    def _add(self, delta: str, size: int, now: float) -> None:
        buffer = self._buffer
        if buffer is None:
            buffer = self._buffer = bytearray(_encode(self.text))
        buffer += _encode(delta)
        self._text = None
        self._text_frame = None
        self.size = size
        self.n += 1
        self.updated = self.sent_at = now

    def _set(self, text: str, size: int, now: float) -> None:
        self._close_stream(_encode(text))
        self._buffer = None  # made again by the next delta: a text costs one copy
        self._text = text
        self._text_frame = None
        self.size = size + self._held_size  # held deltas follow the new text
        self.n += 1
        self.updated = self.sent_at = now

    def _close_stream(self, new: bytes) -> None:
        """Close the stream where ``new`` (the next text) stops extending
        what it holds: a stream is append-only, so a text that rewrites it
        ends it, at the bytes both share (a whole character)."""
        if self.stream_closed is not None:
            return  # closed already: it stays as it closed
        old = self.utf8(0, self.size - self._held_size)
        if new.startswith(old):
            return
        # The longest common prefix, by halves (compared in C, not copied).
        a, b = memoryview(old), memoryview(new)
        same, high = 0, min(len(old), len(new))
        while same < high:
            middle = (same + high + 1) // 2
            if a[:middle] == b[:middle]:
                same = middle
            else:
                high = middle - 1
        while same > 0 and same < len(new) and new[same] & 0xC0 == 0x80:
            same -= 1  # not inside a character
        self.stream_closed = old[:same]

    def hold(self, delta: str, size: int, now: float) -> None:
        """Keep ``delta`` (the text is then ``size`` bytes with it) for the
        next update."""
        self._held += _encode(delta)
        self._held_size += size - self.size
        self.size = size
        self.updated = now

    def hold_chunks(self, chunks: Sequence[dict[str, Any]], now: float) -> None:
        """Keep ``chunks`` (checked) for the next update: they are folded in
        when it goes out, so that a ``replay`` is always of update ``n``."""
        self._held_chunks += chunks
        self.updated = now

    @property
    def held_chunks(self) -> list[dict[str, Any]]:
        """The chunks that wait for the next update, in order."""
        return self._held_chunks

    def release(self, now: float) -> EncodedDraft | None:
        """The held deltas (or chunks) as one update (``None``: none held)."""
        if self._held_chunks:
            return self.folded((), now)
        if not self._held_size:
            return None
        delta = self._held.decode(_UTF8, _ERRORS)
        self._held = bytearray()
        self._held_size = 0
        return self.appended(delta, self.size, now)

    def folded(self, chunks: Sequence[dict[str, Any]], now: float) -> EncodedDraft:
        """Fold the held chunks and ``chunks`` (checked) into the reply:
        update ``n`` + 1, with the ``delta`` its text grew by, or its
        ``text`` when it did not only grow."""
        ui = self.ui
        assert ui is not None
        taken = self._held_chunks
        taken += chunks
        self._held_chunks = []
        grew = _text_growth(ui, taken)
        ui.apply_all(taken)
        if grew is None:
            text = _joined_text(ui)
            old = self.text
            if not text.startswith(old):
                self._set(text, utf8_length(text), now)
                return EncodedDraft(self._frame(text=text, chunks=taken), self)
            grew = text[len(old) :]
        self._add(grew, self.size + utf8_length(grew), now)
        return EncodedDraft(self._frame(delta=grew, chunks=taken), self)

    def appended(self, delta: str, size: int, now: float) -> EncodedDraft:
        """Append ``delta`` (the text is then ``size`` bytes): update ``n`` + 1."""
        self._add(delta, size, now)
        return EncodedDraft(self._frame(delta=delta), self)

    def replaced(self, text: str, size: int, now: float) -> EncodedDraft:
        """Replace the text with ``text`` (``size`` bytes): update ``n`` + 1
        (held deltas are dropped: the text replaces them too)."""
        self._held = bytearray()
        self._held_size = 0
        self._set(text, size, now)
        # Not kept: a text nobody reads would be held twice (the frame's
        # encoding); ``text_frame`` makes it once if a late joiner needs it.
        return EncodedDraft(self._frame(text=text), self)

    def close_frame(self, state: wire.DraftState, revision: int | None = None) -> EncodedDraft:
        """Its close (no text; ``revision`` for ``final`` only)."""
        return EncodedDraft(self._frame(state=state, revision=revision))


def messages_of(draft: OpenDraft, *, stopped: bool) -> list[dict[str, Any]]:
    """What an open draft holds as the messages to commit in its place: a
    reply with parts as its ``UIMessage`` maps (one message per step, tool
    results as ``tool`` messages), a text draft as one message; ``stopped``
    marks each (and the UIMessage) as stopped by a reader."""
    if draft.ui is not None:
        ui = draft.ui.message()
        if stopped:
            ui["metadata"] = {**(ui.get("metadata") or {}), "stopped": True}
        messages: list[dict[str, Any]] = msgspec.to_builtins(ui_messages.from_ui_message(ui))
    else:
        messages = [{"role": draft.role, "content": draft.text}]
    if stopped:
        for message in messages:
            message["metadata"] = {**(message.get("metadata") or {}), "stopped": True}
    return messages


class ClosedDraft(NamedTuple):
    """A draft closed at ``closed_at`` (monotonic) as ``state``, remembered
    for ``draft_ttl_s`` (a late op on it is ``draft-closed``). ``final``: the
    close frame of a committed draft that was open (a consumer that resumes
    from before its revision gets it); ``None`` for every other close (a
    consumer that holds such a draft closes it as ``gone``). ``text``: its
    Durable Stream's bytes when it closed (a reader behind gets the rest),
    ``None`` when it was never open here."""

    state: str
    closed_at: float
    final: EncodedDraft | None = None
    text: bytes | None = None
    #: Who stopped it (``Drafts.stop``): its writer's late commit is refused.
    stopped_by: str | None = None

    @property
    def cost(self) -> int:
        """What remembering it costs in the ``DraftBudget``."""
        return CLOSED_DRAFT_COST + (len(self.text) if self.text is not None else 0)


class Written(NamedTuple):
    """What a ``draft`` op did: ``n`` to acknowledge, and the frame to fan
    out (``None``: it changed nothing, a keep-alive, or its delta is held).
    ``flush_at``: the op began holding deltas; ``Drafts.flush`` them at this
    (monotonic) time."""

    n: int
    update: EncodedDraft | None
    flush_at: float | None = None
