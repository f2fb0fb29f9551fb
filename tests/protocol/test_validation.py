"""protocol.validation: every rule, with the exact path and reason it reports."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import InvalidId, InvalidMessage, ProtocolError
from protocol.limits import (
    MAX_ID_LENGTH,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_MESSAGE_BYTES,
    MAX_MESSAGES_PER_BATCH,
)
from protocol.types import AttachmentPart, ImageUrl, ImageUrlPart, Message, TextPart
from protocol.validation import (
    _plain_scalars,
    check_value,
    parse_message,
    parse_messages,
    validate_id,
    validate_idempotency_key,
)
from tests.strategies import carried_exactly, loose_values, message_dicts, transcript_ids

USER = {"role": "user", "content": "hello"}


def _error(data: Any, **kwargs: Any) -> str:
    with pytest.raises(InvalidMessage) as info:
        parse_messages(data, **kwargs)
    return str(info.value)


def test_the_contract_example_names_path_and_reason() -> None:
    batch = [
        USER,
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": [{"type": "video", "url": "x"}]},
    ]
    with pytest.raises(InvalidMessage) as info:
        parse_messages(batch)
    assert str(info.value) == 'messages[2].content[0].type: unknown content part "video"'
    assert info.value.path == "messages[2].content[0].type"
    assert info.value.reason == 'unknown content part "video"'


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("text", "messages[0]: expected an object, got a string"),
        (None, "messages[0]: expected an object, got null"),
        ({"content": "x"}, "messages[0].role: missing"),
        ({"role": "user"}, "messages[0].content: missing"),
        (
            {"role": "robot", "content": "x"},
            'messages[0].role: unknown role "robot" '
            "(one of user, assistant, system, tool, context)",
        ),
        (
            {"role": 1, "content": "x"},
            "messages[0].role: unknown role a number (one of user, "
            "assistant, system, tool, context)",
        ),
        ({"role": "user", "content": "x", "extra": 1}, "messages[0].extra: unknown field"),
        (
            {"role": "user", "content": 5},
            "messages[0].content: expected a string or a list of content parts, got a number",
        ),
        (
            {"role": "user", "content": None},
            "messages[0].content: expected a string or a list of content parts, got null",
        ),
        (
            {"role": "user", "content": ["hi"]},
            "messages[0].content[0]: expected a content part object, got a string",
        ),
        ({"role": "user", "content": [{"text": "x"}]}, "messages[0].content[0].type: missing"),
        (
            {"role": "user", "content": [{"type": 3}]},
            "messages[0].content[0].type: expected a string, got a number",
        ),
        (
            {"role": "user", "content": [{"type": "text", "text": "a", "bold": True}]},
            "messages[0].content[0].bold: unknown field of a 'text' part",
        ),
        ({"role": "user", "content": [{"type": "text"}]}, "messages[0].content[0].text: missing"),
        (
            {"role": "user", "content": [{"type": "text", "text": 1}]},
            "messages[0].content[0].text: expected a string, got a number",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": "http://x"}]},
            "messages[0].content[0].image_url: expected an object, got a string",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {}}]},
            "messages[0].content[0].image_url.url: expected a string",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u", "x": 1}}]},
            "messages[0].content[0].image_url.x: unknown field",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "u", "detail": 3}}],
            },
            "messages[0].content[0].image_url.detail: expected a string, got a number",
        ),
        (
            {"role": "user", "content": [{"type": "attachment", "name": "a", "mime": "m"}]},
            "messages[0].content[0].content: missing",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "attachment", "name": "a", "mime": [], "content": ""}],
            },
            "messages[0].content[0].mime: expected a string, got a list",
        ),
        (
            {"role": "user", "content": "x", "name": 5},
            "messages[0].name: expected a string, got a number",
        ),
        (
            {"role": "tool", "content": "x", "tool_call_id": True},
            "messages[0].tool_call_id: expected a string, got a boolean",
        ),
        (
            {"role": "user", "content": "x", "metadata": [1]},
            "messages[0].metadata: expected an object, got a list",
        ),
        (
            {"role": "assistant", "content": "", "tool_calls": {"id": 1}},
            "messages[0].tool_calls: expected a list, got an object",
        ),
        (
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c"}, 2]},
            "messages[0].tool_calls[1]: expected an object, got a number",
        ),
    ],
)
def test_every_rule_names_path_and_reason(message: Any, expected: str) -> None:
    assert _error([message]) == expected
    # parse_message says the same under its own path.
    with pytest.raises(InvalidMessage) as info:
        parse_message(message)
    assert str(info.value) == expected.replace("messages[0]", "message", 1)


def test_the_first_bad_message_is_reported_and_the_path_prefix_is_the_callers() -> None:
    batch = [USER, {"role": "user"}, {"role": "nobody", "content": ""}]
    assert _error(batch) == "messages[1].content: missing"
    assert _error(batch, path="body.messages") == "body.messages[1].content: missing"


@pytest.mark.parametrize("data", [None, "x", {"role": "user", "content": "x"}, 3])
def test_the_batch_must_be_a_list(data: Any) -> None:
    assert _error(data) == "messages: expected a list of messages"


def test_batch_limit() -> None:
    assert len(parse_messages([USER] * MAX_MESSAGES_PER_BATCH)) == MAX_MESSAGES_PER_BATCH
    assert _error([USER] * (MAX_MESSAGES_PER_BATCH + 1)) == (
        f"messages: too many messages: {MAX_MESSAGES_PER_BATCH + 1} > {MAX_MESSAGES_PER_BATCH}"
    )
    assert _error([USER] * 3, max_messages=2) == "messages: too many messages: 3 > 2"


def test_size_limit_is_the_compact_json_encoding() -> None:
    message = {"role": "user", "content": "x" * 100}
    size = len(msgspec.json.encode(message))
    assert parse_messages([message], max_message_bytes=size)
    assert _error([USER, message], max_message_bytes=size - 1) == (
        f"messages[1]: message is {size} bytes, more than the limit of {size - 1}"
    )
    with pytest.raises(InvalidMessage, match=r"^message: message is \d+ bytes"):
        parse_message(message, max_message_bytes=size - 1)


def test_default_size_limit() -> None:
    overhead = len(msgspec.json.encode({"role": "user", "content": ""}))
    fits = {"role": "user", "content": "x" * (MAX_MESSAGE_BYTES - overhead)}
    assert parse_message(fits).content == fits["content"]
    too_big = {"role": "user", "content": "x" * (MAX_MESSAGE_BYTES - overhead + 1)}
    with pytest.raises(InvalidMessage, match="more than the limit"):
        parse_message(too_big)


def test_a_batch_is_checked_whole_before_anything_is_returned() -> None:
    with pytest.raises(InvalidMessage, match=r"^messages\[2\]"):
        parse_messages([USER, USER, {"role": "user", "content": 1}])


def test_valid_messages_become_frozen_structs_verbatim() -> None:
    parsed = parse_messages(
        [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                    {"type": "attachment", "name": "a.txt", "mime": "text/plain", "content": "x"},
                ],
                "name": "ann",
                "metadata": {"lang": "en"},
            },
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function"}]},
            {"role": "tool", "content": "42", "tool_call_id": "c1"},
            {"role": "context", "content": "Once upon a time"},
        ]
    )
    assert parsed[1] == Message(
        role="user",
        content=(
            TextPart(text="look"),
            ImageUrlPart(image_url=ImageUrl(url="data:image/png;base64,AA")),
            AttachmentPart(name="a.txt", mime="text/plain", content="x"),
        ),
        name="ann",
        metadata={"lang": "en"},
    )
    assert parsed[2].tool_calls == ({"id": "c1", "type": "function"},)
    assert parsed[3].tool_call_id == "c1"
    assert [m.role for m in parsed] == ["system", "user", "assistant", "tool", "context"]
    with pytest.raises(AttributeError):
        parsed[0].content = "changed"  # type: ignore[misc]


def test_tuples_are_accepted_like_lists() -> None:
    parsed = parse_messages(({"role": "user", "content": ({"type": "text", "text": "a"},)},))
    assert parsed[0].text() == "a"
    with pytest.raises(InvalidMessage) as info:
        parse_messages([{"role": "user", "content": ({"type": "video"},)}])
    assert info.value.path == "messages[0].content[0].type"


def test_message_text_joins_text_parts() -> None:
    message = parse_message(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a"},
                {"type": "image_url", "image_url": {"url": "u"}},
                {"type": "text", "text": "b"},
            ],
        }
    )
    assert message.text() == "ab"
    assert parse_message(USER).text() == "hello"


@settings(max_examples=60, deadline=None)
@given(st.lists(message_dicts(), max_size=4))
def test_every_valid_message_parses_and_encodes_back_to_its_json(batch: list[Any]) -> None:
    parsed = parse_messages(batch)
    assert msgspec.json.decode(msgspec.json.encode(parsed)) == batch


# --- ids and keys -----------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(transcript_ids())
def test_valid_ids_pass_unchanged(value: str) -> None:
    assert validate_id(value) == value


@pytest.mark.parametrize(
    "value",
    ["", "a b", "a/b", "é", "a\n", "x" * (MAX_ID_LENGTH + 1), None, 5, b"abc", "tab\t"],
)
def test_invalid_ids(value: object) -> None:
    with pytest.raises(InvalidId, match=r"^transcriptId: must be 1\.\.128 characters"):
        validate_id(value)


def test_id_limits_and_alphabet() -> None:
    assert validate_id("x" * MAX_ID_LENGTH) == "x" * MAX_ID_LENGTH
    assert validate_id("A-z_0.9:") == "A-z_0.9:"
    with pytest.raises(InvalidId, match=r"^id: "):
        validate_id("", what="id")


def test_idempotency_keys() -> None:
    assert validate_idempotency_key(None) is None
    assert validate_idempotency_key("k") == "k"
    key = "k" * MAX_IDEMPOTENCY_KEY_LENGTH
    assert validate_idempotency_key(key) == key
    for bad in ("", key + "k", 5):
        with pytest.raises(InvalidMessage, match=r"^idempotencyKey: must be a string"):
            validate_idempotency_key(bad)


def test_every_error_is_a_protocol_error_and_a_value_error() -> None:
    for error in (InvalidMessage("p", "r"), InvalidId("x")):
        assert isinstance(error, ProtocolError)
        assert isinstance(error, ValueError)
    assert str(InvalidMessage("", "bare reason")) == "bare reason"


def test_a_trailing_newline_is_not_part_of_a_valid_id_on_the_wire_either() -> None:
    # Python's `$` matches before a final newline; both doors must refuse "a\n".
    from protocol.errors import InvalidFrame
    from protocol.wire import decode_client_op

    with pytest.raises(InvalidFrame, match="transcriptId"):
        decode_client_op('{"op":"subscribe","transcriptId":"a\\n"}')


# --- values every format carries exactly ---------------------------------------------


def _with_metadata(value: Any) -> dict[str, Any]:
    return {"role": "user", "content": "x", "metadata": {"n": value}}


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (_with_metadata(2**64), "messages[0].metadata.n: integer out of range"),
        (_with_metadata(-(2**63) - 1), "messages[0].metadata.n: integer out of range"),
        (_with_metadata(float("nan")), "messages[0].metadata.n: not a finite number"),
        (_with_metadata(float("-inf")), "messages[0].metadata.n: not a finite number"),
        (_with_metadata({1: "a"}), "messages[0].metadata.n: object key 1 is not a string"),
        (_with_metadata(b"\x00"), "messages[0].metadata.n: not a JSON value (bytes)"),
        (_with_metadata({1, 2}), "messages[0].metadata.n: not a JSON value (set)"),
        (
            _with_metadata("a\ud800"),
            "messages[0].metadata.n: string holds a lone surrogate (U+D800..U+DFFF), "
            "which is not Unicode",
        ),
        (
            _with_metadata({"\udc00": 1}),
            "messages[0].metadata.n: object key holds a lone surrogate (U+D800..U+DFFF), "
            "which is not Unicode",
        ),
        (
            _with_metadata([0, {"a b": [2**70]}]),
            'messages[0].metadata.n[1]["a b"][0]: integer out of range',
        ),
        (
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "n": 2**64}]},
            "messages[0].tool_calls[0].n: integer out of range",
        ),
        (
            {"role": "user", "content": [{"type": "text", "text": float("inf")}]},
            "messages[0].content[0].text: not a finite number",
        ),
        (
            {"role": "user", "content": "a\udfff"},
            "messages[0].content: string holds a lone surrogate (U+D800..U+DFFF), "
            "which is not Unicode",
        ),
        (
            {"role": "user", "content": [{"type": "text", "text": "\ud800"}]},
            "messages[0].content[0].text: string holds a lone surrogate (U+D800..U+DFFF), "
            "which is not Unicode",
        ),
        (
            {"role": "user", "content": "x", "name": "\ud800"},
            "messages[0].name: string holds a lone surrogate (U+D800..U+DFFF), "
            "which is not Unicode",
        ),
        (
            {"role": "us\ud800", "content": "x"},
            "messages[0].role: string holds a lone surrogate (U+D800..U+DFFF), "
            "which is not Unicode",
        ),
    ],
)
def test_a_value_some_format_cannot_carry_is_refused_with_its_path(
    message: Any, expected: str
) -> None:
    assert _error([USER, message]).replace("messages[1]", "messages[0]", 1) == expected
    with pytest.raises(InvalidMessage) as info:
        parse_message(message)
    assert str(info.value) == expected.replace("messages[0]", "message", 1)
    # The error itself can be sent in either format.
    msgspec.json.encode(str(info.value))


@pytest.mark.parametrize(
    "value", [2**64 - 1, -(2**63), 0, -0.0, 1e308, 5e-324, -1.5, True, None, "\u2028\x00"]
)
def test_the_edges_every_format_carries_are_accepted(value: Any) -> None:
    (message,) = parse_messages([_with_metadata(value)])
    assert message.metadata is not None
    carried = message.metadata["n"]
    assert type(carried) is type(value) and carried == value


def test_a_message_built_in_python_is_held_to_the_same_values() -> None:
    from server.model.transcript import Transcript

    transcript = Transcript()
    built = Message(role="user", content="x", metadata={"deep": [{"n": 2**64}]})
    with pytest.raises(InvalidMessage) as info:
        transcript.append([built])
    assert str(info.value) == "messages[0].metadata.deep[0].n: integer out of range"
    nan = Message(role="user", content="x", metadata={"x": float("nan")})
    with pytest.raises(InvalidMessage, match=r"metadata\.x: not a finite number"):
        transcript.append([nan])
    assert transcript.revision == 0


@settings(max_examples=400, deadline=None)
@given(loose_values())
def test_validation_accepts_exactly_what_every_format_carries(value: Any) -> None:
    data = _with_metadata(value)
    try:
        (message,) = parse_messages([data])
    except InvalidMessage as exc:
        assert not carried_exactly(value), f"refused a value both formats carry: {exc}"
        assert exc.path.startswith("messages[0].metadata.n"), exc.path
        return
    assert carried_exactly(value), f"accepted {value!r}, which a format changes"
    for module in (msgspec.json, msgspec.msgpack):
        assert module.decode(module.encode(message), type=Message) == message


_SCALARS = (
    st.text()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.booleans()
    | st.none()
    | st.binary(max_size=3)
)


@given(st.dictionaries(st.text(max_size=4) | st.integers(0, 3), _SCALARS, max_size=6))
@settings(max_examples=500)
def test_the_plain_scalars_short_cut_passes_only_what_check_value_passes(
    value: dict[Any, Any],
) -> None:
    """The short cut of ``parse_messages`` for flat metadata never lets
    through what the walk would refuse."""
    if _plain_scalars(value):
        check_value(value, "m", level=2)


@given(st.dictionaries(st.text(max_size=4), _SCALARS, max_size=6))
@settings(max_examples=300)
def test_flat_metadata_is_refused_or_kept_as_before(metadata: dict[str, Any]) -> None:
    """With the short cut, a message's flat metadata is refused exactly when
    the walk refuses it (a message as the wire decodes it)."""
    item = {"role": "user", "content": "x", "metadata": metadata}
    try:
        check_value(metadata, "messages[0].metadata", level=2)
        walked: str | None = None
    except InvalidMessage as exc:
        walked = str(exc)
    try:
        parse_messages([item])
        parsed: str | None = None
    except InvalidMessage as exc:
        parsed = str(exc)
    if walked is not None:
        assert parsed == walked
