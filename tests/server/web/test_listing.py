"""``GET /v1/transcripts?order=updated``: the most recently updated first,
ordered by the server (``server.web.listing``) over the store's id order."""

from __future__ import annotations

import random
from typing import Any

import httpx

from server.store.base import TranscriptInfo
from server.web.listing import SCAN_PAGE, newest_first
from tests.support.servers import running_server


def _info(tid: str, updated: int) -> TranscriptInfo:
    return TranscriptInfo(tid, "e", 1, 1, 0, updated, title=None, preview=None)


def _store(infos: list[TranscriptInfo]) -> Any:
    """A store's ``list``: by id, after ``after``, at most ``limit``."""
    by_id = sorted(infos, key=lambda i: i.transcript_id)

    async def page(*, after: str | None = None, limit: int = 100) -> list[TranscriptInfo]:
        return [i for i in by_id if after is None or i.transcript_id > after][:limit]

    return page


async def test_pages_of_newest_first_cover_every_transcript_once() -> None:
    rng = random.Random(7)
    # More than one scan page, and ties (the same ms), which fall back on the id.
    infos = [_info(f"t{n:05d}", rng.randrange(500)) for n in range(SCAN_PAGE * 2 + 37)]
    page = _store(infos)
    seen: list[TranscriptInfo] = []
    after = None
    while chunk := await newest_first(page, after=after, limit=300):
        seen += chunk
        after = chunk[-1].transcript_id
    assert seen == sorted(infos, key=lambda i: (-i.updated_at, i.transcript_id))


async def test_a_page_after_a_transcript_that_is_gone_is_empty() -> None:
    page = _store([_info("a", 1), _info("b", 2)])
    assert await newest_first(page, after="zzz", limit=10) == []
    assert [i.transcript_id for i in await newest_first(page, limit=10)] == ["b", "a"]


async def test_the_http_route_orders_and_pages() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        for tid in ("b", "a", "c"):
            await srv.hub.writes.create(tid)
        await srv.hub.writes.append("a", [{"role": "user", "content": "latest"}])

        async def ids(**params: str) -> list[str]:
            r = await http.get("/v1/transcripts", params=params)
            assert r.status_code == 200, r.text
            return [t["transcriptId"] for t in r.json()["transcripts"]]

        assert await ids() == ["a", "b", "c"]  # by id, the default
        newest = await ids(order="updated")
        assert newest[0] == "a" and sorted(newest) == ["a", "b", "c"]
        assert await ids(order="updated", limit="1", after="a") == newest[1:2]
        r = await http.get("/v1/transcripts", params={"order": "newest"})
        assert r.status_code == 400 and r.json()["code"] == "invalid-query"
        assert "'id' or 'updated'" in r.json()["detail"]
        spec = (await http.get("/v1/openapi.json")).json()
        params = spec["paths"]["/v1/transcripts"]["get"]["parameters"]
        assert {"name": "order", "in": "query"}.items() <= params[0].items()
