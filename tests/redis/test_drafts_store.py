"""The draft entries and relay of ``RedisStore`` (``server.store.redis_drafts``)
on a real Redis and a real Redis Cluster: each update is stored and announced
in order on the transcript's notice channel, a delta that does not follow the
entry is ``stale``, a closed entry takes nothing more and keeps no text, and
every key lapses with the TTL."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest

from server.store.base import Notice, Recheck, RelayedDraft
from server.store.redis import RedisStore
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis

_prefixes = itertools.count()


@pytest.fixture(params=["redis", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RedisStore]:
    """A store on the module's Redis, or on its Redis Cluster."""
    name = "shared_redis" if request.param == "redis" else "shared_cluster"
    server: RedisServer | RedisCluster = request.getfixturevalue(name)
    store = RedisStore(f"{server.url}?prefix=ds{next(_prefixes)}:")
    await store.open()
    yield store
    await store.close()


def update(n: int, **fields: object) -> RelayedDraft:
    base: dict[str, object] = {"transcript_id": "t", "draft_id": "d", "role": "assistant", "n": n}
    return RelayedDraft(**{**base, **fields})  # type: ignore[arg-type]


async def drafts(store: RedisStore, transcript_id: str = "t") -> list[RelayedDraft]:
    return [stored.draft for stored in (await store.drafts_of([transcript_id]))[transcript_id]]


async def relay(store: RedisStore, *updates: RelayedDraft) -> list[str]:
    return [outcome for outcome, _ in await store.relay_drafts(updates, 30)]


async def test_updates_build_the_entry_and_a_close_keeps_only_its_state(
    store: RedisStore,
) -> None:
    outcomes = await relay(
        store, update(1, delta="Hel"), update(2, delta="lo"), update(3, delta="!")
    )
    assert outcomes == ["stored"] * 3
    [(entry, expires_in_s)] = (await store.drafts_of(["t"]))["t"]
    assert (entry.n, entry.text, entry.state, entry.role) == (3, "Hello!", "open", "assistant")
    assert 29 < expires_in_s <= 30

    # A delta past the entry's n + 1 cannot be appended: stale, entry unchanged.
    assert await store.relay_drafts([update(5, delta="?")], 30) == [("stale", 3)]
    assert (await drafts(store))[0].text == "Hello!"
    # The whole text repairs it; a keep-alive changes nothing but the time;
    # the same update again (a retried relay) changes nothing.
    assert await relay(store, update(5, text="Hello!!?"), update(5), update(5, text="x")) == [
        "stored",
        "stored",
        "repeated",
    ]
    assert (await drafts(store))[0].text == "Hello!!?"

    assert await relay(store, update(5, state="final", revision=7)) == ["stored"]
    [closed] = await drafts(store)
    assert (closed.state, closed.revision, closed.text) == ("final", 7, None)
    # Closed: a late update neither reopens nor changes it.
    assert await relay(store, update(6, delta="late")) == ["closed"]
    assert await drafts(store) == [closed]
    # Another transcript's drafts are its own; a keep-alive opens nothing.
    assert await relay(store, update(1, transcript_id="other")) == ["stale"]
    assert await drafts(store, "other") == []


async def test_a_writer_that_moved_to_another_replica_takes_the_draft_over(
    store: RedisStore,
) -> None:
    await relay(store, update(1, text="from a ", origin="a"), update(2, delta="...", origin="a"))
    # Replica c opened it afresh (it had not read it back yet): behind the entry.
    assert await store.relay_drafts([update(1, text="whole", origin="c")], 30) == [("behind", 2)]
    # Numbered past it, c's text wins; a delta of c never lands on a's text.
    assert await relay(store, update(3, delta="!", origin="c")) == ["stale"]
    assert await relay(store, update(3, text="whole", origin="c")) == ["stored"]
    assert await relay(store, update(4, delta="!", origin="c")) == ["stored"]
    # a's late update is behind now.
    assert await relay(store, update(3, delta="late", origin="a")) == ["behind"]
    [entry] = await drafts(store)
    assert (entry.n, entry.text) == (4, "whole!")


async def test_every_key_lapses_with_the_ttl(store: RedisStore) -> None:
    assert await store.relay_drafts([update(1, text="soon gone")], 0.2) == [("stored", 1)]
    client = store._client()
    tag = store.prefix + "{t}:"
    for key in (tag + "drafts", tag + "draft:d"):
        assert 0 < await client.pttl(key) <= 200
    async with asyncio.timeout(5):
        while await drafts(store):  # noqa: ASYNC110 - Redis's clock
            await asyncio.sleep(0.05)
    assert await client.exists(tag + "drafts", tag + "draft:d") == 0


async def test_updates_are_announced_in_order_with_the_change_notices(
    store: RedisStore,
) -> None:
    store.watch(["t"])
    notices = store.notices()
    try:
        async with asyncio.timeout(10):
            # Subscribed: one Redis says so with None, a Cluster with a Recheck.
            while True:
                item = await anext(notices)
                if (item is None and not store.cluster) or isinstance(item, Recheck):
                    break
            await store.create("t", "e1", 0)
            await store.relay_drafts(
                [update(1, delta="a", origin="r1"), update(2, delta="b", origin="r1")], 30
            )
            await store.relay_drafts([update(2, state="cancelled")], 30)
            seen: list[object] = []
            while len(seen) < 4:
                item = await anext(notices)
                if isinstance(item, Notice | RelayedDraft):
                    seen.append(item)
    finally:
        await notices.aclose()
    assert seen == [
        Notice("t", "e1", 0),
        update(1, delta="a", origin="r1"),
        update(2, delta="b", origin="r1"),
        update(2, state="cancelled"),
    ]
