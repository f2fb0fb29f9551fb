"""The Redis streams registry against a real Redis: writes that redis-py
retries after a lost answer are made once, a Redis that is down is a 503
(never a 500) and the streams are there again when it is back, a stream with
a TTL carries a Redis expiry, and a deletion on one replica is seen on the
other."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from server.store.redis import RedisStore
from server.store.redis.link import Script
from server.streams.shared import SharedPort
from tests.support.redis_server import RedisServer
from tests.support.servers import RunningServer, running_server

pytestmark = pytest.mark.redis

TEXT = {"content-type": "text/plain"}


def registry(server: RunningServer) -> SharedPort:
    """The port of the server's streams on the Redis store."""
    port = server.app.state.streams.port
    assert isinstance(port, SharedPort)
    return port


class AnsweredTwice(Script):
    """A script whose first answer is lost: redis-py runs it again (as it
    does after a connection error or a timeout), and that answer is the one
    the caller gets."""

    def __init__(self, script: Script) -> None:
        super().__init__(script.text)

    async def __call__(self, client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        await super().__call__(client, keys, args)
        return await super().__call__(client, keys, args)


async def test_writes_retried_after_a_lost_answer_are_made_once(
    shared_redis: RedisServer,
) -> None:
    url = f"{shared_redis.url}?prefix=r{uuid.uuid4().hex[:8]}:"
    path = "/v1/stream/retried"
    async with (
        running_server(store=RedisStore(url)) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
    ):
        part = registry(srv).store  # the store's streams part: its scripts
        for name in ("_create", "_update", "_remove", "_fork", "_unfork"):
            setattr(part, name, AnsweredTwice(getattr(part, name)))
        made = await http.put(path, headers=TEXT, content=b"one")
        assert made.status_code == 201
        appended = await http.post(path, headers=TEXT, content=b" two")
        assert appended.status_code == 204
        closed = await http.post(path, headers={"stream-closed": "true"})
        assert closed.status_code == 204
        read = await http.get(path, params={"offset": "-1"})
        assert read.content == b"one two" and read.headers["stream-closed"] == "true"
        assert read.headers["stream-next-offset"] == appended.headers["stream-next-offset"]
        fork = await http.put(path + "-fork", headers={"stream-forked-from": path})
        assert fork.status_code == 201
        assert (await http.delete(path + "-fork")).status_code == 204
        assert (await http.delete(path)).status_code == 204
        assert (await http.get(path, params={"offset": "-1"})).status_code == 404
        client = aioredis.Redis.from_url(shared_redis.url)
        try:
            left = [k async for k in client.scan_iter(url.rsplit("=", 1)[1] + "*")]
        finally:
            await client.aclose()
        assert all(k.endswith(b":gone") for k in left), left


async def test_a_redis_that_is_down_is_a_503_and_the_streams_are_back_with_it(
    redis_server: RedisServer,
) -> None:
    path = "/v1/stream/outage"
    async with (
        running_server(store=RedisStore(redis_server.url)) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
    ):
        assert (await http.put(path, headers=TEXT, content=b"kept")).status_code == 201
        redis_server.stop()
        for answer in (
            await http.post(path, headers=TEXT, content=b"lost"),
            await http.get(path, params={"offset": "-1"}),
            await http.head(path),
            await http.put(path + "2", headers=TEXT),
        ):
            assert answer.status_code == 503, answer.text
            assert answer.headers["retry-after"] == "1"
        redis_server.start()
        read = await http.get(path, params={"offset": "-1"})
        assert read.status_code == 200 and read.content == b"kept"


async def test_a_stream_with_a_ttl_expires_in_redis_too(shared_redis: RedisServer) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    async with (
        running_server(store=RedisStore(f"{shared_redis.url}?prefix={prefix}")) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
    ):
        made = await http.put("/v1/stream/ttl", headers={**TEXT, "stream-ttl": "3600"})
        assert made.status_code == 201
        assert (await http.put("/v1/stream/forever", headers=TEXT)).status_code == 201
        client = aioredis.Redis.from_url(shared_redis.url)
        try:
            keys = registry(srv).store.keys
            ttl_ms = await client.pttl(keys("/v1/stream/ttl")[0])
            assert 3600_000 < ttl_ms <= 3660_000
            assert await client.pttl(keys("/v1/stream/forever")[0]) == -1
            # A fork keeps its source in Redis for as long as it reads through it.
            fork = {"stream-forked-from": "/v1/stream/ttl", "stream-ttl": "60"}
            assert (await http.put("/v1/stream/f", headers=fork)).status_code == 201
            assert await client.pttl(keys("/v1/stream/ttl")[0]) == -1
            assert (await http.delete("/v1/stream/f")).status_code == 204
            assert await client.pttl(keys("/v1/stream/ttl")[0]) > 3600_000
        finally:
            await client.aclose()


async def test_a_stream_deleted_through_a_is_gone_on_b(shared_redis: RedisServer) -> None:
    url = f"{shared_redis.url}?prefix=d{uuid.uuid4().hex[:8]}:"
    path = "/v1/stream/deleted"
    async with (
        running_server(store=RedisStore(url)) as a,
        running_server(store=RedisStore(url)) as b,
        httpx.AsyncClient(base_url=a.url, timeout=20) as http_a,
        httpx.AsyncClient(base_url=b.url, timeout=20) as http_b,
    ):
        assert (await http_a.put(path, headers=TEXT, content=b"old")).status_code == 201
        assert (await http_b.get(path, params={"offset": "-1"})).content == b"old"
        assert (await http_a.delete(path)).status_code == 204
        assert (await http_b.get(path, params={"offset": "-1"})).status_code == 404
        # Made again, as JSON: B answers from the new one, not its old copy.
        json_type = {"content-type": "application/json"}
        assert (await http_a.put(path, headers=json_type, content=b"[1]")).status_code == 201
        read = await http_b.get(path, params={"offset": "-1"})
        assert read.json() == [1] and read.headers["content-type"] == "application/json"
