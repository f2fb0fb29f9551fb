"""Segmenting a narrative into turns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.lmml.narrative import Embed, Narrative

__all__ = ["Turn", "segment"]


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a narrative.

    ``text`` is verbatim: everything after the delimiter line (``delimiter``,
    its line ending included; ``""`` for the preamble) up to the next
    delimiter line or the end. ``start``/``end`` are its byte offsets in the
    narrative. ``embeds`` are the embeds whose first reference or fence lies
    in ``text``, in first-occurrence order. ``attributes`` come from a
    ``<!-- role {...} -->`` delimiter.
    """

    role: str
    text: str
    start: int
    end: int
    delimiter: str = ""
    embeds: tuple[Embed, ...] = ()
    attributes: Mapping[str, Any] = field(default_factory=dict)


def segment(narrative: Narrative) -> tuple[Turn, ...]:
    """Split a narrative into turns at its role delimiters.

    Text before the first delimiter, if any, is a ``context`` turn (the
    preamble), so nothing the author wrote is dropped: the preamble's text
    followed by each turn's ``delimiter`` and ``text`` is the narrative
    exactly. Every delimiter opens a turn, even one with the same role as the
    turn before.
    """
    text = narrative.text
    embeds = narrative.embeds
    # (byte start, byte end, char start, char end, role, delimiter line, attributes)
    spans: list[tuple[int, int, int, int, str, str, Mapping[str, Any]]] = []
    first = narrative.delimiters[0] if narrative.delimiters else None
    preamble_end = first.start if first else narrative.size
    if preamble_end > 0:
        spans.append(
            (0, preamble_end, 0, first.char_start if first else len(text), "context", "", {})
        )
    following = [*narrative.delimiters[1:], None][: len(narrative.delimiters)]
    for delimiter, after in zip(narrative.delimiters, following, strict=True):
        spans.append(
            (
                delimiter.end,
                after.start if after else narrative.size,
                delimiter.char_end,
                after.char_start if after else len(text),
                delimiter.role,
                delimiter.line,
                delimiter.attributes,
            )
        )
    return tuple(
        Turn(
            role=role,
            text=text[char_start:char_end],
            start=start,
            end=end,
            delimiter=line,
            embeds=tuple(e for e in embeds if start <= e.offset < end),
            attributes=attributes,
        )
        for start, end, char_start, char_end, role, line, attributes in spans
    )
