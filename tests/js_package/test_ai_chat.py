"""``/v1/ai/chat`` against the AI SDK's own ``WebSocketChatTransport`` (``ai``
from npm, in Node through ``ws``): a user message sent, the reply an agent
writes (a Python ``RawClient`` on ``/v1/ws``, sending ``draft`` ops with
chunks and committing with ``format: "ui"``) streamed back and equal to the
stored message; a resume in the middle of a reply; ``no-active`` when idle;
an abort that stops the reply and keeps what it held; bad frames closed with
1008, held to ``safeValidateWebSocketChatTransportRequest``'s verdicts.

The tests of what differs per store run through memory, SQLite and two
replicas on one Redis (``STORES``): there the agent writes on one replica and
the transport talks to the other, so the reply crosses the backplane."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from protocol import ai_chat, codes
from protocol.ui_stream import UIMessageState
from protocol.wire import ErrorFrame, Increment
from server.config import ServerConfig
from server.store.redis import RedisStore
from tests.conftest import require_binary
from tests.js_package import npm
from tests.support.node import NodeRun, node_script
from tests.support.redis_server import RedisServer
from tests.support.servers import RunningServer, ServerProcess, running_server
from tests.support.wsclient import RawClient

pytestmark = pytest.mark.slow

#: A reply with reasoning and text, in the batches the agent sends.
REPLY: list[list[dict[str, Any]]] = [
    [{"type": "start", "messageId": "reply-1"}],
    [{"type": "start-step"}, {"type": "reasoning-start", "id": "r"}],
    [{"type": "reasoning-delta", "id": "r", "delta": "The user wants the weather."}],
    [{"type": "reasoning-end", "id": "r"}, {"type": "text-start", "id": "t"}],
    [{"type": "text-delta", "id": "t", "delta": "It is 18 "}],
    [{"type": "text-delta", "id": "t", "delta": "°C "}],
    [{"type": "text-delta", "id": "t", "delta": "in Paris."}],
    [{"type": "text-end", "id": "t"}, {"type": "finish-step"}],
    [{"type": "finish", "finishReason": "stop"}],
]


@pytest.fixture(scope="module", autouse=True)
def tools() -> None:
    npm.tools()


@dataclass
class Deployment:
    """Where the agent writes (``agent``) and where the transport talks to
    (``chat``): one server, or two replicas on one Redis."""

    agent: RunningServer
    chat: RunningServer


Deploy = Callable[..., AbstractAsyncContextManager[Deployment]]

#: The stores the tests of what differs per store run through.
STORES = [
    pytest.param("memory"),
    pytest.param("sqlite"),
    pytest.param("redis", marks=pytest.mark.redis),
]
_prefixes = itertools.count()


@pytest.fixture(scope="module")
def module_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One Redis for the module (only its Redis tests start it); each test
    keeps to a key prefix of its own."""
    binary = require_binary("redis-server")
    with RedisServer(binary, tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(params=STORES)
def deploy(request: pytest.FixtureRequest, tmp_path: Path) -> Deploy:
    """``deploy(**settings)``: the test's servers on the store of its param."""
    kind: str = request.param
    url = request.getfixturevalue("module_redis").url if kind == "redis" else ""

    @contextlib.asynccontextmanager
    async def servers(**settings: Any) -> AsyncIterator[Deployment]:
        if kind == "redis":
            store = f"{url}?prefix=ai{next(_prefixes)}:"
            async with (
                running_server(store=RedisStore(store), backplane_resync_s=0.2, **settings) as a,
                running_server(store=RedisStore(store), backplane_resync_s=0.2, **settings) as b,
            ):
                yield Deployment(agent=a, chat=b)
            return
        where = "memory" if kind == "memory" else f"sqlite:{tmp_path / 'data'}"
        config = ServerConfig(store=where, graceful_shutdown_s=2.0)
        async with running_server(config, **settings) as srv:
            yield Deployment(agent=srv, chat=srv)

    return servers


async def first_chunk(run: NodeRun) -> str:
    """Wait for a resuming script to say its stream's first chunk came: the
    server joined the reply, so what the agent writes next reaches it."""
    assert run.proc.stdout is not None
    async with asyncio.timeout(15):
        line = await run.proc.stdout.readline()
    said = json.loads(line or b"null")
    assert isinstance(said, dict) and "first" in said, line
    first: str = said["first"]
    return first


def ai_url(srv: RunningServer) -> str:
    return srv.ws_url.removesuffix("/v1/ws") + "/v1/ai/chat"


def folded(batches: list[list[dict[str, Any]]]) -> dict[str, Any]:
    state = UIMessageState("d1")
    for batch in batches:
        state.apply_all(batch)
    return state.message()


async def create(srv: RunningServer, tid: str) -> None:
    async with httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post("/v1/transcripts", json={"id": tid})
        assert r.status_code == 201, r.text


async def ui_messages(srv: RunningServer, tid: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.get(f"/v1/transcripts/{tid}/ui-messages")
        assert r.status_code == 200, r.text
        messages: list[dict[str, Any]] = r.json()["messages"]
        return messages


class Agent:
    """An agent on ``/v1/ws``: waits for a user message, then writes a reply
    as a draft with chunks."""

    def __init__(self, writer: RawClient, reader: RawClient, tid: str) -> None:
        self.writer = writer
        self.reader = reader
        self.tid = tid
        self.stopped: ErrorFrame | None = None

    @classmethod
    async def start(cls, srv: RunningServer | ServerProcess, tid: str) -> Agent:
        reader = await RawClient.connect(srv.ws_url)
        await reader.send(op="subscribe", transcriptId=tid)
        await reader.recv()  # the baseline
        return cls(await RawClient.connect(srv.ws_url), reader, tid)

    async def user_message(self) -> None:
        while True:
            frame = await self.reader.recv(timeout=15)
            if isinstance(frame, Increment):
                return

    async def write(self, batches: list[list[dict[str, Any]]], pause: float = 0.02) -> None:
        for batch in batches:
            await self.writer.send(op="draft", transcriptId=self.tid, draftId="d1", chunks=batch)
            await asyncio.sleep(pause)

    async def commit(self, batches: list[list[dict[str, Any]]]) -> None:
        await self.writer.send(
            op="append",
            transcriptId=self.tid,
            draftId="d1",
            format="ui",
            messages=[folded(batches)],
            ref="commit",
        )
        await self.writer.recv()

    async def close(self) -> None:
        await self.writer.close()
        await self.reader.close()


async def chat(srv: RunningServer, tid: str, mode: str, *extra: str) -> Any:
    args = (ai_url(srv), tid, mode, *extra)
    async with node_script("node_ai_chat.mjs", *args, cwd=npm.PROJECT) as run:
        return await run.finish()


async def test_a_sent_message_is_answered_with_the_reply_an_agent_streams(
    deploy: Deploy,
) -> None:
    async with deploy(draft_coalesce_s=0) as at:
        await create(at.chat, "chat-1")
        agent = await Agent.start(at.agent, "chat-1")
        args = (ai_url(at.chat), "chat-1", "send")
        async with node_script("node_ai_chat.mjs", *args, cwd=npm.PROJECT) as run:
            await agent.user_message()
            await agent.write(REPLY)
            await agent.commit(REPLY)
            seen = await run.finish()
        stored = await ui_messages(at.chat, "chat-1")
        await agent.close()
    assert seen["error"] is None, seen
    assert seen["types"][0] == "start"
    assert seen["message"]["id"] == "reply-1"
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[0]["id"] == "user-msg-1"
    assert stored[1]["id"] == "reply-1"
    assert seen["message"]["parts"] == stored[1]["parts"]


async def test_the_chat_is_created_on_its_first_send_and_a_resent_message_appends_once() -> None:
    async with running_server(draft_coalesce_s=0, ai_reply_timeout_s=1) as srv:
        first = await chat(srv, "chat-new", "send")
        again = await chat(srv, "chat-new", "send")
        stored = await ui_messages(srv, "chat-new")
    for seen in (first, again):
        assert "no agent replied within 1 s" in str(seen), seen
    assert [m["id"] for m in stored] == ["user-msg-1"]


async def test_a_resume_in_the_middle_of_a_reply_gets_it_whole_and_nothing_twice(
    deploy: Deploy,
) -> None:
    async with deploy(draft_coalesce_s=0) as at:
        await create(at.chat, "chat-2")
        agent = await Agent.start(at.agent, "chat-2")
        async with httpx.AsyncClient(base_url=at.chat.url) as http:
            user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
            r = await http.post(
                "/v1/transcripts/chat-2/messages",
                params={"format": "ui"},
                json={"messages": [user]},
            )
            assert r.status_code in (200, 201), r.text
        await agent.user_message()
        await agent.write(REPLY[:5])
        args = (ai_url(at.chat), "chat-2", "resume")
        async with node_script("node_ai_chat.mjs", *args, cwd=npm.PROJECT) as run:
            # The resume joined the reply half written once its first chunk came.
            assert await first_chunk(run) == "start"
            await agent.write(REPLY[5:])
            await agent.commit(REPLY)
            seen = await run.finish()
        stored = await ui_messages(at.chat, "chat-2")
        await agent.close()
    assert seen["resolved"] == "stream" and seen["error"] is None, seen
    assert seen["types"][0] == "start"
    assert seen["message"] == {**folded(REPLY), "id": "reply-1"}
    assert seen["message"]["parts"] == stored[1]["parts"]
    [text] = [p["text"] for p in seen["message"]["parts"] if p["type"] == "text"]
    assert text == "It is 18 °C in Paris."  # nothing twice


async def test_a_resume_with_no_reply_being_written_is_no_active(deploy: Deploy) -> None:
    async with deploy() as at:
        await create(at.agent, "chat-3")
        idle = await chat(at.chat, "chat-3", "idle")
        missing = await chat(at.chat, "no-such-chat", "idle")
    assert idle == {"resolved": None}
    assert missing == {"resolved": None}


async def test_an_abort_stops_the_reply_tells_the_agent_and_keeps_what_it_held(
    deploy: Deploy,
) -> None:
    async with deploy(draft_coalesce_s=0) as at:
        await create(at.chat, "chat-4")
        agent = await Agent.start(at.agent, "chat-4")
        args = (ai_url(at.chat), "chat-4", "abort")
        async with node_script("node_ai_chat.mjs", *args, cwd=npm.PROJECT) as run:
            await agent.user_message()
            await agent.write(REPLY[:3])
            told: ErrorFrame | None = None
            for i in range(200):  # the agent talks until it is told to stop
                await agent.writer.send(
                    op="draft",
                    transcriptId="chat-4",
                    draftId="d1",
                    chunks=[{"type": "text-delta", "id": "t", "delta": "word "}]
                    if i
                    else [{"type": "text-start", "id": "t"}],
                )
                try:
                    frame = await agent.writer.recv(timeout=0.02)
                except TimeoutError:
                    continue
                if isinstance(frame, ErrorFrame):
                    told = frame
                    break
            seen = await run.finish()
        stored = await ui_messages(at.chat, "chat-4")
        await agent.close()
    assert told is not None and told.code == codes.DRAFT_CLOSED, told
    if at.agent is at.chat:  # told at once, by the replica that stopped the reply
        assert "was stopped by ai" in told.message, told
    else:  # across replicas: told at once by its own replica, when the close arrives
        assert "was stopped on another replica" in told.message, told
    assert [m["role"] for m in stored] == ["user", "assistant"]
    [text] = [p["text"] for p in stored[1]["parts"] if p["type"] == "text"]
    assert text.startswith("word word ")
    shown = "".join(p["text"] for p in seen["message"]["parts"] if p["type"] == "text")
    assert shown.startswith("word word ") and text.startswith(shown)


async def test_regenerate_is_refused_with_a_clear_error() -> None:
    async with running_server() as srv:
        await create(srv, "chat-5")
        seen = await chat(srv, "chat-5", "regenerate")
        stored = await ui_messages(srv, "chat-5")
    assert "regenerate-message is not supported" in seen["error"], seen
    assert stored == []


BAD_FRAMES: list[Any] = [
    "not json",
    [],
    {"type": "send"},
    {"type": "abort"},
    {"type": "resume", "requestId": "r", "id": "c", "headers": {}, "body": {}, "lastSequence": -1},
    {"type": "resume", "requestId": "r", "id": "c", "headers": {"a": 1}, "body": {}},
    {
        "type": "send",
        "requestId": "r",
        "id": "chat-6",
        "trigger": "submit-message",
        "headers": {},
        "body": {},
        "messages": [{"id": "m", "role": "user", "parts": []}],
    },
    {
        "type": "send",
        "requestId": "r",
        "id": "chat-6",
        "trigger": "edit",
        "headers": {},
        "body": {},
        "messages": [{"id": "m", "role": "user", "parts": [{"type": "text", "text": "x"}]}],
    },
]


#: The bad frame each store is tried with beyond memory: a send with a user
#: message the store would append if it got that far.
STORE_BAD_FRAME = 6


@pytest.mark.parametrize("frame", BAD_FRAMES, ids=range(len(BAD_FRAMES)))
async def test_a_bad_frame_closes_with_1008_and_appends_nothing(frame: Any) -> None:
    text = frame if isinstance(frame, str) else json.dumps(frame)
    async with running_server() as srv:
        await create(srv, "chat-6")
        seen = await chat(srv, "chat-6", "bad", text)
        stored = await ui_messages(srv, "chat-6")
    assert seen["code"] == 1008, seen
    assert "Invalid frame" in seen["reason"], seen
    assert stored == []


async def test_a_bad_frame_appends_nothing_through_each_store(deploy: Deploy) -> None:
    async with deploy() as at:
        await create(at.agent, "chat-6")
        seen = await chat(at.chat, "chat-6", "bad", json.dumps(BAD_FRAMES[STORE_BAD_FRAME]))
        stored = [await ui_messages(srv, "chat-6") for srv in (at.agent, at.chat)]
    assert seen["code"] == 1008, seen
    assert "Invalid frame" in seen["reason"], seen
    assert stored == [[], []]


def _send(messages: Any, **fields: Any) -> dict[str, Any]:
    frame = {
        "type": "send",
        "requestId": "r",
        "id": "c",
        "trigger": "submit-message",
        "headers": {},
        "body": {},
        "messages": messages,
    }
    return {**frame, **fields}


TEXT = {"type": "text", "text": "x"}
PARITY: list[Any] = [
    *[f for f in BAD_FRAMES if not isinstance(f, str)],
    None,
    {"type": "abort", "requestId": "r"},
    {"type": "abort", "requestId": 1},
    {"type": "resume", "requestId": "r", "id": "c", "headers": {}, "body": {}},
    {"type": "resume", "requestId": "r", "id": "c", "headers": {}, "body": {}, "lastSequence": 3},
    {"type": "resume", "requestId": "r", "id": "c", "headers": {}, "body": {}, "lastSequence": 1.5},
    {"type": "resume", "requestId": "r", "id": "c", "headers": {}, "body": [], "lastSequence": 0},
    {"type": "resume", "requestId": "r", "id": "c", "body": {}},
    {"type": "other", "requestId": "r", "id": "c", "headers": {}, "body": {}},
    _send([{"id": "m", "role": "user", "parts": [TEXT]}]),
    _send([{"id": "m", "role": "user", "parts": [TEXT]}], messageId=3),
    _send([{"id": "m", "role": "user", "parts": [TEXT]}], messageId="m"),
    _send([{"id": "m", "role": "user", "parts": [TEXT]}], trigger="regenerate-message"),
    _send([]),
    _send("x"),
    _send([{"id": "m", "role": "tool", "parts": [TEXT]}]),
    _send([{"id": 1, "role": "user", "parts": [TEXT]}]),
    _send([{"id": "m", "role": "assistant", "parts": []}]),
    _send([{"id": "m", "role": "user", "parts": [{"type": "text"}]}]),
    _send([{"id": "m", "role": "user", "parts": [{"type": "nope"}]}]),
    _send([{"id": "m", "role": "user", "parts": [{"type": "text", "text": "x", "state": "x"}]}]),
    _send([{"id": "m", "role": "user", "parts": [{"type": "data-x", "data": 1}]}]),
    _send([{"id": "m", "role": "user", "parts": [{"type": "data-x", "id": 2}]}]),
    _send([{"id": "m", "role": "user", "parts": [{"type": "file", "mediaType": "a", "url": "u"}]}]),
    _send([{"id": "m", "role": "user", "parts": [{"type": "file", "url": "u"}]}]),
    _send([{"id": "m", "role": "user", "parts": [{"type": "step-start"}]}]),
    _send([{"id": "m", "role": "user", "parts": [TEXT], "metadata": {"a": 1}}]),
    _send(
        [
            {
                "id": "m",
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool-weather",
                        "toolCallId": "c1",
                        "state": "output-available",
                        "input": {},
                        "output": 1,
                    }
                ],
            }
        ]
    ),
    _send(
        [
            {
                "id": "m",
                "role": "assistant",
                "parts": [{"type": "tool-weather", "toolCallId": "c1", "state": "done"}],
            }
        ]
    ),
    _send(
        [
            {
                "id": "m",
                "role": "assistant",
                "parts": [
                    {"type": "dynamic-tool", "toolCallId": "c1", "state": "output-error"},
                ],
            }
        ]
    ),
    _send(
        [
            {
                "id": "m",
                "role": "assistant",
                "parts": [
                    {
                        "type": "dynamic-tool",
                        "toolName": "w",
                        "toolCallId": "c1",
                        "state": "output-error",
                        "errorText": "no",
                    },
                ],
            }
        ]
    ),
    _send(
        [
            {
                "id": "m",
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool-w",
                        "toolCallId": "c1",
                        "state": "input-available",
                        "input": {},
                        "output": 1,
                    },
                ],
            }
        ]
    ),
]


