"""MessageUsage: how several ranges of one transcript use its messages.

Segments may overlap (they share messages), Views may cover any range, and a
subscriber's window is one more range: the same message is then used by
several of them. ``message_usage`` counts each message **once by identity**
(the same object, however many ranges include it, and even if it sits at two
indices because a range was appended again from itself with ``append_from``)
and reports, besides the totals, how many of the ranges use each index.

Pure: give it the ranges and their messages; a caller holding a transcript
(``Transcript.usage``, the server's ``GET .../usage``) slices the messages
from one list so that overlapping ranges share the very same objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import msgspec
from msgspec import Struct

from protocol.state import TranscriptState
from protocol.types import Message, NonNegative
from protocol.views import InvalidView

__all__ = [
    "MessageUsage",
    "RangeUsage",
    "UsageRange",
    "UseRun",
    "message_usage",
    "named_ranges",
]

_encode: Final = msgspec.json.Encoder().encode


class UsageRange(Struct, frozen=True):
    """One named range ``[start, end)`` of the transcript (``segment:0``,
    ``view:draft``, ...)."""

    name: str
    start: NonNegative
    end: NonNegative


class RangeUsage(Struct, frozen=True):
    """One range on its own: its distinct messages and their bytes."""

    name: str
    start: NonNegative
    end: NonNegative
    messages: NonNegative
    bytes: NonNegative


class UseRun(Struct, frozen=True):
    """Indices ``[start, end)`` each used by ``count`` of the ranges (at least one)."""

    start: NonNegative
    end: NonNegative
    count: NonNegative


class MessageUsage(Struct, frozen=True):
    """What ``message_usage`` found.

    ``messages``: distinct messages (by identity) used by any range;
    ``bytes``: the sum of their compact JSON encodings, each counted once;
    ``references``: (range, index) pairs, i.e. what a naive sum would count;
    ``uses``: runs of indices and how many ranges use each (indices no
    range uses are left out); ``ranges``: each range on its own, in the
    order given.
    """

    messages: NonNegative
    bytes: NonNegative
    references: NonNegative
    uses: tuple[UseRun, ...]
    ranges: tuple[RangeUsage, ...]


def message_usage(ranges: Iterable[tuple[UsageRange, Sequence[Message]]]) -> MessageUsage:
    """Count how ``ranges`` use their messages. Each item is a range and its
    messages (``len(messages) == end - start``, else ``ValueError``).
    The totals do not depend on the order of the ranges, and a message used
    by several of them (or twice by one) counts once."""
    sizes: dict[int, int] = {}  # id(message) -> encoded size, once per distinct message
    keep: list[Message] = []  # holds the messages so that their ids stay theirs
    counts: dict[int, int] = {}  # index -> how many ranges use it
    references = 0
    per_range: list[RangeUsage] = []
    for span, messages in ranges:
        if len(messages) != span.end - span.start:
            raise ValueError(
                f"range {span.name!r} [{span.start}, {span.end}) came with {len(messages)} messages"
            )
        seen: dict[int, int] = {}
        for offset, message in enumerate(messages):
            key = id(message)
            size = sizes.get(key)
            if size is None:
                size = sizes[key] = len(_encode(message))
                keep.append(message)
            seen[key] = size
            index = span.start + offset
            counts[index] = counts.get(index, 0) + 1
        references += len(messages)
        per_range.append(RangeUsage(span.name, span.start, span.end, len(seen), sum(seen.values())))
    return MessageUsage(
        messages=len(sizes),
        bytes=sum(sizes.values()),
        references=references,
        uses=_runs(counts),
        ranges=tuple(per_range),
    )


def _runs(counts: dict[int, int]) -> tuple[UseRun, ...]:
    runs: list[UseRun] = []
    start = end = count = -1
    for index in sorted(counts):
        value = counts[index]
        if index == end and value == count:
            end += 1
            continue
        if count >= 0:
            runs.append(UseRun(start, end, count))
        start, end, count = index, index + 1, value
    if count >= 0:
        runs.append(UseRun(start, end, count))
    return tuple(runs)


def named_ranges(
    state: TranscriptState,
    *,
    segments: str | Iterable[int] | None = "all",
    views: Iterable[str] | None = None,
) -> list[UsageRange]:
    """The ranges of ``state`` to count: ``segments`` ``"all"`` (every
    segment), ``"active"`` (the open one), indices into ``segments()``, or
    ``None``; ``views`` names of Views (``None``: every View). Ranges are
    named ``segment:<i>`` and ``view:<name>``; an open end is the length.
    Raises ``InvalidView`` for an unknown View, ``ValueError`` for an index
    that is not a segment's."""
    length = state.length
    every = state.segments()
    if segments is None:
        chosen: list[int] = []
    elif segments == "all":
        chosen = list(range(len(every)))
    elif segments == "active":
        chosen = [len(every) - 1]
    elif isinstance(segments, str):
        raise ValueError(f"segments: expected 'all', 'active' or indices, got {segments!r}")
    else:
        chosen = list(segments)
        for i in chosen:
            if not 0 <= i < len(every):
                raise ValueError(f"no segment {i}: the transcript has {len(every)}")
    found = [UsageRange(f"segment:{i}", every[i].start, _end(every[i].end, length)) for i in chosen]
    names = sorted(state.views) if views is None else list(views)
    for name in names:
        view = state.views.get(name)
        if view is None:
            raise InvalidView(f"no View named {name!r}")
        found.append(UsageRange(f"view:{name}", view.start, _end(view.end, length)))
    return found


def _end(end: int | None, length: int) -> int:
    return length if end is None else end
