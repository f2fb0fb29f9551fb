"""Long conversations end to end (issue 18): windowed subscriptions, resuming
with a window, ``load_earlier`` across a delete and re-creation, Views over
the WebSocket and HTTP, the range and usage endpoints, against a real
in-process server."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

import client_py
from client_py import EpochChanged, InvalidView, Mirror
from protocol import wire
from protocol.types import Segment, View
from tests.support.servers import running_server
from tests.support.wsclient import RawClient


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def texts(mirror: Mirror) -> list[Any]:
    return [m.content for m in mirror.messages]


async def fill(client: client_py.Client, tid: str, count: int, *, batch: int = 7) -> None:
    done = 0
    while done < count:
        n = min(batch, count - done)
        await client.http.append(tid, [user(f"m{done + i}") for i in range(n)])
        done += n


async def test_window_edges() -> None:
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        await client.create("t", [user(f"m{i}") for i in range(6)])
        await client.http.start_segment("t", 4)

        whole = await client.subscribe("t", window={"tail": 100})  # larger than the transcript
        assert (whole.start, whole.length, texts(whole)) == (0, 6, [f"m{i}" for i in range(6)])
        await client.unsubscribe("t")

        past = await client.subscribe("t", window={"from": 50})  # beyond the end: holds nothing
        assert (past.start, past.length, past.messages) == (6, 6, ())
        assert past.segments == (Segment(0, 6), Segment(4, None))
        await client.append("t", [user("m6")])
        await past.wait_for_revision(3)
        assert (past.start, texts(past)) == (6, ["m6"])  # and fills as messages arrive
        await client.unsubscribe("t")

        active = await client.subscribe("t", window={"segment": "active"})
        assert (active.start, texts(active)) == (4, ["m4", "m5", "m6"])
        await client.unsubscribe("t")

        nothing = await client.subscribe("t", window={"tail": 0})
        assert (nothing.start, nothing.length, nothing.messages) == (7, 7, ())


async def test_a_view_window_and_an_unknown_view() -> None:
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        await client.create("t", [user(f"m{i}") for i in range(5)])
        ack = await client.set_view("t", "recent", 3)
        assert (ack.revision, ack.duplicate) == (2, False)
        mirror = await client.subscribe("t", window={"view": "recent"})
        assert (mirror.start, texts(mirror)) == (3, ["m3", "m4"])
        assert mirror.views == (View("recent", 3, None),)
        await client.unsubscribe("t")
        with pytest.raises(InvalidView):
            await client.subscribe("t", window={"view": "nope"})
        assert "t" not in client.mirrors


async def test_a_window_plus_increments_is_the_same_slice_as_a_whole_mirror() -> None:
    rng = random.Random(18)
    async with (
        running_server() as srv,
        client_py.connect(srv.ws_url) as whole_client,
        client_py.connect(srv.ws_url) as window_client,
    ):
        await whole_client.create("t", [user(f"m{i}") for i in range(30)])
        whole = await whole_client.subscribe("t")
        windowed = await window_client.subscribe("t", window={"tail": 5})
        assert windowed.start == 25
        length = 30
        for step in range(60):
            roll = rng.random()
            if roll < 0.6:
                n = rng.randint(1, 4)
                ack = await whole_client.append("t", [user(f"s{step}.{i}") for i in range(n)])
                length += n
            elif roll < 0.75 and whole.active_start < length:
                start = rng.randint(whole.active_start + 1, length)
                ack = await whole_client.start_segment("t", start)
            elif roll < 0.9:
                start = rng.randint(0, length)
                end = rng.choice([None, rng.randint(start, length)])
                ack = await whole_client.set_view("t", rng.choice("abc"), start, end)
            else:
                ack = await whole_client.leave_view("t", rng.choice("abc"))
            # The next step reads the mirror's active start: let it catch up.
            await whole.wait_for_revision(ack.revision)
        revision = (await whole_client.get("t")).revision
        await whole.wait_for_revision(revision)
        await windowed.wait_for_revision(revision)
        assert windowed.start == 25
        assert windowed.length == whole.length
        assert windowed.messages == whole.messages[windowed.start :]
        assert windowed.segments == whole.segments
        assert windowed.views == whole.views
        assert windowed.counters.rebaselines == 0


async def test_resume_with_a_window_keeps_what_the_copy_held() -> None:
    # max_resume_events=3: a copy further behind than that gets a baseline.
    async with (
        running_server(max_resume_events=3) as srv,
        client_py.connect(srv.ws_url) as client,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        await client.create("t", [user(f"m{i}") for i in range(10)])
        mirror = await client.subscribe("t", window={"tail": 4})
        assert mirror.start == 6
        await mirror.load_earlier(2)
        assert (mirror.start, texts(mirror)[0]) == (4, "m4")

        # A short absence: the resume is answered with increments.
        await srv.hub.subscriptions.connections[
            next(iter(srv.hub.subscriptions.connections))
        ].send_close(1001, "bye")
        for i in range(2):
            assert (
                await http.post("/v1/transcripts/t/messages", json={"messages": [user(f"a{i}")]})
            ).status_code == 201
        await mirror.wait_for_revision(3, timeout=10)
        assert (mirror.start, mirror.counters.rebaselines) == (4, 0)


async def test_a_resume_too_far_behind_gets_a_baseline_of_the_window() -> None:
    async with running_server(max_resume_events=3) as srv:
        await srv.hub.writes.create("t", [user(f"m{i}") for i in range(10)])
        async with await RawClient.connect(srv.ws_url) as raw:
            await raw.send(op="subscribe", transcriptId="t", window={"tail": 4})
            first = (await raw.expect(wire.Baseline)).snapshot
            assert (first.start, first.length, first.revision) == (6, 10, 1)
        for i in range(2):
            await srv.hub.writes.append("t", [user(f"a{i}")])
        async with await RawClient.connect(srv.ws_url) as raw:
            # Close enough: the increments, whatever the window.
            await raw.send(
                op="subscribe",
                transcriptId="t",
                fromRevision=1,
                epoch=first.epoch,
                window={"tail": 4},
            )
            resumed = [await raw.expect(wire.Increment) for _ in range(2)]
            assert [f.event.revision for f in resumed] == [2, 3]
        for i in range(4):
            await srv.hub.writes.append("t", [user(f"b{i}")])
        async with await RawClient.connect(srv.ws_url) as raw:
            # Too far behind: a baseline, of the window asked for.
            await raw.send(
                op="subscribe",
                transcriptId="t",
                fromRevision=3,
                epoch=first.epoch,
                window={"tail": 4},
            )
            again = (await raw.expect(wire.Baseline)).snapshot
            assert (again.start, again.length, again.revision) == (12, 16, 7)
            assert [m.content for m in again.messages] == ["b0", "b1", "b2", "b3"]


async def test_load_earlier_widens_the_window_in_order() -> None:
    async with running_server(live_messages=10) as srv, client_py.connect(srv.ws_url) as client:
        await client.create("t")
        await fill(client, "t", 2600, batch=500)
        mirror = await client.subscribe("t", window={"tail": 50})
        assert (mirror.start, mirror.length) == (2550, 2600)
        assert await mirror.load_earlier(1500) == 1500  # two reads: at most 1000 each
        assert mirror.start == 1050
        assert texts(mirror) == [f"m{i}" for i in range(1050, 2600)]
        assert await mirror.load_earlier(5000) == 1050
        assert await mirror.load_earlier(1) == 0
        assert texts(mirror) == [f"m{i}" for i in range(2600)]


async def test_load_earlier_across_a_delete_and_creation_is_refused() -> None:
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        first = await client.create("t", [user(f"old{i}") for i in range(10)])
        mirror = await client.subscribe("t", window={"tail": 3})
        await client.http.delete("t")
        second = await client.create("t", [user(f"new{i}") for i in range(10)])
        assert second.epoch != first.epoch
        with pytest.raises(EpochChanged):
            await mirror.load_earlier(5)
        assert (mirror.start, texts(mirror)) == (7, ["old7", "old8", "old9"])
        # The HTTP endpoint refuses the old epoch the same way.
        with pytest.raises(EpochChanged):
            await client.http.messages("t", 0, 5, epoch=first.epoch)
        fresh = await client.http.messages("t", 0, 2, epoch=second.epoch)
        assert [m.content for m in fresh.messages] == ["new0", "new1"]


async def test_views_over_http_and_the_usage_endpoint() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        created = await http.post(
            "/v1/transcripts", json={"id": "t", "messages": [user(f"m{i}") for i in range(8)]}
        )
        assert created.status_code == 201
        assert (await http.post("/v1/transcripts/t/segments", json={"start": 5})).status_code == 201
        put = await http.put("/v1/transcripts/t/views/draft", json={"start": 2, "end": 6})
        assert (put.status_code, put.json()["revision"], put.json()["duplicate"]) == (201, 3, False)
        again = await http.put("/v1/transcripts/t/views/draft", json={"start": 2, "end": 6})
        assert (again.status_code, again.json()["revision"], again.json()["duplicate"]) == (
            200,
            3,
            True,
        )
        bad = await http.put("/v1/transcripts/t/views/draft", json={"start": 2, "end": 60})
        assert (bad.status_code, bad.json()["code"]) == (422, "invalid-view")
        bad_name = await http.put("/v1/transcripts/t/views/a%20b", json={"start": 0})
        assert (bad_name.status_code, bad_name.json()["code"]) == (422, "invalid-view")
        listed = (await http.get("/v1/transcripts/t/views")).json()
        assert listed["views"] == [{"name": "draft", "start": 2, "end": 6}]

        usage = (await http.get("/v1/transcripts/t/usage")).json()
        # segment 0 is [0, 8), segment 1 [5, 8), the View [2, 6): 8 distinct messages.
        assert [r["name"] for r in usage["ranges"]] == ["segment:0", "segment:1", "view:draft"]
        assert usage["messages"] == 8
        assert usage["references"] == 8 + 3 + 4
        assert usage["uses"] == [
            {"start": 0, "end": 2, "count": 1},
            {"start": 2, "end": 5, "count": 2},
            {"start": 5, "end": 6, "count": 3},
            {"start": 6, "end": 8, "count": 2},
        ]
        only = (await http.get("/v1/transcripts/t/usage?segments=active&views=draft")).json()
        assert (only["messages"], only["references"]) == (6, 7)  # [2, 8) once
        missing = await http.get("/v1/transcripts/t/usage?views=nope")
        assert (missing.status_code, missing.json()["code"]) == (422, "invalid-view")
        bad_segment = await http.get("/v1/transcripts/t/usage?segments=7")
        assert (bad_segment.status_code, bad_segment.json()["code"]) == (400, "invalid-query")

        left = await http.delete("/v1/transcripts/t/views/draft")
        assert (left.status_code, left.json()["revision"]) == (200, 4)
        assert (await http.delete("/v1/transcripts/t/views/draft")).json()["duplicate"] is True
        snapshot = (await http.get("/v1/transcripts/t")).json()
        assert len(snapshot["messages"]) == 8 and snapshot["revision"] == 4
        assert snapshot["viewChanges"] == 2 and "views" not in snapshot

        page = (await http.get("/v1/transcripts/t/messages?start=6")).json()
        assert (page["start"], page["end"], page["length"]) == (6, 8, 8)
        assert [m["content"] for m in page["messages"]] == ["m6", "m7"]
        backwards = await http.get("/v1/transcripts/t/messages?start=5&end=2")
        assert backwards.status_code == 400
        summary = (await http.get("/v1/transcripts")).json()["transcripts"][0]
        assert (summary["title"], summary["preview"]) == ("m0", "m7")
