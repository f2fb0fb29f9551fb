"""Durable Streams shared by replicas on one Redis (or Redis Cluster).

A reader waiting on replica B (long-poll, SSE) sees an append made through
replica A at once: A's write publishes the stream's path, B reads its copy
again and wakes its readers. The safety net that reads waited-on streams
again (``backplane_resync_s``) is set to a minute here, and the long-poll to
half a minute, so a reader answered within seconds was woken by the notice.
An append acknowledged by a replica that is then killed is read from the
other, and its producer's retry there is a duplicate, not a second copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from server.store.redis import RedisStore
from server.streams.shared import SharedPort
from tests.redis.replicas import replicas
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer
from tests.support.servers import RunningServer, running_server
from tests.support.waiting import until

pytestmark = pytest.mark.redis

TEXT = {"content-type": "text/plain"}
#: Far beyond the test's own bound: only a notice can wake a reader in time.
SLOW_SAFETY_NET: dict[str, Any] = {"backplane_resync_s": 60.0, "stream_long_poll_s": 30.0}
WAKE_BOUND_S = 10.0


@pytest.fixture(params=["redis", "cluster"])
def store_url(request: pytest.FixtureRequest) -> str:
    """A fresh key prefix on the module's Redis, or on its Redis Cluster."""
    backend = request.getfixturevalue(
        "shared_redis" if request.param == "redis" else "shared_cluster"
    )
    return f"{backend.url}?prefix=s{uuid.uuid4().hex[:8]}:"


def registry(server: RunningServer) -> SharedPort:
    """The port of the server's streams on the Redis store."""
    port = server.app.state.streams.port
    assert isinstance(port, SharedPort)
    return port


def waiting(server: RunningServer, path: str, readers: int) -> bool:
    """Long-polls waiting and SSE readers following (``server.streams.fanout``)."""
    streams = server.app.state.streams
    return len(streams._waiters.get(path, ())) + streams.fanout.count(path) >= readers


@contextlib.asynccontextmanager
async def sse_events(
    http: httpx.AsyncClient, path: str, offset: str
) -> AsyncIterator[asyncio.Queue[tuple[str, str]]]:
    """The (event, data) pairs of an SSE read, as they come."""
    events: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def read() -> None:
        event, lines = "", []
        params = {"offset": offset, "live": "sse"}
        async with http.stream("GET", path, params=params) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    lines.append(line[5:])
                elif line == "" and event:
                    await events.put((event, "\n".join(lines)))
                    event, lines = "", []

    task = asyncio.create_task(read())
    try:
        yield events
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def next_data(events: asyncio.Queue[tuple[str, str]]) -> str:
    while True:
        event, data = await events.get()
        if event == "data":
            return data


async def test_readers_on_b_see_an_append_through_a_at_once(store_url: str) -> None:
    path = "/v1/stream/chat/one"
    async with (
        running_server(store=RedisStore(store_url), **SLOW_SAFETY_NET) as a,
        running_server(store=RedisStore(store_url), **SLOW_SAFETY_NET) as b,
        httpx.AsyncClient(base_url=a.url, timeout=40) as http_a,
        httpx.AsyncClient(base_url=b.url, timeout=40) as http_b,
    ):
        await until(lambda: registry(b).subscribed > 0, timeout=10)
        created = await http_a.put(path, headers=TEXT, content=b"first ")
        assert created.status_code == 201
        tail = created.headers["stream-next-offset"]
        # B reads what A wrote, from Redis.
        assert (await http_b.get(path, params={"offset": "-1"})).content == b"first "
        async with sse_events(http_b, path, tail) as events:
            poll = asyncio.create_task(
                http_b.get(path, params={"offset": tail, "live": "long-poll"})
            )
            await until(lambda: waiting(b, path, 2), timeout=10)
            appended = await http_a.post(path, headers=TEXT, content=b"from A")
            assert appended.status_code == 204
            async with asyncio.timeout(WAKE_BOUND_S):
                answer = await poll
                assert await next_data(events) == "from A"
            assert answer.status_code == 200 and answer.content == b"from A"
            assert answer.headers["stream-next-offset"] == appended.headers["stream-next-offset"]
            # A close through A ends B's waiting long-poll too.
            after = appended.headers["stream-next-offset"]
            poll = asyncio.create_task(
                http_b.get(path, params={"offset": after, "live": "long-poll"})
            )
            await until(lambda: waiting(b, path, 2), timeout=10)
            assert (await http_a.post(path, headers={"stream-closed": "true"})).status_code == 204
            async with asyncio.timeout(WAKE_BOUND_S):
                closed = await poll
                while True:  # and B's SSE reader gets its last control
                    event, data = await events.get()
                    if event == "control" and json.loads(data).get("streamClosed"):
                        break
        assert closed.status_code == 204 and closed.headers["stream-closed"] == "true"


