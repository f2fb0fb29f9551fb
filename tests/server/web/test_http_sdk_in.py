"""``POST /v1/transcripts/{id}/messages?format=openai|anthropic`` against a
real server: what ``GET .../chat?format=`` gives goes back in as the same
messages (a round trip, property-tested on what each mapping represents),
and what the SDKs return (their own types, dumped) is appended as it is."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import anthropic.types as at
import httpx
import openai.types.chat as ot
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.protocol.test_sdk_in import (
    WEATHER_CALL,
    anthropic_representable,
    openai_representable,
)
from tests.support.servers import running_server

_ids = itertools.count()


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    box: dict[str, Any] = {}
    ready = threading.Event()

    async def main() -> None:
        async with running_server() as srv:
            box["url"], box["loop"], box["stop"] = srv.url, asyncio.get_running_loop(), None
            box["stop"] = asyncio.Event()
            ready.set()
            await box["stop"].wait()

    def serve() -> None:
        try:
            asyncio.run(main())
        finally:
            ready.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(30) and "url" in box, "the server did not start"
    try:
        with httpx.Client(base_url=box["url"], timeout=20) as client:
            yield client
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(10)


def new_transcript(http: httpx.Client, messages: list[Any]) -> str:
    tid = f"sdk-{next(_ids)}"
    r = http.post("/v1/transcripts", json={"id": tid, "messages": messages})
    assert r.status_code == 201, r.text
    return tid


def messages_of(http: httpx.Client, tid: str) -> list[dict[str, Any]]:
    r = http.get(f"/v1/transcripts/{tid}")
    assert r.status_code == 200, r.text
    got: list[dict[str, Any]] = r.json()["messages"]
    return got


def round_trip(http: httpx.Client, messages: list[dict[str, Any]], chat_format: str) -> None:
    source = new_transcript(http, messages)
    r = http.get(f"/v1/transcripts/{source}/chat", params={"format": chat_format})
    assert r.status_code == 200, r.text
    copy = new_transcript(http, [])
    r = http.post(f"/v1/transcripts/{copy}/messages", params={"format": chat_format}, json=r.json())
    assert r.status_code in (200, 201), r.text
    assert messages_of(http, copy) == messages_of(http, source)


_SLOW = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SLOW
@given(st.lists(openai_representable(), max_size=5))
def test_openai_chat_output_appends_back_as_the_messages(
    http: httpx.Client, messages: list[dict[str, Any]]
) -> None:
    round_trip(http, messages, "openai")


@_SLOW
@given(anthropic_representable())
def test_anthropic_chat_output_appends_back_as_the_messages(
    http: httpx.Client, messages: list[dict[str, Any]]
) -> None:
    round_trip(http, messages, "anthropic")


def test_what_the_sdks_return_is_appended_as_it_is(http: httpx.Client) -> None:
    tid = new_transcript(http, [{"role": "user", "content": "weather in Oslo?"}])
    openai_answer = ot.ChatCompletionMessage(
        role="assistant",
        content=None,
        tool_calls=[ot.ChatCompletionMessageFunctionToolCall.model_validate(WEATHER_CALL)],
    )
    for dumped in (openai_answer.model_dump(), openai_answer.model_dump(exclude_none=True)):
        r = http.post(
            f"/v1/transcripts/{tid}/messages",
            params={"format": "openai"},
            json={
                "messages": [dumped, {"role": "tool", "tool_call_id": "call_1", "content": "rain"}]
            },
        )
        assert r.status_code == 201, r.text
    anthropic_answer = at.Message(
        id="msg_1",
        type="message",
        role="assistant",
        model="claude-x",
        content=[
            at.TextBlock(type="text", text="Checking."),
            at.ToolUseBlock(type="tool_use", id="toolu_1", name="weather", input={"city": "Oslo"}),
        ],
        stop_reason="tool_use",
        stop_sequence=None,
        usage=at.Usage(input_tokens=3, output_tokens=5),
    )
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "rain"}],
    }
    r = http.post(
        f"/v1/transcripts/{tid}/messages",
        params={"format": "anthropic"},
        json={"messages": [anthropic_answer.model_dump(mode="json"), result]},
    )
    assert r.status_code == 201, r.text
    got = messages_of(http, tid)
    assert (
        got[1:5]
        == [
            {"role": "assistant", "content": "", "tool_calls": [WEATHER_CALL]},
            {"role": "tool", "content": "rain", "tool_call_id": "call_1"},
        ]
        * 2
    )
    assert got[5:] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "content": "rain", "tool_call_id": "toolu_1"},
    ]


def test_a_bad_format_or_a_misplaced_system_is_refused(http: httpx.Client) -> None:
    tid = new_transcript(http, [])
    url = f"/v1/transcripts/{tid}/messages"
    body = {"messages": [{"role": "user", "content": "hi"}]}
    r = http.post(url, params={"format": "gemini"}, json=body)
    assert r.status_code == 400 and r.json()["code"] == "invalid-query", r.text
    r = http.post(url, json={**body, "system": "be brief"})
    assert r.status_code == 422 and "system" in r.json()["detail"], r.text
    # Without format= the transcript's own shape is asked for: OpenAI's nulls are not it.
    r = http.post(url, json={"messages": [{"role": "assistant", "content": None, "refusal": None}]})
    assert r.status_code == 422 and r.json()["code"] == "invalid-message", r.text
    assert "format=openai" in r.json()["detail"], r.text
    assert messages_of(http, tid) == []
