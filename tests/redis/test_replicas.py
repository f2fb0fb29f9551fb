"""Several ``tsync serve`` processes on one private Redis: fan-out across
replicas, concurrent writers (on a Redis Cluster too), a replica killed with
SIGKILL, Redis restarted (AOF on) and Redis paused. After each, every subscriber's copy equals the
transcript Redis holds, and every acknowledged append is in it exactly once."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.redis.replicas import (
    Follower,
    append,
    authoritative,
    check_converged,
    create,
    replicas,
    texts_of,
)
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis

#: Short timeouts so that a stopped or paused Redis fails appends quickly.
FAST_FAIL = "?socket_timeout=0.3&socket_connect_timeout=0.3&retries=1"


async def test_a_change_through_one_replica_reaches_subscribers_of_the_other(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    url = shared_redis.url + "?prefix=fanout:"
    async with replicas(2, url, tmp_path) as (a, b), httpx.AsyncClient(timeout=10) as http:
        await create(http, a.url, "t")
        on_a, on_b = Follower("t"), Follower("t")
        await on_a.attach(a.ws_url)
        await on_b.attach(b.ws_url)
        await asyncio.gather(on_a.wait_revision(0), on_b.wait_revision(0))
        for i in range(20):
            reply = await append(http, a.url, "t", [f"a{i}", f"a{i}+"])
            assert reply.status_code == 201, reply.text
        # And the other way round.
        reply = await append(http, b.url, "t", ["from b"])
        assert reply.json()["revision"] == 21
        stored = await authoritative(url, "t")
        assert stored.revision == 21
        await check_converged([on_a, on_b], stored)
        # Each change came once, as an increment after the one baseline.
        assert [e.revision for e in on_b.events] == list(range(1, 22))
        assert (on_a.baselines, on_b.baselines) == (1, 1)
        # Reads on either replica give the same transcript.
        for replica in (a, b):
            snapshot = (await http.get(f"{replica.url}/v1/transcripts/t")).json()
            assert snapshot["revision"] == 21
            assert [m["content"] for m in snapshot["messages"]] == texts_of(on_a.messages)
        await on_a.detach()
        await on_b.detach()


@pytest.fixture(params=["redis", "cluster"])
def shared_url(request: pytest.FixtureRequest) -> str:
    """The module's Redis, or its three-master Redis Cluster."""
    name = "shared_redis" if request.param == "redis" else "shared_cluster"
    url: str = request.getfixturevalue(name).url
    return url


async def test_concurrent_writers_on_three_replicas_land_in_one_order(
    shared_url: str, tmp_path: Path
) -> None:
    url = shared_url + "?prefix=writers:"
    async with replicas(3, url, tmp_path) as procs, httpx.AsyncClient(timeout=10) as http:
        await create(http, procs[0].url, "t")
        followers = [Follower("t") for _ in procs]
        for follower, proc in zip(followers, procs, strict=True):
            await follower.attach(proc.ws_url)
        per_writer = 15

        async def writer(w: int) -> list[int]:
            revisions = []
            for i in range(per_writer):
                reply = await append(http, procs[w].url, "t", [f"w{w}-{i}"], key=f"w{w}-{i}")
                assert reply.status_code == 201, reply.text
                revisions.append(reply.json()["revision"])
            return revisions

        won = await asyncio.gather(*(writer(w) for w in range(len(procs))))
        total = per_writer * len(procs)
        assert sorted(r for revs in won for r in revs) == list(range(1, total + 1))
        for revs in won:
            assert revs == sorted(revs)  # each writer's own appends keep their order

        # expectedRevision: two replicas race for the same next revision.
        racing = await asyncio.gather(
            append(http, procs[1].url, "t", ["race b"], expected=total),
            append(http, procs[2].url, "t", ["race c"], expected=total),
        )
        codes = sorted(r.status_code for r in racing)
        assert codes == [201, 409], [r.text for r in racing]
        conflict = next(r for r in racing if r.status_code == 409).json()
        assert conflict["code"] == "revision-conflict"
        assert conflict["revision"] == total + 1
        # A replica whose copy trails still judges expectedRevision against
        # the store, not its copy: the current revision is accepted anywhere.
        reply = await append(http, procs[0].url, "t", ["after race"], expected=total + 1)
        assert reply.status_code == 201, reply.text

        stored = await authoritative(url, "t")
        assert stored.revision == total + 2
        texts = Counter(texts_of([m for e in stored.events for m in e.change.messages]))  # type: ignore[union-attr]
        assert all(n == 1 for n in texts.values())
        assert len(texts) == total + 2
        await check_converged(followers, stored)
        # Every subscriber saw one identical order (the store's).
        assert [(f.baselines, f.base_revision) for f in followers] == [(1, 0)] * 3
        assert all(f.events == followers[0].events for f in followers)
        for follower in followers:
            await follower.detach()


