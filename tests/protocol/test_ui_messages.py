"""protocol.ui_messages: stored messages as the AI SDK's UIMessages, and back.

The shapes are held to the SDK's own validator in tests/server/web/
test_ui_messages_http.py; here, the mapping's rules and the round trip of a
UIMessage in its final state through the stored form.
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.types import Message
from protocol.ui_messages import UIMessageRenderer, from_ui_message, to_ui_messages
from protocol.validation import parse_messages
from tests.strategies import messages as message_strategy

#: One UIMessage of every kind of part a finished reply can hold (ai 7).
REPLY: dict[str, Any] = {
    "id": "reply-1",
    "role": "assistant",
    "metadata": {"model": "m-1", "tokens": 42},
    "parts": [
        {"type": "step-start"},
        {"type": "reasoning", "text": "The user wants the weather.", "state": "done"},
        {
            "type": "tool-weather",
            "toolCallId": "call-1",
            "state": "output-available",
            "input": {"city": "Paris"},
            "output": {"celsius": 18, "sky": "clear"},
        },
        {
            "type": "tool-search",
            "toolCallId": "call-2",
            "state": "output-error",
            "input": {"q": "paris"},
            "errorText": "rate limited",
        },
        {
            "type": "tool-delete",
            "toolCallId": "call-3",
            "state": "output-denied",
            "input": {"path": "/"},
            "approval": {"id": "ap-1", "approved": False, "reason": "no"},
        },
        {"type": "step-start"},
        {"type": "text", "text": "It is 18 °C and clear in Paris.", "state": "done"},
        {"type": "source-url", "sourceId": "s1", "url": "https://example.com/w", "title": "W"},
        {
            "type": "source-document",
            "sourceId": "s2",
            "mediaType": "application/pdf",
            "title": "Report",
            "filename": "r.pdf",
        },
        {"type": "data-weather", "id": "d1", "data": {"city": "Paris", "status": "done"}},
        {"type": "text", "text": "Anything else?"},
    ],
}

USER: dict[str, Any] = {
    "id": "u-1",
    "role": "user",
    "parts": [
        {"type": "text", "text": "What is in these?"},
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,iVBORw0KGgo="},
        {
            "type": "file",
            "mediaType": "text/plain",
            "filename": "notes.txt",
            "url": "data:text/plain;base64," + base64.b64encode(b"hello").decode(),
        },
    ],
}


def stored(ui_messages: list[dict[str, Any]]) -> list[Message]:
    """What the UIMessages become, checked by the server's own validation."""
    messages = [m for ui in ui_messages for m in from_ui_message(ui)]
    as_dicts = msgspec.to_builtins(messages)
    return list(parse_messages(as_dicts))


def test_a_reply_of_every_part_comes_back_as_it_was_streamed() -> None:
    messages = stored([USER, REPLY])
    # Chat completions see what they can carry: the tool calls and results, the text.
    roles = [m.role for m in messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert messages[1].tool_calls is not None and len(messages[1].tool_calls) == 3
    assert messages[2].tool_call_id == "call-1"
    assert messages[3].text() == "It is 18 °C and clear in Paris.Anything else?"
    assert to_ui_messages(messages) == [USER, REPLY]


def test_tool_results_fold_into_the_call_before_them() -> None:
    messages = parse_messages(
        [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": '{"celsius": 3}'},
            {"role": "assistant", "content": "3 °C."},
        ]
    )
    assert to_ui_messages(messages) == [
        {"id": "msg-0", "role": "user", "parts": [{"type": "text", "text": "weather?"}]},
        {
            "id": "msg-1",
            "role": "assistant",
            "parts": [
                {
                    "type": "tool-weather",
                    "toolCallId": "c1",
                    "state": "output-available",
                    "input": {"city": "Oslo"},
                    "output": {"celsius": 3},
                }
            ],
        },
        {"id": "msg-3", "role": "assistant", "parts": [{"type": "text", "text": "3 °C."}]},
    ]


def test_a_window_that_starts_at_a_tool_result_shows_it_as_a_dynamic_tool() -> None:
    messages = parse_messages([{"role": "tool", "tool_call_id": "c9", "content": "done"}])
    assert to_ui_messages(messages, start=7) == [
        {
            "id": "msg-7",
            "role": "assistant",
            "parts": [
                {
                    "type": "dynamic-tool",
                    "toolName": "tool",
                    "toolCallId": "c9",
                    "state": "output-available",
                    "input": None,
                    "output": "done",
                }
            ],
        }
    ]


def test_context_is_left_out_or_shown_as_system() -> None:
    messages = parse_messages([{"role": "context", "content": "preamble"}])
    assert to_ui_messages(messages) == []
    assert to_ui_messages(messages, context="system") == [
        {"id": "msg-0", "role": "system", "parts": [{"type": "text", "text": "preamble"}]}
    ]
    with pytest.raises(ValueError, match="context"):
        UIMessageRenderer(context="nope")


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "user", "parts": []},
        {"id": "x", "role": "tool", "parts": []},
        {"id": "x", "role": "user", "parts": "text"},
        {"id": "x", "role": "user", "parts": [{"text": "no type"}]},
    ],
)
def test_what_is_not_a_ui_message_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        from_ui_message(bad)


@given(st.lists(message_strategy(), max_size=8), st.integers(0, 3), st.data())
def test_paging_does_not_change_the_answer(
    messages: list[Message], cut: int, data: st.DataObject
) -> None:
    """The server renders a page at a time: any split gives the same UIMessages."""
    whole = to_ui_messages(messages)
    renderer = UIMessageRenderer()
    at = data.draw(st.integers(0, len(messages)))
    paged = renderer.feed(messages[:at]) + renderer.feed(messages[at:]) + renderer.finish()
    assert paged == whole
    ids = [m["id"] for m in whole]
    assert len(ids) == len(set(ids)) or any(
        isinstance((m.metadata or {}).get("ui"), dict) for m in messages
    )
    del cut
