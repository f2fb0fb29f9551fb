"""Whole reads written in pages (``server.web.http_reads``, issue 24 item 8):
the streamed answer is byte for byte the JSON the whole answer was, for the
snapshot, a range of it, the events and the chat rendering, whether the
messages come from memory or the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from protocol import api, lmml
from protocol.chat import anthropic_messages
from protocol.types import TranscriptSnapshot
from server.config import ServerConfig
from server.web import http_reads
from tests.support.servers import running_server

LENGTH = 700


def _messages(start: int, count: int) -> list[dict[str, Any]]:
    # Sizes from a few bytes to ~40 KB so that pages vary; some context turns.
    return [
        {
            "role": "context" if i % 50 == 0 else "user",
            "content": f"m{i}-" + "x" * (i * 37 % 40_000),
        }
        for i in range(start, start + count)
    ]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_streamed_answers_are_the_whole_answers(tmp_path: Path, store: str) -> None:
    where = "memory" if store == "memory" else f"sqlite:{tmp_path / 'data'}"
    # live_messages 100: most of the transcript is read back from the store.
    async with (
        running_server(
            ServerConfig(store=where, graceful_shutdown_s=2.0), live_messages=100
        ) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60) as http,
    ):
        assert (await http.post("/v1/transcripts", json={"id": "t"})).status_code == 201
        for start in range(0, LENGTH, 100):
            r = await http.post(
                "/v1/transcripts/t/messages", json={"messages": _messages(start, 100)}
            )
            assert r.status_code == 201, r.text
        assert (
            await http.post("/v1/transcripts/t/segments", json={"start": 350})
        ).status_code == 201
        assert (
            await http.put("/v1/transcripts/t/views/v", json={"start": 3, "end": 9})
        ).status_code == 201
        for i in range(100):  # many small events
            r = await http.post(
                "/v1/transcripts/t/messages",
                json={"messages": [{"role": "user", "content": f"e{i}"}]},
            )
            assert r.status_code == 201

        whole = await http.get("/v1/transcripts/t")
        assert whole.headers.get("content-length") is None  # streamed
        snapshot = msgspec.json.decode(whole.content, type=TranscriptSnapshot)
        assert snapshot.start == 0 and len(snapshot.messages) == snapshot.length == LENGTH + 100
        # The same bytes msgspec writes for the whole snapshot at once.
        assert whole.content == msgspec.json.encode(snapshot)
        contents = [m.content for m in snapshot.messages]
        assert contents[:LENGTH] == [m["content"] for m in _messages(0, LENGTH)]

        part = await http.get("/v1/transcripts/t", params={"start": 10, "end": 500})
        ranged = msgspec.json.decode(part.content, type=TranscriptSnapshot)
        assert ranged.start == 10 and ranged.messages == snapshot.messages[10:500]
        assert part.content == msgspec.json.encode(ranged)
        head = await http.get("/v1/transcripts/t", params={"end": 450})
        assert head.headers.get("content-length") is None  # streamed, through the events
        first = msgspec.json.decode(head.content, type=TranscriptSnapshot)
        assert first.start == 0 and first.messages == snapshot.messages[:450]
        assert head.content == msgspec.json.encode(first)
        small = await http.get("/v1/transcripts/t", params={"start": 10, "end": 15})
        assert small.headers["content-length"] == str(len(small.content))  # built whole
        assert (
            msgspec.json.decode(small.content, type=TranscriptSnapshot).messages
            == snapshot.messages[10:15]
        )

        events = await http.get("/v1/transcripts/t/events", params={"after": 0})
        body = msgspec.json.decode(events.content, type=api.EventsBody)
        assert [e.revision for e in body.events] == list(range(1, snapshot.revision + 1))
        assert events.content == msgspec.json.encode(body)
        later = msgspec.json.decode(
            (await http.get("/v1/transcripts/t/events", params={"after": 12})).content,
            type=api.EventsBody,
        )
        assert later.events == body.events[12:]
        gone = await http.get("/v1/transcripts/t/events", params={"after": snapshot.revision + 1})
        assert gone.status_code == 410

        for segment in ("all", "active"):
            for context in ("omit", "system"):
                chat = await http.get(
                    "/v1/transcripts/t/chat", params={"segment": segment, "context": context}
                )
                assert chat.headers["x-transcript-revision"] == str(snapshot.revision)
                messages = snapshot.messages if segment == "all" else snapshot.messages[350:]
                expected = api.ChatBody(messages=lmml.chat_messages(messages, context=context))
                assert chat.content == msgspec.json.encode(expected), (segment, context)
                # Anthropic's body merges messages across pages and ends with `system`.
                params = {"segment": segment, "context": context, "format": "anthropic"}
                claude = await http.get("/v1/transcripts/t/chat", params=params)
                rendered = anthropic_messages(messages, context=context)
                body = api.ChatBody(
                    messages=rendered["messages"], system=rendered.get("system", msgspec.UNSET)
                )
                assert claude.content == msgspec.json.encode(body), (segment, context)


def test_a_page_aims_at_its_bytes() -> None:
    pager = http_reads._Pager()
    assert pager.size == http_reads.STREAM_FIRST_PAGE
    pager.written(64, 64 * 100)
    assert pager.size == min(http_reads.STREAM_MAX_PAGE_ITEMS, http_reads.STREAM_PAGE_BYTES // 100)
    pager.written(4, 4 * (4 << 20))
    assert pager.size == 1
    pager.written(1, 0)
    assert pager.size == 2


def test_a_split_head_joins_back() -> None:
    head = msgspec.json.encode(api.EventsBody(transcript_id="t", events=[]))
    before, after = http_reads._split(head, b"events")
    assert before + after == head and before.endswith(b"[") and after.startswith(b"]")
