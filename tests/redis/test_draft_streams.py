"""A draft written through replica A, read as a Durable Stream on replica B
(``/v1/stream/transcripts/{id}/drafts/{draftId}``): B's copy, which the
backplane's draft relay keeps, grows on B as A's writer writes and closes on
B when A commits. Nothing is built for this beyond the relay the WebSocket
face has: this shows that it falls out of it."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import client_py
from server.store.redis import RedisStore
from tests.durable_streams.test_drafts import follow_sse
from tests.support.redis_server import RedisServer
from tests.support.servers import running_server
from tests.support.waiting import until

pytestmark = pytest.mark.redis

PATH = "/v1/stream/transcripts/t1/drafts/d1"


async def test_a_draft_written_on_a_is_followed_on_b_to_its_close(
    shared_redis: RedisServer,
) -> None:
    url = f"{shared_redis.url}?prefix=dstream:"
    settings = {"backplane_resync_s": 0.2, "draft_coalesce_s": 0.0}
    async with (
        running_server(store=RedisStore(url), **settings) as a,
        running_server(store=RedisStore(url), **settings) as b,
        httpx.AsyncClient(base_url=b.url, timeout=20) as http_b,
        client_py.connect(a.url) as client,
    ):
        await client.create("t1")
        async with client.draft("t1", draft_id="d1") as d:
            await d.write("From A")
            await d.sync()
            # B holds the transcript once a reader asks; its copy of the draft
            # comes from the relay's entry in Redis.
            async with asyncio.timeout(10):
                while (await http_b.head(PATH)).status_code != 200:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)  # B's view of A's draft: no event to wait on
            follower = asyncio.create_task(follow_sse(http_b, PATH))
            await until(lambda: bool(b.hub.live["t1"].draft_watchers), timeout=10)
            for token in (", live", " on B"):
                await d.write(token)
            await d.sync()
            await d.commit()
        data, controls = await asyncio.wait_for(follower, 15)
    assert data[0] == "From A"  # then the rest, live, as B's copy grew
    assert "".join(data) == "From A, live on B"
    assert controls[-1]["streamClosed"] is True
    assert all("streamClosed" not in c for c in controls[:-1])
