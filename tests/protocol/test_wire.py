"""protocol.wire: round trips in both encodings, the seq splice, split_frames, and
``accept_transcript_update`` fuzzed with anything at all."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import InvalidFrame
from protocol.types import (
    Message,
    MessageLocator,
    MessagesAppended,
    Segment,
    SegmentStarted,
    TextPart,
    TranscriptEvent,
    TranscriptRangeLocator,
    TranscriptRecord,
    TranscriptSnapshot,
)
from protocol.wire import (
    Append,
    Baseline,
    ClientOp,
    Draft,
    DraftFrame,
    ErrorFrame,
    Increment,
    Ping,
    ServerFrame,
    Subscribe,
    accept_transcript_update,
    decode_client_op,
    encode,
    encode_event_json,
    encode_json,
    encode_msgpack,
    increment_json,
    seq_bytes,
    seq_parts,
    split_frames,
    with_seq,
)
from tests.strategies import (
    client_ops,
    events,
    json_values,
    message_locators,
    messages,
    range_locators,
    records,
    seqs,
    server_frames,
    snapshots,
    transcript_updates,
)

fast = settings(max_examples=60, deadline=None)

# --- round trips ---------------------------------------------------------------

_VALUE_TYPES: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (Message, messages()),
    (TranscriptEvent, events()),
    (TranscriptSnapshot, snapshots()),
    (TranscriptRecord, records()),
    (MessageLocator, message_locators()),
    (TranscriptRangeLocator, range_locators()),
]


@pytest.mark.parametrize(("kind", "values"), _VALUE_TYPES, ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
def test_model_values_round_trip(kind: Any, values: st.SearchStrategy[Any], binary: bool) -> None:
    decode = msgspec.msgpack.decode if binary else msgspec.json.decode

    @fast
    @given(values)
    def check(value: Any) -> None:
        assert decode(encode(value, binary=binary), type=kind) == value

    check()


@fast
@given(server_frames())
def test_server_frames_round_trip_through_accept_transcript_update(frame: ServerFrame) -> None:
    assert accept_transcript_update(encode_json(frame)) == frame
    assert accept_transcript_update(encode_json(frame).decode()) == frame
    assert accept_transcript_update(encode_msgpack(frame)) == frame


@fast
@given(client_ops())
def test_client_ops_round_trip(op: ClientOp) -> None:
    assert decode_client_op(encode_json(op)) == op
    assert decode_client_op(encode_json(op).decode()) == op
    assert decode_client_op(encode_msgpack(op)) == op


# --- the hot path splice ---------------------------------------------------------


@fast
@given(seqs(), events())
def test_increment_json_equals_encoding_the_whole_increment(
    seq: int, event: TranscriptEvent
) -> None:
    spliced = increment_json(seq, encode_event_json(event))
    assert spliced == encode_json(Increment(seq=seq, event=event))
    assert accept_transcript_update(spliced) == Increment(seq=seq, event=event)


def test_with_seq_numbers_a_frame() -> None:
    frame = ErrorFrame(seq=1, code="lagged", message="queue full")
    assert with_seq(frame, 7) == ErrorFrame(seq=7, code="lagged", message="queue full")


# --- field names on the wire ----------------------------------------------------------


def test_envelope_is_camel_case_and_message_bodies_verbatim() -> None:
    message = Message(role="tool", content="42", tool_call_id="call_1", metadata={"some_key": 1})
    event = TranscriptEvent(
        transcript_id="t1",
        epoch="e1",
        revision=3,
        occurred_at=1700000000000,
        change=MessagesAppended(start=2, messages=(message,)),
    )
    wire = json.loads(encode_json(Increment(seq=9, event=event)))
    assert wire == {
        "type": "increment",
        "seq": 9,
        "event": {
            "transcriptId": "t1",
            "epoch": "e1",
            "revision": 3,
            "occurredAt": 1700000000000,
            "change": {
                "kind": "messages-appended",
                "start": 2,
                "messages": [
                    {
                        "role": "tool",
                        "content": "42",
                        "tool_call_id": "call_1",
                        "metadata": {"some_key": 1},
                    }
                ],
            },
        },
    }


def test_snapshot_and_segment_change_field_names() -> None:
    snapshot = TranscriptSnapshot(
        transcript_id="t1",
        epoch="e1",
        revision=2,
        start=0,
        messages=(Message(role="user", content=(TextPart(text="hi"),)),),
        active_start=1,
        segments=(Segment(0, 1), Segment(1, None)),
    )
    assert json.loads(encode_json(Baseline(seq=1, snapshot=snapshot))) == {
        "type": "baseline",
        "seq": 1,
        "snapshot": {
            "transcriptId": "t1",
            "epoch": "e1",
            "revision": 2,
            "start": 0,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "activeStart": 1,
            "segments": [{"start": 0, "end": 1}, {"start": 1, "end": None}],
            "length": 1,
        },
    }
    change = json.loads(encode_json(SegmentStarted(previous_start=0, start=1, end=1)))
    assert change == {"kind": "segment-started", "previousStart": 0, "start": 1, "end": 1}


def test_client_op_field_names() -> None:
    op = Subscribe(transcript_id="t1", from_revision=4, epoch="e1", ref="r")
    assert json.loads(encode_json(op)) == {
        "op": "subscribe",
        "transcriptId": "t1",
        "fromRevision": 4,
        "epoch": "e1",
        "ref": "r",
    }
    assert decode_client_op('{"op":"startSegment","transcriptId":"t1"}').transcript_id == "t1"  # type: ignore[union-attr]
    assert json.loads(encode_json(Ping())) == {"op": "ping"}


# --- split_frames -------------------------------------------------------------------------


@fast
@given(st.lists(server_frames(), min_size=1, max_size=5))
def test_split_frames_on_newline_joined_json(frames: list[ServerFrame]) -> None:
    joined = b"\n".join(encode_json(f) for f in frames)
    parts = split_frames(joined)
    assert [accept_transcript_update(p) for p in parts] == frames
    text_parts = split_frames(joined.decode())
    assert [accept_transcript_update(p) for p in text_parts] == frames
    # A trailing newline makes no empty frame.
    assert len(split_frames(joined + b"\n")) == len(frames)


@pytest.mark.parametrize("sep", ["\n", "\r\n", "\n \n", "\n\n"])
def test_split_frames_skips_blank_lines_alike_in_text_and_bytes(sep: str) -> None:
    text = '{"type":"pong","seq":1}' + sep + '{"type":"pong","seq":2}' + sep
    for message in (text, text.encode()):
        frames = [accept_transcript_update(p) for p in split_frames(message)]
        assert [f.seq for f in frames] == [1, 2]


@fast
@given(server_frames())
def test_split_frames_keeps_one_msgpack_message_whole(frame: ServerFrame) -> None:
    data = encode_msgpack(frame)
    assert split_frames(data) == [data]


# --- accept_transcript_update never raises anything but InvalidFrame ------------------------


def _accepts_or_invalid(data: bytes | str) -> None:
    try:
        frame = accept_transcript_update(data)
    except InvalidFrame as exc:
        assert str(exc)
    else:
        assert isinstance(frame, ServerFrame)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_accepted_or_invalid_frame(data: bytes) -> None:
    _accepts_or_invalid(data)


@settings(max_examples=200, deadline=None)
@given(json_values())
def test_arbitrary_json_values_are_accepted_or_invalid_frame(value: Any) -> None:
    _accepts_or_invalid(msgspec.json.encode(value))
    _accepts_or_invalid(msgspec.json.encode(value).decode())
    _accepts_or_invalid(msgspec.msgpack.encode(value))


_mutable_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=5,
)


@st.composite
def _mangled_frames(draw: st.DrawFn) -> Any:
    """A valid frame's JSON with one field replaced by an arbitrary value, or dropped."""
    obj = msgspec.to_builtins(draw(transcript_updates()))
    node = obj
    path = []
    while isinstance(node, dict) and node:
        key = draw(st.sampled_from(sorted(node)))
        path.append(key)
        if not isinstance(node[key], dict) or draw(st.booleans()):
            if draw(st.booleans()):
                del node[key]
            else:
                node[key] = draw(_mutable_json)
            break
        node = node[key]
    return obj