async def test_clients_of_a_killed_replica_resume_on_another(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    url = shared_redis.url + "?prefix=kill:"
    async with replicas(3, url, tmp_path) as (a, b, c), httpx.AsyncClient(timeout=10) as http:
        await create(http, b.url, "t")
        moving = [Follower("t") for _ in range(3)]
        staying = Follower("t")
        for follower in moving:
            await follower.attach(a.ws_url)
        await staying.attach(c.ws_url)
        for i in range(10):
            assert (await append(http, b.url, "t", [f"before {i}"])).status_code == 201
        await asyncio.gather(*(f.wait_revision(10) for f in moving))

        a.kill()  # SIGKILL: no goodbye, the sockets just drop
        for i in range(10):
            assert (await append(http, b.url, "t", [f"during {i}"])).status_code == 201
        # The clients move: two to B, one to C, each resuming from revision 10.
        for follower, replica in zip(moving, (b, b, c), strict=True):
            assert follower.revision == 10
            await follower.attach(replica.ws_url)
        for i in range(5):
            assert (await append(http, c.url, "t", [f"after {i}"])).status_code == 201

        stored = await authoritative(url, "t")
        assert stored.revision == 25
        await check_converged([*moving, staying], stored)
        for follower in moving:
            # Resumed by increments: no second baseline, no gap, no repeat.
            assert follower.baselines == 1
            assert [e.revision for e in follower.events] == list(range(1, 26))
            assert follower.continuity.counters.repeats_ignored == 0
        for follower in [*moving, staying]:
            await follower.detach()


async def test_redis_restart_loses_nothing_acknowledged(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    url = redis_server.url + FAST_FAIL
    async with replicas(2, url, tmp_path) as (a, b), httpx.AsyncClient(timeout=10) as http:
        await create(http, a.url, "t")
        followers = [Follower("t"), Follower("t")]
        await followers[0].attach(a.ws_url)
        await followers[1].attach(b.ws_url)
        acked: list[str] = []
        for i in range(10):
            reply = await append(http, (a, b)[i % 2].url, "t", [f"before {i}"], key=f"k{i}")
            assert reply.status_code == 201
            acked.append(f"before {i}")
        await asyncio.gather(*(f.wait_revision(10) for f in followers))

        redis_server.kill()  # SIGKILL; appendfsync always kept every ack on disk
        for replica in (a, b):
            reply = await append(http, replica.url, "t", ["lost"], key=f"down-{replica.port}")
            assert reply.status_code == 503, reply.text
            problem = reply.json()
            assert problem["code"] == "unavailable"
            assert "unreachable" in problem["detail"]

        redis_server.start()  # same port, same AOF
        # The replicas reconnect by themselves: appends through both succeed.
        for i in range(10, 20):
            reply = await append(http, (a, b)[i % 2].url, "t", [f"after {i}"], key=f"k{i}")
            assert reply.status_code == 201, reply.text
            acked.append(f"after {i}")

        stored = await authoritative(url, "t")
        texts = texts_of([m for e in stored.events for m in e.change.messages])  # type: ignore[union-attr]
        assert texts == acked  # in order, once each; the refused ones are not there
        await check_converged(followers, stored)
        assert [f.baselines for f in followers] == [1, 1]
        for follower in followers:
            await follower.detach()


async def test_redis_paused_times_out_then_converges(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    url = redis_server.url + FAST_FAIL
    async with replicas(2, url, tmp_path) as (a, b), httpx.AsyncClient(timeout=10) as http:
        await create(http, a.url, "t")
        followers = [Follower("t"), Follower("t")]
        await followers[0].attach(a.ws_url)
        await followers[1].attach(b.ws_url)
        for i in range(5):
            assert (await append(http, b.url, "t", [f"m{i}"], key=f"m{i}")).status_code == 201
        await asyncio.gather(*(f.wait_revision(5) for f in followers))

        redis_server.pause()  # SIGSTOP: connections stay open, nothing answers
        try:
            replies = await asyncio.gather(
                append(http, a.url, "t", ["p-a"], key="p-a"),
                append(http, b.url, "t", ["p-b"], key="p-b"),
            )
        finally:
            redis_server.resume()
        for reply in replies:
            assert reply.status_code == 503, reply.text
            assert "did not answer" in reply.json()["detail"]

        # The outcome of a timed-out append is unknown (Redis may run it when
        # it wakes up): retried with the same key, each lands exactly once.
        for key, replica in (("p-a", b), ("p-b", a)):
            reply = await append(http, replica.url, "t", [key], key=key)
            assert reply.status_code in (200, 201), reply.text
        for i in range(5, 10):
            assert (await append(http, a.url, "t", [f"m{i}"], key=f"m{i}")).status_code == 201

        stored = await authoritative(url, "t")
        texts = Counter(texts_of([m for e in stored.events for m in e.change.messages]))  # type: ignore[union-attr]
        assert texts == Counter([f"m{i}" for i in range(10)] + ["p-a", "p-b"])
        assert stored.revision == 12
        await check_converged(followers, stored)
        for follower in followers:
            await follower.detach()
