"""The first, quadratic LMML parser, kept only as a test oracle.

It is the parser of round 1 with the rules of issue 12 added in the plainest
way: each opening ``@@@name`` line looks ahead for its ``@@@`` line, each
backtick string for its closer, each reference through every code span; the
comment delimiter is the one regular expression; names are cut at the first
``/`` that does not start a good segment. Slow on purpose-built input, and
easy to check by reading. ``protocol.lmml`` must give exactly its results.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Final

from protocol.lmml.narrative import (
    CHAT_ROLES,
    Delimiter,
    EmbedFence,
    Narrative,
    Reference,
    UnclosedFence,
    heading_role,
)
from protocol.lmml.turns import Turn

_COMMENT_ROLES: Final = (*CHAT_ROLES, "context")
_ATX_RE: Final = re.compile(r" {0,3}#{1,6}[ \t](.*)")
_COMMENT_RE: Final = re.compile(r" {0,3}<!--[ \t]*([A-Za-z]+)[ \t]*(\{.*\})?[ \t]*-->[ \t]*")
_CODE_OPEN_RE: Final = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_CODE_CLOSE_RE: Final = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
_LOOSE_NAME: Final = r"[A-Za-z0-9][A-Za-z0-9_./-]*"
_FENCE_OPEN_RE: Final = re.compile(rf"@@@({_LOOSE_NAME})[ \t]*")
_FENCE_CLOSE_RE: Final = re.compile(r"@@@[ \t]*")
_REFERENCE_RE: Final = re.compile(rf"@({_LOOSE_NAME})")
_BACKTICKS_RE: Final = re.compile(r"`+")


def _name(loose: str) -> str:
    """``loose`` up to the first ``/`` that starts no good segment."""
    first, *segments = loose.split("/")
    kept = [first]
    for segment in segments:
        if not segment.strip("."):  # empty, ".", "..", "..."
            break
        kept.append(segment)
    return "/".join(kept)


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


def _lines(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, line)`` per line; only ``\\n`` ends one (not ``str.splitlines``)."""
    lines = []
    start = 0
    while start < len(text):
        newline = text.find("\n", start)
        end = len(text) if newline < 0 else newline + 1
        line = text[start:end]
        if line.endswith("\n"):
            line = line[:-2] if line.endswith("\r\n") else line[:-1]
        lines.append((start, end, line))
        start = end
    return lines


def _byte(text: str, char: int) -> int:
    return len(text[:char].encode())


def parse(text: str) -> Narrative:
    """What ``protocol.lmml.parse`` must give, slowly."""
    lines = _lines(text)
    delimiters: list[Delimiter] = []
    fences: list[EmbedFence] = []
    unclosed: list[UnclosedFence] = []
    silent: set[int] = set()
    prose: list[tuple[int, int]] = []
    code: tuple[str, int] | None = None
    fence: tuple[str, int, int] | None = None
    paragraph: tuple[int, int] | None = None

    def end_paragraph() -> None:
        nonlocal paragraph
        if paragraph is not None:
            prose.append(paragraph)
            paragraph = None

    for number, (start, end, line) in enumerate(lines, 1):
        if fence is not None:
            if _FENCE_CLOSE_RE.fullmatch(line):
                name, fence_start, content_start = fence
                content = text[content_start:start].encode()
                fences.append(EmbedFence(name, content, _byte(text, fence_start), _byte(text, end)))
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
        if embed and _name(embed.group(1)) == embed.group(1):
            if any(_FENCE_CLOSE_RE.fullmatch(later) for _, _, later in lines[number:]):
                end_paragraph()
                fence = (embed.group(1), start, end)
                continue
            unclosed.append(UnclosedFence(embed.group(1), number, _byte(text, start)))
            silent.add(start + 2)
        delimiter = _delimiter_role(line)
        if delimiter is not None:
            end_paragraph()
            role, attributes = delimiter
            delimiters.append(
                Delimiter(
                    role,
                    text[start:end],
                    _byte(text, start),
                    _byte(text, end),
                    start,
                    end,
                    attributes,
                )
            )
            continue
        if not line.strip(" \t"):
            end_paragraph()
        elif _ATX_RE.fullmatch(line):
            end_paragraph()
            prose.append((start, end))
        elif paragraph is None:
            paragraph = (start, end)
        else:
            paragraph = (paragraph[0], end)
    end_paragraph()
    references = [
        Reference(name, _byte(text, offset))
        for span in sorted(prose)
        for name, offset in _references(text, *span)
        if offset not in silent
    ]
    return Narrative(
        text=text,
        size=len(text.encode()),
        delimiters=tuple(delimiters),
        fences=tuple(fences),
        references=tuple(references),
        open_code_block=code is not None,
        unclosed_fences=tuple(unclosed),
    )


def segment(narrative: Narrative) -> tuple[Turn, ...]:
    """What ``protocol.lmml.segment`` must give, slowly."""
    text = narrative.text
    # (byte start, byte end, char start, char end, delimiter or None)
    spans: list[tuple[int, int, int, int, Delimiter | None]] = []
    first = narrative.delimiters[0] if narrative.delimiters else None
    if first is None or first.start > 0:
        end = first.start if first else narrative.size
        spans.append((0, end, 0, first.char_start if first else len(text), None))
    for i, delimiter in enumerate(narrative.delimiters):
        after = narrative.delimiters[i + 1] if i + 1 < len(narrative.delimiters) else None
        end = after.start if after else narrative.size
        char_end = after.char_start if after else len(text)
        spans.append((delimiter.end, end, delimiter.char_end, char_end, delimiter))
    return tuple(
        Turn(
            role=d.role if d else "context",
            text=text[char_start:char_end],
            start=start,
            end=end,
            delimiter=d.line if d else "",
            embeds=tuple(e for e in narrative.embeds if start <= e.offset < end),
            attributes=d.attributes if d else {},
        )
        for start, end, char_start, char_end, d in spans
    )


def _code_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pos = start
    while True:
        run = _BACKTICKS_RE.search(text, pos, end)
        if run is None:
            return spans
        opener, length = run.start(), len(run.group())
        if _escaped(text, opener, start):
            opener, length = opener + 1, length - 1
        pos = run.end()
        if length == 0:
            continue
        for close in _BACKTICKS_RE.finditer(text, pos, end):
            if len(close.group()) == length:
                spans.append((opener, close.end()))
                pos = close.end()
                break


def _escaped(text: str, pos: int, start: int) -> bool:
    count = 0
    while pos - count - 1 >= start and text[pos - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _references(text: str, start: int, end: int) -> Iterator[tuple[str, int]]:
    spans = _code_spans(text, start, end)
    for match in _REFERENCE_RE.finditer(text, start, end):
        at = match.start()
        if any(a <= at < b for a, b in spans):
            continue
        before = text[at - 1] if at > start else ""
        if before.isalnum() or _escaped(text, at, start):
            continue
        name = _name(match.group(1))
        if name.endswith(".") and len(name) > 1:
            name = name[:-1]
        yield name, at
