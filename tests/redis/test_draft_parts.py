"""Replies with parts (issue 39) across replicas on one private Redis and a
Redis Cluster: a reply written with AI SDK chunks through replica A reaches
B's subscribers as frames that fold to the writer's ``UIMessage``, a late
joiner on B (B holding the transcript, or B seeding it from Redis) gets one
``replay`` frame that folds to it, and an update B misses is repaired from
the stored reply."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from protocol import wire
from protocol.drafts import DraftCopy
from server.live.drafts import UI_BYTES_HELD
from server.store.base import RelayedDraft
from server.tuning import OPEN_DRAFT_COST
from tests.redis.replicas import create
from tests.redis.test_drafts import relay_of, two_replicas
from tests.server.live.test_draft_parts import REPLY, folded
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer
from tests.support.servers import RunningServer
from tests.support.waiting import until
from tests.support.wsclient import RawClient

pytestmark = pytest.mark.redis

TEXT = "It is 18 °C in Paris."


@pytest.fixture(params=["redis", "cluster"])
def redis_url(request: pytest.FixtureRequest) -> str:
    """The module's Redis, or its Redis Cluster."""
    name = "shared_redis" if request.param == "redis" else "shared_cluster"
    server: RedisServer | RedisCluster = request.getfixturevalue(name)
    return server.url


@contextlib.asynccontextmanager
async def reader_on(srv: RunningServer, transcript_id: str) -> AsyncIterator[RawClient]:
    """A raw subscriber of ``transcript_id`` on ``srv``, past its baseline."""
    client = await RawClient.connect(srv.ws_url)
    try:
        await client.send(op="subscribe", transcriptId=transcript_id)
        assert isinstance(await client.recv(10), wire.Baseline)
        yield client
    finally:
        await client.close()


async def drafts_until(
    client: RawClient, copy: DraftCopy, done: Any, timeout: float = 10.0
) -> list[wire.DraftFrame]:
    """Fold ``client``'s frames of ``copy``'s draft into it until
    ``done(copy)``; the frames it took."""
    frames: list[wire.DraftFrame] = []
    while not done(copy):
        frame = await client.recv(timeout)
        if isinstance(frame, wire.DraftFrame) and frame.draft_id == copy.draft_id:
            frames.append(frame)
            copy.take(frame)
    return frames


async def write(writer: RawClient, transcript_id: str, batches: list[list[dict[str, Any]]]) -> None:
    """Send the batches of chunks as draft ``d1``, the last one acked."""
    for i, batch in enumerate(batches):
        op: dict[str, Any] = {"ref": "last"} if i == len(batches) - 1 else {}
        await writer.send(op="draft", transcriptId=transcript_id, draftId="d1", chunks=batch, **op)
    await writer.expect(wire.Ack, 10)


async def warm(writer: RawClient, reader: RawClient, transcript_id: str) -> None:
    """A text draft seen by ``reader``: its replica relays the transcript's
    drafts (it is subscribed to the notice channel)."""
    await writer.send(op="draft", transcriptId=transcript_id, draftId="d0", text="warm")
    copy = DraftCopy("d0", "assistant")
    await drafts_until(reader, copy, lambda c: c.text == "warm")


def message_is(expected: dict[str, Any]) -> Any:
    return lambda copy: copy.message == expected


async def test_a_reply_with_parts_on_a_reaches_b_live_and_b_late_joiners_get_its_replay(
    redis_url: str,
) -> None:
    async with (
        two_replicas(redis_url, draft_coalesce_s=0) as (_, a, b),
        httpx.AsyncClient() as http,
    ):
        await create(http, a.url, "t")
        writer = await RawClient.connect(a.ws_url)
        try:
            async with reader_on(b, "t") as reader:
                await warm(writer, reader, "t")
                await write(writer, "t", REPLY)
                copy = DraftCopy("d1", "assistant")
                frames = await drafts_until(reader, copy, message_is(folded(REPLY)))
                # Chunk by chunk, in order: no frame needed a repair.
                assert all(f.chunks is not None and f.replay is None for f in frames)
                assert [f.n for f in frames] == list(range(1, len(frames) + 1))
                assert copy.text == TEXT and not copy.ui_behind
                assert relay_of(b).counters.gaps == 0
                # B's copy is counted as A counts the reply: its chunks' bytes.
                held = b.hub.live["t"].drafts.open["d1"]
                assert held.ui_size > len(TEXT.encode())
                assert held.cost == OPEN_DRAFT_COST + UI_BYTES_HELD * held.ui_size

            # A late joiner on B: one frame, the whole reply as a replay.
            async with reader_on(b, "t") as late:
                joined = DraftCopy("d1", "assistant")
                frames = await drafts_until(late, joined, message_is(folded(REPLY)))
                [frame] = frames
                assert frame.replay is not None and frame.text == TEXT
                assert len(frame.replay) < sum(len(batch) for batch in REPLY)
        finally:
            await writer.close()


