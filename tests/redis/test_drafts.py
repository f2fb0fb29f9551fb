"""Drafts across replicas on one private Redis (and a Redis Cluster): a draft
written through replica A reaches the subscribers of replica B live, a late
joiner on B gets its text at once, a commit on A closes it on B together
with its message, a cancel crosses, the pub/sub connection of B killed loses
nothing (B reads the text back), and a replica SIGKILLed mid-draft takes its
draft with it (B's subscribers get ``expired``; committed messages stay)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from protocol import wire
from protocol.consumer import Applied, DraftClosed, DraftUpdated, Synced, Update
from server.replicas.backplane import Backplane
from server.replicas.draft_relay import DraftRelay
from server.store.redis import RedisStore
from server.tuning import REMOTE_DRAFT_GRACE_S
from tests.redis.replicas import Follower, authoritative, create, replicas, texts_of
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer
from tests.support.servers import RunningServer, running_server
from tests.support.waiting import until
from tests.support.wsclient import RawClient

pytestmark = pytest.mark.redis

_prefixes = itertools.count()


@contextlib.asynccontextmanager
async def two_replicas(
    url: str, **settings: Any
) -> AsyncIterator[tuple[str, RunningServer, RunningServer]]:
    """Two in-process replicas on ``url`` under a fresh key prefix."""
    url = f"{url}?prefix=dr{next(_prefixes)}:"
    async with (
        running_server(store=RedisStore(url), backplane_resync_s=0.2, **settings) as a,
        running_server(store=RedisStore(url), backplane_resync_s=0.2, **settings) as b,
    ):
        yield url, a, b


def relay_of(server: RunningServer) -> DraftRelay:
    backplane = server.app.state.backplane
    assert isinstance(backplane, Backplane) and backplane.drafts is not None
    return backplane.drafts


class DraftFollower(Follower):
    """A ``Follower`` that also logs what happened to its drafts, in order:
    ``("event", revision)``, ``("delta"|"text", draft id, n)``,
    ``("closed", draft id, state, revision)``."""

    def __init__(self, transcript_id: str) -> None:
        super().__init__(transcript_id)
        self.log: list[tuple[Any, ...]] = []
        #: The text of each draft after each of its updates.
        self.texts: list[tuple[str, str]] = []

    def _on(self, update: Update) -> None:
        match update:
            case Applied(event=event):
                self.log.append(("event", event.revision))
            case DraftUpdated(draft_id=draft_id, n=n, text=text):
                self.log.append(("text" if text is not None else "delta", draft_id, n))
                self.texts.append((draft_id, self.subscription.drafts[draft_id].text))
            case DraftClosed(draft_id=draft_id, state=state, revision=revision):
                self.log.append(("closed", draft_id, state, revision))
            case Synced():
                self.log.append(("synced",))
        super()._on(update)

    def text(self, draft_id: str) -> str | None:
        draft = self.subscription.drafts.get(draft_id)
        return None if draft is None else draft.text

    async def wait_for(self, what: Callable[[], bool], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not what():
                self._changed.clear()
                await self._changed.wait()

    async def wait_text(self, draft_id: str, text: str, timeout: float = 10.0) -> None:
        await self.wait_for(lambda: self.text(draft_id) == text, timeout)

    def closed(self, draft_id: str) -> tuple[Any, ...] | None:
        return next((e for e in self.log if e[0] == "closed" and e[1] == draft_id), None)

    async def wait_closed(self, draft_id: str, timeout: float = 10.0) -> tuple[Any, ...]:
        await self.wait_for(lambda: self.closed(draft_id) is not None, timeout)
        closed = self.closed(draft_id)
        assert closed is not None
        return closed


class Writer:
    """A draft writer over the raw protocol."""

    def __init__(self, client: RawClient, transcript_id: str) -> None:
        self.client = client
        self.transcript_id = transcript_id
        self.refs = itertools.count()

    @classmethod
    @contextlib.asynccontextmanager
    async def on(cls, ws_url: str, transcript_id: str) -> AsyncIterator[Writer]:
        client = await RawClient.connect(ws_url)
        try:
            yield cls(client, transcript_id)
        finally:
            await client.close()

    async def draft(self, draft_id: str, **fields: Any) -> None:
        await self.client.send(
            op="draft", transcriptId=self.transcript_id, draftId=draft_id, **fields
        )

    async def acked(self, op: str, **fields: Any) -> wire.Ack:
        """Send an op with a ref and return its ack (skipping nothing else:
        the writer subscribes to nothing)."""
        ref = f"w{next(self.refs)}"
        await self.client.send(op=op, transcriptId=self.transcript_id, ref=ref, **fields)
        frame = await self.client.recv(10)
        assert isinstance(frame, wire.Ack) and frame.ref == ref, frame
        return frame

    async def stream(self, draft_id: str, tokens: list[str]) -> wire.Ack:
        """The tokens as deltas, the last one acked (so all were taken)."""
        for token in tokens[:-1]:
            await self.draft(draft_id, delta=token)
        return await self.acked("draft", draftId=draft_id, delta=tokens[-1])

    async def commit(self, draft_id: str, text: str) -> wire.Ack:
        return await self.acked(
            "append", messages=[{"role": "assistant", "content": text}], draftId=draft_id
        )


TOKENS = [f"tok{i} " for i in range(40)]
TEXT = "".join(TOKENS)


async def test_a_draft_on_a_streams_to_b_and_commits_with_its_message(
    shared_redis: RedisServer,
) -> None:
    # Every delta its own update (draft_coalesce_s=0): counted one by one on B.
    async with (
        two_replicas(shared_redis.url, draft_coalesce_s=0) as (_, a, b),
        httpx.AsyncClient() as http,
    ):
        epoch = await create(http, a.url, "t")
        live_b = DraftFollower("t")
        await live_b.attach(b.ws_url)
        async with Writer.on(a.ws_url, "t") as writer:
            # B relays the transcript's drafts once it is subscribed to its notice
            # channel: a first draft seen on B says it is (before that, B would
            # repair what it missed with one `text`, rightly, but not token by token).
            await writer.stream("d0", ["warm"])
            await live_b.wait_text("d0", "warm")
            ack = await writer.stream("d1", TOKENS)
            assert ack.n == len(TOKENS)
            await live_b.wait_text("d1", TEXT)
            # Token by token, in order, no text frame needed: nothing was lost.
            assert [e for e in live_b.log if e[0] in ("delta", "text") and e[1] == "d1"] == [
                ("delta", "d1", n) for n in range(1, len(TOKENS) + 1)
            ]
            assert relay_of(b).counters.gaps == 0

            # A late joiner on B gets the whole text at once.
            late_b = DraftFollower("t")
            await late_b.attach(b.ws_url)
            await late_b.wait_text("d1", TEXT)
            assert [e for e in late_b.log if e[0] != "synced" and e[1] == "d1"] == [
                ("text", "d1", len(TOKENS))
            ]

            # Commit on A: on B the message and the close come together, the
            # increment first (B sends the final only once it has the revision).
            raw_b = await RawClient.connect(b.ws_url)
            await raw_b.send(op="subscribe", transcriptId="t", fromRevision=0, epoch=epoch)
            await raw_b.send(op="ping", ref="in")
            while not isinstance(await raw_b.recv(), wire.Pong):
                pass
            committed = await writer.commit("d1", TEXT)
            frames = [await raw_b.recv(10)]
            while not isinstance(frames[-1], wire.DraftFrame) or frames[-1].state == "open":
                frames.append(await raw_b.recv(10))
            await raw_b.close()
            assert [type(f).__name__ for f in frames] == ["Increment", "DraftFrame"]
            assert frames[-1].state == "final" and frames[-1].revision == committed.revision
            for follower in (live_b, late_b):
                await follower.wait_closed("d1")
                at = follower.log.index(("closed", "d1", "final", committed.revision))
                assert follower.log[at - 1] == ("event", committed.revision)
                assert follower.text("d1") is None
                assert texts_of(follower.messages) == [TEXT]
            # A token after the commit is refused on either replica.
            for url in (a.ws_url, b.ws_url):
                async with Writer.on(url, "t") as late:
                    await late.draft("d1", delta="late", ref="late")
                    error = await late.client.expect(wire.ErrorFrame)
                    assert error.code == "draft-closed"
        await live_b.detach()
        await late_b.detach()


async def test_a_cancel_crosses_and_a_new_replica_seeds_from_the_key(
    shared_redis: RedisServer,
) -> None:
    async with two_replicas(shared_redis.url) as (_, a, b), httpx.AsyncClient() as http:
        await create(http, a.url, "t")
        async with Writer.on(a.ws_url, "t") as writer:
            await writer.stream("d1", ["one ", "two ", "three"])
            await writer.acked("draft", draftId="d2", role="tool", text="whole")
            # B does not hold "t" yet: its first subscriber makes it load the
            # transcript, and the drafts come from their entries in Redis.
            assert not b.hub.is_loaded("t")
            await asyncio.sleep(0.5)  # the drafts age (time passing is the subject here)
            first_b = DraftFollower("t")
            await first_b.attach(b.ws_url)
            await first_b.wait_for(
                lambda: (first_b.text("d1"), first_b.text("d2")) == ("one two three", "whole")
            )
            assert first_b.subscription.drafts["d2"].role == "tool"
            # B's copy is as old as the entry: it expires with it, not later.
            copy = b.hub.live["t"].drafts.open["d2"]
            assert time.monotonic() - copy.updated >= 0.45
            await writer.acked("draft", draftId="d1", cancel=True)
            await first_b.wait_for(lambda: first_b.closed("d1") is not None)
            assert first_b.closed("d1") == ("closed", "d1", "cancelled", None)
            assert first_b.text("d2") == "whole"
        await first_b.detach()


@pytest.mark.parametrize("b_holds_it", [False, True])
async def test_a_writer_that_moves_to_another_replica_goes_on_with_its_draft(
    shared_redis: RedisServer, b_holds_it: bool
) -> None:
    async with two_replicas(shared_redis.url) as (_, a, b), httpx.AsyncClient() as http:
        await create(http, a.url, "t")
        on_a = DraftFollower("t")
        await on_a.attach(a.ws_url)
        followers = [on_a]
        if b_holds_it:
            followers.append(DraftFollower("t"))
            await followers[1].attach(b.ws_url)
        first = "".join(TOKENS[:10])
        async with Writer.on(a.ws_url, "t") as writer:
            await writer.stream("d1", TOKENS[:10])
            for follower in followers:
                await follower.wait_text("d1", first)
        # Reconnected to B: the writer sends its whole text, then goes on.
        # (When B does not hold the transcript, B opens the draft afresh
        # before it has read it back: its updates are behind A's in Redis,
        # and B numbers its copy past them.)
        async with Writer.on(b.ws_url, "t") as writer:
            await writer.acked("draft", draftId="d1", text=first)
            if not b_holds_it:
                await until(lambda: relay_of(b).counters.renumbered == 1)
            await writer.stream("d1", TOKENS[10:20])
            for follower in followers:
                await follower.wait_text("d1", "".join(TOKENS[:20]))
            committed = await writer.commit("d1", "".join(TOKENS[:20]))
        for follower in followers:
            await follower.wait_closed("d1")
            assert follower.closed("d1") == ("closed", "d1", "final", committed.revision)
            assert follower.subscription.drafts == {}
            await follower.detach()
            # Every text a subscriber showed was a prefix of the answer.
            assert all(TEXT.startswith(text) for _, text in follower.texts), follower.texts
        assert relay_of(b).counters.renumbered == (0 if b_holds_it else 1)


async def test_b_reads_the_text_back_after_its_pubsub_connection_is_killed(
    shared_redis: RedisServer,
) -> None:
    async with two_replicas(shared_redis.url) as (_, a, b), httpx.AsyncClient() as http:
        await create(http, a.url, "t")
        live_b = DraftFollower("t")
        await live_b.attach(b.ws_url)
        backplane_b = b.app.state.backplane
        async with Writer.on(a.ws_url, "t") as writer:
            await writer.stream("d1", TOKENS[:10])
            await live_b.wait_text("d1", "".join(TOKENS[:10]))
            resubscribed = backplane_b.counters.resubscribed
            recoveries = relay_of(b).counters.recoveries
            client = aioredis.Redis.from_url(shared_redis.url)
            try:
                killed = await client.client_kill_filter(_type="pubsub")
            finally:
                await client.aclose()
            assert killed >= 1
            # Written while B is resubscribing: pub/sub drops these for B.
            await writer.stream("d1", TOKENS[10:])
            await live_b.wait_text("d1", TEXT)
            assert backplane_b.counters.resubscribed > resubscribed
            assert relay_of(b).counters.recoveries > recoveries
            # The repair was a text frame (B's subscriber missed deltas).
            assert any(e[0] == "text" for e in live_b.log)
        await live_b.detach()


async def test_updates_refused_while_redis_is_down_go_again_as_the_whole_text(
    redis_server: RedisServer,
) -> None:
    fast_fail = "socket_timeout=0.3&socket_connect_timeout=0.3&retries=0"
    url = f"{redis_server.url}?prefix=down:&{fast_fail}"
    async with (
        running_server(store=RedisStore(url), backplane_resync_s=0.2) as a,
        running_server(store=RedisStore(url), backplane_resync_s=0.2) as b,
        httpx.AsyncClient() as http,
    ):
        await create(http, a.url, "t")
        live_b = DraftFollower("t")
        await live_b.attach(b.ws_url)
        async with Writer.on(a.ws_url, "t") as writer:
            await writer.stream("d1", TOKENS[:5])
            await live_b.wait_text("d1", "".join(TOKENS[:5]))
            redis_server.kill()
            # Drafts need no Redis on the replica that takes them: acked.
            await writer.stream("d1", TOKENS[5:10])
            await until(lambda: relay_of(a).counters.relay_failures > 0)
            redis_server.start()  # same port, same data (AOF)
            await writer.stream("d1", TOKENS[10:15])
            await live_b.wait_text("d1", "".join(TOKENS[:15]), timeout=15)
            assert relay_of(a).counters.resent >= 1
            assert all(TEXT.startswith(text) for _, text in live_b.texts)
        await live_b.detach()


async def test_a_replica_killed_mid_draft_takes_its_draft_with_it(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    url = redis_server.url + "?prefix=kill:"
    ttl = 1.0
    async with (
        replicas(2, url, tmp_path, f"draft_ttl_s={ttl}") as (a, b),
        httpx.AsyncClient(timeout=10) as http,
    ):
        await create(http, a.url, "t")
        live_b = DraftFollower("t")
        await live_b.attach(b.ws_url)
        async with Writer.on(a.ws_url, "t") as writer:
            await writer.stream("done", ["committed ", "answer"])
            committed = await writer.commit("done", "committed answer")
            await writer.stream("d1", TOKENS[:5])
            await live_b.wait_text("d1", "".join(TOKENS[:5]))
            a.kill()  # SIGKILL: no close, no expiry of its own
        # B expires the copy itself (draft_ttl_s + the grace for a dead replica).
        await live_b.wait_for(lambda: live_b.closed("d1") is not None, timeout=ttl + 8)
        assert live_b.closed("d1") == ("closed", "d1", "expired", None)
        assert live_b.closed("done") == ("closed", "done", "final", committed.revision)
        stored = await authoritative(url, "t")
        assert stored.revision == committed.revision == 1
        assert texts_of(live_b.messages) == ["committed answer"]
        # A late joiner on B sees no draft (the entry lapsed with its TTL).
        late_b = DraftFollower("t")
        await late_b.attach(b.ws_url)
        assert await _no_draft_after_barrier(late_b)
        await live_b.detach()
        await late_b.detach()


async def _no_draft_after_barrier(follower: DraftFollower) -> bool:
    """Whether the subscription holds no open draft once the barrier after
    its subscribe was answered (everything the subscribe sent is in)."""
    await follower.wait_for(lambda: ("synced",) in follower.log)
    return not follower.subscription.drafts


async def test_keep_alives_cross_and_a_lost_entry_is_written_whole_again(
    shared_redis: RedisServer,
) -> None:
    ttl = 1.0
    async with (
        two_replicas(shared_redis.url, draft_ttl_s=ttl) as (url, a, b),
        httpx.AsyncClient() as http,
    ):
        await create(http, a.url, "t")
        live_b = DraftFollower("t")
        await live_b.attach(b.ws_url)
        async with Writer.on(a.ws_url, "t") as writer:
            await writer.stream("d1", ["one "])
            await live_b.wait_text("d1", "one ")
            # Only keep-alives for longer than B would keep a silent copy
            # (draft_ttl_s + the grace for a dead replica): A relays them.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + ttl + REMOTE_DRAFT_GRACE_S + 0.5
            while loop.time() < deadline:
                await writer.acked("draft", draftId="d1")
                await asyncio.sleep(ttl / 5)  # the writer's pace, not a wait for the server
            assert relay_of(a).counters.keepalives >= 1
            assert live_b.closed("d1") is None and live_b.text("d1") == "one "

            # The entry is lost (as after a Redis restart without its data):
            # the next delta is stale there, so A writes the whole text again.
            store = RedisStore(url)
            await store.open()
            try:
                client = store._client()
                await client.delete(store.prefix + "{t}:drafts", store.prefix + "{t}:draft:d1")
                await writer.stream("d1", ["two"])
                await live_b.wait_text("d1", "one two")
                await until(lambda: relay_of(a).counters.resent > 0)
                [(entry, _)] = (await store.drafts_of(["t"]))["t"]
                assert (entry.n, entry.text) == (2, "one two")
            finally:
                await store.close()
            assert relay_of(b).counters.gaps == 0  # the delta itself went out as usual
        # No keep-alive any more: A expires it and B hears so.
        await live_b.wait_for(lambda: live_b.closed("d1") is not None, timeout=ttl + 5)
        assert live_b.closed("d1") == ("closed", "d1", "expired", None)
        await live_b.detach()


async def test_drafts_cross_replicas_on_a_redis_cluster(shared_cluster: RedisCluster) -> None:
    async with two_replicas(shared_cluster.url) as (_, a, b), httpx.AsyncClient() as http:
        ids = [f"t{i}" for i in range(4)]  # spread over the masters
        for tid in ids:
            await create(http, a.url, tid)
            async with Writer.on(a.ws_url, tid) as writer:
                await writer.stream("d", TOKENS[:8])
                # B loads the transcript now: the text comes from its slot.
                on_b = DraftFollower(tid)
                await on_b.attach(b.ws_url)
                await on_b.wait_text("d", "".join(TOKENS[:8]))
                # Then live, through the transcript's sharded channel.
                await writer.stream("d", TOKENS[8:16])
                await on_b.wait_text("d", "".join(TOKENS[:16]))
                committed = await writer.commit("d", "done")
                await on_b.wait_closed("d")
                assert on_b.closed("d") == ("closed", "d", "final", committed.revision)
                assert texts_of(on_b.messages) == ["done"]
                await on_b.detach()
