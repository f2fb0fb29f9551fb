"""Chat output held against the official SDKs' own types.

Every message ``protocol.chat`` renders must be accepted by the ``openai``
package's ``ChatCompletionMessageParam`` and the ``anthropic`` package's
``MessageParam`` (pydantic, with extra keys forbidden, every lazily validated
iterable drained so that its items are checked too), for any transcript the
server accepts; and nothing the transcript says may vanish without a trace.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator
from typing import Any

import msgspec
import pydantic
import pytest
from anthropic.types import MessageParam
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam

from protocol import lmml
from protocol.chat import anthropic_messages, openai_messages
from protocol.types import AttachmentPart, ImageUrl, ImageUrlPart, Message, TextPart
from protocol.validation import parse_messages
from tests import strategies
from tests.lmml import strategies as lmml_strategies

_FORBID = pydantic.ConfigDict(extra="forbid")
OPENAI = pydantic.TypeAdapter(ChatCompletionMessageParam, config=_FORBID)
ANTHROPIC = pydantic.TypeAdapter(MessageParam, config=_FORBID)

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
SVG = "data:image/svg+xml;base64," + base64.b64encode(b"<svg/>").decode()
PDF = base64.b64encode(b"%PDF-1.4\xff\xfe").decode()
BIN = base64.b64encode(b"\x00\xff\x10").decode()


def _drain(value: Any) -> Any:
    """The validated value with every lazy iterator pydantic left in it consumed
    (its items are validated only then) and turned into a list."""
    if isinstance(value, dict):
        return {k: _drain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_drain(v) for v in value]
    if isinstance(value, Iterator):
        return [_drain(v) for v in value]
    return value


def check_openai(message: dict[str, Any]) -> None:
    _drain(OPENAI.validate_python(message))
    json.dumps(message)  # plain JSON all the way down


def check_anthropic(message: dict[str, Any]) -> None:
    _drain(ANTHROPIC.validate_python(message))
    json.dumps(message)


def _texts(value: Any) -> str:
    """Every string anywhere in a rendered body, joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_texts(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(_texts(v) for v in value)
    return ""


# --- strategies: what the server accepts, with the shapes real agents write ---

_openai_calls = st.builds(
    lambda i, name, args: {
        "id": i,
        "type": "function",
        "function": {"name": name, "arguments": args},
    },
    st.text(min_size=1, max_size=8),
    st.text(min_size=1, max_size=8),
    st.one_of(
        st.just("{}"),
        st.dictionaries(st.text(max_size=4), st.integers(0, 9), max_size=2).map(json.dumps),
        st.text(max_size=8),
    ),
)
_parts = st.one_of(
    strategies.content_parts(),
    st.builds(
        lambda url, detail: ImageUrlPart(image_url=ImageUrl(url=url, detail=detail)),
        st.sampled_from([PNG, SVG, "https://example.com/cat.jpg", "not a url"]),
        st.none() | st.sampled_from(["auto", "low", "high", "ultra", ""]),
    ),
    st.builds(
        AttachmentPart,
        name=st.sampled_from(["notes.txt", "paper.pdf", "blob.bin"]),
        mime=st.sampled_from(["text/plain", "application/pdf", "application/octet-stream"]),
        content=st.sampled_from(["buy milk\n", PDF, BIN, ""]),
    ),
)
_messages = st.builds(
    Message,
    role=strategies.roles(),
    content=st.one_of(st.text(max_size=20), st.lists(_parts, max_size=4).map(tuple)),
    name=st.none() | st.text(max_size=6),
    tool_call_id=st.none() | st.text(max_size=6),
    tool_calls=st.none()
    | st.lists(
        st.one_of(_openai_calls, st.dictionaries(st.text(max_size=4), strategies.json_values())),
        max_size=2,
    ).map(tuple),
    metadata=st.none() | st.dictionaries(st.text(max_size=4), strategies.json_values()),
)
transcripts = st.one_of(
    st.lists(_messages, max_size=6),
    st.lists(strategies.messages(), max_size=6),
    lmml_strategies.transcripts(),
)


def _accepted(messages: list[Message]) -> list[Message]:
    """The messages as the server stores them: through its own validation."""
    return list(parse_messages(msgspec.json.decode(msgspec.json.encode(messages))))


@settings(max_examples=300, deadline=None)
@given(transcripts, st.sampled_from(["omit", "system"]))
def test_every_rendered_message_is_accepted_by_both_sdks(
    messages: list[Message], context: str
) -> None:
    accepted = _accepted(messages)
    rendered = openai_messages(accepted, context=context)  # type: ignore[arg-type]
    for message in rendered:
        check_openai(message)
    body = anthropic_messages(accepted, context=context)  # type: ignore[arg-type]
    assert set(body) <= {"messages", "system"}
    assert isinstance(body.get("system", ""), str)
    for message in body["messages"]:
        check_anthropic(message)
    roles = [m["role"] for m in body["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles

    # Nothing vanishes: every text the transcript holds is in both renderings.
    kept = [m for m in accepted if m.role != "context" or context == "system"]
    openai_text, anthropic_text = _texts(rendered), _texts(body)
    for message in kept:
        parts = (
            (message.content,)
            if isinstance(message.content, str)
            else tuple(p.text for p in message.content if isinstance(p, TextPart))
        )
        for text in parts:
            assert text in openai_text
            assert text in anthropic_text


def test_the_lmml_render_function_is_the_openai_one() -> None:
    messages = [Message(role="assistant", content=(ImageUrlPart(image_url=ImageUrl(url=PNG)),))]
    assert lmml.chat_messages(messages) == openai_messages(messages)


# --- the conversions, one by one (docs/protocol.md, "Chat output") -------------


def test_openai_files_become_file_parts_or_text_and_images_stay_in_user_messages() -> None:
    user = Message(
        role="user",
        content=(
            TextPart(text="see"),
            AttachmentPart(name="notes.txt", mime="text/plain", content="buy milk"),
            AttachmentPart(name="paper.pdf", mime="application/pdf", content=PDF),
            ImageUrlPart(image_url=ImageUrl(url=PNG, detail="ultra")),
        ),
        metadata={"client": "x"},
    )
    [out] = openai_messages([user])
    assert out == {
        "role": "user",
        "content": [
            {"type": "text", "text": "see"},
            {"type": "text", "text": "[file notes.txt (text/plain)]\nbuy milk\n[end of notes.txt]"},
            {
                "type": "file",
                "file": {
                    "filename": "paper.pdf",
                    "file_data": "data:application/pdf;base64," + PDF,
                },
            },
            {"type": "image_url", "image_url": {"url": PNG}},  # "ultra" is no detail level
        ],
    }
    check_openai(out)


def test_openai_images_and_binary_files_outside_user_messages_become_placeholders() -> None:
    for role in ("assistant", "system", "tool"):
        message = Message(
            role=role,  # type: ignore[arg-type]
            content=(
                ImageUrlPart(image_url=ImageUrl(url="https://example.com/a.png")),
                AttachmentPart(name="blob.bin", mime="application/octet-stream", content=BIN),
            ),
            tool_call_id="c1" if role == "tool" else None,
            name="fetch",
        )
        [out] = openai_messages([message])
        check_openai(out)
        texts = [p["text"] for p in out["content"]]
        assert texts == [
            f"[image https://example.com/a.png left out: {role} messages cannot carry images]",
            f"[file blob.bin (application/octet-stream, 3 bytes) left out: {role} messages"
            " cannot carry files]",
        ]
        assert ("name" in out) == (role != "tool")


def test_openai_tool_messages_without_a_call_id_become_user_messages() -> None:
    [out] = openai_messages([Message(role="tool", content="42")])
    assert out == {"role": "user", "content": "[tool result without a tool_call_id]\n42"}
    check_openai(out)


def test_openai_tool_calls_are_normalised_or_kept_as_text() -> None:
    message = Message(
        role="assistant",
        content="",
        tool_calls=(
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}},
            {"id": "c2", "function": {"name": "g", "arguments": "{}"}, "index": 0},
            {"weird": True},
        ),
    )
    [out] = openai_messages([message])
    check_openai(out)
    assert out["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]
    assert out["content"] == (
        '[tool call {"weird":true} left out: not in the function or custom shape]'
    )


def test_anthropic_tool_use_and_results_and_a_system_string() -> None:
    messages = [
        Message(role="system", content="be brief"),
        Message(role="user", content="weather?"),
        Message(
            role="assistant",
            content="checking",
            tool_calls=(
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                },
            ),
        ),
        Message(role="tool", content="rain", tool_call_id="c1"),
        Message(role="user", content="thanks"),
        Message(role="system", content="answer in English"),
    ]
    body = anthropic_messages(messages)
    assert body["system"] == "be brief\n\nanswer in English"
    assert body["messages"] == [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Oslo"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "c1",
                    "content": "rain",
                },
                {"type": "text", "text": "thanks"},
            ],
        },
    ]
    for message in body["messages"]:
        check_anthropic(message)


