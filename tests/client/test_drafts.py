"""Drafts through the Python client against a real in-process server: a
writer's draft grows in another client's mirror and is swapped for its
message in one step; cancel on exceptions and on leaving the block; limits;
the whole text again after a reconnect."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

import client_py
from client_py import (
    ClientError,
    DraftClosed,
    DraftEvent,
    DraftUpdated,
    MirrorUpdate,
    ServerError,
    chunk_text,
)
from protocol.types import MessagesAppended, TranscriptEvent
from tests.support.servers import running_server

TIMEOUT = 10


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def next_draft_event(
    stream: client_py.EventStream[MirrorUpdate | DraftEvent],
) -> MirrorUpdate | DraftEvent:
    return await asyncio.wait_for(anext(stream), TIMEOUT)


async def follow_draft(
    stream: client_py.EventStream[MirrorUpdate | DraftEvent], draft_id: str
) -> tuple[list[str], list[MirrorUpdate | DraftEvent]]:
    """Read the stream until ``draft_id`` closes: every text it showed, and
    every update from the draft's first one on."""
    texts: list[str] = []
    seen: list[MirrorUpdate | DraftEvent] = []
    text = ""
    while True:
        update = await next_draft_event(stream)
        if isinstance(update, DraftUpdated | DraftClosed) and update.draft_id != draft_id:
            continue
        if not seen and not isinstance(update, DraftUpdated):
            continue
        seen.append(update)
        if isinstance(update, DraftUpdated):
            text = update.text if update.text is not None else text + (update.delta or "")
            texts.append(text)
        elif isinstance(update, DraftClosed):
            return texts, seen


async def test_a_streamed_draft_grows_in_a_mirror_then_becomes_its_message() -> None:
    async with (
        running_server() as srv,
        client_py.connect(srv.ws_url) as writer,
        client_py.connect(srv.ws_url) as reader,
    ):
        await writer.create("d1", [user("tell me")])
        mirror = await reader.subscribe("d1")
        stream = mirror.events(drafts=True)
        tokens = ["Once", " upon", " a", " time", "."]

        async def chunks() -> AsyncIterator[str]:
            for token in tokens:
                yield token

        ack = await writer.stream("d1", chunks(), draft_id="answer-1")
        assert (ack.revision, ack.start, ack.count) == (2, 1, 1)
        texts, seen = await follow_draft(stream, "answer-1")
        # Every text the reader showed is a prefix state of the writer's text.
        assert texts and texts[-1] == "Once upon a time."
        assert all("".join(tokens).startswith(t) for t in texts)
        # The message came right before the final close: never both, never neither.
        event, closed = seen[-2], seen[-1]
        assert isinstance(event, TranscriptEvent) and isinstance(event.change, MessagesAppended)
        assert isinstance(closed, DraftClosed)
        assert (closed.state, closed.revision, closed.text) == ("final", 2, "Once upon a time.")
        assert event.revision == 2
        assert mirror.messages[-1].content == "Once upon a time."
        assert mirror.messages[-1].role == "assistant"
        assert mirror.drafts == {}


