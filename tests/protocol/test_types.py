"""protocol.types: the model's values are frozen, derive what they promise and
keep message bodies verbatim."""

from __future__ import annotations

import copy
import pickle

import msgspec
import pytest
from hypothesis import given, settings

from protocol.frozen import FrozenDict, FrozenList, freeze
from protocol.types import (
    ImageUrl,
    ImageUrlPart,
    Message,
    MessageLocator,
    MessagesAppended,
    Origin,
    Segment,
    SegmentStarted,
    TextPart,
    TranscriptEvent,
    TranscriptSnapshot,
    to_builtins,
)
from tests.strategies import messages


def _snapshot(start: int = 0, count: int = 2) -> TranscriptSnapshot:
    return TranscriptSnapshot(
        transcript_id="t1",
        epoch="e1",
        revision=3,
        start=start,
        messages=tuple(Message(role="user", content=str(i)) for i in range(count)),
        active_start=start,
        segments=(Segment(start=start, end=None),),
    )


def test_every_value_is_frozen() -> None:
    message = Message(role="user", content="hi")
    with pytest.raises(AttributeError):
        message.content = "changed"  # type: ignore[misc]
    event = TranscriptEvent("t1", "e1", 1, 0, MessagesAppended(0, (message,)))
    with pytest.raises(AttributeError):
        event.revision = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        _snapshot().revision = 0  # type: ignore[misc]


def test_ends() -> None:
    assert MessagesAppended(start=5, messages=(Message(role="user", content=""),) * 3).end == 8
    assert _snapshot(start=4, count=2).end == 6
    assert _snapshot(start=0, count=0).end == 0


def test_message_text() -> None:
    assert Message(role="user", content="plain").text() == "plain"
    parts = (TextPart("a"), ImageUrlPart(ImageUrl(url="u")), TextPart("b"))
    assert Message(role="user", content=parts).text() == "ab"


def test_to_builtins_is_the_wire_shape() -> None:
    event = TranscriptEvent(
        "t1",
        "e1",
        2,
        7,
        SegmentStarted(previous_start=0, start=2, end=2),
        origin=Origin(context_id="c1"),
    )
    assert to_builtins(event) == {
        "transcriptId": "t1",
        "epoch": "e1",
        "revision": 2,
        "occurredAt": 7,
        "change": {"kind": "segment-started", "previousStart": 0, "start": 2, "end": 2},
        "origin": {"contextId": "c1"},
    }
    assert to_builtins(MessageLocator("t1", 3)) == {"transcriptId": "t1", "index": 3}


def test_optional_message_fields_are_left_out_not_null() -> None:
    assert (
        msgspec.json.encode(Message(role="user", content="x")) == b'{"role":"user","content":"x"}'
    )


@pytest.mark.parametrize(
    "data",
    [
        b'{"role":"user","content":"x","extra":1}',
        b'{"role":"robot","content":"x"}',
        b'{"role":"user","content":[{"type":"video"}]}',
        b'{"role":"user","content":[{"type":"text","text":"a","extra":1}]}',
    ],
)
def test_message_decoding_is_strict(data: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(data, type=Message)


def test_events_need_a_positive_revision_and_a_valid_id() -> None:
    change = b'"change":{"kind":"segment-started","previousStart":0,"start":1,"end":1}'
    good = b'{"transcriptId":"t","epoch":"e","revision":1,"occurredAt":0,' + change + b"}"
    assert msgspec.json.decode(good, type=TranscriptEvent).revision == 1
    for bad in (good.replace(b'"revision":1', b'"revision":0'), good.replace(b'"t"', b'"t t"')):
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(bad, type=TranscriptEvent)


# --- frozen all the way down ------------------------------------------------------------


def test_frozen_containers_refuse_every_change() -> None:
    frozen = freeze({"a": [1, {"b": 2}], "c": (3,)})
    assert isinstance(frozen, FrozenDict) and isinstance(frozen["a"], FrozenList)
    assert frozen == {"a": [1, {"b": 2}], "c": [3]}
    changes = [
        lambda: frozen.__setitem__("x", 1),
        lambda: frozen.__delitem__("a"),
        lambda: frozen.update(x=1),
        lambda: frozen.setdefault("x", 1),
        lambda: frozen.pop("a"),
        lambda: frozen.popitem(),
        lambda: frozen.clear(),
        lambda: frozen["a"].append(2),
        lambda: frozen["a"].extend([2]),
        lambda: frozen["a"].insert(0, 2),
        lambda: frozen["a"].__setitem__(0, 2),
        lambda: frozen["a"].sort(),
        lambda: frozen["a"][1].__setitem__("b", 3),
    ]
    for change in changes:
        with pytest.raises(TypeError, match="frozen"):
            change()
    with pytest.raises(TypeError):
        frozen |= {"x": 1}  # type: ignore[misc]
    assert frozen == {"a": [1, {"b": 2}], "c": [3]}
    assert freeze(frozen) is frozen
    assert hash(frozen) == hash(freeze({"c": [3], "a": [1, {"b": 2}]}))
    assert pickle.loads(pickle.dumps(frozen)) == frozen
    assert copy.deepcopy(frozen) == frozen
    assert msgspec.json.encode(frozen) == b'{"a":[1,{"b":2}],"c":[3]}'


@settings(deadline=None)
@given(messages())
def test_every_message_is_hashable_and_survives_a_round_trip(message: Message) -> None:
    for data in (msgspec.json.encode(message), msgspec.msgpack.encode(message)):
        decoded = (
            msgspec.json.decode(data, type=Message)
            if data[:1] == b"{"
            else msgspec.msgpack.decode(data, type=Message)
        )
        assert decoded == message and hash(decoded) == hash(message)
        for value in (decoded.metadata, *(decoded.tool_calls or ())):
            assert value is None or isinstance(value, FrozenDict)
        assert isinstance(decoded.content, str | tuple)