async def test_many_readers_on_b_cost_b_one_read_of_redis_per_append(
    shared_redis: RedisServer,
) -> None:
    """B reads the stream once per notice and every waiting reader shares
    that copy: readers add no reads of their own."""
    url = f"{shared_redis.url}?prefix=n{uuid.uuid4().hex[:8]}:"
    path = "/v1/stream/many"
    async with (
        running_server(store=RedisStore(url), **SLOW_SAFETY_NET) as a,
        running_server(store=RedisStore(url), **SLOW_SAFETY_NET) as b,
        httpx.AsyncClient(base_url=a.url, timeout=40) as http_a,
        httpx.AsyncClient(base_url=b.url, timeout=40) as http_b,
        contextlib.AsyncExitStack() as stack,
    ):
        await until(lambda: registry(b).subscribed > 0, timeout=10)
        tail = (await http_a.put(path, headers=TEXT)).headers["stream-next-offset"]
        readers = [
            await stack.enter_async_context(sse_events(http_b, path, tail)) for _ in range(8)
        ]
        for round_ in range(3):
            await until(lambda: waiting(b, path, 8), timeout=10)
            before = registry(b).reads
            assert (await http_a.post(path, headers=TEXT, content=b"x")).status_code == 204
            async with asyncio.timeout(WAKE_BOUND_S):
                assert [await next_data(r) for r in readers] == ["x"] * 8, round_
            await until(lambda: waiting(b, path, 8), timeout=10)
            assert registry(b).reads - before == 1


