"""MessageUsage: how several ranges of one transcript use its messages.

Segments may overlap (they share messages), Views may cover any range, and a
subscriber's window is one more range: the same message is then used by
several of them. ``message_usage`` counts each message **once by identity**
(the same object, however many ranges include it, and even if it sits at two
indices because a range was appended again from itself with ``append_from``)
and reports, besides the totals, how many of the ranges use each index.

Pure: give it the ranges and the messages they lie in, as one sequence (a
caller holding a transcript, ``Transcript.usage`` or the server's ``GET
.../usage``, reads them once, so that overlapping ranges share the very same
objects). What it costs depends on the messages the ranges cover and the
number of ranges, not on how much they overlap; ``check_ranges`` refuses the
same range asked twice and more ranges than a caller allows.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Sequence
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
    "sized_usage",
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


def message_usage(
    ranges: Sequence[UsageRange], messages: Sequence[Message], start: int = 0
) -> MessageUsage:
    """Count how ``ranges`` use ``messages``, the messages ``[start, start +
    len(messages))`` of one transcript (every range must lie within them,
    else ``ValueError``). The totals do not depend on the order of the
    ranges, and a message used by several of them (or twice by one) counts
    once.

    Interval arithmetic, not a walk per range: the ranges are merged into
    the disjoint runs they cover (their union), each covered message is
    encoded once for its size (prefix sums then give any range's bytes from
    its two bounds) and the per-index counts come from a sweep over the
    ranges' bounds. Cost: the messages covered, plus ``R log R`` for ``R``
    ranges, however much they overlap (the per-message walk cost ranges x
    messages: 13.4 s for 200 ranges over 100,000 messages). Identity is
    looked at only when two indices hold one object (a range appended again
    from itself with ``append_from``): then only those objects are counted
    again, per range."""
    _check_within(ranges, start, start + len(messages))
    covered = _union(ranges)
    # Prefix sums of the encoded sizes, per covered run: run k covers
    # [lo, hi) and sums[k][i - lo] is the bytes of [lo, i).
    sums: list[list[int]] = []
    for lo, hi in covered:
        part = messages[lo - start : hi - start]
        sums.append(list(itertools.accumulate(map(len, map(_encode, part)), initial=0)))
    lows = [lo for lo, _ in covered]

    def size_of(a: int, b: int) -> int:
        if a == b:
            return 0
        k = bisect.bisect_right(lows, a) - 1
        run = sums[k]
        lo = lows[k]
        return run[b - lo] - run[a - lo]

    return _count(ranges, covered, size_of, _shared(messages, start, covered))


def sized_usage(ranges: Sequence[UsageRange], sums: Sequence[int], start: int = 0) -> MessageUsage:
    """``message_usage`` from the sizes alone: ``sums[i]`` is the bytes of
    messages ``[start, start + i)`` (prefix sums of their compact JSON), and
    every index holds a message of its own (as a server's do: each append
    and each read from its store decodes its own objects). Costs ``R log R``
    for ``R`` ranges, whatever their length. ``ValueError`` for a range not
    within ``[start, start + len(sums) - 1)``."""
    _check_within(ranges, start, start + len(sums) - 1)
    return _count(ranges, _union(ranges), lambda a, b: sums[b - start] - sums[a - start], [])


def _check_within(ranges: Iterable[UsageRange], start: int, stop: int) -> None:
    for span in ranges:
        if not start <= span.start <= span.end <= stop:
            raise ValueError(
                f"range {span.name!r} [{span.start}, {span.end}) is not within the messages "
                f"[{start}, {stop}) given"
            )


def _count(
    ranges: Sequence[UsageRange],
    covered: list[tuple[int, int]],
    size_of: Callable[[int, int], int],
    shared: list[tuple[list[int], int]],
) -> MessageUsage:
    """The usage of ``ranges`` covering the runs ``covered``, the bytes of
    any ``[a, b)`` within a run being ``size_of(a, b)``; ``shared`` the
    objects found at several indices (their indices and size)."""
    total_messages = sum(hi - lo for lo, hi in covered)
    total_bytes = sum(size_of(lo, hi) for lo, hi in covered)
    per_range = [[span.end - span.start, size_of(span.start, span.end)] for span in ranges]
    for indices, size in shared:
        # One object at several indices: counted once overall and once per range.
        total_messages -= len(indices) - 1
        total_bytes -= (len(indices) - 1) * size
        for found, span in zip(per_range, ranges, strict=True):
            inside = bisect.bisect_left(indices, span.end) - bisect.bisect_left(indices, span.start)
            if inside > 1:
                found[0] -= inside - 1
                found[1] -= (inside - 1) * size
    return MessageUsage(
        messages=total_messages,
        bytes=total_bytes,
        references=sum(span.end - span.start for span in ranges),
        uses=_sweep(ranges),
        ranges=tuple(
            RangeUsage(span.name, span.start, span.end, count, size)
            for span, (count, size) in zip(ranges, per_range, strict=True)
        ),
    )


def _union(ranges: Iterable[UsageRange]) -> list[tuple[int, int]]:
    """The disjoint runs ``[lo, hi)`` the non-empty ranges cover, in order
    (touching runs joined)."""
    runs: list[tuple[int, int]] = []
    for lo, hi in sorted((r.start, r.end) for r in ranges if r.start < r.end):
        if runs and lo <= runs[-1][1]:
            if hi > runs[-1][1]:
                runs[-1] = (runs[-1][0], hi)
        else:
            runs.append((lo, hi))
    return runs


def _shared(
    messages: Sequence[Message], start: int, covered: list[tuple[int, int]]
) -> list[tuple[list[int], int]]:
    """The objects that sit at more than one covered index: for each, its
    indices (ascending) and its encoded size. Usually none, found by one
    pass over the covered objects' identities."""
    objects = [message for lo, hi in covered for message in messages[lo - start : hi - start]]
    if len(set(map(id, objects))) == len(objects):
        return []
    where: dict[int, list[int]] = {}
    for lo, hi in covered:
        for index in range(lo, hi):
            where.setdefault(id(messages[index - start]), []).append(index)
    return [
        (indices, len(_encode(messages[indices[0] - start])))
        for indices in where.values()
        if len(indices) > 1
    ]


