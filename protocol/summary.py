"""What the list of transcripts shows of each: a title and a preview.

Every store keeps both up to date when it accepts an append (so listing
needs no message), with these two functions: the **title** is the first
user message's text, the **preview** the last message's, each on one line
and trimmed (``TITLE_CHARS``, ``PREVIEW_CHARS``) as the chat page trims them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from protocol.types import Message

__all__ = ["PREVIEW_CHARS", "TITLE_CHARS", "one_line", "preview_of", "title_of"]

#: Longest title, in characters.
TITLE_CHARS: Final = 80
#: Longest preview, in characters.
PREVIEW_CHARS: Final = 120

_SPACE: Final = re.compile(r"\s+")
_HEADING: Final = re.compile(r"^#+\s*")


def one_line(text: str, limit: int) -> str:
    """``text`` with its white space collapsed, cut to ``limit`` characters
    (the last one an ellipsis when cut)."""
    flat = _SPACE.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    return flat[: limit - 1].rstrip() + "…"


def title_of(messages: Iterable[Message]) -> str | None:
    """The title the first user message with text gives (a Markdown
    heading's ``#`` dropped), ``None`` when no message of ``messages`` does."""
    for message in messages:
        if message.role == "user":
            text = one_line(_HEADING.sub("", message.text().lstrip()), TITLE_CHARS)
            if text:
                return text
    return None


def preview_of(messages: Sequence[Message]) -> str | None:
    """The preview the last of ``messages`` gives (``None``: there is none;
    ``""`` when it has no text, an image say)."""
    if not messages:
        return None
    return one_line(messages[-1].text(), PREVIEW_CHARS)
