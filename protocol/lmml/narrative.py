"""Parsing an LMML narrative: role delimiters, embed fences and references.

An LMML narrative is Markdown plus three things, all found line by line:

- role delimiters: an ATX heading naming a role (``## Turn 1 -- user``) or an
  HTML comment on a line of its own whose whole text is a role
  (``<!-- assistant -->``);
- inline embed fences: a line ``@@@name.ext``, the content verbatim, a line
  ``@@@``; an opening line that no ``@@@`` line follows is plain text;
- external references: ``@name.ext`` (or ``@dir/name.ext``) in prose.

Lines inside fenced code blocks (````` or ``~~~``) and inside embed fences are
never delimiters and hold no references; neither do code spans. Only ``\\n``
ends a line; a ``\\r`` before it is part of the line ending (CRLF works like
LF), never of a name or a role.

``parse`` keeps every byte: it only records where things are. Offsets are
byte offsets into the narrative's UTF-8 encoding. It takes time linear in the
length of the text: one pass over the lines, and one over each paragraph's
backticks and at signs (no regular expression here can backtrack
quadratically, and no code span or reference is looked for twice).
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
    "UnclosedFence",
    "has_closing_line",
    "heading_role",
    "parse",
]

#: Roles a delimiter can name. ``context`` only in the HTML-comment spelling.
CHAT_ROLES: Final = ("user", "assistant", "system", "tool")
_COMMENT_ROLES: Final = (*CHAT_ROLES, "context")
#: An embed name: ``[A-Za-z0-9_.-]+`` starting with a letter or digit, then
#: any number of ``/segment`` (entries in subfolders), a segment being
#: ``[A-Za-z0-9_.-]+`` with something other than dots (never ``.`` or ``..``).
#: Possessive, so that no failed match backtracks.
NAME_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9_.-]*+(?:/(?=\.*+[A-Za-z0-9_-])[A-Za-z0-9_.-]++)*+"

_ATX_RE: Final = re.compile(r" {0,3}#{1,6}[ \t](.*)")
_COMMENT_OPEN_RE: Final = re.compile(r" {0,3}<!--")
_ROLE_RE: Final = re.compile(r"[A-Za-z]+")
_CODE_OPEN_RE: Final = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_CODE_CLOSE_RE: Final = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
_FENCE_OPEN_RE: Final = re.compile(rf"@@@({NAME_PATTERN})[ \t]*")
_FENCE_CLOSE_RE: Final = re.compile(r"@@@[ \t]*")
# A closing line anywhere in a text: only "\n" ends a line, and a "\r"
# counts as part of the line ending only before a "\n".
_FENCE_CLOSE_LINE_RE: Final = re.compile(r"^@@@[ \t]*(?:\r?\n|\Z)", re.MULTILINE)
_REFERENCE_RE: Final = re.compile(rf"@({NAME_PATTERN})")
_BACKTICKS_RE: Final = re.compile(r"`+")
_NOT_LETTERS_RE: Final = re.compile(r"[^a-z]+")
#: First characters of lines that may be blank or open a block (the empty
#: string is in every string: an empty line).
_BLOCK_STARTS: Final = " \t#<`~@"
#: Unclosed fence lines warned about one by one; the rest are counted.
_MAX_UNCLOSED_WARNINGS: Final = 10


@dataclass(frozen=True, slots=True)
class Reference:
    """An external reference ``@name`` at byte ``offset`` (of the ``@``)."""

    name: str
    offset: int


@dataclass(frozen=True, slots=True)
class EmbedFence:
    """An inline embed: ``@@@name`` at byte ``offset``, ``content`` its bytes.

    ``content`` is every line between the opening line and the closing
    ``@@@`` line, each with its line ending: ``@@@a.txt``, ``x``, ``@@@``
    holds ``b"x\n"``, and a fence with no line between holds ``b""``.
    """

    name: str
    content: bytes
    offset: int
    end: int


@dataclass(frozen=True, slots=True)
class UnclosedFence:
    """A line ``@@@name`` that no ``@@@`` line follows: read as plain text.

    ``line`` is its 1-based line number, ``offset`` its byte offset. The
    line holds no reference (``@name`` on it names nothing).
    """

    name: str
    line: int
    offset: int


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
    the text (it was never closed, which Markdown allows). ``unclosed_fences``
    are the ``@@@name`` lines read as plain text because no ``@@@`` line
    follows them.
    """

    text: str
    size: int
    delimiters: tuple[Delimiter, ...]
    fences: tuple[EmbedFence, ...]
    references: tuple[Reference, ...]
    open_code_block: bool
    unclosed_fences: tuple[UnclosedFence, ...] = ()

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
        found: dict[str, None] = {}
        for fence in self.fences:
            if seen.setdefault(fence.name, fence.content) != fence.content:
                found[fence.name] = None
        return tuple(found)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Readable sentences about what parsed but is likely a mistake."""
        unclosed = [
            f"line {u.line}: @@@{u.name} is never closed by a line @@@, so it is plain text"
            for u in self.unclosed_fences[:_MAX_UNCLOSED_WARNINGS]
        ]
        more = len(self.unclosed_fences) - _MAX_UNCLOSED_WARNINGS
        if more > 0:
            unclosed.append(f"{more} more @@@name lines are never closed")
        conflicting = [
            f"embed {name!r} is fenced more than once with different contents; the first is used"
            for name in self.conflicts
        ]
        return (*unclosed, *conflicting)


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


def has_closing_line(text: str) -> bool:
    """Whether a line of ``text`` is a closing ``@@@`` line (as ``parse`` reads lines)."""
    return _FENCE_CLOSE_LINE_RE.search(text) is not None


def _delimiter_role(line: str, number: int) -> tuple[str, dict[str, Any]] | None:
    heading = _ATX_RE.fullmatch(line)
    if heading is not None:
        role = heading_role(heading.group(1))
        return None if role is None else (role, {})
    comment = _comment(line)
    if comment is None:
        return None
    role, data = comment[0].lower(), comment[1]
    if role not in _COMMENT_ROLES:
        return None
    if not data:
        return role, {}
    try:
        attributes = json.loads(data)
    except ValueError:
        return None
    except RecursionError:
        raise LmmlError(f"line {number}: a delimiter's JSON object is nested too deeply") from None
    return (role, attributes) if isinstance(attributes, dict) else None


def _comment(line: str) -> tuple[str, str] | None:
    """``(word, "{...}" or "")`` of a line ``<!-- word {...} -->``, else ``None``.

    By hand rather than one regular expression: the blanks around the word,
    the object and the ``-->`` can each be matched by two neighbouring
    ``[ \\t]*`` of such an expression, which backtracks quadratically on a
    long run of blanks.
    """
    opening = _COMMENT_OPEN_RE.match(line)
    if opening is None:
        return None
    body = line.rstrip(" \t")
    if not body.endswith("-->") or len(body) - 3 < opening.end():
        return None
    inner = body[opening.end() : -3].strip(" \t")
    word = _ROLE_RE.match(inner)
    if word is None:
        return None
    data = inner[word.end() :].lstrip(" \t")
    if data and not (data[0] == "{" and data[-1] == "}" and len(data) > 1):
        return None
    return word.group(), data


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


class _Bytes:
    """Char offsets to UTF-8 byte offsets, for offsets that never decrease."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._ascii = text.isascii()
        self._char = 0
        self._byte = 0

    def at(self, char: int) -> int:
        if self._ascii:
            return char
        if char < self._char:
            raise ValueError("offsets must not decrease")  # a bug, never bad input
        self._byte += len(self._text[self._char : char].encode())
        self._char = char
        return self._byte


