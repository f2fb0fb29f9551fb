"""What a subscriber of ``tsync bench stream`` checks about drafts.

The writers stream drafts whose tokens are their own send times: each token
is ``TOKEN_CHARS`` characters, 16 hex digits of ``time.time_ns()`` (when the
token was due: no coordinated omission) and a space. A subscriber learns
each token's delivery latency from the frame that brought it: a ``delta``
carries one token, a ``text`` (after a catch-up, or deltas the server merged
for a slow reader) carries all the tokens past the ones it had. Each
committed message carries its draft's id in ``metadata.d``.

``DraftCheck`` applies a consumer's rules (``protocol.drafts``, written
again here so that the bench does not check the client with itself): a
``delta`` whose ``n`` is the copy's ``n`` + 1 is appended, a newer ``text``
replaces, older frames are ignored, a ``delta`` past ``n`` + 1 is a gap that
only a later ``text`` repairs. When a draft closes as ``final`` its text
must equal the committed message's content (an unrepaired gap shows as a
mismatch). Counts go into the subscriber group's ``GroupStats``. Pure: no
I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from client_py.bench.stats import GroupStats

__all__ = ["TOKEN_CHARS", "DraftCheck", "token"]

#: A token: 16 hex digits of its due time in ns, then a space.
TOKEN_CHARS: Final = 17


def token(due_ns: int) -> str:
    """The token a writer sends for a token due at ``due_ns``."""
    return f"{due_ns:016x} "


def _sent(text: str, at: int) -> int | None:
    try:
        return int(text[at : at + 16], 16)
    except ValueError:
        return None


@dataclass(slots=True)
class _Draft:
    n: int = 0
    parts: list[str] = field(default_factory=list)
    waiting: bool = False

    @property
    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""


class DraftCheck:
    """One subscriber's drafts. ``resumed_ns`` (set by a subscriber that
    paused) makes the frames that bring tokens due before it count as the
    backlog it got after resuming."""

    def __init__(self, stats: GroupStats) -> None:
        self.stats = stats
        self.drafts: dict[str, _Draft] = {}
        #: draft id -> the content of the message that committed it
        self.commits: dict[str, str] = {}
        self.resumed_ns: int | None = None
        self.tokens_seen = False

    def frame(
        self,
        draft_id: str,
        n: int,
        delta: str | None,
        text: str | None,
        state: str,
        now_ns: int,
    ) -> None:
        """One draft frame (or the update a consumer core made of one)."""
        stats = self.stats
        stats.draft_frames += 1
        if state != "open":
            self._closed(draft_id, state)
            return
        draft = self.drafts.get(draft_id)
        if draft is None:
            draft = self.drafts[draft_id] = _Draft()
        if text is not None:
            stats.draft_texts += 1
            if n <= draft.n:
                return
            if draft.waiting:
                stats.draft_repairs += 1
            previous = draft.text
            # The tokens it brings: those past the text held (all of them if it is no prefix).
            first = len(previous) if text.startswith(previous) else 0
            draft.parts, draft.n, draft.waiting = [text], n, False
            self._tokens(text, first, now_ns, texts=True)
            return
        if n <= draft.n or draft.waiting:
            return
        if n != draft.n + 1:
            stats.draft_gaps += 1
            draft.waiting = True
            return
        assert delta is not None
        draft.parts.append(delta)
        draft.n = n
        self._tokens(delta, 0, now_ns, texts=False)

    def _tokens(self, text: str, first: int, now_ns: int, *, texts: bool) -> None:
        """Count and time the tokens of ``text`` from offset ``first`` on."""
        stats = self.stats
        count = 0
        backlog = False
        resumed = self.resumed_ns
        for at in range(first, len(text) - TOKEN_CHARS + 1, TOKEN_CHARS):
            sent = _sent(text, at)
            if sent is None:
                continue
            count += 1
            stats.token_latency.record_ns(now_ns - sent)
            if resumed is not None and sent < resumed:
                backlog = True
        if count:
            stats.tokens += count
            self.tokens_seen = True
            if backlog:
                stats.backlog_frames += 1
                stats.backlog_texts += texts

    def committed(self, draft_id: str, content: str) -> None:
        """The message that committed ``draft_id`` was applied."""
        self.commits[draft_id] = content

    def _closed(self, draft_id: str, state: str) -> None:
        stats = self.stats
        draft = self.drafts.pop(draft_id, None)
        if state != "final":
            stats.drafts_dropped += 1
            return
        stats.drafts_final += 1
        content = self.commits.pop(draft_id, None)
        if draft is None or content is None or draft.text != content:
            stats.draft_mismatches += 1

    def finish(self) -> None:
        """The run is over: drafts still open never closed."""
        self.stats.drafts_unclosed += len(self.drafts)
        self.drafts.clear()
