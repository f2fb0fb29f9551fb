"""The draft entries and relay of ``RedisStore`` (``server.store.redis.drafts``)
on a real Redis and a real Redis Cluster: each update is stored and announced
in order on the transcript's notice channel, a delta that does not follow the
entry is ``stale``, a closed entry takes nothing more and keeps no text, and
every key lapses with the TTL."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest

from server.store.base import NewTranscript, Notice, Recheck, RelayedDraft
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
            await store.create(NewTranscript("t", "e1", 0))
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


async def test_a_reply_with_parts_keeps_its_chunks_beside_its_text(store: RedisStore) -> None:
    start = [{"type": "start", "messageId": "m"}, {"type": "text-start", "id": "x"}]
    hel = [{"type": "text-delta", "id": "x", "delta": "Hel"}]
    lo = [{"type": "text-delta", "id": "x", "delta": "lo"}]
    assert (
        await relay(
            store,
            update(1, delta="", chunks=start, origin="a"),
            update(2, delta="Hel", chunks=hel, origin="a"),
            update(3, delta="lo", chunks=lo, origin="a"),
        )
        == ["stored"] * 3
    )
    # Read back: the text and every chunk since the draft began, in order.
    [entry] = await drafts(store)
    assert (entry.n, entry.text, entry.replay) == (3, "Hello", start + hel + lo)
    assert entry.chunks is None

    # A whole text with chunks of its update follows update n - 1 of its
    # replica, as a delta does: else stale, and nothing changes.
    rewrite = [{"type": "text-start", "id": "y"}]
    assert await store.relay_drafts([update(5, text="Hello", chunks=rewrite, origin="a")], 30) == [
        ("stale", 3)
    ]
    assert await store.relay_drafts([update(4, text="Hi", chunks=rewrite, origin="c")], 30) == [
        ("stale", 3)
    ]
    assert (await drafts(store))[0].replay == start + hel + lo
    # The resend: the whole text and its replay replace both.
    replay = [*start, {"type": "text-delta", "id": "x", "delta": "Hello"}]
    assert await relay(store, update(5, text="Hello", replay=replay, origin="a")) == ["stored"]
    assert await relay(store, update(6, delta="!", chunks=[{**hel[0], "delta": "!"}], origin="a"))
    [entry] = await drafts(store)
    assert (entry.n, entry.text) == (6, "Hello!")
    assert entry.replay == [*replay, {"type": "text-delta", "id": "x", "delta": "!"}]
    # A keep-alive keeps them.
    assert await relay(store, update(6, origin="a")) == ["stored"]
    assert (await drafts(store))[0].replay == entry.replay

    # An update of text alone (a replica that relays no chunks): a text draft.
    assert await relay(store, update(7, text="plain", origin="old")) == ["stored"]
    [entry] = await drafts(store)
    assert (entry.n, entry.text, entry.replay) == (7, "plain", None)

    # A close drops the chunks with the text.
    await relay(store, update(1, draft_id="e", delta="", chunks=start, origin="a"))
    await relay(store, update(1, draft_id="e", state="cancelled"))
    client = store._client()
    assert await client.exists(store.prefix + "{t}:ui:e") == 0


async def test_chunks_of_another_update_than_the_entry_s_are_not_read_back(
    store: RedisStore,
) -> None:
    # An older replica's delta (its script knows nothing of the chunks key)
    # leaves the chunks of update 1 behind update 2: the entry reads as text.
    start = [{"type": "start", "messageId": "m"}]
    await relay(store, update(1, delta="", chunks=start, origin="a"))
    client = store._client()
    tag = store.prefix + "{t}:"
    entry_of_1 = await client.hget(tag + "drafts", "d")
    await client.hset(tag + "drafts", "d", entry_of_1.replace(b"1:", b"2:", 1))
    [entry] = await drafts(store)
    assert (entry.n, entry.replay) == (2, None)
    # A malformed chunks key is left out too (the text is still read).
    await client.set(tag + "ui:d", b"2 not json\n")
    [entry] = await drafts(store)
    assert (entry.n, entry.text, entry.replay) == (2, "", None)
