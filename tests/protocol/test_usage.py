"""MessageUsage (``protocol.usage``): overlapping ranges never count a
message twice, the order of the ranges does not matter, and identity, not
position or equality, is what makes two uses one message. The interval
arithmetic gives what the walk per message per range (``walked``, the
algorithm it replaced) gave, on random ranges over random sharings."""

from __future__ import annotations

import time

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.state import TranscriptState
from protocol.types import Message, MessagesAppended, SegmentStarted, TranscriptEvent, ViewChanged
from protocol.usage import (
    MessageUsage,
    RangeUsage,
    UsageRange,
    UseRun,
    message_usage,
    named_ranges,
    sized_usage,
)
from protocol.views import InvalidView

LENGTH = 40
MESSAGES = tuple(Message(role="user", content="x" * (i % 7)) for i in range(LENGTH))
SIZES = [len(msgspec.json.encode(m)) for m in MESSAGES]


@st.composite
def spans(draw: st.DrawFn) -> list[UsageRange]:
    count = draw(st.integers(0, 8))
    found = []
    for n in range(count):
        start = draw(st.integers(0, LENGTH))
        end = draw(st.integers(start, LENGTH))
        found.append(UsageRange(f"r{n}", start, end))
    return found


def usage_of(ranges: list[UsageRange]) -> MessageUsage:
    return message_usage(ranges, MESSAGES)


def walked(ranges: list[UsageRange], messages: tuple[Message, ...], start: int) -> MessageUsage:
    """The algorithm before issue 24: every message of every range, by identity."""
    sizes: dict[int, int] = {}
    keep: list[Message] = []
    counts: dict[int, int] = {}
    per_range: list[RangeUsage] = []
    for span in ranges:
        seen: dict[int, int] = {}
        for index in range(span.start, span.end):
            message = messages[index - start]
            size = sizes.get(id(message))
            if size is None:
                size = sizes[id(message)] = len(msgspec.json.encode(message))
                keep.append(message)
            seen[id(message)] = size
            counts[index] = counts.get(index, 0) + 1
        per_range.append(RangeUsage(span.name, span.start, span.end, len(seen), sum(seen.values())))
    runs: list[UseRun] = []
    for index in sorted(counts):
        if runs and runs[-1].end == index and runs[-1].count == counts[index]:
            runs[-1] = UseRun(runs[-1].start, index + 1, counts[index])
        else:
            runs.append(UseRun(index, index + 1, counts[index]))
    return MessageUsage(
        messages=len(sizes),
        bytes=sum(sizes.values()),
        references=sum(r.end - r.start for r in ranges),
        uses=tuple(runs),
        ranges=tuple(per_range),
    )


POOL = tuple(Message(role="user", content="y" * n) for n in range(6))


@st.composite
def shared_messages(draw: st.DrawFn) -> tuple[int, tuple[Message, ...], list[UsageRange]]:
    """Messages ``[start, start + n)`` some of which are one object at several
    indices (as ``append_from`` makes), and ranges within them."""
    start = draw(st.integers(0, 5))
    picks = draw(st.lists(st.integers(0, 2 * len(POOL) - 1), max_size=30))
    # Half the picks are a shared object of the pool, half a fresh equal one.
    messages = tuple(
        POOL[p] if p < len(POOL) else Message(role="user", content="y" * (p % len(POOL)))
        for p in picks
    )
    stop = start + len(messages)
    found = []
    for n in range(draw(st.integers(0, 8))):
        a = draw(st.integers(start, stop))
        b = draw(st.integers(a, stop))
        found.append(UsageRange(f"r{n}", a, b))
    return start, messages, found


@given(shared_messages())
def test_interval_arithmetic_gives_what_the_walk_gave(
    case: tuple[int, tuple[Message, ...], list[UsageRange]],
) -> None:
    start, messages, ranges = case
    assert message_usage(ranges, messages, start) == walked(ranges, messages, start)


@given(spans())
def test_overlapping_ranges_never_double_count(ranges: list[UsageRange]) -> None:
    usage = usage_of(ranges)
    covered = {i for r in ranges for i in range(r.start, r.end)}
    assert usage.messages == len(covered)
    assert usage.bytes == sum(SIZES[i] for i in covered)
    assert usage.references == sum(r.end - r.start for r in ranges)
    assert usage.messages <= usage.references
    # The runs count, for each index, the ranges that hold it; nothing else.
    counted = {i: run.count for run in usage.uses for i in range(run.start, run.end)}
    assert counted == {i: sum(r.start <= i < r.end for r in ranges) for i in covered}
    assert all(run.count > 0 and run.start < run.end for run in usage.uses)


