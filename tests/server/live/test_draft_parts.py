"""Replies with parts (issue 39, section 1): a draft written with AI SDK
``UIMessageChunk``s reaches JSON and MessagePack subscribers as frames whose
folded state is the writer's message, a late joiner gets it whole in one
``replay`` frame, a consumer of text alone still sees the reply's text, and
a batch of chunks is taken whole or refused whole with the setting named."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from protocol import codes
from protocol.drafts import DraftCopy
from protocol.ui_stream import UIMessageState
from protocol.wire import Ack, DraftFrame, ErrorFrame
from tests.server.live.test_drafts import create, next_draft, subscribed
from tests.support.servers import running_server
from tests.support.wsclient import RawClient

#: A reply of every kind of part, as ``streamText(...).toUIMessageStream()``
#: writes it, in the batches a writer sends: reasoning, a tool call streamed
#: then answered, one that failed, one denied its approval, text, a file,
#: sources, a data part replaced by id, metadata, two steps.
REPLY: list[list[dict[str, Any]]] = [
    [{"type": "start", "messageId": "reply-1", "messageMetadata": {"model": "m"}}],
    [{"type": "start-step"}, {"type": "reasoning-start", "id": "r"}],
    [{"type": "reasoning-delta", "id": "r", "delta": "The user wants "}],
    [{"type": "reasoning-delta", "id": "r", "delta": "the weather."}],
    [{"type": "reasoning-end", "id": "r"}],
    [{"type": "tool-input-start", "toolCallId": "c1", "toolName": "weather"}],
    [{"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"city": "Pa'}],
    [{"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": 'ris"}'}],
    [
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "weather",
            "input": {"city": "Paris"},
        }
    ],
    [{"type": "tool-output-available", "toolCallId": "c1", "output": {"celsius": 18}}],
    [{"type": "finish-step"}, {"type": "start-step"}, {"type": "text-start", "id": "t"}],
    [{"type": "text-delta", "id": "t", "delta": "It is 18 "}],
    [{"type": "text-delta", "id": "t", "delta": "°C in Paris."}],
    # A tool that failed, one that asked for approval and was denied.
    [
        {
            "type": "tool-input-available",
            "toolCallId": "c2",
            "toolName": "search",
            "input": {"q": "paris"},
        }
    ],
    [{"type": "tool-output-error", "toolCallId": "c2", "errorText": "rate limited"}],
    [{"type": "tool-input-available", "toolCallId": "c3", "toolName": "rm", "input": {"p": "/"}}],
    [{"type": "tool-approval-request", "approvalId": "a1", "toolCallId": "c3"}],
    [{"type": "tool-approval-response", "approvalId": "a1", "approved": False, "reason": "no"}],
    [{"type": "tool-output-denied", "toolCallId": "c3"}],
    [{"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,iVBORw0KGgo="}],
    [{"type": "source-document", "sourceId": "s2", "mediaType": "application/pdf", "title": "R"}],
    [{"type": "message-metadata", "messageMetadata": {"tokens": 42}}],
    [{"type": "source-url", "sourceId": "s", "url": "https://example.com/w"}],
    [{"type": "data-weather", "id": "d", "data": {"status": "loading"}}],
    [{"type": "data-weather", "id": "d", "data": {"status": "done"}}],
    [{"type": "text-end", "id": "t"}, {"type": "finish-step"}],
    [{"type": "finish", "finishReason": "stop"}],
]

EACH = {"draft_coalesce_s": 0}


def folded(batches: list[list[dict[str, Any]]]) -> dict[str, Any]:
    state = UIMessageState("d1")
    for batch in batches:
        state.apply_all(batch)
    return state.message()


async def write(w: RawClient, batches: list[list[dict[str, Any]]], **op: Any) -> None:
    for batch in batches:
        await w.send(op="draft", transcriptId="t", draftId="d1", chunks=batch, **op)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
async def test_a_reply_with_parts_reaches_every_subscriber_as_the_sdk_folds_it(
    binary: bool,
) -> None:
    async with running_server(**EACH) as srv:
        await create(srv, "t")
        reader = await RawClient.connect(srv.ws_url, binary=binary)
        await reader.send(op="subscribe", transcriptId="t")
        await reader.recv()  # the baseline
        writer = await RawClient.connect(srv.ws_url)
        await write(writer, REPLY)
        copy = DraftCopy("d1", "assistant")
        # Every batch that changes what the SDK shows is one update.
        while copy.n < len(REPLY) - 1:
            frame = await next_draft(reader)
            assert frame.chunks is not None and frame.replay is None
            assert copy.take(frame)
        assert copy.message == folded(REPLY)
        assert copy.text == "It is 18 °C in Paris."  # what a text consumer shows
        assert not copy.ui_behind

        # A late joiner: the whole reply in one frame, as compacted chunks.
        late = await subscribed(srv, "t")
        await late.recv()
        replay = await next_draft(late)
        assert replay.replay is not None and replay.text == "It is 18 °C in Paris."
        assert len(replay.replay) < sum(len(b) for b in REPLY)
        joined = DraftCopy("d1", "assistant")
        assert joined.take(replay)
        assert joined.message == folded(REPLY)
        for client in (reader, writer, late):
            await client.close()


async def test_a_late_joiner_in_the_middle_of_a_tool_input_sees_the_input_so_far() -> None:
    async with running_server(**EACH) as srv:
        await create(srv, "t")
        writer = await RawClient.connect(srv.ws_url)
        await write(writer, REPLY[:7], ref="r")
        for _ in REPLY[:7]:
            await writer.expect(Ack)
        late = await subscribed(srv, "t")
        await late.recv()
        replay = await next_draft(late)
        copy = DraftCopy("d1", "assistant")
        copy.take(replay)
        assert copy.message is not None
        [tool] = [p for p in copy.message["parts"] if p["type"] == "tool-weather"]  # type: ignore[union-attr, index]
        assert tool["state"] == "input-streaming" and tool["input"] == {"city": "Pa"}
        # ...and goes on with the live chunks.
        await write(writer, REPLY[7:9])
        while copy.n < replay.n + 2:
            copy.take(await next_draft(late))
        assert copy.message == folded(REPLY[:9])
        await writer.close()
        await late.close()


async def test_chunks_that_do_not_fit_the_reply_are_refused_whole() -> None:
    async with running_server(**EACH, max_draft_parts=4) as srv:
        await create(srv, "t")
        reader = await subscribed(srv, "t")
        await reader.recv()
        writer = await RawClient.connect(srv.ws_url)
        await write(writer, [[{"type": "text-start", "id": "t"}]], ref="open")
        await writer.expect(Ack)
        first = await next_draft(reader)
        # A good chunk then a delta for a part never started: nothing applied.
        bad = [
            {"type": "text-delta", "id": "t", "delta": "kept?"},
            {"type": "text-delta", "id": "nope", "delta": "x"},
        ]
        await write(writer, [bad], ref="bad")
        error = await writer.expect(ErrorFrame)
        assert error.code == codes.INVALID_FRAME and "chunk 1" in error.message
        # Past max_draft_parts: refused with the setting named.
        many = [{"type": "source-url", "sourceId": f"s{i}", "url": "https://e/"} for i in range(4)]
        await write(writer, [many], ref="many")
        error = await writer.expect(ErrorFrame)
        assert error.code == codes.DRAFT_TOO_LARGE and "max_draft_parts" in error.message
        # A draft of parts takes no delta, and a text draft no chunks.
        await writer.send(op="draft", transcriptId="t", draftId="d1", delta="x", ref="mix")
        assert (await writer.expect(ErrorFrame)).code == codes.INVALID_FRAME
        await writer.send(op="draft", transcriptId="t", draftId="d2", delta="text", ref="t2")
        await writer.expect(Ack)
        await writer.send(
            op="draft", transcriptId="t", draftId="d2", chunks=[{"type": "start"}], ref="m2"
        )
        assert (await writer.expect(ErrorFrame)).code == codes.INVALID_FRAME
        # The reply is as it was: the next good chunk is update 2.
        await write(writer, [[{"type": "text-delta", "id": "t", "delta": "ok"}]])
        frames = [await next_draft(reader), await next_draft(reader)]
        update = next(f for f in frames if f.draft_id == "d1")
        assert isinstance(update, DraftFrame) and update.n == first.n + 1
        assert update.delta == "ok"
        await writer.close()
        await reader.close()


async def test_a_reply_past_max_message_bytes_is_refused_with_the_setting_named() -> None:
    async with running_server(**EACH, max_message_bytes=2000) as srv:
        await create(srv, "t")
        writer = await RawClient.connect(srv.ws_url)
        await write(writer, [[{"type": "text-start", "id": "t"}]], ref="open")
        await writer.expect(Ack)
        big = [{"type": "text-delta", "id": "t", "delta": "x" * 3000}]
        await write(writer, [big], ref="big")
        error = await writer.expect(ErrorFrame)
        assert error.code == codes.DRAFT_TOO_LARGE and "max_message_bytes" in error.message
        await writer.close()


async def test_the_reply_commits_as_the_ui_message_it_was_streamed_as() -> None:
    """The writer commits what it streamed (``append`` with ``format: "ui"``
    and the draft's id): the stored messages carry the reply's parts, and
    ``GET .../ui-messages`` gives the very UIMessage back (same id, parts in
    their final state); ``/chat`` gives a model the tool call and its result."""
    async with running_server(**EACH) as srv:
        await create(srv, "t", {"role": "user", "content": "Weather in Paris?"})
        reader = await subscribed(srv, "t")
        await reader.recv()
        writer = await RawClient.connect(srv.ws_url)
        await write(writer, REPLY)
        reply = folded(REPLY)
        await writer.send(
            op="append", transcriptId="t", draftId="d1", format="ui", messages=[reply], ref="c"
        )
        ack = await writer.expect(Ack)
        assert ack.count == 3  # the tool call's step, its result, the answer's step
        async with httpx.AsyncClient(base_url=srv.url) as http:
            ui = (await http.get("/v1/transcripts/t/ui-messages")).json()["messages"]
            assert ui[1] == reply and ui[1]["id"] == "reply-1"
            chat = (await http.get("/v1/transcripts/t/chat")).json()["messages"]
            assert [m["role"] for m in chat] == ["user", "assistant", "tool", "assistant"]
            assert chat[1]["tool_calls"][0]["function"]["name"] == "weather"
            # The same over HTTP: a UIMessage appended with ?format=ui.
            user = {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "Thanks!"}]}
            r = await http.post(
                "/v1/transcripts/t/messages", params={"format": "ui"}, json={"messages": [user]}
            )
            assert r.status_code == 201, r.text
            assert (await http.get("/v1/transcripts/t/ui-messages?tail=1")).json()["messages"] == [
                user
            ]
            r = await http.post(
                "/v1/transcripts/t/messages",
                params={"format": "ui"},
                json={"messages": [{"id": "x", "role": "tool", "parts": []}]},
            )
            assert r.status_code == 422 and "messages[0]" in r.text
        await writer.close()
        await reader.close()


@pytest.mark.parametrize("parts", [False, True], ids=["text", "parts"])
async def test_a_stop_commits_what_was_said_once_and_tells_the_writer(parts: bool) -> None:
    async with running_server(**EACH) as srv:
        await create(srv, "t", {"role": "user", "content": "Tell me a story"})
        reader = await subscribed(srv, "t")
        await reader.recv()
        writer = await RawClient.connect(srv.ws_url)
        if parts:
            await write(writer, REPLY[:11])  # reasoning, a tool call, a step, a text begun
            await write(writer, REPLY[11:12], ref="w")  # "It is 18 "
            said = folded(REPLY[:12])
        else:
            await writer.send(
                op="draft", transcriptId="t", draftId="d1", delta="Once upon", ref="w"
            )
        await writer.expect(Ack)
        stopper = await RawClient.connect(srv.ws_url)
        await stopper.send(op="draft", transcriptId="t", draftId="d1", stop=True, ref="stop")
        told = await writer.expect(ErrorFrame)  # the writer learns at once, unasked
        assert told.code == codes.DRAFT_CLOSED and "stopped" in told.message
        ack = await stopper.expect(Ack)
        assert ack.revision == 2
        # A second stop and a late token change nothing.
        await stopper.send(op="draft", transcriptId="t", draftId="d1", stop=True, ref="again")
        assert (await stopper.expect(ErrorFrame)).code == codes.DRAFT_CLOSED
        late: dict[str, Any] = {"chunks": REPLY[12]} if parts else {"delta": " a time"}
        await writer.send(op="draft", transcriptId="t", draftId="d1", ref="late", **late)
        assert (await writer.expect(ErrorFrame)).code == codes.DRAFT_CLOSED
        async with httpx.AsyncClient(base_url=srv.url) as http:
            body = (await http.get("/v1/transcripts/t")).json()
            assert body["revision"] == 2  # committed once
            stored = body["messages"][1:]
            assert all(m["metadata"]["stopped"] is True for m in stored)
            if parts:
                ui = (await http.get("/v1/transcripts/t/ui-messages")).json()["messages"]
                assert ui[1]["id"] == "reply-1" and ui[1]["metadata"]["stopped"] is True
                assert ui[1]["parts"] == said["parts"]
            else:
                assert stored == [
                    {"role": "assistant", "content": "Once upon", "metadata": {"stopped": True}}
                ]
        for client in (reader, writer, stopper):
            await client.close()


async def test_a_writers_commit_after_a_stop_is_refused_and_nothing_is_stored_twice() -> None:
    """The writer's commit crossed the stop (it had not heard of it yet): the
    stop committed what the draft held, once; the commit is draft-closed with
    the stop's revision, and stores nothing."""
    async with running_server(**EACH) as srv:
        await create(srv, "t")
        writer = await RawClient.connect(srv.ws_url)
        await writer.send(op="draft", transcriptId="t", draftId="d1", delta="partial", ref="w")
        await writer.expect(Ack)
        stopper = await RawClient.connect(srv.ws_url)
        await stopper.send(op="draft", transcriptId="t", draftId="d1", stop=True, ref="s")
        stop = await stopper.expect(Ack)
        told = await writer.expect(ErrorFrame)
        assert told.revision == stop.revision
        await writer.send(
            op="append",
            transcriptId="t",
            draftId="d1",
            messages=[{"role": "assistant", "content": "partial and the rest"}],
            ref="commit",
        )
        refused = await writer.expect(ErrorFrame)
        assert refused.code == codes.DRAFT_CLOSED and refused.revision == stop.revision
        async with httpx.AsyncClient(base_url=srv.url) as http:
            body = (await http.get("/v1/transcripts/t")).json()
        assert body["revision"] == 1
        assert [m["content"] for m in body["messages"]] == ["partial"]
        await writer.close()
        await stopper.close()
