"""``/readyz`` follows a real Redis: 503 with the reason while it is down,
200 again once it is back; ``/healthz`` (liveness) never depends on it."""

from __future__ import annotations

import time

import httpx
import pytest

from server.config import ServerConfig
from tests.support.redis_server import RedisServer
from tests.support.servers import running_server

pytestmark = pytest.mark.redis


async def _ready(http: httpx.AsyncClient, want: int, timeout: float = 10.0) -> httpx.Response:
    """Ask ``/readyz`` until it answers ``want`` (each answer takes at most the
    readiness timeout: the loop is bounded by the server, not by sleeps)."""
    deadline = time.monotonic() + timeout
    while True:
        r = await http.get("/readyz")
        if r.status_code == want or time.monotonic() > deadline:
            return r


async def test_readyz_is_503_while_redis_is_down(redis_server: RedisServer) -> None:
    url = redis_server.url + "?socket_timeout=0.5&socket_connect_timeout=0.5&retries=1"
    config = ServerConfig(store=url, graceful_shutdown_s=2.0)
    async with (
        running_server(config) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=10) as http,
    ):
        ready = await http.get("/readyz")
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})

        redis_server.stop()
        down = await _ready(http, 503)
        assert down.status_code == 503
        assert down.json()["status"] == "unready"
        assert down.json()["reason"].startswith("store unreachable")
        assert (await http.get("/healthz")).status_code == 200  # alive all the same

        redis_server.start()
        back = await _ready(http, 200)
        assert (back.status_code, back.json()) == (200, {"status": "ready"})