@settings(max_examples=80, deadline=None)
@given(_mangled_frames())
def test_mangled_frames_are_accepted_or_invalid_frame(obj: Any) -> None:
    # Python's json module writes NaN/Infinity and huge integers that msgspec refuses.
    _accepts_or_invalid(json.dumps(obj))
    try:
        packed = msgspec.msgpack.encode(obj)
    except OverflowError:
        return
    _accepts_or_invalid(packed)


@pytest.mark.parametrize(
    "data",
    [
        "",
        b"",
        " ",
        "\n",
        "null",
        "[]",
        "{}",
        '{"type":"increment"}',
        '{"type":"nope","seq":1}',
        '{"type":"pong","seq":0}',
        '{"type":"pong","seq":-1}',
        '{"type":"pong","seq":1.5}',
        '{"type":"pong","seq":"1"}',
        '{"type":"pong","seq":1}{"type":"pong","seq":2}',
        '{"type":"pong","seq":1}\n{"type":"pong","seq":2}',
        b"\xff\xfe",
        b"\xc1",
        b"\x81\xa4type",
        "[" * 10_000,
        '{"type":"baseline","seq":1,"snapshot":{"transcriptId":"bad id","epoch":"e","revision":0,'
        '"start":0,"messages":[],"activeStart":0,"segments":[]}}',
    ],
)
def test_malformed_frames_raise_invalid_frame(data: bytes | str) -> None:
    with pytest.raises(InvalidFrame):
        accept_transcript_update(data)


