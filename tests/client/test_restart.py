"""A real server (SQLite store) killed and restarted under a live mirror,
with appends in flight: nothing lost, nothing doubled."""

from __future__ import annotations

import asyncio
from pathlib import Path

import client_py
from tests.client.test_client import assert_mirror_equals
from tests.support.servers import ServerProcess


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def test_a_mirror_resumes_across_a_server_restart(tmp_path: Path) -> None:
    server = ServerProcess(store=f"sqlite:{tmp_path / 'data'}", log_path=tmp_path / "server.log")
    await asyncio.to_thread(server.start)
    try:
        async with client_py.connect(
            server.ws_url, backoff_min=0.02, backoff_max=0.3, request_timeout=20, heartbeat=0.2
        ) as client:
            created = await client.create("restart", [user("before-0")])
            mirror = await client.subscribe("restart")
            for i in range(1, 5):
                await client.append("restart", [user(f"before-{i}")])
            await mirror.wait_for_revision(5, timeout=5)

            # Keep appending while the server is killed and comes back: the
            # appends in flight are re-sent on the new connection.
            under_way = asyncio.Event()

            async def writer() -> None:
                for i in range(40):
                    await client.append("restart", [user(f"during-{i}")])
                    if i == 4:
                        under_way.set()

            writing = asyncio.create_task(writer())
            await asyncio.wait_for(under_way.wait(), 10)
            await asyncio.to_thread(server.restart)
            await asyncio.wait_for(writing, 30)
            for i in range(3):
                await client.append("restart", [user(f"after-{i}")])

            snapshot = await client.get("restart")
            await mirror.wait_for_revision(snapshot.revision, timeout=10)
            assert_mirror_equals(mirror, snapshot)
            assert snapshot.epoch == created.epoch  # the store kept the transcript
            texts = [m.content for m in snapshot.messages]
            assert texts == [
                *(f"before-{i}" for i in range(5)),
                *(f"during-{i}" for i in range(40)),
                *(f"after-{i}" for i in range(3)),
            ]
            print(f"\nclient: {client.counters.as_dict()}\nmirror: {mirror.counters.as_dict()}")
            assert client.counters.reconnects >= 1
            assert mirror.counters.resumes >= 1
            assert mirror.counters.rebaselines == 0  # resumed from its revision
    finally:
        await asyncio.to_thread(server.kill)
