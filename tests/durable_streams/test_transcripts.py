"""Transcripts as read-only Durable Streams (``/v1/stream/transcripts/{id}``):
their events in order, offsets that are revisions, readers that wait for the
next change, and the transcript API as the only way to write."""

from __future__ import annotations

import asyncio
import json

import httpx

import client_py
from server.streams.transcripts import offset_of
from tests.support.servers import running_server
from tests.support.waiting import until

URL = "/v1/stream/transcripts/t1"


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def test_a_transcript_reads_as_its_events_and_resumes_from_a_revision() -> None:
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
        client_py.connect(srv.url) as client,
    ):
        created = await client.create("t1", [user("a"), user("b")])
        await client.append("t1", [user("c")])
        read = await http.get(URL, params={"offset": "-1"})
        assert read.status_code == 200
        assert read.headers["content-type"] == "application/json"
        assert read.headers["stream-up-to-date"] == "true"
        events = read.json()
        assert [e["revision"] for e in events] == [1, 2]
        assert [m["content"] for e in events for m in e["change"]["messages"]] == ["a", "b", "c"]
        assert read.headers["stream-next-offset"] == offset_of(created.epoch, 2)

        # Resuming from that offset gives what came after, and nothing else.
        await client.append("t1", [user("d")])
        later = await http.get(URL, params={"offset": read.headers["stream-next-offset"]})
        assert [e["revision"] for e in later.json()] == [3]
        tail = await http.get(URL, params={"offset": later.headers["stream-next-offset"]})
        assert tail.json() == [] and tail.headers["stream-up-to-date"] == "true"
        now = await http.get(URL, params={"offset": "now"})
        assert now.json() == [] and now.headers["stream-next-offset"] == offset_of(created.epoch, 3)
        head = await http.head(URL)
        assert head.headers["stream-next-offset"] == offset_of(created.epoch, 3)

        # Writes go through the transcript API.
        for method in ("PUT", "POST", "DELETE"):
            refused = await http.request(method, URL, content=b"[]")
            assert refused.status_code == 405 and "GET" in refused.headers["allow"]
        assert (await http.put("/v1/stream/transcripts/t1/x")).status_code == 405
        assert (
            await http.get("/v1/stream/transcripts/nope", params={"offset": "-1"})
        ).status_code == 404


async def test_a_long_poll_wakes_on_the_next_append_and_sse_follows() -> None:
    async with (
        running_server(stream_long_poll_s=10.0) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
        client_py.connect(srv.url) as client,
    ):
        created = await client.create("t1", [user("a")])
        tail = offset_of(created.epoch, 1)
        poll = asyncio.create_task(http.get(URL, params={"offset": tail, "live": "long-poll"}))
        sse_lines: list[str] = []

        async def follow() -> None:
            params = {"offset": "-1", "live": "sse"}
            async with http.stream("GET", URL, params=params) as response:
                assert response.headers["content-type"] == "text/event-stream"
                async for line in response.aiter_lines():
                    sse_lines.append(line)
                    if line.startswith("data:") and '"b"' in line:
                        return

        follower = asyncio.create_task(follow())
        await client.append("t1", [user("b")])
        answer = await asyncio.wait_for(poll, 10)
        assert answer.status_code == 200
        assert [e["revision"] for e in answer.json()] == [2]
        assert answer.headers["stream-cursor"].isdigit()
        await asyncio.wait_for(follower, 10)
        data = [json.loads(line[5:]) for line in sse_lines if line.startswith("data:[")]
        assert [e["revision"] for batch in data for e in batch] == [1, 2]


def watching() -> list[asyncio.Task[object]]:
    """The transcripts' watching tasks (one per transcript with SSE readers)."""
    # (getattr: some tasks run an object that has no ``__qualname__``, e.g. an
    # async generator's athrow)
    return [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == "_watch"]


async def test_the_watching_task_ends_with_the_last_sse_reader_and_starts_again() -> None:
    # long_poll_s is the watcher's wait for a change: it must not outlive its
    # readers by that long.
    async with (
        running_server(stream_long_poll_s=60.0) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
        client_py.connect(srv.url) as client,
    ):
        await client.create("t1", [user("a")])

        async def read_until(text: str) -> None:
            params = {"offset": "-1", "live": "sse"}
            async with http.stream("GET", URL, params=params) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data:") and f'"{text}"' in line:
                        return

        for text in ("b", "c"):
            reader = asyncio.create_task(read_until(text))
            await until(lambda: len(watching()) == 1)
            await client.append("t1", [user(text)])
            await asyncio.wait_for(reader, 10)
            await until(lambda: not watching())


async def test_an_offset_of_a_deleted_history_is_gone() -> None:
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
        client_py.connect(srv.url) as client,
    ):
        first = await client.create("t1", [user("a")])
        offset = offset_of(first.epoch, 1)
        await client.http.delete("t1")
        again = await client.create("t1", [user("x"), user("y")])
        assert again.epoch != first.epoch
        gone = await http.get(URL, params={"offset": offset})
        assert gone.status_code == 410


async def test_a_transcript_and_a_draft_refuse_bad_ids_and_answer_preflights() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        bad = await http.get("/v1/stream/transcripts/a%20b", params={"offset": "-1"})
        assert bad.status_code == 400 and bad.json()["detail"] == "not a transcript id"
        bad_draft = await http.get("/v1/stream/transcripts/t1/drafts/a%20b")
        assert bad_draft.status_code == 400 and bad_draft.json()["detail"] == "not a draft id"
        # An id is checked before the method.
        assert (await http.put("/v1/stream/transcripts/a%20b")).status_code == 400
        for url in (URL, URL + "/drafts/d1"):
            preflight = await http.options(url)
            assert preflight.status_code == 204
            assert "GET" in preflight.headers["access-control-allow-methods"]