@pytest.mark.parametrize("data", [None, 1, 1.5, ["x"], {"type": "pong"}, bytearray(b"{}")])
def test_wrong_argument_types_raise_invalid_frame(data: Any) -> None:
    with pytest.raises(InvalidFrame):
        accept_transcript_update(data)


def _event(change: Any) -> dict[str, Any]:
    return {
        "type": "increment",
        "seq": 1,
        "event": {
            "transcriptId": "t",
            "epoch": "e",
            "revision": 1,
            "occurredAt": 0,
            "change": change,
        },
    }


def _baseline(**snapshot: Any) -> dict[str, Any]:
    fields = {
        "transcriptId": "t",
        "epoch": "e",
        "revision": 1,
        "start": 0,
        "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
        "activeStart": 0,
        "segments": [{"start": 0, "end": None}],
    }
    return {"type": "baseline", "seq": 1, "snapshot": fields | snapshot}


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (_event({"kind": "messages-appended", "start": 0, "messages": []}), "at least one message"),
        (
            _event({"kind": "segment-started", "previousStart": 2, "start": 2, "end": 3}),
            "previousStart",
        ),
        (
            _event({"kind": "segment-started", "previousStart": 0, "start": 4, "end": 3}),
            "previousStart",
        ),
        (_event({"kind": "messages-appended", "start": -1, "messages": []}), ">= 0"),
        (_event({"kind": "renamed", "start": 0}), "kind"),
        (_baseline(activeStart=3), "activeStart"),
        (
            _baseline(segments=[{"start": 0, "end": 2}, {"start": 0, "end": None}], revision=2),
            "segments[1]",
        ),
        (_baseline(segments=[{"start": 1, "end": 0}]), "start at 0"),
        (_baseline(revision=-1), ">= 0"),
    ],
)
def test_semantic_checks_name_the_reason(frame: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidFrame, match=reason.replace("[", r"\[").replace("]", r"\]")):
        accept_transcript_update(json.dumps(frame))


def test_a_revision_0_event_is_invalid() -> None:
    frame = _event(
        {"kind": "messages-appended", "start": 0, "messages": [{"role": "user", "content": "a"}]}
    )
    frame["event"]["revision"] = 0
    with pytest.raises(InvalidFrame, match="revision"):
        accept_transcript_update(json.dumps(frame))


@pytest.mark.parametrize(
    "data",
    [
        "",
        "{}",
        '{"op":"subscribe"}',
        '{"op":"subscribe","transcriptId":"has space"}',
        '{"op":"subscribe","transcriptId":"t","fromRevision":-1}',
        '{"op":"append","transcriptId":"t","messages":[],"idempotencyKey":""}',
        '{"op":"ping","ref":"' + "r" * 201 + '"}',
        '{"op":"launch"}',
        b"\xc1",
    ],
)
def test_decode_client_op_raises_invalid_frame(data: bytes | str) -> None:
    with pytest.raises(InvalidFrame):
        decode_client_op(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=100) | st.text(max_size=100))
def test_decode_client_op_never_raises_anything_else(data: bytes | str) -> None:
    with contextlib.suppress(InvalidFrame):
        decode_client_op(data)


