"""``/v1/ai/chat``'s credentials, spoken to frame by frame from Python: the
token in the query (``?token=``) or in a frame's ``Authorization`` header,
the rights a send and a resume need, and a chat created on its first send
only for a token that may create. (The AI SDK's own transport against it:
tests/js_package/test_ai_chat.py.)"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import jwt
import websockets

from protocol.wire import Increment
from tests.support.servers import RunningServer, running_server
from tests.support.wsclient import RawClient

SECRET = "ai-chat-suite-secret-0123456789abcdef"
USER = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}


def token(**claims: object) -> str:
    return jwt.encode({"sub": "s", "exp": int(time.time()) + 600, **claims}, SECRET, "HS256")


def send_frame(chat_id: str, headers: dict[str, str] | None = None) -> str:
    return json.dumps(
        {
            "type": "send",
            "requestId": "q1",
            "id": chat_id,
            "trigger": "submit-message",
            "headers": headers or {},
            "body": {},
            "messages": [USER],
        }
    )


async def answer(srv: RunningServer, frame: str, query: str = "") -> dict[str, Any]:
    """The first frame the server answers ``frame`` with."""
    url = srv.ws_url.removesuffix("/v1/ws") + "/v1/ai/chat" + query
    async with websockets.connect(url) as ws:
        await ws.send(frame)
        reply: dict[str, Any] = json.loads(await ws.recv(decode=True))
        return reply


async def stored(srv: RunningServer, tid: str) -> list[str] | None:
    headers = {"authorization": f"Bearer {token(admin=True)}"}
    async with httpx.AsyncClient(base_url=srv.url, headers=headers) as http:
        r = await http.get(f"/v1/transcripts/{tid}/ui-messages")
        if r.status_code == 404:
            return None
        return [m["id"] for m in r.json()["messages"]]


async def test_a_send_takes_the_token_in_the_query_or_in_its_headers() -> None:
    async with running_server(jwt_secret=SECRET, ai_reply_timeout_s=0.3) as srv:
        admin = {"authorization": f"Bearer {token(admin=True)}"}
        async with httpx.AsyncClient(base_url=srv.url, headers=admin) as http:
            for tid in ("chat-q", "chat-h", "chat-r"):
                assert (await http.post("/v1/transcripts", json={"id": tid})).status_code == 201
        rights = token(read=["chat-*"], write=["chat-*"])

        none = await answer(srv, send_frame("chat-q"))
        assert none["type"] == "error" and "no credentials" in none["errorText"], none
        assert await stored(srv, "chat-q") == []

        by_query = await answer(srv, send_frame("chat-q"), f"?token={rights}")
        assert "no agent replied within 0.3 s" in by_query["errorText"], by_query
        assert await stored(srv, "chat-q") == ["u1"]

        by_header = await answer(srv, send_frame("chat-h", {"authorization": f"Bearer {rights}"}))
        assert "no agent replied" in by_header["errorText"], by_header
        assert await stored(srv, "chat-h") == ["u1"]

        read_only = await answer(srv, send_frame("chat-r"), f"?token={token(read=['chat-*'])}")
        assert read_only["errorText"].startswith("forbidden"), read_only
        assert await stored(srv, "chat-r") == []


async def test_a_missing_chat_is_created_only_for_a_token_that_may_create() -> None:
    async with running_server(jwt_secret=SECRET, ai_reply_timeout_s=0.3) as srv:
        writer = token(read=["*"], write=["*"])
        refused = await answer(srv, send_frame("chat-new"), f"?token={writer}")
        assert refused["errorText"].startswith("not-found"), refused
        assert await stored(srv, "chat-new") is None

        created = await answer(srv, send_frame("chat-new"), f"?token={token(admin=True)}")
        assert "no agent replied" in created["errorText"], created
        assert await stored(srv, "chat-new") == ["u1"]


async def test_a_resume_needs_read_and_is_no_active_when_idle() -> None:
    async with running_server(jwt_secret=SECRET) as srv:
        frame = json.dumps(
            {"type": "resume", "requestId": "q2", "id": "chat-x", "headers": {}, "body": {}}
        )
        idle = await answer(srv, frame, f"?token={token(read=['chat-*'])}")
        assert idle == {"type": "no-active", "requestId": "q2"}
        refused = await answer(srv, frame, f"?token={token(read=['other'])}")
        assert refused["type"] == "error" and refused["errorText"].startswith("forbidden")


async def test_a_reply_written_as_text_alone_comes_as_one_text_part() -> None:
    async with running_server(draft_coalesce_s=0, ai_reply_timeout_s=5) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as http:
            assert (await http.post("/v1/transcripts", json={"id": "chat-t"})).status_code == 201
        agent = await RawClient.connect(srv.ws_url)
        await agent.send(op="subscribe", transcriptId="chat-t")
        await agent.recv()  # the baseline
        url = srv.ws_url.removesuffix("/v1/ws") + "/v1/ai/chat"
        async with websockets.connect(url) as ws:
            await ws.send(send_frame("chat-t"))
            while not isinstance(await agent.recv(), Increment):
                pass  # the user's message
            for word in ("Hello", " there"):
                await agent.send(op="draft", transcriptId="chat-t", draftId="d", delta=word)
            reply = {"role": "assistant", "content": "Hello there"}
            await agent.send(op="append", transcriptId="chat-t", draftId="d", messages=[reply])
            frames = []
            while not frames or frames[-1]["type"] == "chunk":
                frames.append(json.loads(await ws.recv(decode=True)))
        await agent.close()
    assert frames[-1] == {"type": "end", "requestId": "q1"}
    assert [f["sequence"] for f in frames[:-1]] == list(range(len(frames) - 1))
    chunks = [f["chunk"] for f in frames[:-1]]
    assert chunks[0] == {"type": "start", "messageId": "d"}
    assert [c["type"] for c in chunks[1:3]] == ["start-step", "text-start"]
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "Hello there"
    assert [c["type"] for c in chunks[-3:]] == ["text-end", "finish-step", "finish"]


async def test_a_frame_after_the_connections_token_expired_is_refused() -> None:
    async with running_server(jwt_secret=SECRET, ai_reply_timeout_s=0.3) as srv:
        exp = int(time.time()) + 2
        short = jwt.encode({"sub": "s", "exp": exp, "admin": True}, SECRET, "HS256")
        url = srv.ws_url.removesuffix("/v1/ws") + f"/v1/ai/chat?token={short}"
        async with websockets.connect(url) as ws:
            await asyncio.sleep(exp - time.time() + 0.1)  # past exp
            await ws.send(send_frame("chat-late"))
            answer = json.loads(await ws.recv(decode=True))
        assert "the token has expired" in answer["errorText"], answer
        assert await stored(srv, "chat-late") is None
