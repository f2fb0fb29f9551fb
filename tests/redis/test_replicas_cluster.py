"""``tsync serve`` replicas on a Redis Cluster (three masters started by the
tests): a change through one replica reaches the subscribers of the other
through the transcript's sharded channel, and a killed master costs only its
own transcripts: they answer ``unavailable`` while it is down, the others
keep working, and nothing acknowledged is lost once it is back. (Concurrent
writers on both kinds of store: ``test_replicas.py``.)"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from server.store.redis import RedisStore
from tests.redis.replicas import (
    Follower,
    append,
    authoritative,
    check_converged,
    create,
    replicas,
    texts_of,
)
from tests.support.redis_cluster import RedisCluster

pytestmark = pytest.mark.redis

#: Short timeouts so that appends to a dead master fail quickly.
FAST_FAIL = "socket_timeout=0.5&socket_connect_timeout=0.5&retries=1"


async def test_a_change_through_one_replica_reaches_subscribers_of_the_other(
    shared_cluster: RedisCluster, tmp_path: Path
) -> None:
    url = shared_cluster.url + "?prefix=fanout:"
    async with replicas(2, url, tmp_path) as (a, b), httpx.AsyncClient(timeout=10) as http:
        ids = [f"t{i}" for i in range(6)]  # on every master
        for tid in ids:
            await create(http, a.url, tid)
        on_a = [Follower(tid) for tid in ids]
        on_b = [Follower(tid) for tid in ids]
        for follower in on_a:
            await follower.attach(a.ws_url)
        for follower in on_b:
            await follower.attach(b.ws_url)
        for i in range(10):
            for tid in ids:
                replica = (a, b)[i % 2]
                reply = await append(http, replica.url, tid, [f"{tid}-{i}"])
                assert reply.status_code == 201, reply.text
        for tid, mine, theirs in zip(ids, on_a, on_b, strict=True):
            stored = await authoritative(url, tid)
            assert stored.revision == 10
            await check_converged([mine, theirs], stored)
            # Each change came once, as an increment after the one baseline.
            assert [e.revision for e in theirs.events] == list(range(1, 11))
            assert (mine.baselines, theirs.baselines) == (1, 1)
        for follower in [*on_a, *on_b]:
            await follower.detach()


async def test_a_killed_master_costs_only_its_own_transcripts(
    redis_cluster: RedisCluster, tmp_path: Path
) -> None:
    url = redis_cluster.url + "?" + FAST_FAIL
    probe = RedisStore(url)
    index_node = redis_cluster.node_of(probe._index)
    victim = next(n for n in redis_cluster.nodes if n is not index_node)
    names = (f"t{i}" for i in itertools.count())
    on_victim, elsewhere = [], []
    while not (on_victim and elsewhere):
        tid = next(names)
        node = redis_cluster.node_of(probe._keys(tid)[0])
        (on_victim if node is victim else elsewhere).append(tid)
    doomed, spared = on_victim[0], elsewhere[0]

    async with replicas(2, url, tmp_path) as (a, b), httpx.AsyncClient(timeout=10) as http:
        followers = {}
        for tid in (doomed, spared):
            await create(http, a.url, tid)
            followers[tid] = [Follower(tid), Follower(tid)]
            await followers[tid][0].attach(a.ws_url)
            await followers[tid][1].attach(b.ws_url)
        acked: dict[str, list[str]] = {doomed: [], spared: []}
        for i in range(4):
            for tid in (doomed, spared):
                text = f"{tid} before {i}"
                reply = await append(http, (a, b)[i % 2].url, tid, [text], key=text)
                assert reply.status_code == 201, reply.text
                acked[tid].append(text)

        victim.kill()  # SIGKILL: appendfsync always kept every acknowledged append
        for replica in (a, b):
            reply = await append(http, replica.url, doomed, ["lost"], key=f"lost-{replica.port}")
            assert reply.status_code == 503, reply.text
            problem = reply.json()
            assert problem["code"] == "unavailable"
            assert f"127.0.0.1:{victim.port}" in problem["detail"], problem
            text = f"{spared} during {replica.port}"
            reply = await append(http, replica.url, spared, [text], key=text)
            assert reply.status_code == 201, reply.text
            acked[spared].append(text)
        # The spared transcript's subscribers on both replicas keep up.
        stored = await authoritative(url, spared)
        await check_converged(followers[spared], stored)

        victim.start()  # same port, same data
        redis_cluster.wait_ok()
        for i in range(3):
            text = f"{doomed} after {i}"
            reply = await append(http, (a, b)[i % 2].url, doomed, [text], key=text)
            assert reply.status_code == 201, reply.text
            acked[doomed].append(text)
        for tid in (doomed, spared):
            stored = await authoritative(url, tid)
            texts = texts_of([m for e in stored.events for m in e.change.messages])  # type: ignore[union-attr]
            assert texts == acked[tid]  # in order, once each; the refused one is not there
            await check_converged(followers[tid], stored, timeout=20)
        for pair in followers.values():
            for follower in pair:
                await follower.detach()


async def test_the_bench_measures_across_replicas_of_the_cluster(
    shared_cluster: RedisCluster, tmp_path: Path
) -> None:
    """``tsync bench --writer-url``: the writer on replica A, the subscribers
    (fast checks) on replica B; every delivery crosses the cluster."""
    url = shared_cluster.url + "?prefix=bench:"
    out = tmp_path / "result.json"
    async with replicas(2, url, tmp_path) as (a, b):
        cmd = [
            sys.executable, "-m", "server.run.cli", "bench", "fanout",
            "--url", b.url, "--writer-url", a.url, "--subscribers", "10",
            "--rate", "20", "--duration", "2", "--fast", "--no-progress",
            "--json", str(out),
        ]  # fmt: skip
        done = await asyncio.to_thread(
            subprocess.run,
            cmd,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads(out.read_text())["runs"][0]
    assert run["writer_url"] == a.ws_url and run["url"] == b.ws_url
    on_time = run["groups"]["on-time"]
    assert on_time["delivered"] == on_time["expected"] == 10 * run["writers"]["acks"] > 0
