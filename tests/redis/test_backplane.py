"""The backplane's repairs, with two in-process replicas on one Redis: a
missed notice, a stream that no longer holds the gap, a transcript deleted
and created again through the other replica."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator

import httpx
import pytest

import client_py
from protocol import wire
from protocol.types import View
from server.replicas.backplane import Backplane
from server.store.redis import RedisStore
from tests.redis.replicas import Follower, append, authoritative, check_converged, create
from tests.support.redis_server import RedisServer
from tests.support.servers import RunningServer, running_server
from tests.support.wsclient import RawClient

pytestmark = pytest.mark.redis

_prefixes = itertools.count()


@contextlib.asynccontextmanager
async def two_replicas(
    redis: RedisServer, options: str = ""
) -> AsyncIterator[tuple[str, RunningServer, RunningServer]]:
    """Two in-process replicas sharing a fresh key prefix; yields the store URL
    too. ``options`` are more store URL options (``&name=value``)."""
    url = f"{redis.url}?prefix=bp{next(_prefixes)}:"
    async with (
        running_server(store=RedisStore(url + options), backplane_resync_s=0.2) as a,
        running_server(store=RedisStore(url + options), backplane_resync_s=0.2) as b,
    ):
        yield url, a, b


def backplane_of(server: RunningServer) -> Backplane:
    backplane = server.app.state.backplane
    assert isinstance(backplane, Backplane)
    return backplane


async def test_a_missed_notice_is_repaired_by_the_safety_net(shared_redis: RedisServer) -> None:
    async with two_replicas(shared_redis) as (url, a, b), httpx.AsyncClient() as http:
        await create(http, a.url, "t")
        follower = Follower("t")
        await follower.attach(b.ws_url)
        # B stops hearing notices (as if pub/sub dropped them all).
        backplane_of(b)._background.tasks[0].cancel()
        for i in range(3):
            assert (await append(http, a.url, "t", [f"m{i}"])).status_code == 201
        await check_converged([follower], await authoritative(url, "t"), timeout=5)
        assert follower.baselines == 1
        assert backplane_of(b).counters.syncs >= 1
        await follower.detach()


async def test_a_gap_the_stream_no_longer_holds_means_a_fresh_baseline(
    shared_redis: RedisServer,
) -> None:
    async with (
        two_replicas(shared_redis, "&stream_maxlen=5") as (url, a, b),
        httpx.AsyncClient(timeout=10) as http,
    ):
        await create(http, a.url, "t")
        follower = Follower("t")
        await follower.attach(b.ws_url)
        await backplane_of(b).stop()  # B falls behind ...
        for i in range(250):  # ... further than the trimmed stream reaches
            await a.hub.writes.append("t", [{"role": "user", "content": f"m{i}"}])
        assert await b.hub.store.events_after("t", 0) is None
        await backplane_of(b).start()
        stored = await authoritative(url, "t")
        await check_converged([follower], stored)
        assert follower.baselines == 2
        assert follower.base_revision == 250
        assert backplane_of(b).counters.reloads == 1
        await follower.detach()


async def test_deleted_and_created_again_through_the_other_replica(
    shared_redis: RedisServer,
) -> None:
    async with two_replicas(shared_redis) as (url, a, b), httpx.AsyncClient() as http:
        first_epoch = await create(http, a.url, "t")
        assert (await append(http, a.url, "t", ["old"])).status_code == 201
        async with await RawClient.connect(b.ws_url) as client:
            await client.send(op="subscribe", transcriptId="t")
            baseline = await client.expect(wire.Baseline)
            assert baseline.snapshot.epoch == first_epoch
            assert (await http.delete(f"{a.url}/v1/transcripts/t")).status_code == 204
            gone = await client.expect(wire.ErrorFrame)
            assert (gone.code, gone.transcript_id) == ("not-found", "t")
            assert "t" not in b.hub.live

            second_epoch = await create(http, a.url, "t")
            assert (await append(http, a.url, "t", ["new"])).status_code == 201
            await client.send(op="subscribe", transcriptId="t", fromRevision=1, epoch=first_epoch)
            fresh = await client.expect(wire.Baseline)
            assert fresh.snapshot.epoch == second_epoch
            assert [m.content for m in fresh.snapshot.messages] == ["new"]
        # B's copy, if it kept one, is of the new epoch: an append through B lands.
        reply = await append(http, b.url, "t", ["via b"], expected=1)
        assert reply.status_code == 201, reply.text
        stored = await authoritative(url, "t")
        assert (stored.epoch, stored.revision) == (second_epoch, 2)


async def test_a_new_epoch_found_by_the_safety_net_rebaselines_subscribers(
    shared_redis: RedisServer,
) -> None:
    async with two_replicas(shared_redis) as (url, a, b), httpx.AsyncClient() as http:
        first_epoch = await create(http, a.url, "t")
        assert (await append(http, a.url, "t", ["old", "older"])).status_code == 201
        follower = Follower("t")
        await follower.attach(b.ws_url)
        await follower.wait_revision(1)
        # B hears nothing of the delete and the new creation ...
        await backplane_of(b).stop()
        assert (await http.delete(f"{a.url}/v1/transcripts/t")).status_code == 204
        second_epoch = await create(http, a.url, "t")
        for text in ("new 1", "new 2", "new 3"):
            assert (await append(http, a.url, "t", [text])).status_code == 201
        # ... and only its safety net looks afterwards. (Had it looked between
        # the delete and the creation, "not-found" would have been the right
        # answer for its subscriber: the race this test once lost under load.)
        await backplane_of(b).start()
        backplane_of(b)._background.tasks[0].cancel()
        # ... and still gives its subscriber the new transcript, as a baseline.
        stored = await authoritative(url, "t")
        assert stored.epoch == second_epoch != first_epoch
        await check_converged([follower], stored, timeout=5)
        assert follower.continuity.epoch == second_epoch
        assert follower.continuity.counters.epoch_changes == 1
        assert backplane_of(b).counters.reloads >= 1
        await follower.detach()


async def test_views_set_and_left_on_either_replica_reach_both(shared_redis: RedisServer) -> None:
    async with (
        two_replicas(shared_redis) as (url, a, b),
        client_py.connect(a.ws_url) as on_a,
        client_py.connect(b.ws_url) as on_b,
    ):
        await on_a.create("t", [{"role": "user", "content": f"m{i}"} for i in range(6)])
        mirror_a = await on_a.subscribe("t")
        mirror_b = await on_b.subscribe("t", window={"tail": 2})
        ack = await on_a.set_view("t", "draft", 1, 4)
        await mirror_b.wait_for_revision(ack.revision, timeout=5)
        assert mirror_b.views == (View("draft", 1, 4),)
        moved = await on_b.set_view("t", "draft", 3)
        left = await on_b.leave_view("t", "other")  # none: nothing changes
        assert (left.revision, left.duplicate) == (moved.revision, True)
        await mirror_a.wait_for_revision(moved.revision, timeout=5)
        assert mirror_a.views == (View("draft", 3, None),)
        gone = await on_a.leave_view("t", "draft")
        await mirror_b.wait_for_revision(gone.revision, timeout=5)
        await mirror_a.wait_for_revision(gone.revision, timeout=5)  # its increment is async too
        assert mirror_a.views == mirror_b.views == ()
        stored = await authoritative(url, "t")
        assert (stored.revision, len(stored.events)) == (gone.revision, 4)
        # A replica that loads it afresh finds the same state: no View, all messages.
        assert (await b.hub.reads.snapshot("t")).view_changes == 3
        assert mirror_b.messages == mirror_a.messages[mirror_b.start :]