async def test_openai_style_chunks_and_message_fields() -> None:
    chunks: list[Any] = [
        {"choices": [{"delta": {"role": "assistant"}}]},
        {"choices": [{"delta": {"content": "Hel"}}]},
        SimpleNamespace(choices=[SimpleNamespace(delta=SimpleNamespace(content="lo"))]),
        {"choices": [{"delta": {"content": None}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"total_tokens": 3}},
    ]
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        await client.create("d2")
        ack = await client.stream("d2", chunks, fields={"name": "bot"})
        snapshot = await client.get("d2")
        assert ack.revision == 1
        assert snapshot.messages[0].content == "Hello"
        assert snapshot.messages[0].name == "bot"


def test_chunk_text_is_duck_typed() -> None:
    assert chunk_text("x") == "x"
    assert chunk_text({"choices": [{"delta": {"content": "y"}}]}) == "y"
    assert chunk_text({"choices": [{"delta": {}}]}) is None
    obj = SimpleNamespace(choices=[SimpleNamespace(delta=SimpleNamespace(content="z"))])
    assert chunk_text(obj) == "z"
    with pytest.raises(TypeError):
        chunk_text(42)
    with pytest.raises(TypeError):
        chunk_text({"choices": [{"delta": {"content": 3}}]})


async def test_a_draft_is_cancelled_on_an_exception_and_without_a_commit() -> None:
    async with (
        running_server() as srv,
        client_py.connect(srv.ws_url) as writer,
        client_py.connect(srv.ws_url) as reader,
    ):
        await writer.create("d3")
        mirror = await reader.subscribe("d3")
        stream = mirror.events(drafts=True)

        with pytest.raises(RuntimeError, match="the model failed"):
            async with writer.draft("d3", draft_id="boom") as d:
                await d.write("half an ans")
                await d.sync()
                raise RuntimeError("the model failed")
        texts, seen = await follow_draft(stream, "boom")
        closed = seen[-1]
        assert isinstance(closed, DraftClosed)
        assert (closed.state, closed.text) == ("cancelled", "half an ans")

        async with writer.draft("d3", draft_id="left", role="tool") as d:
            await d.replace("never committed")
        texts, seen = await follow_draft(stream, "left")
        assert texts == ["", "never committed"]  # opened empty: a typing indicator at once
        closed = seen[-1]
        assert isinstance(closed, DraftClosed) and closed.state == "cancelled"
        assert closed.role == "tool"
        assert d.state == "cancelled"
        with pytest.raises(ClientError):
            await d.write("late")
        assert mirror.revision == 0  # drafts never change the transcript


async def test_a_refused_commit_leaves_the_draft_open() -> None:
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        await client.create("d4", [user("q")])
        async with client.draft("d4") as d:
            await d.write("answer")
            with pytest.raises(client_py.RevisionConflict):
                await d.commit(expected_revision=0)
            assert d.state == "open"
            ack = await d.commit(expected_revision=1)
        assert (ack.revision, d.state) == (2, "committed")
        with pytest.raises(ClientError):
            await d.write("more")


async def test_limits_are_errors_and_the_writer_stays_usable() -> None:
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        await client.create("d5")
        writers = [client.draft("d5", draft_id=f"w{i}") for i in range(16)]
        for w in writers:
            await w.open()
        with pytest.raises(ServerError) as refused:
            await client.draft("d5", draft_id="one-too-many").open()
        assert refused.value.code == "too-many-drafts"
        await writers[0].cancel()
        async with client.draft("d5", draft_id="now-it-fits") as d:
            await d.write("fits")
            assert await d.sync() == 2  # opened (1), then "fits" (2)
        # A cancelled draft's id takes no more updates: a late token opens no ghost.
        with pytest.raises(ServerError) as closed:
            await client.draft("d5", draft_id="w0").open()
        assert closed.value.code == "draft-closed"
        for w in writers[1:]:
            await w.cancel()
        assert await client.ping() >= 0


async def test_a_refused_update_ends_the_writer_with_its_error() -> None:
    async with (
        running_server(max_message_bytes=1000) as srv,
        client_py.connect(srv.ws_url) as client,
    ):
        await client.create("d7")
        mirror = await client.subscribe("d7")
        stream = mirror.events(drafts=True)
        async with client.draft("d7", draft_id="big") as d:
            await d.write("x" * 600)
            await d.write("y" * 600)  # not answered: past max_message_bytes
            with pytest.raises(ServerError) as refused:
                await d.sync()
            assert refused.value.code == "draft-too-large"
            assert d.state == "failed"
            with pytest.raises(ServerError):
                await d.write("more")
            assert mirror.drafts["big"].text == "x" * 600  # the server kept it as it was
        texts, seen = await follow_draft(stream, "big")  # and leaving the block cancelled it
        assert texts[-1] == "x" * 600
        closed = seen[-1]
        assert isinstance(closed, DraftClosed) and closed.state == "cancelled"
        assert mirror.revision == 0


async def test_after_a_reconnect_the_writer_sends_its_whole_text() -> None:
    async with (
        running_server() as srv,
        client_py.connect(srv.ws_url, backoff_min=0.01, backoff_max=0.05) as writer,
        client_py.connect(srv.ws_url) as reader,
    ):
        await writer.create("d6")
        mirror = await reader.subscribe("d6")
        stream = mirror.events(drafts=True)
        async with writer.draft("d6", draft_id="r") as d:
            await d.write("before ")
            await d.sync()
            ws = writer._ws
            assert ws is not None
            await ws.close()  # the connection is lost
            await d.write("lost? ")  # sent into the closed connection, or while away
            await d.sync()  # answered on the next connection, after the whole text
            assert writer.counters.reconnects == 1
            await d.write("after")
            ack = await d.commit()
        texts, _ = await follow_draft(stream, "r")
        assert texts[-1] == "before lost? after"
        assert all("before lost? after".startswith(t) for t in texts)
        assert mirror.messages[-1].content == "before lost? after"
        assert mirror.revision == ack.revision
        assert mirror.drafts == {}
