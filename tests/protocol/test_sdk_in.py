"""protocol.sdk_in: what the OpenAI and Anthropic SDKs give goes back into a
transcript, and reads back as what ``protocol.chat`` rendered (round trips
on what each mapping can represent), nulls and real SDK types included."""

from __future__ import annotations

import base64
import json
from typing import Any

import anthropic.types as at
import openai.types.chat as ot
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.chat import anthropic_messages, openai_messages
from protocol.errors import InvalidMessage
from protocol.sdk_in import from_anthropic, from_openai, from_sdk
from protocol.types import Message
from protocol.validation import parse_messages

# --- what each mapping can represent, as plain message dicts -----------------------

texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
nonempty = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)
names = st.text("abcdefghij_", min_size=1, max_size=8)
#: Bytes that are not UTF-8: chat renders them as a file, not as inlined text.
binary = st.binary(max_size=12).map(lambda b: b"\xff" + b)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


@st.composite
def tool_calls(draw: st.DrawFn) -> list[dict[str, Any]]:
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        arguments = draw(st.dictionaries(texts, json_values, max_size=3))
        calls.append(
            {
                "id": draw(names),
                "type": "function",
                "function": {
                    "name": draw(names),
                    "arguments": json.dumps(
                        arguments, ensure_ascii=False, separators=(",", ":"), sort_keys=True
                    ),
                },
            }
        )
    return calls


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@st.composite
def openai_representable(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "system", "assistant", "tool"]))
    user_part = st.one_of(
        texts.map(text_part),
        st.builds(
            lambda url, detail: {
                "type": "image_url",
                "image_url": {"url": url} if detail is None else {"url": url, "detail": detail},
            },
            nonempty,
            st.sampled_from([None, "auto", "low", "high"]),
        ),
        st.builds(
            lambda name, mime, data: {
                "type": "attachment",
                "name": name,
                "mime": mime,
                "content": _b64(data),
            },
            nonempty,
            st.sampled_from(["application/pdf", "image/png", "audio/wav"]),
            binary,
        ),
    )
    part = user_part if role == "user" else texts.map(text_part)
    message: dict[str, Any] = {
        "role": role,
        "content": draw(texts | st.lists(part, max_size=3)),
    }
    if role == "tool":
        message["tool_call_id"] = draw(names)
    elif draw(st.booleans()):
        message["name"] = draw(names)
    if role == "assistant" and draw(st.booleans()):
        message["tool_calls"] = draw(tool_calls())
    return message


