"""Drafts as read-only Durable Streams
(``/v1/stream/transcripts/{id}/drafts/{draftId}``): the draft's text as it
grows, offsets that are bytes of it, readers that wake on its next update,
and a stream closed when the draft is committed, cancelled, expires or has
its text rewritten. Drafts are written with the Python client."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

import client_py
from server.streams.transcripts import offset_of
from tests.auth.conftest import SECRET, mint
from tests.durable_streams.test_conformance import HERE
from tests.support.node import node_script, npm_ci
from tests.support.servers import RunningServer, running_server
from tests.support.waiting import until

TEXT = "text/plain; charset=utf-8"


def url(draft_id: str, transcript_id: str = "t1") -> str:
    return f"/v1/stream/transcripts/{transcript_id}/drafts/{draft_id}"


def waiting(srv: RunningServer, draft_id: str, transcript_id: str = "t1") -> bool:
    """Whether a long-poll or SSE reader waits for the draft's next update."""
    live = srv.hub.live.get(transcript_id)
    watchers = () if live is None else live.draft_watchers.get(draft_id, ())
    return any(not future.done() for future in watchers)  # a woken one is not waiting


async def test_a_draft_reads_as_its_text_and_resumes_from_a_byte() -> None:
    async with (
        running_server(draft_coalesce_s=0.0) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
        client_py.connect(srv.url) as client,
    ):
        created = await client.create("t1", [{"role": "user", "content": "hi"}])
        async with client.draft("t1", draft_id="d1") as d:
            await d.write("Hello")
            await d.sync()
            first = await http.get(url("d1"), params={"offset": "-1"})
            assert first.status_code == 200, first.text
            assert first.headers["content-type"] == TEXT
            assert first.content == b"Hello"
            assert first.headers["stream-next-offset"] == offset_of(created.epoch, 5)
            assert first.headers["stream-up-to-date"] == "true"
            assert "stream-closed" not in first.headers

            # Resuming from that offset gives what came after, and no more;
            # offsets count bytes of UTF-8.
            await d.write(", wörld")
            await d.sync()
            later = await http.get(
                url("d1"), params={"offset": first.headers["stream-next-offset"]}
            )
            assert later.content == ", wörld".encode()
            assert later.headers["stream-next-offset"] == offset_of(created.epoch, 13)
            tail = await http.get(url("d1"), params={"offset": later.headers["stream-next-offset"]})
            assert tail.content == b"" and tail.headers["stream-up-to-date"] == "true"
            now = await http.get(url("d1"), params={"offset": "now"})
            assert now.content == b""
            assert now.headers["stream-next-offset"] == offset_of(created.epoch, 13)
            head = await http.head(url("d1"))
            assert head.status_code == 200
            assert head.headers["stream-next-offset"] == offset_of(created.epoch, 13)
            assert "stream-closed" not in head.headers

            # Bad input is told, never a 500.
            past = await http.get(url("d1"), params={"offset": offset_of(created.epoch, 99)})
            assert past.status_code == 400 and "past" in past.text
            garbage = await http.get(url("d1"), params={"offset": "x"})
            assert garbage.status_code == 400
            other_epoch = await http.get(
                url("d1"), params={"offset": "0000000000000001_0000000000000000"}
            )
            assert other_epoch.status_code in (400, 410)
            assert (await http.get(url("d-nope"))).status_code == 404
            assert (await http.get(url("d1", "t-nope"))).status_code == 404
            assert (await http.get(url("bad%20id"))).status_code == 400
            for method in ("PUT", "POST", "DELETE"):
                refused = await http.request(method, url("d1"), content=b"x")
                assert refused.status_code == 405 and "GET" in refused.headers["allow"]
            assert (await http.options(url("d1"))).status_code == 204

            await d.commit()
        # Committed: the stream is closed, its text still readable.
        closed = await http.get(url("d1"), params={"offset": "-1"})
        assert closed.content == "Hello, wörld".encode()
        assert closed.headers["stream-closed"] == "true"
        at_end = await http.get(url("d1"), params={"offset": closed.headers["stream-next-offset"]})
        assert at_end.content == b"" and at_end.headers["stream-closed"] == "true"
        head = await http.head(url("d1"))
        assert head.headers["stream-closed"] == "true"
        polled = await http.get(
            url("d1"),
            params={"offset": closed.headers["stream-next-offset"], "live": "long-poll"},
        )
        assert polled.status_code == 204 and polled.headers["stream-closed"] == "true"


