"""``client_py.ui_chunks``: recorded streams of the ``openai`` and
``anthropic`` SDKs (built with their own types, no network) as AI SDK
``UIMessageChunk``s that ``UIMessageState`` takes, folding into the reply
the model wrote: its reasoning, its text and its tool calls, inputs parsed."""

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

from client_py.ui_chunks import UIChunks
from protocol.ui_stream import UIMessageState


def oa(delta: ChoiceDelta, finish: Any = None) -> ot.ChatCompletionChunk:
    return ot.ChatCompletionChunk(
        id="chatcmpl-1",
        object="chat.completion.chunk",
        created=1,
        model="gpt-x",
        choices=[Choice(index=0, delta=delta, finish_reason=finish)],
    )


def oa_call(
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


def reasoning(text: str) -> ChoiceDelta:
    # What OpenAI-compatible servers (DeepSeek, vLLM) add to the delta.
    return ChoiceDelta.model_validate({"reasoning_content": text})


#: A chat completions stream: thinking, text, two parallel calls, the end,
#: and the usage chunk that ``stream_options.include_usage`` adds.
OPENAI_STREAM: list[ot.ChatCompletionChunk] = [
    oa(ChoiceDelta(role="assistant", content="")),
    oa(reasoning("The user wants ")),
    oa(reasoning("the weather.")),
    oa(ChoiceDelta(content="Checking ")),
    oa(ChoiceDelta(content="Oslo.")),
    oa(oa_call(0, id="call_a", name="weather", arguments="")),
    oa(oa_call(0, arguments='{"ci')),
    oa(oa_call(1, id="call_b", name="time", arguments='{"tz":')),
    oa(oa_call(0, arguments='ty":"Oslo"}')),
    oa(oa_call(1, arguments='"CET"}')),
    oa(ChoiceDelta(), finish="tool_calls"),
    ot.ChatCompletionChunk(
        id="chatcmpl-1",
        object="chat.completion.chunk",
        created=1,
        model="gpt-x",
        choices=[],
        usage={"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14},
    ),
]

OPENAI_REPLY = {
    "id": "chatcmpl-1",
    "role": "assistant",
    "parts": [
        {"type": "step-start"},
        {
            "type": "reasoning",
            "id": "reasoning-1",
            "text": "The user wants the weather.",
            "state": "done",
        },
        {"type": "text", "text": "Checking Oslo.", "state": "done"},
        {
            "type": "tool-weather",
            "toolCallId": "call_a",
            "state": "input-available",
            "input": {"city": "Oslo"},
        },
        {
            "type": "tool-time",
            "toolCallId": "call_b",
            "state": "input-available",
            "input": {"tz": "CET"},
        },
    ],
}


def _message() -> at.Message:
    return at.Message(
        id="msg_01",
        type="message",
        role="assistant",
        model="claude-x",
        content=[],
        stop_reason=None,
        stop_sequence=None,
        usage=at.Usage(input_tokens=10, output_tokens=1),
    )


#: A Messages API stream with extended thinking and a tool call.
ANTHROPIC_STREAM: list[Any] = [
    at.RawMessageStartEvent(type="message_start", message=_message()),
    at.RawContentBlockStartEvent(
        type="content_block_start",
        index=0,
        content_block=at.ThinkingBlock(type="thinking", thinking="", signature=""),
    ),
    at.RawContentBlockDeltaEvent(
        type="content_block_delta",
        index=0,
        delta=at.ThinkingDelta(type="thinking_delta", thinking="The user wants "),
    ),
    at.RawContentBlockDeltaEvent(
        type="content_block_delta",
        index=0,
        delta=at.ThinkingDelta(type="thinking_delta", thinking="the weather."),
    ),
    at.RawContentBlockDeltaEvent(
        type="content_block_delta",
        index=0,
        delta=at.SignatureDelta(type="signature_delta", signature="sig=="),
    ),
    at.RawContentBlockStopEvent(type="content_block_stop", index=0),
    at.RawContentBlockStartEvent(
        type="content_block_start",
        index=1,
        content_block=at.RedactedThinkingBlock(type="redacted_thinking", data="opaque"),
    ),
    at.RawContentBlockStopEvent(type="content_block_stop", index=1),
    at.RawContentBlockStartEvent(
        type="content_block_start", index=2, content_block=at.TextBlock(type="text", text="")
    ),
    at.RawContentBlockDeltaEvent(
        type="content_block_delta", index=2, delta=at.TextDelta(type="text_delta", text="Checking ")
    ),
    at.RawContentBlockDeltaEvent(
        type="content_block_delta", index=2, delta=at.TextDelta(type="text_delta", text="Oslo.")
    ),
    at.RawContentBlockStopEvent(type="content_block_stop", index=2),
    at.RawContentBlockStartEvent(
        type="content_block_start",
        index=3,
        content_block=at.ToolUseBlock(type="tool_use", id="toolu_1", name="weather", input={}),
    ),
    at.RawContentBlockDeltaEvent(
        type="content_block_delta",
        index=3,
        delta=at.InputJSONDelta(type="input_json_delta", partial_json=""),
    ),
    at.RawContentBlockDeltaEvent(
        type="content_block_delta",
        index=3,
        delta=at.InputJSONDelta(type="input_json_delta", partial_json='{"city": "Os'),
    ),
    at.RawContentBlockDeltaEvent(
        type="content_block_delta",
        index=3,
        delta=at.InputJSONDelta(type="input_json_delta", partial_json='lo"}'),
    ),
    at.RawContentBlockStopEvent(type="content_block_stop", index=3),
    at.RawMessageDeltaEvent(
        type="message_delta",
        delta={"stop_reason": "tool_use", "stop_sequence": None},  # type: ignore[arg-type]
        usage=at.MessageDeltaUsage(output_tokens=42),
    ),
    at.RawMessageStopEvent(type="message_stop"),
]

ANTHROPIC_REPLY = {
    "id": "msg_01",
    "role": "assistant",
    "parts": [
        {"type": "step-start"},
        {
            "type": "reasoning",
            "id": "0",
            "text": "The user wants the weather.",
            "providerMetadata": {"anthropic": {"signature": "sig=="}},
            "state": "done",
        },
        {
            "type": "reasoning",
            "id": "1",
            "text": "",
            "providerMetadata": {"anthropic": {"redactedData": "opaque"}},
            "state": "done",
        },
        {"type": "text", "text": "Checking Oslo.", "state": "done"},
        {
            "type": "tool-weather",
            "toolCallId": "toolu_1",
            "state": "input-available",
            "input": {"city": "Oslo"},
        },
    ],
}


def fold(stream: list[Any], draft_id: str = "d1", **kw: Any) -> tuple[UIMessageState, UIChunks]:
    """Convert item by item, each batch checked then folded (as the server does)."""
    state = UIMessageState(draft_id)
    convert = UIChunks(**kw)
    for item in stream:
        batch = convert.add(item)
        state.check(batch)
        state.apply_all(batch)
    end = convert.end()
    state.check(end)
    state.apply_all(end)
    return state, convert


def test_an_openai_stream_folds_into_its_reply() -> None:
    state, convert = fold(OPENAI_STREAM)
    assert state.message() == OPENAI_REPLY
    assert state.finish_reason == "tool-calls" and convert.end() == []


def test_an_openai_stream_as_dicts_is_the_same() -> None:
    state, _ = fold([c.model_dump(exclude_none=True) for c in OPENAI_STREAM])
    assert state.message() == OPENAI_REPLY


def test_an_anthropic_stream_folds_into_its_reply() -> None:
    state, _ = fold(ANTHROPIC_STREAM)
    assert state.message() == ANTHROPIC_REPLY
    assert state.finish_reason == "tool-calls"
    # The tool input streams: a reader sees it grow.
    partial = UIMessageState("d1")
    convert = UIChunks()
    for item in ANTHROPIC_STREAM[:15]:
        partial.apply_all(convert.add(item))
    [tool] = [p for p in partial.message()["parts"] if p["type"] == "tool-weather"]
    assert tool["state"] == "input-streaming" and tool["input"] == {"city": "Os"}


def test_the_message_id_may_be_chosen() -> None:
    state, _ = fold(ANTHROPIC_STREAM, message_id="reply-7")
    assert state.message()["id"] == "reply-7"


def test_a_stream_cut_short_is_closed_by_end() -> None:
    """Parts left open (no finish_reason / message_delta) are ended, a
    call's input parsed: the message is in its final state."""
    state, _ = fold(OPENAI_STREAM[:10])
    assert state.message() == OPENAI_REPLY
    assert state.finish_reason is not None  # finish came, with no reason


def test_arguments_that_are_not_json_are_a_tool_input_error() -> None:
    state, _ = fold(
        [oa(oa_call(0, id="c", name="f", arguments='{"a": tru')), oa(ChoiceDelta(), "stop")]
    )
    [tool] = state.message()["parts"][1:]
    assert tool["state"] == "output-error" and tool["input"] == '{"a": tru'


def test_ui_chunks_pass_as_they_are_and_streams_do_not_mix() -> None:
    convert = UIChunks()
    chunk = {"type": "text-start", "id": "t"}
    assert convert.add(chunk) == [chunk]
    with pytest.raises(TypeError):
        convert.add(OPENAI_STREAM[0])
    with pytest.raises(TypeError):
        UIChunks().add(42)


def test_the_message_id_names_a_stream_of_ui_chunks_too() -> None:
    text = {"type": "text-start", "id": "t"}
    assert UIChunks("m").add(text) == [{"type": "start", "messageId": "m"}, text]
    assert UIChunks("m").add({"type": "start", "messageId": "x"}) == [
        {"type": "start", "messageId": "m"}
    ]
    assert UIChunks().add(text) == [text]


def test_the_anthropic_sdks_helper_events_are_skipped() -> None:
    """``messages.stream(...)`` yields, besides the raw events, ``text`` and
    ``input_json`` events repeating their deltas (and ``ping``): the reply
    is the same, said once."""
    from anthropic.lib.streaming import InputJsonEvent, TextEvent

    stream: list[Any] = []
    for event in ANTHROPIC_STREAM:
        stream.append(event)
        delta = getattr(event, "delta", None)
        if isinstance(delta, at.TextDelta):
            stream.append(TextEvent(type="text", text=delta.text, snapshot=delta.text))
        elif isinstance(delta, at.InputJSONDelta):
            stream.append(
                InputJsonEvent(type="input_json", partial_json=delta.partial_json, snapshot={})
            )
    stream.insert(1, {"type": "ping"})
    state, _ = fold(stream)
    assert state.message() == ANTHROPIC_REPLY
    # And as dicts.
    dicts, _ = fold([e.model_dump() if hasattr(e, "model_dump") else e for e in stream])
    assert dicts.message() == ANTHROPIC_REPLY