async def test_a_replica_that_loads_the_transcript_seeds_the_reply_from_redis(
    redis_url: str,
) -> None:
    async with two_replicas(redis_url) as (_, a, b), httpx.AsyncClient() as http:
        await create(http, a.url, "t")
        writer = await RawClient.connect(a.ws_url)
        try:
            await write(writer, "t", REPLY[:8])  # in the middle of a tool input
            assert not b.hub.is_loaded("t")
            async with reader_on(b, "t") as first:
                seeded = DraftCopy("d1", "assistant")
                [frame] = await drafts_until(first, seeded, message_is(folded(REPLY[:8])))
                assert frame.replay is not None
                # ...and goes on live from there.
                await write(writer, "t", REPLY[8:])
                await drafts_until(first, seeded, message_is(folded(REPLY)))
                assert seeded.text == TEXT and not seeded.ui_behind
        finally:
            await writer.close()


async def test_an_update_b_missed_is_repaired_with_the_stored_reply(
    shared_redis: RedisServer,
) -> None:
    async with (
        two_replicas(shared_redis.url, draft_coalesce_s=0) as (_, a, b),
        httpx.AsyncClient() as http,
    ):
        await create(http, a.url, "t")
        relay = relay_of(b)
        received = relay.received
        dropped: list[RelayedDraft] = []

        def lossy(update: RelayedDraft) -> None:
            # As if pub/sub lost B's copy of update 5 of d1 (a tool input delta).
            if update.draft_id == "d1" and update.n == 5 and not dropped:
                dropped.append(update)
                return
            received(update)

        relay.received = lossy  # type: ignore[method-assign]
        writer = await RawClient.connect(a.ws_url)
        try:
            async with reader_on(b, "t") as reader:
                await warm(writer, reader, "t")
                await write(writer, "t", REPLY)
                copy = DraftCopy("d1", "assistant")
                frames = await drafts_until(reader, copy, message_is(folded(REPLY)))
                assert dropped and dropped[0].chunks is not None
                assert relay.counters.gaps >= 1 and relay.counters.recoveries >= 1
                # The repair: a text frame with the stored reply as its replay.
                assert any(f.replay is not None for f in frames)
                assert copy.text == TEXT and not copy.ui_behind
            # B's copy is whole: a late joiner there gets the writer's reply.
            async with reader_on(b, "t") as late:
                joined = DraftCopy("d1", "assistant")
                await drafts_until(late, joined, message_is(folded(REPLY)))
        finally:
            relay.received = received  # type: ignore[method-assign]
            await writer.close()


async def test_a_replica_that_relays_no_chunks_turns_the_copies_into_text(
    shared_redis: RedisServer,
) -> None:
    async with (
        two_replicas(shared_redis.url, draft_coalesce_s=0) as (_, a, b),
        httpx.AsyncClient() as http,
    ):
        await create(http, a.url, "t")
        writer = await RawClient.connect(a.ws_url)
        try:
            async with reader_on(b, "t") as reader:
                await warm(writer, reader, "t")
                await write(writer, "t", REPLY[:12])
                copy = DraftCopy("d1", "assistant")
                await drafts_until(reader, copy, message_is(folded(REPLY[:12])))
                live_b = b.hub.live["t"].drafts.open["d1"]
                assert live_b.ui is not None
                # What an older replica relays: the whole text, no chunks.
                old = RelayedDraft(
                    transcript_id="t",
                    draft_id="d1",
                    role="assistant",
                    n=copy.n + 1,
                    text="plain",
                    origin="older",
                )
                relay_of(b).received(old)
                await until(lambda: b.hub.live["t"].drafts.open["d1"].ui is None)
                frame = b.hub.live["t"].drafts.text("d1")
                assert frame is not None
                assert (frame.frame.text, frame.frame.replay) == ("plain", None)
                assert b.hub.live["t"].drafts.open["d1"].cost == OPEN_DRAFT_COST + len("plain")
        finally:
            await writer.close()


async def test_a_writer_that_moves_to_b_goes_on_with_its_reply(shared_redis: RedisServer) -> None:
    async with (
        two_replicas(shared_redis.url, draft_coalesce_s=0) as (_, a, b),
        httpx.AsyncClient() as http,
    ):
        await create(http, a.url, "t")
        async with reader_on(a, "t") as on_a, reader_on(b, "t") as on_b:
            writer = await RawClient.connect(a.ws_url)
            try:
                await warm(writer, on_b, "t")
                await write(writer, "t", REPLY[:9])
                copies = [DraftCopy("d1", "assistant") for _ in (on_a, on_b)]
                for reader, copy in zip((on_a, on_b), copies, strict=True):
                    await drafts_until(reader, copy, message_is(folded(REPLY[:9])))
            finally:
                await writer.close()
            # Reconnected to B, which holds the reply: its chunks go on from
            # there. A wrote the entry last, so B relays the whole reply once.
            writer = await RawClient.connect(b.ws_url)
            try:
                await write(writer, "t", REPLY[9:])
                for reader, copy in zip((on_a, on_b), copies, strict=True):
                    await drafts_until(reader, copy, message_is(folded(REPLY)))
                    assert copy.text == TEXT and not copy.ui_behind
                await until(lambda: relay_of(b).counters.resent >= 1)
            finally:
                await writer.close()
        # A late joiner on A gets the reply B wrote.
        async with reader_on(a, "t") as late:
            await drafts_until(late, DraftCopy("d1", "assistant"), message_is(folded(REPLY)))
