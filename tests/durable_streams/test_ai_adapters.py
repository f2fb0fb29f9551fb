"""The Durable Streams AI adapters on npm against ``/v1/stream``, as their
READMEs describe (tests/durable_streams/ai_adapters, pinned): an app server
in Node writes a model's reply into a stream of tsync's with the adapter's
server helper, and the adapter's client reads it, a reload in the middle of
the reply resuming it with nothing twice.

- ``@durable-streams/aisdk-transport``: ``toDurableStreamResponse`` in the
  README's ``POST /api/chat`` (``streamText`` with the AI SDK's
  ``MockLanguageModelV3``), ``GET /api/chat/:id/stream`` (204 or the stream's
  URL), and the AI SDK's ``Chat`` on ``createDurableChatTransport``.
- ``@durable-streams/tanstack-ai-transport``: ``toDurableChatSessionResponse``
  (one session stream per chat), the read proxy route, and
  ``durableStreamConnection``'s ``subscribe``/``send`` with
  ``materializeSnapshotFromDurableStream`` for the reload; then TanStack AI's
  ``ChatClient`` (the engine of ``@tanstack/ai-react``'s ``useChat``) on that
  connection, one tab sending and another seeing the turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.node import node_script, npm_ci
from tests.support.servers import running_server

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent / "ai_adapters"


@pytest.fixture(scope="module", autouse=True)
def tools() -> None:
    npm_ci(HERE)


def texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in message["parts"] if p["type"] == "text"]


TOKEN = "adapter-test-token"


@pytest.mark.parametrize("token", [None, TOKEN], ids=["open", "token"])
async def test_the_aisdk_transport_streams_and_resumes_a_reply_through_a_stream(
    token: str | None,
) -> None:
    # With a token, the route writes with it and the browser reads through
    # the app's read proxy (the transport's reader sends no headers).
    bearer = {"authorization": f"Bearer {token}"} if token else {}
    async with running_server(token=token) as srv, httpx.AsyncClient() as http:
        args = (srv.url, token) if token else (srv.url,)
        async with node_script("aisdk.mjs", *args, cwd=HERE) as run:
            seen = await run.finish()
        stream_url = srv.url + seen["streamPath"]
        stored = await http.get(stream_url, params={"offset": "-1"}, headers=bearer)
        head = await http.head(stream_url, headers=bearer)
        bare = await http.get(stream_url, params={"offset": "-1"})
    assert seen["streamPath"].startswith("/v1/stream/chats/c1/"), seen
    if token:
        assert seen["streamUrl"].endswith("/api/stream?path=%2Fv1%2Fstream%2Fchats%2Fc1%2F1")
        assert bare.status_code == 401  # tsync's stream is not readable without the token
    else:
        assert seen["streamUrl"] == stream_url
        assert bare.status_code == 200
    tab, reloaded = seen["tab"], seen["reloaded"]
    for chat in (tab, reloaded):
        assert chat["status"] == "ready" and chat["error"] is None, chat
        assert [m["role"] for m in chat["messages"]] == ["user", "assistant"], chat
        assert texts(chat["messages"][1]) == ["Hello, world!"]  # once, whole
    # The reload resumed the reply while it was being written (the reconnect
    # route gave the stream, not 204) and made the same message of it.
    assert reloaded["messages"][1]["parts"] == tab["messages"][1]["parts"]
    assert reloaded["messages"][0] == tab["messages"][0]
    assert seen["afterEnd"] is None  # 204 once the reply is done
    # tsync holds the UI message chunks, and the stream is closed.
    assert stored.status_code == 200
    assert stored.headers["content-type"].startswith("application/json")
    chunks = stored.json()
    types = [c["type"] for c in chunks]
    assert (types[0], types[-1]) == ("start", "finish")
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "Hello, world!"
    assert head.headers.get("stream-closed") == "true"


async def test_the_tanstack_transport_keeps_a_chat_session_in_one_stream() -> None:
    async with running_server() as srv, httpx.AsyncClient() as http:
        async with node_script("tanstack.mjs", srv.url, cwd=HERE) as run:
            seen = await run.finish()
        url = srv.url + "/v1/stream/sessions/s1"
        stored = await http.get(url, params={"offset": "-1"})
        head = await http.head(url)
    assert seen["tab"]["user"] == "Say hello"
    assert seen["tab"]["reply"] == "Hello, world!"
    # The reload's snapshot holds the reply half written; its subscription
    # from the snapshot's offset brings the rest and nothing before it.
    user = {"id": "user-1", "role": "user", "parts": [{"type": "text", "content": "Say hello"}]}
    half = {"id": "reply-1", "role": "assistant", "parts": [{"type": "text", "content": "Hello"}]}
    assert seen["snapshot"] == [user, half]
    assert seen["after"] == {
        "types": ["TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"],
        "reply": ", world!",
    }
    # A tab opened later gets the conversation as one MESSAGES_SNAPSHOT.
    whole = {**half, "parts": [{"type": "text", "content": "Hello, world!"}]}
    assert seen["late"] == [{"type": "MESSAGES_SNAPSHOT", "messages": [user, whole]}]
    # The session goes on: a second turn in the same stream.
    assert seen["turn2"]["user"] == "Again"
    assert seen["turn2"]["reply"] == "Hello again."
    # tsync holds both turns' chunks (stored without the duplicated
    # `content`), and the session stream stays open.
    assert stored.status_code == 200
    chunks = stored.json()
    contents = [c for c in chunks if c["type"] == "TEXT_MESSAGE_CONTENT"]
    assert "".join(c["delta"] for c in contents) == "Say helloHello, world!AgainHello again."
    assert all("content" not in c for c in contents)
    assert "stream-closed" not in head.headers
    # TanStack AI's ChatClient: the tab that sent and the one that watched
    # hold the same turn, once.
    sender, watcher = seen["tanstack"]["sender"], seen["tanstack"]["watcher"]
    assert sender == watcher
    assert [(m["role"], m["parts"]) for m in sender] == [
        ("user", [{"type": "text", "content": "Hi"}]),
        ("assistant", [{"type": "text", "content": "Hello there."}]),
    ]
