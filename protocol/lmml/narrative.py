"""Parsing an LMML narrative: role delimiters, embed fences and references.

An LMML narrative is Markdown plus three things, all found line by line:

- role delimiters: an ATX heading naming a role (``## Turn 1 -- user``) or an
  HTML comment on a line of its own whose whole text is a role
  (``<!-- assistant -->``);
- inline embed fences: a line ``@@@name.ext``, the content verbatim, a line ``@@@``;
- external references: ``@name.ext`` in prose.

Lines inside fenced code blocks (````` or ``~~~``) and inside embed fences are
never delimiters and hold no references; neither do code spans. Only ``\\n``
ends a line; a ``\\r`` before it is part of the line ending (CRLF works like
LF), never of a name or a role.

``parse`` keeps every byte: it only records where things are. Offsets are
byte offsets into the narrative's UTF-8 encoding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from protocol.lmml.errors import LmmlError

__all__ = [
    "CHAT_ROLES",
    "NAME_PATTERN",
    "Delimiter",
    "Embed",
    "EmbedFence",
    "Narrative",
    "Reference",
    "heading_role",
    "parse",
]

#: Roles a delimiter can name. ``context`` only in the HTML-comment spelling.
CHAT_ROLES: Final = ("user", "assistant", "system", "tool")
_COMMENT_ROLES: Final = (*CHAT_ROLES, "context")
#: An embed name: ``[A-Za-z0-9_.-]+`` starting with a letter or digit.
NAME_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9_.-]*"

_ATX_RE: Final = re.compile(r" {0,3}#{1,6}[ \t](.*)")
_COMMENT_RE: Final = re.compile(r" {0,3}<!--[ \t]*([A-Za-z]+)[ \t]*(\{.*\})?[ \t]*-->[ \t]*")
_CODE_OPEN_RE: Final = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_CODE_CLOSE_RE: Final = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
_FENCE_OPEN_RE: Final = re.compile(rf"@@@({NAME_PATTERN})[ \t]*")
_FENCE_CLOSE_RE: Final = re.compile(r"@@@[ \t]*")
_REFERENCE_RE: Final = re.compile(rf"@({NAME_PATTERN})")
_BACKTICKS_RE: Final = re.compile(r"`+")
_NOT_LETTERS_RE: Final = re.compile(r"[^a-z]+")


@dataclass(frozen=True, slots=True)
class Reference:
    """An external reference ``@name`` at byte ``offset`` (of the ``@``)."""

    name: str
    offset: int


@dataclass(frozen=True, slots=True)
class EmbedFence:
    """An inline embed: ``@@@name`` at byte ``offset``, ``content`` its bytes.

    ``content`` is everything between the opening line and the closing
    ``@@@`` line, without the line ending just before ``@@@``.
    """

    name: str
    content: bytes
    offset: int
    end: int


@dataclass(frozen=True, slots=True)
class Embed:
    """One embed of a narrative, by name.

    ``offset`` is the byte offset of its first reference or fence. ``content``
    is the content of its first inline fence, or ``None`` when it is only
    referenced (a bundle entry must then supply it).
    """

    name: str
    offset: int
    content: bytes | None


@dataclass(frozen=True, slots=True)
class Delimiter:
    """A role delimiter line: ``[start, end)`` in bytes, line ending included.

    ``line`` is the line verbatim (with its ending); ``attributes`` are the
    JSON object of a ``<!-- role {...} -->`` comment (empty otherwise).
    ``char_start``/``char_end`` are the same span in characters of the text.
    """

    role: str
    line: str
    start: int
    end: int
    char_start: int
    char_end: int
    attributes: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Narrative:
    """A parsed narrative: the text and where its delimiters and embeds are.

    ``open_code_block`` is true when a fenced code block runs to the end of
    the text (it was never closed, which Markdown allows).
    """

    text: str
    size: int
    delimiters: tuple[Delimiter, ...]
    fences: tuple[EmbedFence, ...]
    references: tuple[Reference, ...]
    open_code_block: bool

    @property
    def embeds(self) -> tuple[Embed, ...]:
        """Every embed once, in first-occurrence order (first fence gives the content)."""
        first: dict[str, int] = {}
        content: dict[str, bytes] = {}
        occurrences = [(f.offset, f.name) for f in self.fences]
        occurrences += [(r.offset, r.name) for r in self.references]
        for offset, name in sorted(occurrences):
            first.setdefault(name, offset)
        for fence in self.fences:
            content.setdefault(fence.name, fence.content)
        return tuple(Embed(name, offset, content.get(name)) for name, offset in first.items())

    @property
    def conflicts(self) -> tuple[str, ...]:
        """Names fenced more than once with different contents (the first one counts)."""
        seen: dict[str, bytes] = {}
        found: list[str] = []
        for fence in self.fences:
            if seen.setdefault(fence.name, fence.content) != fence.content and (
                fence.name not in found
            ):
                found.append(fence.name)
        return tuple(found)


def heading_role(heading_text: str) -> str | None:
    """The role an ATX heading's text names: its first whole-word role token.

    The text is lowercased and split on anything that is not a letter a-z, so
    ``Turn 1 -- User`` and ``user's question`` name ``user``, while
    ``userland`` and ``Users`` name nothing.
    """
    for token in _NOT_LETTERS_RE.split(heading_text.lower()):
        if token in CHAT_ROLES:
            return token
    return None


def _delimiter_role(line: str) -> tuple[str, dict[str, Any]] | None:
    heading = _ATX_RE.fullmatch(line)
    if heading is not None:
        role = heading_role(heading.group(1))
        return None if role is None else (role, {})
    comment = _COMMENT_RE.fullmatch(line)
    if comment is None:
        return None
    role = comment.group(1).lower()
    if role not in _COMMENT_ROLES:
        return None
    if comment.group(2) is None:
        return role, {}
    try:
        attributes = json.loads(comment.group(2))
    except ValueError:
        return None
    return (role, attributes) if isinstance(attributes, dict) else None


def _lines(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, line)``: char span with the ending, and the line without it."""
    pos, size = 0, len(text)
    while pos < size:
        newline = text.find("\n", pos)
        end = size if newline < 0 else newline + 1
        line = text[pos:end]
        if line.endswith("\n"):
            line = line[:-2] if line.endswith("\r\n") else line[:-1]
        yield pos, end, line
        pos = end


