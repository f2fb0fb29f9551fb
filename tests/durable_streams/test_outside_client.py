"""The official Durable Streams clients (``@durable-streams/client`` on npm and
``durable-streams`` on PyPI) follow a live transcript of a real server, in both
of the protocol's live modes."""

from __future__ import annotations

import asyncio

import pytest

import client_py
from tests.durable_streams.test_conformance import HERE
from tests.support.node import node_script, npm_ci
from tests.support.servers import running_server

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("live", ["sse", "long-poll"])
async def test_the_official_client_follows_a_live_transcript(live: str) -> None:
    npm_ci(HERE)
    async with running_server() as srv, client_py.connect(srv.url) as client:
        await client.create("t1", [{"role": "user", "content": "a"}])
        args = (f"{srv.url}/v1/stream/transcripts/t1", "3", live)
        async with node_script("outside_client.mjs", *args, cwd=HERE) as run:
            await client.append("t1", [{"role": "assistant", "content": "b"}])
            await client.append("t1", [{"role": "user", "content": "c"}])
            seen = await run.finish()
    assert seen["revisions"] == [1, 2, 3]
    assert seen["contentType"] == "application/json"


@pytest.mark.parametrize("live", ["sse", "long-poll"])
async def test_the_official_python_client_follows_a_live_transcript(live: str) -> None:
    import durable_streams

    async with running_server() as srv, client_py.connect(srv.url) as client:
        await client.create("t1", [{"role": "user", "content": "a"}])
        seen: list[int] = []
        first = asyncio.Event()

        async def follow() -> None:
            url = f"{srv.url}/v1/stream/transcripts/t1"
            async with durable_streams.astream(url, offset="-1", live=live) as response:
                async for event in response.iter_json():
                    seen.append(event["revision"])
                    first.set()
                    if len(seen) == 3:
                        return

        reader = asyncio.create_task(follow())
        try:
            async with asyncio.timeout(30):
                await first.wait()
                await client.append("t1", [{"role": "assistant", "content": "b"}])
                await client.append("t1", [{"role": "user", "content": "c"}])
                await reader
        finally:
            reader.cancel()
    assert seen == [1, 2, 3]