@pytest.mark.parametrize(
    ("snapshot", "reason"),
    [
        ({"segments": []}, "no segments"),
        (
            {"segments": [{"start": 0, "end": None}, {"start": 1, "end": None}], "activeStart": 1},
            "open",
        ),
        ({"segments": [{"start": 0, "end": 2}, {"start": 1, "end": None}]}, "activeStart"),
        ({"revision": 0}, "revision"),
        ({"segments": [{"start": 1, "end": None}], "activeStart": 1}, "start at 0"),
        ({"start": 1, "length": 2}, "length"),
        (
            {"segments": [{"start": 0, "end": 3}, {"start": 1, "end": None}], "activeStart": 1},
            "end",
        ),
    ],
)
def test_a_baseline_the_entity_would_refuse_is_an_invalid_frame(
    snapshot: dict[str, Any], reason: str
) -> None:
    with pytest.raises(InvalidFrame, match=reason):
        accept_transcript_update(json.dumps(_baseline(**snapshot)))


def test_a_baseline_says_whether_it_is_whole() -> None:
    old = accept_transcript_update(json.dumps(_baseline()))  # an older peer: no length
    assert isinstance(old, Baseline)
    assert old.snapshot.length == 2 and old.snapshot.whole
    window = accept_transcript_update(json.dumps(_baseline(start=1, length=3)))
    assert isinstance(window, Baseline)
    assert (window.snapshot.end, window.snapshot.length, window.snapshot.whole) == (3, 3, False)
    assert json.loads(encode_json(window))["snapshot"]["length"] == 3


# --- drafts ------------------------------------------------------------------------


def test_a_draft_op_carries_at_most_one_of_delta_text_and_cancel() -> None:
    base = {"op": "draft", "transcriptId": "t", "draftId": "d"}
    assert decode_client_op(json.dumps(base)) == Draft(transcript_id="t", draft_id="d")
    op = decode_client_op(json.dumps(base | {"delta": "a", "role": "assistant", "ref": 1}))
    assert op == Draft(transcript_id="t", draft_id="d", delta="a", role="assistant", ref=1)
    for extra in (
        {"delta": "a", "text": "b"},
        {"text": "b", "cancel": True},
        {"delta": ""} | {"cancel": True},
    ):
        with pytest.raises(InvalidFrame, match="at most one"):
            decode_client_op(json.dumps(base | extra))
    for bad in ({"draftId": "a b"}, {"role": "robot"}, {"delta": 3}):
        with pytest.raises(InvalidFrame):
            decode_client_op(json.dumps(base | bad))


def test_an_append_may_name_the_draft_it_commits() -> None:
    op = decode_client_op('{"op":"append","transcriptId":"t","messages":[],"draftId":"d1"}')
    assert isinstance(op, Append) and op.draft_id == "d1"


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        ({"n": 1, "delta": "a", "text": "b"}, "one of delta and text"),
        ({"n": 1}, "one of delta and text"),
        ({"n": 0, "text": ""}, "n >= 1"),
        ({"n": 1, "text": "", "revision": 2}, "only a final"),
        ({"n": 1, "state": "final"}, "carries the revision"),
        ({"n": 1, "state": "expired", "revision": 2}, "carries the revision"),
        ({"n": 1, "state": "cancelled", "delta": "x"}, "no delta or text"),
        ({"n": 1, "state": "closing"}, "closing"),
    ],
)
def test_a_draft_frame_of_the_wrong_shape_is_invalid(frame: dict[str, Any], reason: str) -> None:
    head = {"type": "draft", "seq": 1, "transcriptId": "t", "draftId": "d", "role": "assistant"}
    with pytest.raises(InvalidFrame, match=reason):
        accept_transcript_update(json.dumps(head | frame))


def test_draft_frames_splice_their_seq_like_every_frame() -> None:
    frame = DraftFrame(seq=0, transcript_id="t", draft_id="d", role="assistant", n=3, delta="é")
    head, tail = seq_parts(frame)
    assert head + b"42" + tail == encode_json(with_seq(frame, 42))
    assert json.loads(head + b"42" + tail)["type"] == "draft"
    head, tail = seq_parts(frame, binary=True)
    assert head + seq_bytes(42, binary=True) + tail == encode_msgpack(with_seq(frame, 42))