@st.composite
def anthropic_representable(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A system message first (maybe), then user-side (user or tool) and
    assistant messages taking turns: Anthropic merges neighbours of one role."""
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"role": "system", "content": draw(texts)})
    image = st.one_of(
        st.builds(
            lambda mime, data: f"data:{mime};base64,{_b64(data)}",
            st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp"]),
            st.binary(max_size=9),
        ),
        st.text("abcxyz/._-", max_size=10).map(lambda p: "https://example.com/" + p),
    ).map(lambda url: {"type": "image_url", "image_url": {"url": url}})
    pdf = st.builds(
        lambda name, data: {
            "type": "attachment",
            "name": name,
            "mime": "application/pdf",
            "content": _b64(data),
        },
        nonempty,
        binary,
    )
    text = nonempty.map(text_part)
    user_side = draw(st.booleans())
    for _ in range(draw(st.integers(0, 5))):
        if user_side and draw(st.booleans()):
            content = draw(texts | st.lists(text | image | pdf, min_size=1, max_size=3))
            out.append({"role": "user", "content": content})
        elif user_side:
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": draw(names),
                    "content": draw(texts | st.lists(text | image, min_size=1, max_size=3)),
                }
            )
        elif draw(st.booleans()):
            out.append(
                {"role": "assistant", "content": draw(texts), "tool_calls": draw(tool_calls())}
            )
        else:
            content = draw(texts | st.lists(text, min_size=1, max_size=3))
            out.append({"role": "assistant", "content": content})
        user_side = not user_side
    return out


def through_json(value: Any) -> Any:
    """As the body travels: JSON text, decoded."""
    return json.loads(json.dumps(value))


@settings(max_examples=300, deadline=None)
@given(st.lists(openai_representable(), max_size=6))
def test_openai_output_reads_back_as_the_messages(dicts: list[dict[str, Any]]) -> None:
    messages = list(parse_messages(dicts))
    body = through_json(openai_messages(messages))
    assert list(parse_messages(from_openai(body))) == messages


@settings(max_examples=300, deadline=None)
@given(anthropic_representable())
def test_anthropic_output_reads_back_as_the_messages(dicts: list[dict[str, Any]]) -> None:
    messages = list(parse_messages(dicts))
    body = through_json(anthropic_messages(messages))
    back = from_anthropic(body["messages"], body.get("system"))
    assert list(parse_messages(back)) == messages


# --- OpenAI: nulls, refusals, the SDK's own types ----------------------------------


WEATHER_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
}


def sdk_assistant(**fields: Any) -> ot.ChatCompletionMessage:
    return ot.ChatCompletionMessage(role="assistant", **fields)


@pytest.mark.parametrize("exclude_none", [False, True])
def test_an_openai_assistant_message_with_tool_calls_goes_in(exclude_none: bool) -> None:
    sdk = sdk_assistant(
        content=None,
        tool_calls=[
            ot.ChatCompletionMessageFunctionToolCall.model_validate(WEATHER_CALL),
        ],
    )
    dumped = sdk.model_dump(exclude_none=exclude_none)
    if not exclude_none:  # the nulls the SDK sends
        assert dumped["content"] is None and "refusal" in dumped and "audio" in dumped
    (message,) = parse_messages(from_openai([through_json(dumped)]))
    assert message == Message(role="assistant", content="", tool_calls=(WEATHER_CALL,))


def test_an_openai_refusal_is_the_content_and_kept_in_metadata() -> None:
    dumped = sdk_assistant(content=None, refusal="I can't help with that.").model_dump()
    (message,) = parse_messages(from_openai([dumped]))
    assert message.content == "I can't help with that."
    assert message.metadata == {"refusal": "I can't help with that."}
    # Beside text, the text stays the content.
    both = {"role": "assistant", "content": "No.", "refusal": "policy"}
    (message,) = parse_messages(from_openai([both]))
    assert message.content == "No." and message.metadata == {"refusal": "policy"}
    # A refusal part (request params) is text, and kept too.
    parts = {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}
    (message,) = parse_messages(from_openai([parts]))
    assert message.text() == "no" and message.metadata == {"refusal": "no"}


def test_openai_extras_are_kept_in_metadata_and_developer_is_system() -> None:
    annotated = sdk_assistant(
        content="see",
        annotations=[
            {
                "type": "url_citation",
                "url_citation": {"start_index": 0, "end_index": 3, "title": "t", "url": "u"},
            }
        ],
    ).model_dump()
    (message,) = parse_messages(from_openai([annotated]))
    assert message.metadata is not None and message.metadata["annotations"][0]["type"] == (
        "url_citation"
    )
    given_ = [{"role": "developer", "content": "be brief", "name": None}]
    assert from_openai(given_) == [{"role": "system", "content": "be brief"}]


@pytest.mark.parametrize(
    ("message", "path", "reason"),
    [
        ({"role": "user", "content": None}, "messages[0].content", "null is allowed only"),
        ({"role": "assistant"}, "messages[0].content", "missing"),
        ({"role": "function", "content": "x"}, "messages[0].role", "not an OpenAI role"),
        ({"role": "user", "content": "x", "seed": 1}, "messages[0].seed", "unknown field"),
        (
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
            "messages[0].content[0].type",
            "cannot be carried",
        ),
        (
            {"role": "user", "content": [{"type": "file", "file": {"file_id": "f1"}}]},
            "messages[0].content[0].file.file_data",
            "file_id",
        ),
    ],
)
def test_what_openai_messages_cannot_carry_is_refused_by_path(
    message: dict[str, Any], path: str, reason: str
) -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_messages(from_openai([message]))
    assert caught.value.path == path and reason in caught.value.reason


# --- Anthropic: tool use, thinking, tool results, the SDK's own types ---------------


def anthropic_response(*blocks: Any) -> at.Message:
    return at.Message(
        id="msg_1",
        type="message",
        role="assistant",
        model="claude-x",
        content=list(blocks),
        stop_reason="tool_use",
        stop_sequence=None,
        usage=at.Usage(input_tokens=3, output_tokens=5),
    )


def test_an_anthropic_response_with_tool_use_and_thinking_goes_in() -> None:
    response = anthropic_response(
        at.ThinkingBlock(type="thinking", thinking="rain likely", signature="sig"),
        at.TextBlock(type="text", text="Checking."),
        at.ToolUseBlock(type="tool_use", id="toolu_1", name="weather", input={"city": "Oslo"}),
    )
    (message,) = parse_messages(from_anthropic([through_json(response.model_dump())]))
    assert message.role == "assistant" and message.content == "Checking."
    assert message.tool_calls == (
        {
            "id": "toolu_1",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
        },
    )
    assert message.metadata == {
        "thinking": [{"type": "thinking", "thinking": "rain likely", "signature": "sig"}]
    }
    # And out again as the same tool_use (thinking is ours now: left out).
    rendered = anthropic_messages([message])["messages"][0]["content"]
    assert rendered[-1] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "weather",
        "input": {"city": "Oslo"},
    }


def test_anthropic_tool_results_become_tool_messages_in_order() -> None:
    user = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "rain"},
            {
                "type": "tool_result",
                "tool_use_id": "t2",
                "content": [{"type": "text", "text": "boom"}],
                "is_error": True,
            },
            {"type": "text", "text": "and now?", "cache_control": {"type": "ephemeral"}},
        ],
    }
    got = list(parse_messages(from_anthropic([user], "be brief")))
    assert got == [
        Message(role="system", content="be brief"),
        Message(role="tool", content="rain", tool_call_id="t1"),
        Message(
            role="tool",
            content=parse_messages([{"role": "user", "content": [text_part("boom")]}])[0].content,
            tool_call_id="t2",
            metadata={"is_error": True},
        ),
        parse_messages([{"role": "user", "content": [text_part("and now?")]}])[0],
    ]


@pytest.mark.parametrize(
    ("message", "path", "reason"),
    [
        (
            {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s"}]},
            "messages[0].content[0].type",
            "cannot be carried",
        ),
        (
            {"role": "user", "content": [{"type": "tool_use", "id": "x"}]},
            "messages[0].content[0].type",
            "cannot be carried",
        ),
        ({"role": "system", "content": "x"}, "messages[0].role", "expected 'user' or"),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "x", "name": "n", "input": [1]}],
            },
            "messages[0].content[0].input",
            "expected an object",
        ),
    ],
)
def test_what_anthropic_messages_cannot_carry_is_refused_by_path(
    message: dict[str, Any], path: str, reason: str
) -> None:
    with pytest.raises(InvalidMessage) as caught:
        from_anthropic([message])
    assert caught.value.path == path and reason in caught.value.reason


def test_from_sdk_passes_own_messages_and_keeps_system_to_anthropic() -> None:
    own = [{"role": "user", "content": "hi"}]
    assert from_sdk(None, own) is own
    with pytest.raises(InvalidMessage, match="system"):
        from_sdk(None, own, "s")
    with pytest.raises(InvalidMessage, match="system"):
        from_sdk("openai", own, "s")


def test_the_own_shape_refuses_sdk_fields_and_says_which_format_takes_them() -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_messages([{"role": "assistant", "content": "", "refusal": None}])
    assert caught.value.path == "messages[0].refusal"
    assert "format=openai" in caught.value.reason
    tool_use = {"type": "tool_use", "id": "t", "name": "n", "input": {}}
    with pytest.raises(InvalidMessage) as caught:
        parse_messages([{"role": "assistant", "content": [tool_use]}])
    assert caught.value.path == "messages[0].content[0].type"
    assert "format=anthropic" in caught.value.reason


def test_our_metadata_and_the_values_of_a_call_are_passed_on_as_they_are() -> None:
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "f", "arguments": {"x": None}},
        "index": None,
    }
    given_ = {"role": "assistant", "content": None, "tool_calls": [call], "metadata": {"a": None}}
    assert from_openai([given_]) == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c", "type": "function", "function": call["function"]}],
            "metadata": {"a": None},
        }
    ]
