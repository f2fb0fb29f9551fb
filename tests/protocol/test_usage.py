"""MessageUsage (``protocol.usage``): overlapping ranges never count a
message twice, the order of the ranges does not matter, and identity, not
position or equality, is what makes two uses one message."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.state import TranscriptState
from protocol.types import Message, MessagesAppended, SegmentStarted, TranscriptEvent, ViewChanged
from protocol.usage import UsageRange, UseRun, message_usage, named_ranges
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


def usage_of(ranges: list[UsageRange]):  # type: ignore[no-untyped-def]
    return message_usage((r, MESSAGES[r.start : r.end]) for r in ranges)


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
    usage = message_usage(
        [(UsageRange("a", 0, 2), (shared, shared)), (UsageRange("b", 2, 3), (equal,))]
    )
    assert usage.messages == 2  # shared once, equal (another object) once
    assert usage.ranges[0].messages == 1
    assert usage.uses == (UseRun(0, 3, 1),)


def test_a_range_must_come_with_its_messages() -> None:
    with pytest.raises(ValueError):
        message_usage([(UsageRange("a", 0, 3), MESSAGES[:2])])


def test_named_ranges_of_a_state() -> None:
    state = TranscriptState("t", "e")
    events = [
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
