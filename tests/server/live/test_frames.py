"""Queued frames (``server.live.frames``, ``server.live.baselines``): rendered for a
``seq`` they are exactly what encoding the whole frame gives, in both
encodings; framed for the raw write they are valid WebSocket frames."""

from __future__ import annotations

import struct

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import wire
from protocol.types import Message, TranscriptEvent
from server.live.baselines import EncodedMessages
from server.live.frames import (
    BINARY,
    TEXT,
    ControlFrame,
    EncodedEvent,
    EncodedSnapshot,
    ws_header,
)
from server.model.transcript import Transcript
from server.tuning import BASELINE_CHUNK_BYTES
from tests.strategies import acks, error_frames, events, messages, pongs, seqs


def ws_frame(payload: bytes, *, binary: bool = False) -> bytes:
    """One whole, unfragmented WebSocket frame."""
    return ws_header(BINARY if binary else TEXT, len(payload)) + payload


both = pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])


def parse_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(first header byte, payload) of each unmasked frame in ``data``."""
    out = []
    i = 0
    while i < len(data):
        first, second = data[i], data[i + 1]
        assert not second & 0x80, "server frames are not masked"
        length = second & 0x7F
        i += 2
        if length == 126:
            (length,) = struct.unpack("!H", data[i : i + 2])
            i += 2
        elif length == 127:
            (length,) = struct.unpack("!Q", data[i : i + 8])
            i += 8
        out.append((first, data[i : i + length]))
        i += length
    assert i == len(data)
    return out


@pytest.mark.parametrize("length", [0, 1, 125, 126, 127, 65535, 65536, 1 << 20])
def test_headers_carry_the_length_in_the_shortest_form(length: int) -> None:
    payload = b"x" * length
    ((first, parsed),) = parse_frames(ws_frame(payload))
    assert (first, parsed) == (TEXT, payload)
    assert len(ws_header(BINARY, length)) == 2 + (2 if 126 <= length < 65536 else 0) + (
        8 if length >= 65536 else 0
    )


@settings(max_examples=60)
@given(events(), seqs(), st.booleans())
def test_an_increment_renders_as_the_whole_frame_encoded(
    event: TranscriptEvent, seq: int, binary: bool
) -> None:
    item = EncodedEvent(event)
    expected = wire.encode(wire.Increment(seq=seq, event=event), binary=binary)
    assert item.render(seq, binary) == expected
    if not binary:
        assert item.frame_json(seq) == ws_frame(expected)
        assert abs(item.size - len(expected)) <= 8  # the digits of seq


@settings(max_examples=60)
@given(st.one_of(acks(), pongs(), error_frames()), seqs(), st.booleans())
def test_an_answer_renders_as_the_whole_frame_encoded(
    frame: object, seq: int, binary: bool
) -> None:
    item = ControlFrame(msgspec.structs.replace(frame, seq=0), binary=binary)  # type: ignore[type-var]
    expected = wire.encode(msgspec.structs.replace(frame, seq=seq), binary=binary)  # type: ignore[type-var]
    assert item.render(seq, binary) == expected
    assert abs(item.size - len(expected)) <= 8


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(messages(), min_size=1, max_size=4), min_size=1, max_size=6),
    st.lists(st.integers(min_value=0, max_value=5), max_size=6),
    seqs(),
    st.booleans(),
)
def test_a_baseline_renders_as_the_snapshot_encoded_whatever_was_encoded_before(
    batches: list[list[Message]], baseline_after: list[int], seq: int, binary: bool
) -> None:
    """Baselines taken between appends share and grow the encoded chunks;
    each one is still exactly ``Baseline(seq, snapshot)`` encoded."""
    transcript = Transcript(id="t", epoch="e")
    encoded = EncodedMessages(binary=binary)
    taken = set(baseline_after)
    for i, batch in enumerate(batches):
        transcript.append(batch)
        if i == 2:
            transcript.start_segment()
        if i == 3:
            transcript.set_view("pinned", 0)  # the snapshot's tail carries the Views
        if i in taken or i == len(batches) - 1:
            encoded.encode_all(transcript.state)
            item = encoded.snapshot(transcript.state)
            expected = wire.encode(
                wire.Baseline(seq=seq, snapshot=transcript.snapshot()), binary=binary
            )
            assert item.render(seq, binary) == expected
            assert abs(item.size - len(expected)) <= 8
            assert item.revision == transcript.revision


@both
def test_a_big_baseline_is_fragments_of_whole_frames_that_join_to_the_render(
    binary: bool,
) -> None:
    transcript = Transcript(id="t", epoch="e")
    body = "é" * 900
    for i in range(0, 600, 100):
        transcript.append([Message(role="user", content=f"{i}{body}") for _ in range(100)])
    encoded = EncodedMessages(binary=binary)
    steps = 0
    while encoded.missing(transcript.state):
        encoded.encode_step(transcript.state)
        steps += 1
    item = encoded.snapshot(transcript.state)
    assert steps > 3 and len(item.chunks) > 3
    assert all(len(c) < 2 * BASELINE_CHUNK_BYTES for c in item.chunks)
    raw = b""
    index = 0
    while True:
        parts, size, last = item.fragment(index, 7)
        assert size == sum(len(part) for part in parts)
        raw += b"".join(parts)
        index += 1
        if last:
            break
    frames = parse_frames(raw)
    assert len(frames) == len(item.chunks) + 2
    opcode = 0x02 if binary else 0x01
    assert [first for first, _ in frames] == [opcode] + [0x00] * (len(frames) - 2) + [0x80]
    assert b"".join(payload for _, payload in frames) == item.render(7, binary)


def test_a_few_messages_appended_grow_the_last_chunk_instead_of_adding_one() -> None:
    transcript = Transcript(id="t", epoch="e")
    encoded = EncodedMessages(binary=False)
    for i in range(50):
        transcript.append([Message(role="user", content=str(i))])
        encoded.encode_all(transcript.state)
    assert len(encoded.chunks) == 1
    assert encoded.count == 50


@both
def test_a_baseline_of_any_snapshot_renders_and_streams_as_encoded(binary: bool) -> None:
    """``EncodedSnapshot.of``: a range, or a transcript not held whole."""
    transcript = Transcript(id="t", epoch="e")
    for i in range(3):
        transcript.append([Message(role="user", content=f"{i}{'ü' * 500}") for _ in range(100)])
    snapshot = transcript.snapshot(280, start=20)
    item = EncodedSnapshot.of(snapshot, binary=binary)
    expected = wire.encode(wire.Baseline(seq=42, snapshot=snapshot), binary=binary)
    assert item.render(42, binary) == expected
    assert len(item.chunks) > 2
    raw = b""
    index = 0
    while True:
        parts, size, last = item.fragment(index, 42)
        assert size == sum(len(part) for part in parts)
        raw += b"".join(parts)
        index += 1
        if last:
            break
    assert b"".join(payload for _, payload in parse_frames(raw)) == expected


@both
def test_a_streamed_fragment_writes_the_shared_chunk_itself(binary: bool) -> None:
    """Each connection's fragments are a header and the shared chunk, not a
    copy of it (25 connections that did not read an 8 MB baseline held a
    copy each)."""
    transcript = Transcript(id="t", epoch="e")
    transcript.append([Message(role="user", content="x" * 40_000) for _ in range(10)])
    encoded = EncodedMessages(binary=binary)
    encoded.encode_all(transcript.state)
    item = encoded.snapshot(transcript.state)
    for index in range(1, len(item.chunks) + 1):
        parts, _, _ = item.fragment(index, 3)
        assert any(part is item.chunks[index - 1] for part in parts)


@both
def test_a_baseline_from_start_joins_older_messages_and_held_ones(binary: bool) -> None:
    """A baseline of a transcript no longer held whole: the older messages
    come from the store's read (``encode_from``), the rest from memory, and
    the whole is exactly the snapshot's encoding, at every later revision."""
    whole = Transcript(id="t", epoch="e")
    for i in range(4):
        whole.append([Message(role="user", content=f"{i}-{j}{'ü' * 300}") for j in range(100)])
    older = whole.state.slice(20, 300)
    held = Transcript.restore_window(whole.snapshot(start=300))
    encoded = EncodedMessages(binary=binary, start=20)
    left = 1
    while left:
        left = encoded.encode_from(20, older)
    assert encoded.count == 300
    encoded.encode_all(held.state)
    expected = wire.encode(wire.Baseline(seq=5, snapshot=whole.snapshot(start=20)), binary=binary)
    assert encoded.snapshot(held.state).render(5, binary) == expected
    chunks = len(encoded.chunks)
    held.append([Message(role="assistant", content="more")])
    encoded.encode_all(held.state)
    later = held.state.snapshot_of(20, older + held.state.slice(300))
    expected = wire.encode(wire.Baseline(seq=6, snapshot=later), binary=binary)
    assert encoded.snapshot(held.state).render(6, binary) == expected
    assert len(encoded.chunks) <= chunks + 1


