"""Many ``/v1/ai/chat`` readers of one reply (what ``tsync bench aichat``
loads): each update's chunks are encoded and its draft frame decoded once for
all of them, so a reader that joined late (its subscription's ``seq`` differs
from the first's) must still get its own ``requestId`` and its own
``sequence`` from 0 without a gap, and every reader the same reply, equal to
the stored message."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import websockets

from protocol.ui_stream import UIMessageState
from tests.support.servers import RunningServer, running_server
from tests.support.wsclient import RawClient

OPENING = [
    {"type": "start", "messageId": "reply-1"},
    {"type": "start-step"},
    {"type": "text-start", "id": "t"},
]
WORDS = [f"word{i} " for i in range(8)]


class Reader:
    """A ``/v1/ai/chat`` connection that resumed the chat."""

    def __init__(self, ws: websockets.ClientConnection, request_id: str) -> None:
        self.ws = ws
        self.request_id = request_id
        self.frames: list[dict[str, Any]] = []

    @classmethod
    async def resume(cls, srv: RunningServer, chat: str, request_id: str) -> Reader:
        url = srv.ws_url.removesuffix("/v1/ws") + "/v1/ai/chat"
        ws = await websockets.connect(url)
        resume = {"type": "resume", "requestId": request_id, "id": chat, "headers": {}, "body": {}}
        await ws.send(json.dumps(resume))
        return cls(ws, request_id)

    async def read_until(self, kind: str) -> None:
        while not self.frames or self.frames[-1]["type"] != kind:
            self.frames.append(json.loads(await asyncio.wait_for(self.ws.recv(), 10)))

    async def read_chunks(self, count: int) -> None:
        while len(self.chunks()) < count:
            self.frames.append(json.loads(await asyncio.wait_for(self.ws.recv(), 10)))

    def chunks(self) -> list[dict[str, Any]]:
        return [f["chunk"] for f in self.frames if f["type"] == "chunk"]


async def test_readers_that_joined_at_different_times_each_get_the_whole_reply_once() -> None:
    async with running_server(draft_coalesce_s=0) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as http:
            r = await http.post("/v1/transcripts", json={"id": "many-1"})
            assert r.status_code == 201, r.text
        agent = await RawClient.connect(srv.ws_url)
        subscriber = await RawClient.connect(srv.ws_url)  # a /v1/ws reader beside them
        await subscriber.send(op="subscribe", transcriptId="many-1")
        await subscriber.recv()  # the baseline
        await agent.send(op="draft", transcriptId="many-1", draftId="d1", chunks=OPENING)

        async def write(words: list[str]) -> None:
            for word in words:
                chunk = {"type": "text-delta", "id": "t", "delta": word}
                await agent.send(op="draft", transcriptId="many-1", draftId="d1", chunks=[chunk])

        first = await Reader.resume(srv, "many-1", "early")
        await first.read_until("chunk")  # joined
        await write(WORDS[:4])
        await first.read_chunks(len(OPENING) + 4)  # the late reader joins after these
        second = await Reader.resume(srv, "many-1", "late")
        await second.read_until("chunk")
        await write(WORDS[4:])
        closing = [{"type": "text-end", "id": "t"}, {"type": "finish-step"}, {"type": "finish"}]
        await agent.send(op="draft", transcriptId="many-1", draftId="d1", chunks=closing)
        state = UIMessageState("d1")
        state.apply_all([*OPENING, *({"type": "text-delta", "id": "t", "delta": w} for w in WORDS)])
        state.apply_all(closing)
        await agent.send(
            op="append",
            transcriptId="many-1",
            draftId="d1",
            format="ui",
            messages=[state.message()],
            ref="commit",
        )
        await agent.recv()
        for reader in (first, second):
            await reader.read_until("end")
            await reader.ws.close()
        await agent.close()
        await subscriber.close()

    full = "".join(WORDS)
    for reader in (first, second):
        chunk_frames = [f for f in reader.frames if f["type"] == "chunk"]
        assert {f["requestId"] for f in reader.frames} == {reader.request_id}
        assert [f["sequence"] for f in chunk_frames] == list(range(len(chunk_frames)))
        chunks = reader.chunks()
        assert chunks[0] == {"type": "start", "messageId": "reply-1"}
        text = "".join(c.get("delta", "") for c in chunks if c["type"] == "text-delta")
        assert text == full, reader.request_id
        assert chunks[-1] == {"type": "finish"}