def _sweep(ranges: Iterable[UsageRange]) -> tuple[UseRun, ...]:
    """Runs of indices and how many ranges use each, from the ranges' bounds
    alone: +1 at each start, -1 at each end; equal neighbours joined."""
    delta: dict[int, int] = {}
    for r in ranges:
        if r.start < r.end:
            delta[r.start] = delta.get(r.start, 0) + 1
            delta[r.end] = delta.get(r.end, 0) - 1
    runs: list[UseRun] = []
    count = 0
    previous = 0
    for point in sorted(delta):
        if count > 0:
            if runs and runs[-1].end == previous and runs[-1].count == count:
                runs[-1] = UseRun(runs[-1].start, point, count)
            else:
                runs.append(UseRun(previous, point, count))
        count += delta[point]
        previous = point
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
    that is not a segment's or for a segment or View asked twice."""
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
        _refuse_twice("segment", chosen)
    found = [UsageRange(f"segment:{i}", every[i].start, _end(every[i].end, length)) for i in chosen]
    names = sorted(state.views) if views is None else list(views)
    _refuse_twice("View", names)
    for name in names:
        view = state.views.get(name)
        if view is None:
            raise InvalidView(f"no View named {name!r}")
        found.append(UsageRange(f"view:{name}", view.start, _end(view.end, length)))
    return found


def _refuse_twice(kind: str, asked: Sequence[object]) -> None:
    # Counting one range twice tells nothing new; a client sending
    # segments=0,0,0,... only asks for the work to be done again.
    seen: set[object] = set()
    for x in asked:
        if x in seen:
            raise ValueError(f"{kind} {x!r} asked twice: ask for each once")
        seen.add(x)


def _end(end: int | None, length: int) -> int:
    return length if end is None else end