@given(
    all_messages=st.lists(messages(), min_size=1, max_size=40),
    data=st.data(),
    binary=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_an_encoding_from_any_start_in_any_pieces_is_the_snapshot_encoded(
    all_messages: list[Message], data: st.DataObject, binary: bool
) -> None:
    """However the older messages arrive (pieces of any size read from the
    store) and wherever the held ones begin, the baseline from ``start`` is
    byte for byte the snapshot's encoding."""
    whole = Transcript(id="t", epoch="e")
    whole.append(all_messages)
    length = len(all_messages)
    held_start = data.draw(st.integers(0, length), label="held_start")
    start = data.draw(st.integers(0, held_start), label="start")
    held = Transcript.restore_window(whole.snapshot(start=held_start))
    encoded = EncodedMessages(binary=binary, start=start)
    while encoded.count < held_start:
        end = data.draw(st.integers(encoded.count + 1, held_start), label="piece end")
        first = data.draw(st.integers(start, encoded.count), label="piece start")
        piece = whole.state.slice(first, end)
        while encoded.encode_from(first, piece):
            pass
        assert encoded.count == end
    encoded.encode_all(held.state)
    expected = wire.encode(
        wire.Baseline(seq=9, snapshot=whole.snapshot(start=start)), binary=binary
    )
    assert encoded.snapshot(held.state).render(9, binary) == expected
