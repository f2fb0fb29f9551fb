"""Connection and transcript lifecycle: heartbeats, idle eviction, graceful shutdown."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import pytest
import websockets

from protocol.wire import Baseline, Increment
from tests.support.servers import ServerProcess, running_server
from tests.support.waiting import until
from tests.support.wsclient import RawClient


async def test_dead_connections_are_closed_by_heartbeat() -> None:
    async with running_server(ping_interval_s=0.2, ping_timeout_s=0.3) as srv:
        alive = await RawClient.connect(srv.ws_url)
        dead = await RawClient.connect(srv.ws_url)
        await until(lambda: len(srv.hub.subscriptions.connections) == 2)
        dead.ws.transport.pause_reading()  # type: ignore[attr-defined]  # never pongs again
        await until(lambda: len(srv.hub.subscriptions.connections) == 1)
        await alive.send(op="ping", ref="ok")
        assert (await alive.recv()).ref == "ok"  # type: ignore[union-attr]
        await alive.close()
        dead.ws.transport.abort()  # type: ignore[attr-defined]


async def test_idle_transcripts_leave_memory_and_come_back() -> None:
    async with running_server(idle_ttl_s=0.2) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        await http.post(
            "/v1/transcripts",
            json={"id": "idle", "messages": [{"role": "user", "content": "a"}]},
        )
        async with await RawClient.connect(srv.ws_url) as c:
            await c.send(op="subscribe", transcriptId="idle")
            base = await c.expect(Baseline)
            sweeps = srv.hub.sweeps
            await until(lambda: srv.hub.sweeps >= sweeps + 8)  # > 0.4 s: twice the TTL
            assert "idle" in srv.hub.live
            await c.send(op="unsubscribe", transcriptId="idle")
            await until(lambda: "idle" not in srv.hub.live)
            # Loaded again on use, same epoch and history; subscribers resume.
            r = await http.post(
                "/v1/transcripts/idle/messages",
                json={"messages": [{"role": "user", "content": "b"}]},
            )
            assert r.json()["revision"] == 2
            await c.send(
                op="subscribe", transcriptId="idle", fromRevision=1, epoch=base.snapshot.epoch
            )
            inc = await c.expect(Increment)
            assert inc.event.revision == 2 and inc.event.epoch == base.snapshot.epoch


async def test_graceful_shutdown_closes_with_1001_and_keeps_data(tmp_path: Path) -> None:
    server = ServerProcess(store=f"sqlite:{tmp_path / 'data'}", log_path=tmp_path / "log")
    server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            await http.post("/v1/transcripts", json={"id": "bye"})
            for i in range(20):
                await http.post(
                    "/v1/transcripts/bye/messages",
                    json={"messages": [{"role": "user", "content": str(i)}]},
                )
        async with websockets.connect(server.ws_url, compression=None) as ws:
            await ws.send('{"op":"subscribe","transcriptId":"bye"}')
            await ws.recv()
            # uvicorn re-raises the signal after its graceful shutdown.
            assert server.terminate() in (0, -signal.SIGTERM)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                async with asyncio.timeout(10):
                    while True:
                        await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        server.start()
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/v1/transcripts/bye")).json()["revision"] == 20
    finally:
        server.kill()
