"""``client.stream_reply`` (issue 39, section 3) against a real server: the
recorded streams of the ``openai`` and ``anthropic`` SDKs (their own types,
no network) become a draft with parts that a subscriber sees grow live (its
``DraftCopy.message``), committed as the UIMessage the writer folded:
``GET .../ui-messages`` gives it back with its reasoning, text and tool
calls (input parsed) and ``/chat`` gives a model the calls. A stop from
another connection ends the helper with the partial reply committed; a
stream that raises cancels the draft."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import client_py
from protocol import codes
from protocol.drafts import DraftCopy
from protocol.ui_stream import UIMessageState
from protocol.wire import Ack, DraftFrame, ErrorFrame, Increment
from tests.client.test_ui_chunks import (
    ANTHROPIC_REPLY,
    ANTHROPIC_STREAM,
    OPENAI_REPLY,
    OPENAI_STREAM,
    oa,
)
from tests.support.servers import running_server
from tests.support.wsclient import RawClient

TIMEOUT = 10

#: Where each recorded stream is in the middle of its first tool call's input.
MID_TOOL_INPUT = {"openai": 9, "anthropic": 15}


async def paced(items: list[Any], pause_after: int, go_on: asyncio.Event) -> AsyncIterator[Any]:
    """The recorded stream as a model gives it, waiting after item
    ``pause_after`` until the reader has seen the reply so far."""
    for i, item in enumerate(items):
        yield item
        if i + 1 == pause_after:
            await asyncio.wait_for(go_on.wait(), TIMEOUT)


async def read_until(reader: RawClient, copy: DraftCopy, done: Any) -> None:
    while not done(copy):
        frame = await reader.expect(DraftFrame, TIMEOUT)
        assert frame.draft_id == copy.draft_id
        copy.take(frame)


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_a_models_stream_is_a_live_reply_with_parts_then_its_ui_message(sdk: str) -> None:
    stream, reply = (
        (OPENAI_STREAM, OPENAI_REPLY) if sdk == "openai" else (ANTHROPIC_STREAM, ANTHROPIC_REPLY)
    )
    async with (
        running_server(draft_coalesce_s=0) as srv,
        client_py.connect(srv.ws_url) as writer,
        await RawClient.connect(srv.ws_url) as reader,
    ):
        await writer.create("t", [{"role": "user", "content": "Weather in Oslo?"}])
        await reader.send(op="subscribe", transcriptId="t")
        await reader.recv()  # the baseline
        go_on = asyncio.Event()
        streaming = asyncio.create_task(
            writer.stream_reply("t", paced(stream, MID_TOOL_INPUT[sdk], go_on), draft_id="d1")
        )

        # Live: the reasoning and the text are there, the call's input grows.
        def mid_input(copy: DraftCopy) -> bool:
            parts = (copy.message or {}).get("parts") or []
            assert isinstance(parts, list)
            return any(p.get("state") == "input-streaming" and p.get("input") for p in parts)

        copy = DraftCopy("d1", "assistant")
        await read_until(reader, copy, mid_input)
        assert copy.message is not None and copy.message["id"] == reply["id"]
        [tool] = [p for p in copy.message["parts"] if p.get("toolCallId")][:1]  # type: ignore[union-attr]
        assert tool["input"] in ({"city": ""}, {"city": "Os"}, {"city": "Oslo"})
        kinds = [p["type"] for p in copy.message["parts"]]  # type: ignore[union-attr, index]
        assert "reasoning" in kinds and "text" in kinds
        go_on.set()

        # The whole reply, as the writer folded it, then its commit.
        await read_until(reader, copy, lambda c: c.message == reply)
        receipt = await asyncio.wait_for(streaming, TIMEOUT)
        assert not receipt.stopped and receipt.revision == 2
        # The increment, then the draft's final right behind it.
        increment = await reader.expect(Increment, TIMEOUT)
        assert increment.event.revision == 2
        final = await reader.expect(DraftFrame, TIMEOUT)
        assert final.state == "final" and final.revision == 2

        async with httpx.AsyncClient(base_url=srv.url) as http:
            ui = (await http.get("/v1/transcripts/t/ui-messages")).json()["messages"]
            assert ui[1] == reply
            chat = (await http.get("/v1/transcripts/t/chat")).json()["messages"]
            assert [m["role"] for m in chat] == ["user", "assistant"]
            calls = chat[1]["tool_calls"]
            assert calls[0]["id"] == reply["parts"][-1 if sdk == "anthropic" else -2]["toolCallId"]  # type: ignore[index]
            assert calls[0]["function"]["name"] == "weather"
            assert calls[0]["function"]["arguments"].replace(" ", "") == '{"city":"Oslo"}'
            assert "Checking Oslo." in str(chat[1]["content"])


async def test_a_stop_from_another_connection_commits_the_partial_reply() -> None:
    async with (
        running_server(draft_coalesce_s=0) as srv,
        client_py.connect(srv.ws_url) as writer,
    ):
        await writer.create("t", [{"role": "user", "content": "Count to a million"}])
        sent = asyncio.Event()
        read = 0

        async def model() -> AsyncIterator[Any]:
            """A model that never ends on its own."""
            nonlocal read
            from openai.types.chat.chat_completion_chunk import ChoiceDelta

            for n in range(1_000_000):
                read += 1
                yield oa(ChoiceDelta(content=f"{n} "))
                if n == 2:
                    sent.set()
                await asyncio.sleep(0.01)  # a model's pace, not synchronisation

        streaming = asyncio.create_task(writer.stream_reply("t", model(), draft_id="d1"))
        await asyncio.wait_for(sent.wait(), TIMEOUT)
        async with await RawClient.connect(srv.ws_url) as stopper:
            await stopper.send(op="draft", transcriptId="t", draftId="d1", stop=True, ref="s")
            ack = await stopper.expect(Ack)
            receipt = await asyncio.wait_for(streaming, TIMEOUT)
            assert receipt.stopped and receipt.revision == ack.revision == 2
            assert read < 20  # it stopped reading the model at once
            await stopper.send(op="draft", transcriptId="t", draftId="d1", stop=True, ref="2")
            assert (await stopper.expect(ErrorFrame)).code == codes.DRAFT_CLOSED
        async with httpx.AsyncClient(base_url=srv.url) as http:
            ui = (await http.get("/v1/transcripts/t/ui-messages")).json()["messages"]
        [text] = [p for p in ui[1]["parts"] if p["type"] == "text"]
        assert text["text"].startswith("0 1 2 ")
        snapshot = await writer.get("t")
        assert len(snapshot.messages) == 2


async def test_a_stream_that_raises_cancels_the_draft() -> None:
    async with (
        running_server(draft_coalesce_s=0) as srv,
        client_py.connect(srv.ws_url) as writer,
        await RawClient.connect(srv.ws_url) as reader,
    ):
        await writer.create("t")
        await reader.send(op="subscribe", transcriptId="t")
        await reader.recv()

        async def model() -> AsyncIterator[Any]:
            for item in ANTHROPIC_STREAM[:4]:
                yield item
            raise RuntimeError("overloaded")

        with pytest.raises(RuntimeError, match="overloaded"):
            await writer.stream_reply("t", model(), draft_id="d1")
        frame = await reader.expect(DraftFrame, TIMEOUT)
        while frame.state == "open":
            frame = await reader.expect(DraftFrame, TIMEOUT)
        assert frame.state == "cancelled"
        assert (await writer.get("t")).revision == 0


async def test_ui_message_chunks_and_a_plain_list_are_taken_too() -> None:
    chunks = [
        {"type": "start", "messageId": "m1"},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "Hello"},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop"},
    ]
    async with running_server() as srv, client_py.connect(srv.ws_url) as writer:
        await writer.create("t")
        receipt = await writer.stream_reply("t", chunks, fields={"metadata": {"model": "m"}})
        assert receipt.revision == 1
        async with httpx.AsyncClient(base_url=srv.url) as http:
            ui = (await http.get("/v1/transcripts/t/ui-messages")).json()["messages"]
        assert ui == [
            {
                "id": "m1",
                "role": "assistant",
                "metadata": {"model": "m"},
                "parts": [{"type": "text", "text": "Hello", "state": "done"}],
            }
        ]


HELLO = [
    {"type": "start", "messageId": "m1"},
    {"type": "text-start", "id": "t"},
    {"type": "text-delta", "id": "t", "delta": "Hello"},
]


async def test_a_reconnect_with_no_chunk_in_flight_goes_on_with_the_reply() -> None:
    """The server keeps the draft: what it answered (``sync``) is not lost."""
    async with (
        running_server() as srv,
        client_py.connect(srv.ws_url, backoff_min=0.01, backoff_max=0.05) as writer,
    ):
        await writer.create("t")
        async with writer.draft("t", draft_id="r", parts=True) as d:
            await d.write_chunks(HELLO)
            await d.sync()
            ws = writer._ws
            assert ws is not None
            await ws.close()
            await d.sync()  # answered on the next connection
            assert writer.counters.reconnects == 1
            await d.write_chunks([{"type": "text-delta", "id": "t", "delta": ", world"}])
            await d.write_chunks([{"type": "text-end", "id": "t"}])
            await d.commit()
        async with httpx.AsyncClient(base_url=srv.url) as http:
            ui = (await http.get("/v1/transcripts/t/ui-messages")).json()["messages"]
        assert ui[0]["parts"] == [{"type": "text", "text": "Hello, world", "state": "done"}]


async def test_a_reconnect_with_chunks_in_flight_cancels_the_reply() -> None:
    """Chunks sent into a connection that dropped may be lost, and a reply
    with parts cannot be sent again whole: the writer cancels the draft (no
    reader sees a reply with a hole) and says so with ``Disconnected``."""
    async with (
        running_server() as srv,
        client_py.connect(srv.ws_url, backoff_min=0.01, backoff_max=0.05) as writer,
        await RawClient.connect(srv.ws_url) as reader,
    ):
        await writer.create("t")
        await reader.send(op="subscribe", transcriptId="t")
        await reader.recv()
        async with writer.draft("t", draft_id="r", parts=True) as d:
            await d.write_chunks(HELLO)
            ws = writer._ws
            assert ws is not None
            await ws.close()
            with pytest.raises(client_py.Disconnected):
                await d.sync()
            assert d.state == "failed"
            with pytest.raises(client_py.Disconnected):
                await d.commit()
        frame = await reader.expect(DraftFrame, TIMEOUT)
        while frame.state == "open":
            frame = await reader.expect(DraftFrame, TIMEOUT)
        assert frame.state == "cancelled"
        assert (await writer.get("t")).revision == 0


async def test_what_arrived_while_an_op_was_sent_goes_in_one_op() -> None:
    """A stream whose items are all there at once is one draft op (no ref),
    not one per item; each op's chunks are one update for a subscriber."""
    async with (
        running_server(draft_coalesce_s=0) as srv,
        client_py.connect(srv.ws_url) as writer,
        await RawClient.connect(srv.ws_url) as reader,
    ):
        await writer.create("t")
        await reader.send(op="subscribe", transcriptId="t")
        await reader.recv()

        async def at_once() -> AsyncIterator[Any]:
            for item in OPENAI_STREAM:
                yield item

        await writer.stream_reply("t", at_once(), draft_id="d1")
        updates: list[DraftFrame] = []
        while True:
            frame = await reader.recv(TIMEOUT)
            if isinstance(frame, DraftFrame):
                if frame.state != "open":
                    break
                if frame.chunks:
                    updates.append(frame)
        assert len(updates) == 1
        state = UIMessageState("d1")
        state.apply_all(updates[0].chunks or [])
        assert state.message() == OPENAI_REPLY