async def test_a_text_that_rewrites_the_draft_closes_its_stream_where_they_differ() -> None:
    async with (
        running_server(draft_coalesce_s=0.0) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
        client_py.connect(srv.url) as client,
    ):
        created = await client.create("t1")
        async with client.draft("t1", draft_id="d1") as d:
            await d.write("The answer is 41")
            await d.sync()
            read = await http.get(url("d1"), params={"offset": "-1"})
            assert read.content == b"The answer is 41"
            # A text that extends it is an append.
            await d.replace("The answer is 41, or")
            await d.sync()
            more = await http.get(url("d1"), params={"offset": read.headers["stream-next-offset"]})
            assert more.content == b", or" and "stream-closed" not in more.headers
            # One that rewrites it closes the stream at what both share.
            await d.replace("The answer is 42.")
            await d.sync()
            whole = await http.get(url("d1"), params={"offset": "-1"})
            assert whole.content == b"The answer is 4"
            assert whole.headers["stream-closed"] == "true"
            assert whole.headers["stream-next-offset"] == offset_of(created.epoch, 15)
            # A reader already past that point ends where it is.
            past = await http.get(url("d1"), params={"offset": more.headers["stream-next-offset"]})
            assert past.status_code == 200 and past.content == b""
            assert past.headers["stream-closed"] == "true"
            # Later deltas do not reopen it.
            await d.write(" Sure.")
            await d.sync()
            again = await http.get(url("d1"), params={"offset": "-1"})
            assert again.content == b"The answer is 4" and again.headers["stream-closed"] == "true"


async def test_a_long_poll_wakes_on_the_next_delta() -> None:
    async with (
        running_server(draft_coalesce_s=0.0, stream_long_poll_s=10.0) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
        client_py.connect(srv.url) as client,
    ):
        await client.create("t1")
        async with client.draft("t1", draft_id="d1") as d:
            await d.write("a")
            await d.sync()
            first = await http.get(url("d1"), params={"offset": "-1"})
            offset = first.headers["stream-next-offset"]
            params = {"offset": offset, "live": "long-poll"}
            poll = asyncio.create_task(http.get(url("d1"), params=params))
            await until(lambda: waiting(srv, "d1"))  # the poll waits on the draft
            assert not poll.done()
            started = time.monotonic()
            await d.write("bc")
            answer = await asyncio.wait_for(poll, 5)
            waited = time.monotonic() - started
            assert answer.status_code == 200 and answer.content == b"bc"
            assert answer.headers["stream-cursor"].isdigit()
            assert waited < 2, waited  # woken by the delta, not the 10 s timeout
            # The next poll wakes on the commit: closed, with nothing more.
            params = {"offset": answer.headers["stream-next-offset"], "live": "long-poll"}
            poll = asyncio.create_task(http.get(url("d1"), params=params))
            await until(lambda: waiting(srv, "d1"))
            assert not poll.done()
            await d.commit()
            closed = await asyncio.wait_for(poll, 5)
            assert closed.headers["stream-closed"] == "true" and closed.content == b""