async def test_a_reader_whose_notice_was_lost_wakes_when_b_subscribes_again(
    shared_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pub/sub drops what is published while a subscriber is away: after
    every (re)subscription B reads the streams its readers wait on."""
    url = f"{shared_redis.url}?prefix=l{uuid.uuid4().hex[:8]}:"
    path = "/v1/stream/lost"
    async with (
        running_server(store=RedisStore(url), **SLOW_SAFETY_NET) as a,
        running_server(store=RedisStore(url), **SLOW_SAFETY_NET) as b,
        httpx.AsyncClient(base_url=a.url, timeout=40) as http_a,
        httpx.AsyncClient(base_url=b.url, timeout=40) as http_b,
    ):
        await until(lambda: registry(b).subscribed > 0, timeout=10)
        tail = (await http_a.put(path, headers=TEXT)).headers["stream-next-offset"]
        poll = asyncio.create_task(http_b.get(path, params={"offset": tail, "live": "long-poll"}))
        await until(lambda: waiting(b, path, 1), timeout=10)
        # Every notice B gets from now on is lost, as if it came while B was away.
        monkeypatch.setattr(registry(b), "_noticed_change", lambda path: None)
        assert (await http_a.post(path, headers=TEXT, content=b"missed")).status_code == 204
        subscribed = registry(b).subscribed
        client = aioredis.Redis.from_url(shared_redis.url)
        try:
            await client.client_kill_filter(_type="pubsub")
        finally:
            await client.aclose()
        async with asyncio.timeout(WAKE_BOUND_S):
            answer = await poll
        assert registry(b).subscribed > subscribed
        assert answer.status_code == 200 and answer.content == b"missed"


async def test_producers_on_two_replicas_are_one_sequence(store_url: str) -> None:
    """Epochs and sequences are checked against Redis, whichever replica a
    request reaches: a duplicate is a duplicate, a gap a gap."""
    path = "/v1/stream/produced"
    async with (
        running_server(store=RedisStore(store_url)) as a,
        running_server(store=RedisStore(store_url)) as b,
        httpx.AsyncClient(base_url=a.url, timeout=20) as http_a,
        httpx.AsyncClient(base_url=b.url, timeout=20) as http_b,
    ):
        assert (await http_a.put(path, headers=TEXT)).status_code == 201

        def producer(epoch: int, seq: int) -> dict[str, str]:
            return {**TEXT, "producer-id": "p", "producer-epoch": str(epoch),
                    "producer-seq": str(seq)}  # fmt: skip

        assert (await http_a.post(path, headers=producer(0, 0), content=b"a")).status_code == 200
        assert (await http_b.post(path, headers=producer(0, 0), content=b"a")).status_code == 204
        assert (await http_b.post(path, headers=producer(0, 1), content=b"b")).status_code == 200
        gap = await http_a.post(path, headers=producer(0, 3), content=b"d")
        assert gap.status_code == 409 and gap.headers["producer-expected-seq"] == "2"
        assert (await http_a.post(path, headers=producer(1, 0), content=b"c")).status_code == 200
        stale = await http_b.post(path, headers=producer(0, 2), content=b"x")
        assert stale.status_code == 403 and stale.headers["producer-epoch"] == "1"
        # Concurrent appends through both replicas: each lands once, in some order.
        sends = [
            (http_a if i % 2 else http_b).post(path, headers=TEXT, content=f"<{i}>".encode())
            for i in range(20)
        ]
        assert all(r.status_code == 204 for r in await asyncio.gather(*sends))
        for http in (http_a, http_b):
            body = (await http.get(path, params={"offset": "-1"})).text
            assert body.startswith("abc")
            assert sorted(body[3:].replace("><", ">\n<").split("\n")) == sorted(
                f"<{i}>" for i in range(20)
            )


async def test_an_append_acknowledged_by_a_killed_replica_is_read_from_the_other(
    store_url: str, tmp_path: Path
) -> None:
    url = store_url
    path = "/v1/stream/kept"
    headers: dict[str, Any] = {**TEXT, "producer-id": "w", "producer-epoch": "0"}
    async with replicas(2, url, tmp_path) as (a, b), httpx.AsyncClient(timeout=20) as http:
        assert (await http.put(a.url + path, headers=TEXT)).status_code == 201
        acked = await http.post(
            a.url + path, headers={**headers, "producer-seq": "0"}, content=b"acknowledged"
        )
        assert acked.status_code == 200
        a.kill()  # SIGKILL: nothing is flushed or handed over
        read = await http.get(b.url + path, params={"offset": "-1"})
        assert read.content == b"acknowledged"
        assert read.headers["stream-next-offset"] == acked.headers["stream-next-offset"]
        # The writer retries on B: the same append is known, not made twice.
        again = await http.post(
            b.url + path, headers={**headers, "producer-seq": "0"}, content=b"acknowledged"
        )
        assert again.status_code == 204
        nxt = await http.post(
            b.url + path, headers={**headers, "producer-seq": "1"}, content=b", then B"
        )
        assert nxt.status_code == 200
        read = await http.get(b.url + path, params={"offset": "-1"})
        assert read.content == b"acknowledged, then B"


async def test_a_killed_cluster_master_costs_only_its_streams(redis_cluster: RedisCluster) -> None:
    """The master a replica listens on for notices is killed: its streams
    are 503, the others keep working, and a reader on B of a stream on
    another master still sees A's append (B listens on the next node)."""
    url = redis_cluster.url + "?socket_timeout=0.5&socket_connect_timeout=0.5&retries=1"
    victim = redis_cluster.nodes[0]  # where every replica listens first
    async with (
        running_server(store=RedisStore(url), **SLOW_SAFETY_NET) as a,
        running_server(store=RedisStore(url), **SLOW_SAFETY_NET) as b,
        httpx.AsyncClient(base_url=a.url, timeout=40) as http_a,
        httpx.AsyncClient(base_url=b.url, timeout=40) as http_b,
    ):
        paths = (f"/v1/stream/s{i}" for i in itertools.count())
        doomed = next(
            p for p in paths if redis_cluster.node_of(registry(a).store.keys(p)[0]) is victim
        )
        spared = next(
            p for p in paths if redis_cluster.node_of(registry(a).store.keys(p)[0]) is not victim
        )
        await until(lambda: registry(b).subscribed > 0, timeout=10)
        for path in (doomed, spared):
            assert (await http_a.put(path, headers=TEXT, content=b"kept")).status_code == 201
        tail = (await http_b.head(spared)).headers["stream-next-offset"]
        poll = asyncio.create_task(http_b.get(spared, params={"offset": tail, "live": "long-poll"}))
        await until(lambda: waiting(b, spared, 1), timeout=10)
        victim.kill()
        for answer in (
            await http_a.post(doomed, headers=TEXT, content=b"lost"),
            await http_b.get(doomed, params={"offset": "-1"}),
        ):
            assert answer.status_code == 503, answer.text
            assert f"127.0.0.1:{victim.port}" in answer.text
        assert (await http_a.post(spared, headers=TEXT, content=b" and on")).status_code == 204
        async with asyncio.timeout(WAKE_BOUND_S):
            answer = await poll
        assert answer.status_code == 200 and answer.content == b" and on"
        read = await http_b.get(spared, params={"offset": "-1"})
        assert read.content == b"kept and on"
