"""Views survive a server killed and started again on SQLite (issue 18):
created, moved and left through the WebSocket and the HTTP API, then found
again, with their events, by a new process on the same data folder."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import msgspec

import client_py
from protocol.types import TranscriptEvent, View, ViewChanged, ViewLeft
from tests.support.servers import ServerProcess


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def test_views_live_through_restarts(tmp_path: Path) -> None:
    server = ServerProcess(store=f"sqlite:{tmp_path / 'data'}", log_path=tmp_path / "server.log")
    await asyncio.to_thread(server.start)
    try:
        async with client_py.connect(server.ws_url, backoff_min=0.02, backoff_max=0.3) as client:
            await client.create("t", [user(f"m{i}") for i in range(10)])
            await client.set_view("t", "draft", 2)
            await client.http.set_view("t", "old", 0, 4)
            mirror = await client.subscribe("t", window={"view": "draft"})
            assert mirror.start == 2
        await asyncio.to_thread(server.restart)
        async with client_py.connect(server.ws_url) as client:
            assert await client.http.views("t") == [View("draft", 2, None), View("old", 0, 4)]
            await client.set_view("t", "draft", 5, 9)  # moved
            await client.leave_view("t", "old")  # left: deletes nothing
        await asyncio.to_thread(server.restart)
        async with client_py.connect(server.ws_url) as client:
            assert await client.http.views("t") == [View("draft", 5, 9)]
            snapshot = await client.get("t")
            assert (snapshot.revision, snapshot.length, snapshot.view_changes) == (5, 10, 4)
            assert [m.content for m in snapshot.messages] == [f"m{i}" for i in range(10)]
            mirror = await client.subscribe("t", window={"view": "draft"})
            assert (mirror.start, mirror.views) == (5, (View("draft", 5, 9),))
        async with httpx.AsyncClient(base_url=server.url) as http:
            body = (await http.get("/v1/transcripts/t/events?after=1")).json()
        events = msgspec.convert(body["events"], list[TranscriptEvent])
        assert [e.change for e in events] == [
            ViewChanged("draft", 2, None),
            ViewChanged("old", 0, 4),
            ViewChanged("draft", 5, 9),
            ViewLeft("old", 0, 4),
        ]
    finally:
        await asyncio.to_thread(server.kill)