@given(spans(), st.randoms())
def test_the_order_of_the_ranges_does_not_matter(ranges: list[UsageRange], rng) -> None:  # type: ignore[no-untyped-def]
    shuffled = list(ranges)
    rng.shuffle(shuffled)
    one, other = usage_of(ranges), usage_of(shuffled)
    assert (one.messages, one.bytes, one.references, one.uses) == (
        other.messages,
        other.bytes,
        other.references,
        other.uses,
    )
    assert sorted(one.ranges, key=lambda r: r.name) == sorted(other.ranges, key=lambda r: r.name)


@given(spans())
def test_a_range_given_twice_adds_references_not_messages(ranges: list[UsageRange]) -> None:
    once, twice = usage_of(ranges), usage_of(ranges + ranges)
    assert (twice.messages, twice.bytes) == (once.messages, once.bytes)
    assert twice.references == 2 * once.references


def test_identity_not_equality_makes_one_message() -> None:
    shared = Message(role="user", content="same")
    equal = Message(role="user", content="same")
    # Index 1 holds the same object as index 0 (appended again from itself).
    usage = message_usage([UsageRange("a", 0, 2), UsageRange("b", 2, 3)], (shared, shared, equal))
    assert usage.messages == 2  # shared once, equal (another object) once
    assert usage.ranges[0].messages == 1
    assert usage.uses == (UseRun(0, 3, 1),)


@given(shared_messages())
def test_from_sizes_alone_it_gives_what_the_walk_gave_for_distinct_messages(
    case: tuple[int, tuple[Message, ...], list[UsageRange]],
) -> None:
    start, shared, ranges = case
    messages = tuple(msgspec.structs.replace(m) for m in shared)  # each index its own object
    assert len({id(m) for m in messages}) == len(messages)
    sums = [0]
    for m in messages:
        sums.append(sums[-1] + len(msgspec.json.encode(m)))
    assert sized_usage(ranges, sums, start) == walked(ranges, messages, start)
    with pytest.raises(ValueError):
        sized_usage([UsageRange("past", start, start + len(messages) + 1)], sums, start)


def test_a_range_must_lie_within_the_messages() -> None:
    with pytest.raises(ValueError):
        message_usage([UsageRange("a", 0, 3)], MESSAGES[:2])
    with pytest.raises(ValueError):
        message_usage([UsageRange("a", 0, 3)], MESSAGES[:5], start=1)


def test_many_overlapping_ranges_cost_their_bounds_not_their_messages() -> None:
    """Issue 24 item 1: 200 copies of one range over 100,000 messages took
    13.4 s of the server's loop as a walk per message per range."""
    messages = tuple(Message(role="user", content="z") for _ in range(100_000))
    ranges = [UsageRange(f"view:{i}", i, 100_000 - i) for i in range(1000)]
    began = time.perf_counter()
    usage = message_usage(ranges, messages)
    took = time.perf_counter() - began
    assert usage.messages == 100_000
    assert usage.references == sum(100_000 - 2 * i for i in range(1000))
    assert usage.uses[0] == UseRun(0, 1, 1) and usage.uses[999] == UseRun(999, 99_001, 1000)
    assert took < 2.0, f"{took:.2f} s"  # the walk: minutes


def test_a_segment_or_view_asked_twice_is_refused() -> None:
    state = TranscriptState("t", "e")
    state.apply(TranscriptEvent("t", "e", 1, 0, MessagesAppended(0, MESSAGES[:4])))
    state.apply(TranscriptEvent("t", "e", 2, 0, ViewChanged("v", 1, 2)))
    with pytest.raises(ValueError, match="segment 0 asked twice"):
        named_ranges(state, segments=[0, 0])
    with pytest.raises(ValueError, match="View 'v' asked twice"):
        named_ranges(state, segments=None, views=["v", "v"])


def test_named_ranges_of_a_state() -> None:
    state = TranscriptState("t", "e")
    events: list[MessagesAppended | SegmentStarted | ViewChanged] = [
        MessagesAppended(0, MESSAGES[:10]),
        SegmentStarted(0, 6, 10),
        ViewChanged("v", 2, 4),
        ViewChanged("w", 8, None),
    ]
    for revision, change in enumerate(events, 1):
        state.apply(TranscriptEvent("t", "e", revision, 0, change))
    assert named_ranges(state) == [
        UsageRange("segment:0", 0, 10),
        UsageRange("segment:1", 6, 10),
        UsageRange("view:v", 2, 4),
        UsageRange("view:w", 8, 10),
    ]
    assert named_ranges(state, segments="active", views=["v"]) == [
        UsageRange("segment:1", 6, 10),
        UsageRange("view:v", 2, 4),
    ]
    assert named_ranges(state, segments=None, views=[]) == []
    with pytest.raises(InvalidView):
        named_ranges(state, views=["nope"])
    with pytest.raises(ValueError):
        named_ranges(state, segments=[2])
