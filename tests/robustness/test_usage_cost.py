"""Issue 24 item 1: a usage query costs the ranges' bounds and the messages
they cover once, not ranges x messages; the same range twice, too many
ranges and too many Views are refused, naming the setting.

Before: ``GET .../usage?segments=0,0,0,...`` (200 times segment 0, a
400-character query) on a 100,000-message transcript froze the whole server
13.4 s; with 100 Views a plain usage query took 6.0 s, with 500 Views
30.2 s. Here the same transcript (100,000 messages) with 100 Views is asked
for its usage 20 times while an unrelated client pings and a writer appends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

from tests.robustness.acknowledged import writing
from tests.robustness.harness import Target, assert_responsive, probing

LENGTH = 100_000
BATCH = 10_000
VIEWS = 100


async def _fill(client: httpx.AsyncClient, tid: str) -> None:
    created = await client.post("/v1/transcripts", json={"id": tid})
    assert created.status_code == 201, created.text
    for start in range(0, LENGTH, BATCH):
        batch = [{"role": "user", "content": f"m{i}"} for i in range(start, start + BATCH)]
        appended = await client.post(f"/v1/transcripts/{tid}/messages", json={"messages": batch})
        assert appended.status_code == 201, appended.text
    for i in range(VIEWS):
        view = await client.put(f"/v1/transcripts/{tid}/views/v{i}", json={"start": i})
        assert view.status_code == 201, view.text


def test_usage_of_a_long_transcript_with_many_views(
    target_factory: Callable[..., Target],
) -> None:
    target = target_factory(
        settings={"max_messages_per_batch": BATCH, "max_views_per_transcript": VIEWS}
    )

    async def prepare() -> None:
        async with httpx.AsyncClient(base_url=target.url, timeout=60) as client:
            await _fill(client, "long")

    asyncio.run(prepare())
    rss_before = target.rss()

    async def attack() -> tuple[list[httpx.Response], list[float]]:
        answers, took = [], []
        async with httpx.AsyncClient(base_url=target.url, timeout=60) as client:
            for query in (
                {"segments": ",".join(["0"] * 200)},  # the red team's query
                {"segments": "0", "views": "v1,v2,v1"},
                {},  # every segment and every View: 101 ranges
                {"segments": "all", "views": ",".join(f"v{i}" for i in range(VIEWS))},
                {"segments": "0"},
            ) * 4:
                began = time.monotonic()
                answers.append(await client.get("/v1/transcripts/long/usage", params=query))
                took.append(time.monotonic() - began)
            # A View past the cap.
            answers.append(
                await client.put("/v1/transcripts/long/views/one-more", json={"start": 0})
            )
        return answers, took

    with writing(target.url, "bystander") as writer, probing(target.ws_url) as probe:
        answers, took = asyncio.run(attack())
        probe.wait_pings(5)
    refused_twice = [a for a in answers[:-1] if a.status_code == 400]
    assert len(refused_twice) == 8
    assert {a.json()["code"] for a in refused_twice} == {"invalid-query"}
    assert "asked twice" in refused_twice[0].json()["detail"]
    counted = [a.json() for a in answers[:-1] if a.status_code == 200]
    assert len(counted) == 12
    for body in counted:
        assert body["messages"] == LENGTH
    assert counted[0]["references"] == LENGTH + sum(LENGTH - i for i in range(VIEWS))
    assert len(counted[0]["ranges"]) == 1 + VIEWS
    assert counted[0]["uses"][-1] == {"start": VIEWS - 1, "end": LENGTH, "count": 1 + VIEWS}
    over = answers[-1]
    assert over.status_code == 422 and over.json()["code"] == "invalid-view"
    assert "max_views_per_transcript" in over.json()["detail"]
    # The walk took 6 s per query with 100 Views. The first query after the
    # load measures every message's size once (most are read back from the
    # store); the others count from those sizes: milliseconds.
    assert max(took) < 3, [round(t, 3) for t in took]
    assert sorted(took)[len(took) // 2] < 0.5, [round(t, 3) for t in took]
    assert_responsive(probe)
    assert target.rss() - rss_before < 100 << 20
    writer.assert_nothing_lost()


def test_more_ranges_than_allowed_are_refused(target_factory: Callable[..., Target]) -> None:
    target = target_factory(settings={"max_usage_ranges": 3})
    with httpx.Client(base_url=target.url, timeout=30) as client:
        assert client.post("/v1/transcripts", json={"id": "t"}).status_code == 201
        for name in ("a", "b", "c"):
            assert (
                client.put(f"/v1/transcripts/t/views/{name}", json={"start": 0}).status_code == 201
            )
        assert client.get("/v1/transcripts/t/usage", params={"views": "a,b,c"}).status_code == 200
        refused = client.get("/v1/transcripts/t/usage")  # segment 0 and three Views
    assert refused.status_code == 400
    assert refused.json()["code"] == "invalid-query"
    assert "max_usage_ranges (3)" in refused.json()["detail"]
