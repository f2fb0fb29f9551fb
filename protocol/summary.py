"""What the list of transcripts shows of each: a title and a preview.

Every store keeps both up to date when it accepts an append (so listing
needs no message), with these two functions: the **title** is the first
user message's text, the **preview** the last message's, each as plain text
(Markdown's marks and an imported file's inline fence left out), on one
line and trimmed (``TITLE_CHARS``, ``PREVIEW_CHARS``) as the chat page trims
them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from protocol.types import Message

__all__ = [
    "PREVIEW_CHARS",
    "TITLE_CHARS",
    "one_line",
    "plain_text",
    "preview_of",
    "title_of",
    "without_embed_fences",
]

#: Longest title, in characters.
TITLE_CHARS: Final = 80
#: Longest preview, in characters.
PREVIEW_CHARS: Final = 120

_SPACE: Final = re.compile(r"\s+")


def one_line(text: str, limit: int) -> str:
    """``text`` with its white space collapsed, cut to ``limit`` characters
    (the last one an ellipsis when cut)."""
    flat = _SPACE.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    return flat[: limit - 1].rstrip() + "…"


def title_of(messages: Iterable[Message]) -> str | None:
    """The title the first user message with text gives (as plain text:
    ``plain_text``), ``None`` when no message of ``messages`` does."""
    for message in messages:
        if message.role == "user":
            text = one_line(plain_text(_shown_text(message), TITLE_CHARS), TITLE_CHARS)
            if text:
                return text
    return None


def preview_of(messages: Sequence[Message]) -> str | None:
    """The preview the last of ``messages`` gives (``None``: there is none;
    ``""`` when it has no text, an image say)."""
    if not messages:
        return None
    last = messages[-1]
    return one_line(plain_text(_shown_text(last), PREVIEW_CHARS), PREVIEW_CHARS)


def _shown_text(message: Message) -> str:
    """The text a reader sees: an imported file's inline fence
    (``@@@notes.txt`` ... ``@@@``) is shown as the file, not as text."""
    text = message.text()
    if isinstance(message.content, str) or len(message.content) < 2 or "@@@" not in text:
        return text
    return without_embed_fences(text)


#: An LMML inline fence's opening line (``@@@name``) and its closing line.
_FENCE_OPEN: Final = re.compile(r"@@@[A-Za-z0-9][A-Za-z0-9_.\-/]*[ \t]*")
_FENCE_CLOSE: Final = re.compile(r"@@@[ \t]*")


def without_embed_fences(text: str) -> str:
    """``text`` without its complete ``@@@name`` ... ``@@@`` blocks (the
    files a message carries as parts of their own); linear time."""
    lines = text.splitlines(keepends=True)
    # closer[i]: the index of the first closing line at or after i.
    closer = [len(lines)] * (len(lines) + 1)
    for i in range(len(lines) - 1, -1, -1):
        closer[i] = i if _FENCE_CLOSE.fullmatch(lines[i].rstrip("\r\n")) else closer[i + 1]
    kept: list[str] = []
    i = 0
    while i < len(lines):
        if _FENCE_OPEN.fullmatch(lines[i].rstrip("\r\n")) and closer[i + 1] < len(lines):
            i = closer[i + 1] + 1
            continue
        kept.append(lines[i])
        i += 1
    return "".join(kept)


_CODE_FENCE: Final = re.compile(r"\s{0,3}(?:`{3,}|~{3,})[^`]*")
_RULE: Final = re.compile(r"\s{0,3}(?:[-*_][ \t]*){3,}")
_TABLE_RULE: Final = re.compile(r"\s*\|?(?:\s*:?-+:?\s*\|)+\s*:?-*:?\s*")
_LINE_START: Final = re.compile(
    r"\s{0,3}(?:#{1,6}(?:[ \t]+|$)|(?:>[ \t]?)+"
    r"|(?:[-*+]|[0-9]{1,9}[.)])[ \t]+(?:\[[ xX]\][ \t]+)?)?"
)
_INLINE: Final = (
    (re.compile(r"!\[([^\]\n]*)\]\([^)\n]*\)"), r"\1"),  # an image: its alt text
    (re.compile(r"\[([^\]\n]*)\]\([^)\n]*\)"), r"\1"),  # a link: its text
    (re.compile(r"<(https?://[^>\s]+)>"), r"\1"),  # an autolink
    (re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>"), " "),  # an HTML tag
    (re.compile(r"(`+)([^`\n]+?)\1"), r"\2"),  # code
    (re.compile(r"(\*\*|__|~~)(?=\S)([^\n]*?\S)\1"), r"\2"),  # strong, strikethrough
    (re.compile(r"(?<![\w*])\*(?=\S)([^*\n]*?\S)\*(?![\w*])"), r"\1"),  # emphasis
    (re.compile(r"(?<![\w_])_(?=\S)([^_\n]*?\S)_(?![\w_])"), r"\1"),
)
#: An escaped mark (``\*``) is the mark itself, kept out of the patterns'
#: way as a private-use character until they are done.
_ESCAPED: Final = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~@<])")
_UNESCAPE: Final = {0xE000 + ord(c): c for c in "\\`*_{}[]()#+-.!|>~@<"}


def plain_text(markdown: str, enough: int | None = None) -> str:
    """What Markdown ``markdown`` reads as, without its marks: headings,
    quotes, list markers and code fences dropped, links and images as their
    text, emphasis and code spans as their words, table pipes as spaces.
    With ``enough``, stops once that many characters of text are found
    (a title needs only its start)."""
    if enough is not None:
        # The marks of what is shown lie near it; the regexes below then never
        # see more than a few KiB, whatever the message's size.
        markdown = markdown[: enough * 8 + 256]
    out: list[str] = []
    found = 0
    for line in markdown.splitlines():
        if _CODE_FENCE.fullmatch(line) or _RULE.fullmatch(line) or _TABLE_RULE.fullmatch(line):
            continue
        match = _LINE_START.match(line)
        line = line[match.end() :] if match else line
        line = _ESCAPED.sub(lambda m: chr(0xE000 + ord(m[1])), line)
        for pattern, replacement in _INLINE:
            line = pattern.sub(replacement, line)
        line = line.replace("|", " ").translate(_UNESCAPE)
        out.append(line)
        found += len(line.strip())
        if enough is not None and found > enough:
            break
    return "\n".join(out)
