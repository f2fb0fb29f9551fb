"""A reply survives its replica: two ``tsync serve`` processes on one Redis,
the AI SDK's ``Chat`` on ``WebSocketChatTransport`` (Node, ``ws``), or on
``DefaultChatTransport``, talking to replica A through a forwarder (a load
balancer that goes to the first replica that takes the connection), the agent
writing the reply on replica B; A is SIGKILLed in the middle of the reply.
The chat's ``resumeStream`` opens a new connection, which the forwarder takes
to B; B replays the reply from its start and the chat ends with the reply
whole, equal to the committed message, its text once."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import require_binary
from tests.js_package import npm
from tests.js_package.test_ai_chat import REPLY, Agent, folded
from tests.redis.replicas import replicas
from tests.support.node import NodeRun, node_script
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.redis]


@pytest.fixture(scope="module", autouse=True)
def tools() -> None:
    npm.tools()


@pytest.fixture
def redis_server(tmp_path: Path) -> Any:
    with RedisServer(require_binary("redis-server"), tmp_path / "redis") as server:
        yield server


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def forwarder(ports: Sequence[int]) -> AsyncIterator[int]:
    """A TCP forwarder on a free port of 127.0.0.1: each connection goes to
    the first of ``ports`` that accepts it, and ends when either side does."""
    tasks: set[asyncio.Task[None]] = set()

    async def serve(down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        for port in ports:
            try:
                up_r, up_w = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                continue
        else:
            down_w.close()
            return
        try:
            await asyncio.gather(_pipe(down_r, up_w), _pipe(up_r, down_w))
        finally:  # cancelled at the end too: no socket left open
            up_w.close()
            down_w.close()

    def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(serve(r, w))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


async def said(run: NodeRun, key: str) -> Any:
    """The value of the next line the script prints, which must be ``key``'s."""
    assert run.proc.stdout is not None
    async with asyncio.timeout(20):
        line = await run.proc.stdout.readline()
    value = json.loads(line or b"null")
    assert isinstance(value, dict) and key in value, (key, line)
    return value[key]


def texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in message["parts"] if p["type"] == "text"]


@pytest.mark.parametrize("kind", ["ws", "http"])
async def test_a_reply_survives_the_replica_its_transport_was_on(
    redis_server: RedisServer, tmp_path: Path, kind: str
) -> None:
    async with replicas(2, redis_server.url, tmp_path, "draft_coalesce_s=0") as (a, b):
        async with httpx.AsyncClient(base_url=b.url) as http:
            assert (await http.post("/v1/transcripts", json={"id": "crash"})).status_code == 201
        agent = await Agent.start(b, "crash")  # the third connection, on B
        async with forwarder([a.port, b.port]) as port:
            url = f"{kind}://127.0.0.1:{port}/v1/ai/chat"
            args = (url, "crash", kind)
            async with node_script("node_ai_failover.mjs", *args, cwd=npm.PROJECT) as run:
                await agent.user_message()  # the send, through A
                await agent.write(REPLY[:5])  # up to "It is 18 "
                assert await said(run, "seen") == "It is 18 "
                a.kill()  # SIGKILL, in the middle of the reply
                cut = await said(run, "disconnected")
                assert await said(run, "resumed") is True  # on B, the reply still open
                await agent.write(REPLY[5:])
                await agent.commit(REPLY)
                end = await run.finish()
        async with httpx.AsyncClient(base_url=b.url) as http:
            r = await http.get("/v1/transcripts/crash/ui-messages")
            assert r.status_code == 200, r.text
            stored = r.json()["messages"]
        await agent.close()
    # The user saw the reply cut when A died: the partial reply, then the error.
    dropped = {"ws": "WebSocket chat network connection closed", "http": "terminated"}[kind]
    assert cut["status"] == "error" and dropped in cut["error"], cut
    assert [m["role"] for m in cut["messages"]] == ["user", "assistant"]
    assert texts(cut["messages"][1]) == ["It is 18 "]
    # The resume on B replaced it with the whole reply, nothing twice.
    assert end["status"] == "ready" and end["error"] is None, end
    assert [m["role"] for m in end["messages"]] == ["user", "assistant"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert end["messages"][0]["id"] == stored[0]["id"]
    reply = end["messages"][1]
    assert reply == {**folded(REPLY), "id": "reply-1"}
    assert reply["parts"] == stored[1]["parts"]
    assert texts(reply) == ["It is 18 °C in Paris."]
