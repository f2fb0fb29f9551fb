"""What the OpenAI and Anthropic SDKs give, through the Python client
against a real server: ``client.stream`` of recorded OpenAI chunks that call
tools commits the calls (never an empty message in their place), and
``append(..., format=)`` takes the SDKs' objects as they are."""

from __future__ import annotations

from typing import Any

import anthropic.types as at
import openai.types.chat as ot
import pytest
from openai.types.chat.chat_completion_chunk import (
    Choice,
    ChoiceDelta,
    ChoiceDeltaToolCall,
    ChoiceDeltaToolCallFunction,
)

import client_py
from client_py import ClientError
from client_py.http import HttpApi
from protocol.types import Message
from tests.support.servers import running_server


def chunk(delta: ChoiceDelta, finish: Any = None) -> ot.ChatCompletionChunk:
    return ot.ChatCompletionChunk(
        id="chatcmpl-1",
        object="chat.completion.chunk",
        created=1,
        model="gpt-x",
        choices=[Choice(index=0, delta=delta, finish_reason=finish)],
    )


def call_delta(
    index: int, *, id: str | None = None, name: str | None = None, arguments: str | None = None
) -> ChoiceDelta:
    return ChoiceDelta(
        tool_calls=[
            ChoiceDeltaToolCall(
                index=index,
                id=id,
                type="function" if id else None,
                function=ChoiceDeltaToolCallFunction(name=name, arguments=arguments),
            )
        ]
    )


#: How the chat completions API streams "Checking." and two parallel calls.
TOOL_STREAM = [
    chunk(ChoiceDelta(role="assistant", content="")),
    chunk(ChoiceDelta(content="Checking.")),
    chunk(call_delta(0, id="call_a", name="weather", arguments="")),
    chunk(call_delta(0, arguments='{"ci')),
    chunk(call_delta(0, arguments='ty":"Oslo"}')),
    chunk(call_delta(1, id="call_b", name="time", arguments="")),
    chunk(call_delta(1, arguments='{"tz":"CET"}')),
    chunk(ChoiceDelta(), finish="tool_calls"),
]


async def test_streamed_tool_calls_are_committed_on_the_message() -> None:
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        await client.create("s1")
        ack = await client.stream("s1", TOOL_STREAM)
        assert (ack.revision, ack.count) == (1, 1)
        (message,) = (await client.get("s1")).messages
        assert message == Message(
            role="assistant",
            content="Checking.",
            tool_calls=(
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "time", "arguments": '{"tz":"CET"}'},
                },
            ),
        )


async def test_a_stream_of_only_tool_calls_commits_them_and_fields_still_apply() -> None:
    only_calls = [c for c in TOOL_STREAM if c.choices[0].delta.content != "Checking."]
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        await client.create("s2")
        await client.stream("s2", only_calls, fields={"name": "bot"})
        (message,) = (await client.get("s2")).messages
        assert message.content == "" and message.name == "bot"
        assert message.tool_calls is not None and len(message.tool_calls) == 2


async def test_a_streamed_refusal_is_the_text_and_kept_in_metadata() -> None:
    stream = [
        chunk(ChoiceDelta(role="assistant", content=None, refusal="")),
        chunk(ChoiceDelta(refusal="I can't ")),
        chunk(ChoiceDelta(refusal="help.")),
        chunk(ChoiceDelta(), finish="stop"),
    ]
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        await client.create("s3")
        await client.stream("s3", stream)
        (message,) = (await client.get("s3")).messages
        assert message.content == "I can't help."
        assert message.metadata == {"refusal": "I can't help."}


@pytest.mark.parametrize(
    ("stream", "error"),
    [
        ([chunk(call_delta(0, arguments='{"a":1}'))], "without an id"),
        (
            [chunk(ChoiceDelta(function_call={"name": "f", "arguments": "{}"}))],
            "legacy function_call",
        ),
        (
            [chunk(ChoiceDelta(content="x")), chunk(call_delta(0, id="c", arguments="{}"))],
            "without a function name",
        ),
    ],
)
async def test_what_a_message_cannot_carry_is_refused_not_committed_empty(
    stream: list[Any], error: str
) -> None:
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        await client.create("s4")
        with pytest.raises(ClientError, match=error):
            await client.stream("s4", stream)
        assert (await client.get("s4")).messages == ()


async def test_append_takes_the_sdks_objects_with_format() -> None:
    openai_answer = ot.ChatCompletionMessage(
        role="assistant",
        content=None,
        tool_calls=[
            ot.ChatCompletionMessageFunctionToolCall(
                id="call_a",
                type="function",
                function={"name": "weather", "arguments": '{"city":"Oslo"}'},
            )
        ],
    )
    anthropic_answer = at.Message(
        id="msg_1",
        type="message",
        role="assistant",
        model="claude-x",
        content=[at.ToolUseBlock(type="tool_use", id="toolu_1", name="time", input={})],
        stop_reason="tool_use",
        stop_sequence=None,
        usage=at.Usage(input_tokens=1, output_tokens=1),
    )
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        await client.create("s5")
        await client.append("s5", [openai_answer], format="openai")
        await client.append("s5", [anthropic_answer], format="anthropic", system="be brief")
        async with HttpApi(srv.url) as http:
            result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12:00"}
            await http.append("s5", [{"role": "user", "content": [result]}], format="anthropic")
        messages = (await client.get("s5")).messages
    assert [m.role for m in messages] == ["assistant", "system", "assistant", "tool"]
    assert messages[0].content == "" and messages[0].tool_calls is not None
    assert messages[0].tool_calls[0]["function"]["name"] == "weather"
    assert messages[1].content == "be brief"
    assert messages[2].tool_calls is not None
    assert messages[2].tool_calls[0]["function"] == {"name": "time", "arguments": "{}"}
    assert messages[3] == Message(role="tool", content="12:00", tool_call_id="toolu_1")
