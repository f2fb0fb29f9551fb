"""The backplane's logic without a Redis server: two replicas (real servers on
127.0.0.1) share one ``SharedMemoryStore``, which implements the same port
(``SharedStore``) and passes the same contract as the Redis store."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx

from protocol import wire
from protocol.types import Message, MessagesAppended, TranscriptEvent
from server.replicas.backplane import Backplane
from server.store import SharedMemoryStore
from tests.support.servers import RunningServer, running_server
from tests.support.wsclient import RawClient


@contextlib.asynccontextmanager
async def two_replicas() -> AsyncIterator[tuple[RunningServer, RunningServer]]:
    store = SharedMemoryStore()
    async with (
        running_server(store=store, backplane_resync_s=0.05) as a,
        running_server(store=store, backplane_resync_s=0.05) as b,
    ):
        yield a, b


def backplane_of(server: RunningServer) -> Backplane:
    backplane = server.app.state.backplane
    assert isinstance(backplane, Backplane)
    return backplane


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def test_a_change_through_one_replica_reaches_a_subscriber_of_the_other() -> None:
    async with two_replicas() as (a, b), httpx.AsyncClient() as http:
        assert (await http.post(f"{a.url}/v1/transcripts", json={"id": "t"})).status_code == 201
        async with await RawClient.connect(b.ws_url) as client:
            await client.send(op="subscribe", transcriptId="t")
            assert (await client.expect(wire.Baseline)).snapshot.revision == 0
            for i in range(3):
                r = await http.post(
                    f"{a.url}/v1/transcripts/t/messages", json={"messages": [user(str(i))]}
                )
                assert r.status_code == 201
            revisions = [(await client.expect(wire.Increment)).event.revision for _ in range(3)]
            assert revisions == [1, 2, 3]
        assert backplane_of(b).counters.syncs >= 1


async def test_the_safety_net_repairs_missed_notices() -> None:
    async with two_replicas() as (a, b), httpx.AsyncClient() as http:
        await http.post(f"{a.url}/v1/transcripts", json={"id": "t"})
        async with await RawClient.connect(b.ws_url) as client:
            await client.send(op="subscribe", transcriptId="t")
            await client.expect(wire.Baseline)
            backplane_of(b)._background.tasks[0].cancel()  # B hears no notice any more
            await a.hub.writes.append("t", [user("missed")])
            increment = await client.expect(wire.Increment)
            assert increment.event.revision == 1


async def test_a_delete_through_one_replica_ends_the_other_replicas_subscriptions() -> None:
    async with two_replicas() as (a, b), httpx.AsyncClient() as http:
        await http.post(f"{a.url}/v1/transcripts", json={"id": "t", "messages": [user("x")]})
        async with await RawClient.connect(b.ws_url) as client:
            await client.send(op="subscribe", transcriptId="t")
            await client.expect(wire.Baseline)
            assert (await http.delete(f"{a.url}/v1/transcripts/t")).status_code == 204
            gone = await client.expect(wire.ErrorFrame)
            assert (gone.code, gone.transcript_id) == ("not-found", "t")
            assert not b.hub.holds("t")
            assert backplane_of(b).counters.reloads == 1


async def test_a_change_whose_digest_does_not_follow_reloads_the_other_replica() -> None:
    """Issue 29: a change in the store whose digest does not follow from B's
    copy (a writer with a broken copy stored it) is not applied as it comes:
    B reloads the transcript from the store, its subscribers get a fresh
    baseline, and the metric counts it."""
    async with two_replicas() as (a, b), httpx.AsyncClient() as http:
        await http.post(f"{a.url}/v1/transcripts", json={"id": "t", "messages": [user("0")]})
        async with await RawClient.connect(b.ws_url) as client:
            await client.send(op="subscribe", transcriptId="t")
            first = (await client.expect(wire.Baseline)).snapshot
            store = a.app.state.hub.store
            wrong = TranscriptEvent(
                "t",
                first.epoch,
                2,
                0,
                MessagesAppended(1, (Message(role="user", content="1"),)),
                digest="0" * 32,
            )
            await store.append(wrong)
            again = await client.expect(wire.Baseline, timeout=10)
            assert (again.snapshot.revision, again.snapshot.digest) == (2, "0" * 32)
        assert b.app.state.hub.metrics.digest_mismatches._value.get() == 1
