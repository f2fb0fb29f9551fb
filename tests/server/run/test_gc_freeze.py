"""``tsync serve``'s process moves what startup made out of the garbage
collector's reach once the server has started (``server.run.serve``); a
server run inside another process (the tests') leaves the collector alone."""

from __future__ import annotations

import asyncio
import gc
import socket

import httpx

from server.config import ServerConfig
from server.run.serve import server_for
from tests.support.servers import running_server


async def test_a_started_tsync_serve_has_frozen_its_startup_objects() -> None:
    assert gc.get_freeze_count() == 0  # nothing else in this process freezes
    config = ServerConfig(store="memory", host="127.0.0.1", graceful_shutdown_s=2.0)
    server = server_for(config)
    server.own_process = True  # as ``tsync serve`` and each worker set it
    server.config.setup_event_loop = lambda: None  # type: ignore[method-assign]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                assert not task.done(), "the server stopped during startup"
                await asyncio.sleep(0.01)
        frozen = gc.get_freeze_count()
        # The libraries' modules, classes and functions: tens of thousands.
        assert frozen > 10_000
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{port}/healthz")
        assert answer.status_code == 200  # it serves as before
    finally:
        gc.unfreeze()
        server.should_exit = True
        async with asyncio.timeout(15):
            await task
        sock.close()


async def test_a_server_inside_another_process_freezes_nothing() -> None:
    async with running_server() as server:
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"{server.url}/healthz")
        assert answer.status_code == 200
        assert gc.get_freeze_count() == 0
