"""POST /v1/transcripts/{id}/replies: a reply written from the event stream
the AI SDK itself makes (``createUIMessageStreamResponse``, run with ``ai``
from npm), streamed in pieces to a real server: subscribers see it live as a
draft with parts, it commits as the UIMessage ``readUIMessageStream`` makes
of the same chunks, and what ends a reply early (an abort, a bad chunk, a
reader's stop) ends it cleanly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

from protocol.drafts import DraftCopy
from protocol.wire import Ack, DraftFrame, Pong
from tests.server.live.test_draft_parts import REPLY, create, subscribed
from tests.server.web.test_ui_stream_sdk import sdk_reads
from tests.support.ai_sdk import run_ai_sdk
from tests.support.servers import running_server
from tests.support.wsclient import RawClient

CHUNKS = [chunk for batch in REPLY for chunk in batch]
SSE = {"content-type": "text/event-stream"}


def sdk_body(chunks: list[dict[str, Any]]) -> tuple[dict[str, str], bytes]:
    """The headers and body the AI SDK's own response makes of ``chunks``."""
    answer = run_ai_sdk("ui_stream_body.mjs", chunks)
    return answer["headers"], answer["body"].encode()


async def pieces(body: bytes, size: int = 37) -> AsyncIterator[bytes]:
    """The body in small pieces, as a network delivers it (cut anywhere)."""
    for at in range(0, len(body), size):
        yield body[at : at + size]


async def test_a_reply_posted_as_the_sdk_streams_it_is_seen_live_and_committed() -> None:
    headers, body = sdk_body(CHUNKS)
    assert headers["x-vercel-ai-ui-message-stream"] == "v1"
    [expected] = [a["prefixes"][-1] for a in sdk_reads([CHUNKS])]
    async with running_server(draft_coalesce_s=0) as srv:
        await create(srv, "t", {"role": "user", "content": "Weather in Paris?"})
        reader = await subscribed(srv, "t")
        await reader.recv()
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as http:
            r = await http.post(
                "/v1/transcripts/t/replies",
                params={"draftId": "d1"},
                content=pieces(body),
                headers={"content-type": headers["content-type"]},
            )
            assert r.status_code == 201, r.text
            answer = r.json()
            assert answer["draftId"] == "d1" and answer["revision"] == 2 and answer["count"] == 3
            ui = (await http.get("/v1/transcripts/t/ui-messages")).json()["messages"]
            assert ui[1] == expected and ui[1]["id"] == "reply-1"
        # The subscriber saw it live, as parts, then its final.
        copy = DraftCopy("d1", "assistant")
        frame: Any = None
        while not (isinstance(frame, DraftFrame) and frame.state == "final"):
            frame = await reader.recv()
            if isinstance(frame, DraftFrame) and frame.state == "open":
                copy.take(frame)
        assert copy.message is not None and copy.message["parts"] == expected["parts"]
        await reader.close()


async def test_an_abort_cancels_and_a_bad_chunk_is_refused_and_cancels() -> None:
    async with running_server(draft_coalesce_s=0) as srv:
        await create(srv, "t")
        reader = await subscribed(srv, "t")
        await reader.recv()
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as http:
            _, aborted = sdk_body([*CHUNKS[:5], {"type": "abort", "reason": "user left"}])
            r = await http.post(
                "/v1/transcripts/t/replies", params={"draftId": "a"}, content=aborted, headers=SSE
            )
            assert r.status_code == 200, r.text
            assert r.json() == {
                "transcriptId": "t",
                "draftId": "a",
                "cancelled": True,
                "reason": "user left",
            }
            bad = b'data: {"type":"text-start","id":"t"}\n\ndata: {"type":"text-delta","id":"x"'
            bad += b',"delta":"?"}\n\n'
            r = await http.post(
                "/v1/transcripts/t/replies", params={"draftId": "b"}, content=bad, headers=SSE
            )
            # One batch (one piece): refused whole, nothing opened.
            assert r.status_code == 400 and "chunk 1" in r.text
            r = await http.post(
                "/v1/transcripts/t/replies", content=b"data: not json\n\n", headers=SSE
            )
            assert r.status_code == 400 and "no chunk" in r.text
            r = await http.post("/v1/transcripts/t/replies", json={"messages": []})
            assert r.status_code == 415
            r = await http.post("/v1/transcripts/t/replies", content=b"", headers=SSE)
            assert r.status_code == 400
            assert (await http.get("/v1/transcripts/t")).json()["revision"] == 0
        # The draft that was opened was cancelled; the refused one never opened.
        await reader.send(op="ping", ref="end")
        frames: list[Any] = []
        while not frames or not isinstance(frames[-1], Pong):
            frames.append(await reader.recv())
        closes = [f for f in frames if isinstance(f, DraftFrame) and f.state != "open"]
        assert [(f.draft_id, f.state) for f in closes] == [("a", "cancelled")]
        assert {f.draft_id for f in frames if isinstance(f, DraftFrame)} == {"a"}
        await reader.close()


async def test_a_stop_ends_the_request_with_what_was_said_committed() -> None:
    _, body = sdk_body(CHUNKS)
    first, rest = body[: body.index(b"It is 18") + 20], body[body.index(b"It is 18") + 20 :]
    async with running_server(draft_coalesce_s=0) as srv:
        await create(srv, "t")
        stopped = asyncio.Event()

        async def slow_body() -> AsyncIterator[bytes]:
            yield first
            await stopped.wait()  # the model goes on after the stop
            yield rest

        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as http:
            posting = asyncio.create_task(
                http.post(
                    "/v1/transcripts/t/replies",
                    params={"draftId": "d1"},
                    content=slow_body(),
                    headers=SSE,
                )
            )
            # Once a reader sees the reply say "It is 18", a stop comes.
            reader = await subscribed(srv, "t")
            await reader.recv()
            copy = DraftCopy("d1", "assistant")
            while "It is 18" not in copy.text:
                frame = await reader.recv()
                if isinstance(frame, DraftFrame):
                    copy.take(frame)
            stopper = await RawClient.connect(srv.ws_url)
            await stopper.send(op="draft", transcriptId="t", draftId="d1", stop=True, ref="s")
            ack = await stopper.expect(Ack)
            stopped.set()
            r = await asyncio.wait_for(posting, 30)
            assert r.status_code == 200, r.text
            assert r.json() == {
                "transcriptId": "t",
                "draftId": "d1",
                "revision": ack.revision,
                "stopped": True,
            }
            snapshot = (await http.get("/v1/transcripts/t")).json()
            assert snapshot["revision"] == 1
            assert all(m["metadata"]["stopped"] for m in snapshot["messages"])
            await stopper.close()
            await reader.close()
