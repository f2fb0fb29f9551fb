"""``tsync serve --workers 2`` on a private Redis: two processes behind one
port, connections spread over both, a change made through one reaches the
subscribers of the other, and SIGTERM stops both cleanly (1001 to every
WebSocket, exit status 0, no process left)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.redis.replicas import Follower, append, authoritative, check_converged, create
from tests.support.redis_server import RedisServer
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.redis

MIN_FOLLOWERS = 4
MAX_FOLLOWERS = 40


async def _health_by_pid(url: str, want: int) -> dict[int, dict[str, Any]]:
    """``/healthz`` over fresh connections until ``want`` workers answered
    (the kernel picks one per connection); the last answer of each."""
    seen: dict[int, dict[str, Any]] = {}
    fresh = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=5, limits=fresh) as http:
        for _ in range(400):
            body = (await http.get(f"{url}/healthz")).json()
            seen[body["pid"]] = body
            if len(seen) >= want:
                return seen
    raise AssertionError(f"only {len(seen)} of {want} workers answered 400 connections")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_two_workers_share_a_port_and_their_subscribers(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    url = shared_redis.url + "?prefix=workers:"
    server = ServerProcess(
        store=url,
        args=["--workers", "2", "--set", "backplane_resync_s=0.5"],
        log_path=tmp_path / "server.log",
    )
    server.start()
    try:
        workers = await _health_by_pid(server.url, 2)
        assert len(workers) == 2 and server.proc is not None
        assert server.proc.pid not in workers  # the parent only supervises

        fresh = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=10, limits=fresh) as http:
            await create(http, server.url, "t")
            # Subscribers until each worker has some (the kernel picks a
            # worker per connection by a hash: a few are enough).
            followers: list[Follower] = []
            counts: dict[int, int] = {}
            while len(followers) < MIN_FOLLOWERS or min(counts.values(), default=0) == 0:
                assert len(followers) < MAX_FOLLOWERS, f"one worker got every connection: {counts}"
                follower = Follower("t")
                await follower.attach(server.ws_url)
                followers.append(follower)
                # Each worker counts its own subscriptions.
                async with asyncio.timeout(10):
                    while sum(counts.values()) != len(followers):
                        health = await _health_by_pid(server.url, 2)
                        counts = {pid: body["subscriptions"] for pid, body in health.items()}
            # Appends over fresh connections land on either worker; every
            # follower, on either worker, gets every one of them once.
            for i in range(20):
                reply = await append(http, server.url, "t", [f"m{i}"], key=f"k{i}")
                assert reply.status_code == 201, reply.text
            stored = await authoritative(url, "t")
            assert stored.revision == 20
            await check_converged(followers, stored)
            assert all(f.baselines == 1 for f in followers)

            # SIGTERM to the parent: each worker drains and closes with 1001.
            assert await asyncio.to_thread(server.terminate, 30) == 0
            for follower in followers:
                assert follower._reader is not None
                async with asyncio.timeout(5):
                    await asyncio.shield(follower._reader)
                assert follower.ws is not None and follower.ws.close_code == 1001
        assert all(_gone(pid) for pid in workers)
        log = (tmp_path / "server.log").read_text()
        assert "Traceback" not in log, log
    finally:
        server.kill()


async def test_a_worker_that_dies_is_started_again(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    server = ServerProcess(
        store=shared_redis.url + "?prefix=restart:",
        args=["--workers", "2"],
        log_path=tmp_path / "server.log",
    )
    server.start()
    try:
        first = set(await _health_by_pid(server.url, 2))
        victim = min(first)
        os.kill(victim, 9)
        async with asyncio.timeout(20):
            while True:
                now = set(await _health_by_pid(server.url, 2))
                if victim not in now and len(now) == 2:
                    break
        assert "exited with status -9; starting it again" in (tmp_path / "server.log").read_text()
        assert await asyncio.to_thread(server.terminate, 30) == 0
    finally:
        server.kill()
