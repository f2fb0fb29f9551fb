"""server.model.ranges: fixed ranges of a transcript."""

from __future__ import annotations

import pytest

from protocol.types import Message, TranscriptRangeLocator
from server.model.ranges import TranscriptRangeReader, fixed_range
from server.model.transcript import Transcript


def make(n: int) -> Transcript:
    return Transcript([Message("user", f"m{i}") for i in range(n)], id="t")


def test_a_whole_range_is_fixed_at_its_length_and_revision() -> None:
    t = make(3)
    reader = fixed_range(t)
    assert isinstance(reader, TranscriptRangeReader)
    assert (reader.transcript_id, reader.start, reader.end, reader.revision) == ("t", 0, 3, 1)
    assert len(reader) == 3
    assert reader.locate() == TranscriptRangeLocator(transcript_id="t", start=0, end=3, revision=1)


def test_later_appends_never_widen_a_range() -> None:
    t = make(3)
    reader = fixed_range(t, 1)
    entries = reader.entries()
    t.append([Message("user", "later")])
    t.start_segment()
    assert (reader.end, len(reader), reader.revision) == (3, 2, 1)
    assert reader.entries() == entries
    with pytest.raises(IndexError):
        reader.read(3)
    assert reader.locate().end == 3


def test_read_takes_absolute_indices_and_refuses_others_with_a_message() -> None:
    t = make(5)
    reader = fixed_range(t, 2, 4)
    assert reader.read(2) is t.get(2)
    assert reader.read(3) is t.get(3)
    for bad in (0, 1, 4, -1, 100):
        with pytest.raises(IndexError, match=rf"index {bad} is outside the range \[2, 4\)"):
            reader.read(bad)


def test_entries_are_index_message_pairs_of_the_same_objects() -> None:
    t = make(4)
    entries = fixed_range(t, 1, 3).entries()
    assert isinstance(entries, tuple)
    assert [i for i, _ in entries] == [1, 2]
    assert all(m is t.get(i) for i, m in entries)
    assert fixed_range(t, 2, 2).entries() == ()


def test_slice_narrows_and_keeps_the_revision() -> None:
    t = make(6)
    reader = fixed_range(t, 1, 5)
    t.append([Message("user", "later")])
    part = reader.slice(2, 4)
    assert (part.start, part.end, part.revision) == (2, 4, 1)
    assert part.entries() == reader.entries()[1:3]
    assert len(part.slice(3, 3)) == 0
    assert reader.slice(1, 5).entries() == reader.entries()


@pytest.mark.parametrize(("start", "end"), [(0, 3), (2, 6), (4, 3), (0, 7), (-1, 2)])
def test_slice_can_only_narrow(start: int, end: int) -> None:
    t = make(6)
    t.append([Message("user", "later")])
    reader = fixed_range(t, 1, 5)
    with pytest.raises(ValueError, match="can only narrow"):
        reader.slice(start, end)


@pytest.mark.parametrize(("start", "end"), [(-1, None), (0, 4), (3, 2), (4, None)])
def test_a_range_must_lie_within_the_transcript(start: int, end: int | None) -> None:
    with pytest.raises(ValueError, match="not within"):
        fixed_range(make(3), start, end)


def test_an_empty_range_of_an_empty_transcript() -> None:
    reader = fixed_range(Transcript())
    assert (len(reader), reader.entries(), reader.revision) == (0, (), 0)
    with pytest.raises(IndexError):
        reader.read(0)