def test_anthropic_images_documents_and_placeholders() -> None:
    user = Message(
        role="user",
        content=(
            ImageUrlPart(image_url=ImageUrl(url=PNG)),
            ImageUrlPart(image_url=ImageUrl(url="https://example.com/cat.jpg")),
            ImageUrlPart(image_url=ImageUrl(url=SVG)),
            AttachmentPart(name="paper.pdf", mime="application/pdf", content=PDF),
            AttachmentPart(name="blob.bin", mime="application/octet-stream", content=BIN),
        ),
    )
    [out] = anthropic_messages([user])["messages"]
    check_anthropic(out)
    kinds = [block["type"] for block in out["content"]]
    assert kinds == ["image", "image", "text", "document", "text"]
    assert out["content"][0]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": PNG.split(",", 1)[1],
    }
    assert out["content"][1]["source"] == {"type": "url", "url": "https://example.com/cat.jpg"}
    assert "image/svg+xml" in out["content"][2]["text"]
    assert "blob.bin" in out["content"][4]["text"]
    assert "no system" not in json.dumps(anthropic_messages([user]))
    assert "system" not in anthropic_messages([user])  # none: the key is left out


def test_anthropic_arguments_that_are_not_an_object_are_kept_raw() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}
    message = Message(role="assistant", content="", tool_calls=(call,))
    [out] = anthropic_messages([message])["messages"]
    check_anthropic(out)
    assert out["content"] == [
        {"type": "tool_use", "id": "c", "name": "f", "input": {"arguments": "[1, 2]"}}
    ]


@pytest.mark.parametrize("context", ["keep", ""])
def test_an_unknown_context_mode_is_refused(context: str) -> None:
    with pytest.raises(ValueError, match="context must be"):
        openai_messages([], context=context)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context must be"):
        anthropic_messages([], context=context)  # type: ignore[arg-type]
