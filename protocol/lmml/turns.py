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
    exactly. A narrative without delimiters is one ``context`` turn, even an
    empty one; an empty preamble before a delimiter is no turn. Every
    delimiter opens a turn, even one with the same role as the turn before.
    """
    text = narrative.text
    delimiters = narrative.delimiters
    # (byte start, byte end, char start, char end, role, delimiter line, attributes)
    spans: list[tuple[int, int, int, int, str, str, Mapping[str, Any]]] = []
    if not delimiters or delimiters[0].start > 0:
        first_delimiter = delimiters[0] if delimiters else None
        spans.append(
            (
                0,
                first_delimiter.start if first_delimiter else narrative.size,
                0,
                first_delimiter.char_start if first_delimiter else len(text),
                "context",
                "",
                {},
            )
        )
    for i, delimiter in enumerate(delimiters):
        after = delimiters[i + 1] if i + 1 < len(delimiters) else None
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
    # Embeds come in offset order, like the turns: hand them out in one pass.
    embeds = narrative.embeds
    turns: list[Turn] = []
    first = 0
    for start, end, char_start, char_end, role, line, attributes in spans:
        last = first
        while last < len(embeds) and embeds[last].offset < end:
            last += 1
        turns.append(
            Turn(
                role=role,
                text=text[char_start:char_end],
                start=start,
                end=end,
                delimiter=line,
                embeds=embeds[first:last],
                attributes=attributes,
            )
        )
        first = last
    return tuple(turns)