async def follow_sse(http: httpx.AsyncClient, path: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The data and control events of an SSE read from the start, until it ends."""
    data: list[str] = []
    controls: list[dict[str, Any]] = []
    event = ""
    lines: list[str] = []
    async with http.stream("GET", path, params={"offset": "-1", "live": "sse"}) as response:
        assert response.headers["content-type"] == "text/event-stream"
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                # One space after the colon is dropped (the SSE spec).
                lines.append(line[6:] if line.startswith("data: ") else line[5:])
            elif line == "" and event:
                payload = "\n".join(lines)
                if event == "data":
                    data.append(payload)
                else:
                    controls.append(json.loads(payload))
                event, lines = "", []
    return data, controls


async def test_sse_sees_the_text_grow_and_closes_on_commit_or_cancel() -> None:
    async with (
        running_server(draft_coalesce_s=0.0) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
        client_py.connect(srv.url) as client,
    ):
        created = await client.create("t1")
        for how in ("commit", "cancel"):
            async with client.draft("t1", draft_id=f"d-{how}") as d:
                await d.write("one")
                await d.sync()
                follower = asyncio.create_task(follow_sse(http, url(f"d-{how}")))
                for token in (" two", " three"):
                    # Each written once the reader waits: it sees the text grow.
                    await until(lambda: waiting(srv, f"d-{how}"))  # noqa: B023
                    await d.write(token)
                    await d.sync()
                await d.sync()
                if how == "commit":
                    await d.commit()
                else:
                    await d.cancel()
            data, controls = await asyncio.wait_for(follower, 10)
            assert data == ["one", " two", " three"]  # it grew while read
            assert controls[-1]["streamClosed"] is True
            assert controls[-1]["streamNextOffset"] == offset_of(created.epoch, 13)
            assert all("streamClosed" not in c for c in controls[:-1])
        messages = (await client.http.get("t1")).messages
        assert [m.content for m in messages] == ["one two three"]


async def test_an_expired_draft_closes_its_stream() -> None:
    async with (
        running_server(draft_coalesce_s=0.0, draft_ttl_s=1.0) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
        client_py.connect(srv.url) as client,
    ):
        await client.create("t1")
        d = client.draft("t1", draft_id="d1")
        await d.open()
        await d.write("left behind")
        await d.sync()
        data, controls = await asyncio.wait_for(follow_sse(http, url("d1")), 10)
        assert "".join(data) == "left behind"
        assert controls[-1]["streamClosed"] is True


@pytest.mark.slow
async def test_the_official_client_follows_a_draft_to_its_close() -> None:
    npm_ci(HERE)
    async with (
        running_server(draft_coalesce_s=0.0) as srv,
        client_py.connect(srv.url) as client,
    ):
        await client.create("t1")
        async with client.draft("t1", draft_id="d1") as d:
            await d.write("Once")
            await d.sync()
            async with node_script("outside_draft.mjs", f"{srv.url}{url('d1')}", cwd=HERE) as run:
                for token in (" upon", " a", " time"):
                    await d.write(token)
                await d.commit()
                seen = await run.finish()
    assert seen["text"] == "Once upon a time"
    assert seen["closed"] is True
    assert seen["contentType"] == TEXT


async def test_reading_a_draft_needs_read_on_its_transcript() -> None:
    async with (
        running_server(jwt_secret=SECRET, draft_coalesce_s=0.0) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
        client_py.connect(srv.url, token=mint(audience=None, admin=True)) as client,
    ):
        await client.create("t1")
        async with client.draft("t1", draft_id="d1") as d:
            await d.write("secret plan")
            await d.sync()

            def bearer(**claims: Any) -> dict[str, str]:
                return {"authorization": f"Bearer {mint(audience=None, **claims)}"}

            assert (await http.get(url("d1"))).status_code == 401
            other = await http.get(url("d1"), headers=bearer(read=["t2"]))
            assert other.status_code == 403 and b"secret" not in other.content
            assert (await http.head(url("d1"), headers=bearer(read=["t2"]))).status_code == 403
            mine = await http.get(url("d1"), headers=bearer(read=["t*"]))
            assert mine.status_code == 200 and mine.content == b"secret plan"
            # Writing needs write (and is refused all the same).
            assert (await http.post(url("d1"), headers=bearer(read=["t1"]))).status_code == 403
            assert (await http.post(url("d1"), headers=bearer(write=["t1"]))).status_code == 405
            # A preflight carries no credentials.
            assert (await http.options(url("d1"))).status_code == 204