def _strip_line_ending(text: str) -> str:
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


class _Bytes:
    """Char offsets to UTF-8 byte offsets, cheaply for increasing positions."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._char = 0
        self._byte = 0

    def at(self, char: int) -> int:
        if char < self._char:
            return len(self._text[:char].encode())
        self._byte += len(self._text[self._char : char].encode())
        self._char = char
        return self._byte


def parse(text: str) -> Narrative:
    """Parse a narrative. Raises ``LmmlError`` for an embed fence never closed.

    Nothing is dropped or changed: the result records positions in ``text``.
    """
    to_bytes = _Bytes(text)
    delimiters: list[Delimiter] = []
    fences: list[EmbedFence] = []
    prose: list[tuple[int, int]] = []  # char spans of paragraphs, for references
    code: tuple[str, int] | None = None  # the open code fence: char and length
    fence: tuple[str, int, int, int] | None = None  # name, line no, start, content start
    paragraph: tuple[int, int] | None = None

    def end_paragraph() -> None:
        nonlocal paragraph
        if paragraph is not None:
            prose.append(paragraph)
            paragraph = None

    for number, (start, end, line) in enumerate(_lines(text), 1):
        if fence is not None:
            if _FENCE_CLOSE_RE.fullmatch(line):
                name, _, fence_start, content_start = fence
                content = _strip_line_ending(text[content_start:start]).encode()
                fences.append(EmbedFence(name, content, to_bytes.at(fence_start), to_bytes.at(end)))
                fence = None
            continue
        if code is not None:
            close = _CODE_CLOSE_RE.fullmatch(line)
            if close and close.group(1)[0] == code[0] and len(close.group(1)) >= code[1]:
                code = None
            continue
        opening = _CODE_OPEN_RE.fullmatch(line)
        if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
            end_paragraph()
            code = (opening.group(1)[0], len(opening.group(1)))
            continue
        embed = _FENCE_OPEN_RE.fullmatch(line)
        if embed:
            end_paragraph()
            fence = (embed.group(1), number, start, end)
            continue
        delimiter = _delimiter_role(line)
        if delimiter is not None:
            end_paragraph()
            role, attributes = delimiter
            delimiters.append(
                Delimiter(
                    role,
                    text[start:end],
                    to_bytes.at(start),
                    to_bytes.at(end),
                    start,
                    end,
                    attributes,
                )
            )
            continue
        if not line.strip(" \t"):
            end_paragraph()
        elif _ATX_RE.fullmatch(line):
            # A heading is a block of its own: no code span runs into it.
            end_paragraph()
            prose.append((start, end))
        elif paragraph is None:
            paragraph = (start, end)
        else:
            paragraph = (paragraph[0], end)
    end_paragraph()
    if fence is not None:
        raise LmmlError(f"line {fence[1]}: embed fence @@@{fence[0]} is never closed by a line @@@")
    size = to_bytes.at(len(text))
    to_bytes = _Bytes(text)
    references = [
        Reference(name, to_bytes.at(offset))
        for span in sorted(prose)
        for name, offset in _references(text, *span)
    ]
    return Narrative(
        text=text,
        size=size,
        delimiters=tuple(delimiters),
        fences=tuple(fences),
        references=tuple(references),
        open_code_block=code is not None,
    )


def _code_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Char spans of the code spans in ``text[start:end]`` (CommonMark's rule)."""
    spans: list[tuple[int, int]] = []
    pos = start
    while True:
        run = _BACKTICKS_RE.search(text, pos, end)
        if run is None:
            return spans
        opener, length = run.start(), len(run.group())
        if _escaped(text, opener, start):
            opener, length = opener + 1, length - 1  # "\`" is a literal backtick
        pos = run.end()
        if length == 0:
            continue
        for close in _BACKTICKS_RE.finditer(text, pos, end):
            if len(close.group()) == length:
                spans.append((opener, close.end()))
                pos = close.end()
                break


def _escaped(text: str, pos: int, start: int) -> bool:
    """Whether ``text[pos]`` follows an odd number of backslashes."""
    count = 0
    while pos - count - 1 >= start and text[pos - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _references(text: str, start: int, end: int) -> Iterator[tuple[str, int]]:
    """``(name, char offset)`` of each reference in a paragraph outside code spans."""
    spans = _code_spans(text, start, end)
    for match in _REFERENCE_RE.finditer(text, start, end):
        at = match.start()
        if any(a <= at < b for a, b in spans):
            continue
        before = text[at - 1] if at > start else ""
        if before.isalnum() or _escaped(text, at, start):
            continue  # an e-mail address, or an escaped "\@"
        name = match.group(1)
        # One trailing sentence mark is punctuation, not name; only "." can
        # be both (",;:!?)" already end the name).
        if name.endswith(".") and len(name) > 1:
            name = name[:-1]
        yield name, at