def parse(
    text: str, *, max_delimiters: int | None = None, max_embed_marks: int | None = None
) -> Narrative:
    """Parse a narrative. Any text parses, except that a delimiter's JSON
    object nested too deeply to decode raises ``LmmlError``.

    Nothing is dropped or changed: the result records positions in ``text``.
    ``max_delimiters`` and ``max_embed_marks`` (fences, references and
    unclosed fence lines together) bound what the result holds, and so the
    memory a hostile narrative can take: ``LmmlError`` as soon as either is
    exceeded.
    """
    to_bytes = _Bytes(text)
    reference_bytes = _Bytes(text)
    unclosed_bytes = _Bytes(text)
    delimiters: list[Delimiter] = []
    fences: list[EmbedFence] = []
    references: list[Reference] = []
    unclosed: list[UnclosedFence] = []
    marks = 0
    code: tuple[str, int] | None = None  # the open code fence: char and length
    fence: tuple[str, int, int] | None = None  # name, start, content start
    paragraph: tuple[int, int] | None = None
    silent: list[int] = []  # the "@name" of unclosed fence lines in the paragraph
    # Where the last closing line starts: an opening line after it is never
    # closed, which is known without looking ahead from each opening line.
    last_close = -1
    for last_close_match in _FENCE_CLOSE_LINE_RE.finditer(text):
        last_close = last_close_match.start()

    def count_mark() -> None:
        nonlocal marks
        marks += 1
        if max_embed_marks is not None and marks > max_embed_marks:
            raise LmmlError(
                f"the narrative has more than {max_embed_marks} embed fences and references"
            )

    def end_paragraph() -> None:
        nonlocal paragraph
        if paragraph is not None:
            for name, offset in _references(text, *paragraph, silent):
                count_mark()
                references.append(Reference(name, reference_bytes.at(offset)))
            paragraph = None
            silent.clear()

    for number, (start, end, line) in enumerate(_lines(text), 1):
        if fence is not None:
            if _FENCE_CLOSE_RE.fullmatch(line):
                name, fence_start, content_start = fence
                content = text[content_start:start].encode()
                count_mark()
                fences.append(EmbedFence(name, content, to_bytes.at(fence_start), to_bytes.at(end)))
                fence = None
            continue
        if code is not None:
            close = _CODE_CLOSE_RE.fullmatch(line)
            if close and close.group(1)[0] == code[0] and len(close.group(1)) >= code[1]:
                code = None
            continue
        if line[:1] not in _BLOCK_STARTS:
            # Most lines: prose that can open nothing (a fast path, same result).
            paragraph = (start, end) if paragraph is None else (paragraph[0], end)
            continue
        if not line.strip(" \t"):
            end_paragraph()  # a blank line can be nothing else
            continue
        opening = _CODE_OPEN_RE.fullmatch(line)
        if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
            end_paragraph()
            code = (opening.group(1)[0], len(opening.group(1)))
            continue
        embed = _FENCE_OPEN_RE.fullmatch(line)
        if embed and start < last_close:
            end_paragraph()
            fence = (embed.group(1), start, end)
            continue
        if embed:
            # Never closed: plain text, in its paragraph, naming nothing.
            count_mark()
            unclosed.append(UnclosedFence(embed.group(1), number, unclosed_bytes.at(start)))
            silent.append(start + 2)
        delimiter = _delimiter_role(line, number)
        if delimiter is not None:
            end_paragraph()
            if max_delimiters is not None and len(delimiters) >= max_delimiters:
                raise LmmlError(f"the narrative has more than {max_delimiters} role delimiters")
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
        if _ATX_RE.fullmatch(line):
            # A heading is a block of its own: no code span runs into it.
            end_paragraph()
            paragraph = (start, end)
            end_paragraph()
        elif paragraph is None:
            paragraph = (start, end)
        else:
            paragraph = (paragraph[0], end)
    end_paragraph()
    return Narrative(
        text=text,
        size=to_bytes.at(len(text)),
        delimiters=tuple(delimiters),
        fences=tuple(fences),
        references=tuple(references),
        open_code_block=code is not None,
        unclosed_fences=tuple(unclosed),
    )


