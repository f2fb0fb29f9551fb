"""The official Durable Streams clients (``@durable-streams/client`` on npm and
``durable-streams`` on PyPI) follow a live transcript of a real server, in both
of the protocol's live modes."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

import client_py
from tests.conftest import require_binary
from tests.durable_streams.test_conformance import HERE, npm_ci
from tests.support.servers import running_server

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("live", ["sse", "long-poll"])
async def test_the_official_client_follows_a_live_transcript(live: str) -> None:
    node = require_binary("node")
    npm_ci()
    async with running_server() as srv, client_py.connect(srv.url) as client:
        await client.create("t1", [{"role": "user", "content": "a"}])
        proc = await asyncio.create_subprocess_exec(
            node,
            "outside_client.mjs",
            f"{srv.url}/v1/stream/transcripts/t1",
            "3",
            live,
            cwd=HERE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(30):
                ready = await proc.stdout.readline()
                assert json.loads(ready) == {"ready": True}, ready
                await client.append("t1", [{"role": "assistant", "content": "b"}])
                await client.append("t1", [{"role": "user", "content": "c"}])
                out, err = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0, out + err
    seen = json.loads(out)
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
