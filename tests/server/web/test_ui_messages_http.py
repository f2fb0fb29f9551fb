"""GET /v1/transcripts/{id}/ui-messages against a real server, and what it
answers held to the AI SDK's own ``safeValidateUIMessages`` (``ai`` from npm,
tests/ai_sdk), on every kind of transcript the server accepts."""

from __future__ import annotations

import json
from typing import Any

import httpx
import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.types import Message
from protocol.ui_messages import from_ui_message, to_ui_messages
from tests.protocol.test_ui_messages import REPLY, USER
from tests.strategies import messages as message_strategy
from tests.support.ai_sdk import run_ai_sdk
from tests.support.servers import running_server


def sdk_failures(lists: list[list[dict[str, Any]]]) -> list[Any]:
    """The lists of UIMessages that ``ai``'s validator refuses, with why."""
    answer = run_ai_sdk("validate.mjs", lists)
    assert answer["checked"] == len(lists)
    failures: list[Any] = answer["failures"]
    return failures


def test_the_sdk_accepts_what_every_transcript_becomes() -> None:
    drawn: list[list[dict[str, Any]]] = []

    @settings(max_examples=300, suppress_health_check=list(HealthCheck), deadline=None)
    @given(st.lists(message_strategy(), max_size=6), st.sampled_from(["omit", "system"]))
    def collect(messages: list[Message], context: str) -> None:
        drawn.append(json.loads(msgspec.json.encode(to_ui_messages(messages, context=context))))

    collect()
    drawn.append([USER, REPLY])
    assert len(drawn) > 100
    failures = sdk_failures(drawn)
    assert failures == [], (failures[:3], [drawn[f["index"]] for f in failures[:3]])


def test_the_sdk_refuses_what_is_not_a_ui_message() -> None:
    """The check above can fail: a tool role and a tool part without input are refused."""
    bad = [
        [{"id": "a", "role": "tool", "parts": []}],
        [{"id": "a", "role": "assistant", "parts": [{"type": "tool-x", "toolCallId": "c"}]}],
    ]
    assert [f["index"] for f in sdk_failures(bad)] == [0, 1]


async def test_ui_messages_over_http_with_windows() -> None:
    chatter = [{"role": "user", "content": f"m{i}"} for i in range(10)]
    reply = msgspec.to_builtins([*from_ui_message(USER), *from_ui_message(REPLY)])
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post("/v1/transcripts", json={"id": "ui-1", "messages": chatter})
        assert r.status_code == 201, r.text
        r = await http.post("/v1/transcripts/ui-1/messages", json={"messages": reply})
        assert r.status_code == 201, r.text

        # 14 messages: past the streaming threshold, rendered a page at a time.
        every = await http.get("/v1/transcripts/ui-1/ui-messages")
        assert every.status_code == 200, every.text
        body = every.json()
        assert body["messages"][:10] == [
            {"id": f"msg-{i}", "role": "user", "parts": [{"type": "text", "text": f"m{i}"}]}
            for i in range(10)
        ]
        assert body["messages"][10:] == [USER, REPLY]
        assert every.headers["x-transcript-revision"] == "2"

        tail = (await http.get("/v1/transcripts/ui-1/ui-messages", params={"tail": 4})).json()
        assert tail["messages"] == [USER, REPLY]
        since = (await http.get("/v1/transcripts/ui-1/ui-messages", params={"from": 9})).json()
        assert since["messages"][0]["id"] == "msg-9" and since["messages"][1:] == [USER, REPLY]

        r = await http.post("/v1/transcripts/ui-1/segments", json={"start": 10})
        assert r.status_code == 201, r.text
        active = await http.get("/v1/transcripts/ui-1/ui-messages", params={"segment": "active"})
        assert active.json()["messages"] == [USER, REPLY]

        for bad in ({"tail": "-1"}, {"from": "x"}, {"tail": "1", "from": "2"}, {"segment": "n"}):
            r = await http.get("/v1/transcripts/ui-1/ui-messages", params=bad)
            assert r.status_code == 400, (bad, r.text)
            assert r.headers["content-type"] == "application/problem+json"
        r = await http.get("/v1/transcripts/nope/ui-messages")
        assert r.status_code == 404

        assert sdk_failures([body["messages"]]) == []