def _code_spans(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Char spans of the code spans in ``text[start:end]`` (CommonMark's rule).

    A backtick string opens a span closed by the next backtick string of the
    same length; one that no such string follows is literal text, and the
    search goes on after it. Where the last string of each length starts is
    found first, so an opener knows at once whether a closer follows, and
    the strings are then walked once: linear time, and memory for one entry
    per distinct length.
    """
    last: dict[int, int] = {}
    for run in _BACKTICKS_RE.finditer(text, start, end):
        last[run.end() - run.start()] = run.start()
    seeking = 0  # the length of the closer sought, 0 outside a span
    opener = 0
    for run in _BACKTICKS_RE.finditer(text, start, end):
        first, stop = run.span()
        if seeking:
            if stop - first == seeking:
                yield opener, stop
                seeking = 0
            continue
        if _escaped(text, first, start):
            first += 1  # "\`" is a literal backtick
        if stop > first and last.get(stop - first, -1) > run.start():
            seeking, opener = stop - first, first


def _escaped(text: str, pos: int, start: int) -> bool:
    """Whether ``text[pos]`` follows an odd number of backslashes."""
    count = 0
    while pos - count - 1 >= start and text[pos - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _references(text: str, start: int, end: int, silent: list[int]) -> Iterator[tuple[str, int]]:
    """``(name, char offset)`` of each reference in a paragraph outside code spans.

    An ``@`` at an offset in ``silent`` (the ``@name`` of an unclosed
    ``@@@name`` line) starts no reference.
    """
    first_at = text.find("@", start, end)
    if first_at < 0:
        return  # most paragraphs: nothing to look for
    spans = _code_spans(text, start, end) if text.find("`", start, end) >= 0 else iter(())
    span = next(spans, None)
    silence = set(silent)
    for match in _REFERENCE_RE.finditer(text, first_at, end):
        at = match.start()
        while span is not None and span[1] <= at:
            span = next(spans, None)
        if span is not None and span[0] <= at:
            continue  # inside a code span
        before = text[at - 1] if at > start else ""
        if before.isalnum() or _escaped(text, at, start) or at in silence:
            continue  # an e-mail address, an escaped "\@", an unclosed fence
        name = match.group(1)
        # One trailing sentence mark is punctuation, not name; only "." can
        # be both (",;:!?)" already end the name).
        if name.endswith(".") and len(name) > 1:
            name = name[:-1]
        yield name, at
