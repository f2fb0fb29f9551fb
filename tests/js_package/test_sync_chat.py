"""``syncChat`` (client_js/ai_chat.js, the packed package) on two of the AI
SDK's own ``Chat``s in Node, on each transport: a chat that does not exist
yet is followed from the send that creates it, the Chat that sent nothing
shows the other's message and the reply growing (with its parts), and its ``stopReply()``
(Stop in a tab with no request of its own: over HTTP the only Stop that
reaches the reply) tells the agent; both Chats end equal to the transcript."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol import codes
from protocol.wire import Baseline, ErrorFrame, Increment
from tests.js_package import npm
from tests.support.node import node_script
from tests.support.servers import RunningServer, running_server
from tests.support.waiting import until
from tests.support.wsclient import RawClient

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def installed(tmp_path_factory: pytest.TempPathFactory) -> None:
    npm.tools()
    npm.install(npm.pack(tmp_path_factory.mktemp("pack")))


async def agent_sees_the_user_message(srv: RunningServer, tid: str) -> RawClient:
    """Subscribe once the send created the chat; return when its message is in."""
    await until(lambda: srv.hub.copy_of(tid) is not None, timeout=15)
    reader = await RawClient.connect(srv.ws_url)
    await reader.send(op="subscribe", transcriptId=tid)
    frame = await reader.recv()
    assert isinstance(frame, Baseline), frame
    if not frame.snapshot.messages:
        while not isinstance(await reader.recv(timeout=15), Increment):
            pass
    return reader


@pytest.mark.parametrize("transport", ["websocket", "http"])
async def test_a_chat_that_sent_nothing_follows_the_turn_and_its_stop_stops_it(
    transport: str,
) -> None:
    tid = f"sync-{transport}"
    async with running_server(draft_coalesce_s=0) as srv:
        args = (srv.url, tid, transport)
        async with node_script("node_sync_chat.mjs", *args, cwd=npm.PROJECT) as run:
            reader = await agent_sees_the_user_message(srv, tid)
            writer = await RawClient.connect(srv.ws_url)
            for batch in (
                [{"type": "start", "messageId": "reply-rome"}],
                [{"type": "start-step"}, {"type": "reasoning-start", "id": "r"}],
                [{"type": "reasoning-delta", "id": "r", "delta": "Rome, in Italy."}],
                [{"type": "reasoning-end", "id": "r"}, {"type": "text-start", "id": "t"}],
                [{"type": "text-delta", "id": "t", "delta": "Rome is "}],
            ):
                await writer.send(op="draft", transcriptId=tid, draftId="d1", chunks=batch)
            told: ErrorFrame | None = None
            for _ in range(1000):  # the agent talks until it is told to stop
                delta = [{"type": "text-delta", "id": "t", "delta": "sunny "}]
                await writer.send(op="draft", transcriptId=tid, draftId="d1", chunks=delta)
                try:
                    frame = await writer.recv(timeout=0.02)
                except TimeoutError:
                    continue
                if isinstance(frame, ErrorFrame):
                    told = frame
                    break
            seen: Any = await run.finish()
            await writer.close()
            await reader.close()
    assert told is not None and told.code == codes.DRAFT_CLOSED, told
    assert seen["sawGrowing"]["user"] == "And in Rome?"
    assert seen["sawGrowing"]["id"] == "reply-rome"
    assert seen["sawGrowing"]["reply"].startswith("Rome is")
    stored = seen["stored"]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[1]["id"] == "reply-rome"
    # The reply with its parts, not its text alone.
    assert [p["type"] for p in stored[1]["parts"]] == ["step-start", "reasoning", "text"]
    text = "".join(p["text"] for p in stored[1]["parts"] if p["type"] == "text")
    assert text.startswith("Rome is ")
    assert seen["a"] == stored and seen["b"] == stored
    assert seen["statuses"][-1] == "ready"


@pytest.mark.parametrize("transport", ["websocket", "http"])
async def test_a_reply_written_as_text_alone_shows_once_in_both_chats(transport: str) -> None:
    """Its draft's id names it while it is written (the transports' messageId);
    committed, the transcript names it msg-<index>: no Chat holds both."""
    tid = f"sync-text-{transport}"
    async with running_server(draft_coalesce_s=0) as srv:
        args = (srv.url, tid, transport, "text")
        async with node_script("node_sync_chat.mjs", *args, cwd=npm.PROJECT) as run:
            reader = await agent_sees_the_user_message(srv, tid)
            writer = await RawClient.connect(srv.ws_url)
            await writer.send(op="draft", transcriptId=tid, draftId="d1", delta="Rome is ")
            assert run.proc.stdout is not None
            growing = json.loads(await run.proc.stdout.readline())["growing"]  # seen in B
            for word in ("sunny", " today."):
                await writer.send(op="draft", transcriptId=tid, draftId="d1", delta=word)
            reply = {"role": "assistant", "content": "Rome is sunny today."}
            await writer.send(op="append", transcriptId=tid, draftId="d1", messages=[reply])
            seen: Any = await run.finish()
            await writer.close()
            await reader.close()
    assert growing == {"user": "And in Rome?", "reply": "Rome is ", "id": "d1"}
    stored = seen["stored"]
    assert [(m["id"], m["role"]) for m in stored] == [
        (stored[0]["id"], "user"),
        ("msg-1", "assistant"),
    ]
    assert seen["a"] == stored and seen["b"] == stored
    assert seen["most"] == {"a": 1, "b": 1}