def test_the_python_check_agrees_with_the_sdks_validator() -> None:
    node = require_binary("node")
    result = subprocess.run(
        [node, "node_ai_chat.mjs", "ws://unused", "c", "validate"],
        cwd=npm.PROJECT,
        input=json.dumps(PARITY),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    _ready, verdicts = result.stdout.splitlines()[:2]
    sdk = json.loads(verdicts)
    ours = []
    for value in PARITY:
        try:
            ai_chat.check_request(value)
            ours.append(True)
        except ai_chat.InvalidRequest:
            ours.append(False)
    differ = [(i, PARITY[i], sdk[i]) for i in range(len(PARITY)) if sdk[i] != ours[i]]
    assert not differ, differ
    assert True in sdk and False in sdk


async def test_the_default_chat_transport_gets_the_same_reply_over_http(deploy: Deploy) -> None:
    async with deploy(draft_coalesce_s=0) as at:
        await create(at.chat, "chat-8")
        agent = await Agent.start(at.agent, "chat-8")
        url = at.chat.url + "/v1/ai/chat"
        async with node_script(
            "node_ai_chat.mjs", url, "chat-8", "http-send", cwd=npm.PROJECT
        ) as run:
            await agent.user_message()
            await agent.write(REPLY)
            await agent.commit(REPLY)
            seen = await run.finish()
        stored = await ui_messages(at.chat, "chat-8")
        await agent.close()
    assert seen["error"] is None, seen
    assert seen["message"]["id"] == "reply-1"
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert seen["message"]["parts"] == stored[1]["parts"]


async def test_the_default_chat_transport_resumes_a_reply_and_gets_204_when_idle(
    deploy: Deploy,
) -> None:
    async with deploy(draft_coalesce_s=0) as at:
        await create(at.chat, "chat-9")
        url = at.chat.url + "/v1/ai/chat"
        idle = await chat_at(url, "chat-9", "http-idle")
        agent = await Agent.start(at.agent, "chat-9")
        async with httpx.AsyncClient(base_url=at.chat.url) as http:
            user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
            r = await http.post(
                "/v1/transcripts/chat-9/messages",
                params={"format": "ui"},
                json={"messages": [user]},
            )
            assert r.status_code in (200, 201), r.text
            await agent.user_message()
            await agent.write(REPLY[:5])
            async with http.stream("GET", "/v1/ai/chat/chat-9/stream") as raw:  # half written
                assert raw.status_code == 200
                assert raw.headers["x-vercel-ai-ui-message-stream"] == "v1"
                first = await anext(raw.aiter_lines())
            assert json.loads(first.removeprefix("data: ")) == REPLY[0][0]
        async with node_script(
            "node_ai_chat.mjs", url, "chat-9", "http-resume", cwd=npm.PROJECT
        ) as run:
            # The GET joined the reply half written once its first event came.
            assert await first_chunk(run) == "start"
            await agent.write(REPLY[5:])
            await agent.commit(REPLY)
            seen = await run.finish()
        await agent.close()
    assert idle == {"resolved": None}
    assert seen["resolved"] == "stream" and seen["error"] is None, seen
    assert seen["message"] == {**folded(REPLY), "id": "reply-1"}
    [text] = [p["text"] for p in seen["message"]["parts"] if p["type"] == "text"]
    assert text == "It is 18 °C in Paris."  # nothing twice


async def chat_at(url: str, tid: str, mode: str) -> Any:
    async with node_script("node_ai_chat.mjs", url, tid, mode, cwd=npm.PROJECT) as run:
        return await run.finish()
