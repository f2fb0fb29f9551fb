"""The contract of the backplane's port (``SharedStore``), for every store
replicas can share.

A backend's test module subclasses ``SharedStoreContract`` and supplies the
``shared_backend`` fixture: ``make()`` builds a new, unopened store over the
SAME place each time within one test, as two replicas would open it.

A listener ``watch``es the transcripts it wants to hear about; a store that
subscribes per transcript (a Redis Cluster) says so and yields a ``Recheck``
once they are covered, and only then is every change to them announced.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

import pytest

from server.store import Head, Notice, Recheck, RevisionMismatch, SharedStore, StoreUnavailable
from server.store.base import NewTranscript
from tests.server.store.store_contract import CREATED_AT, EPOCH, appended


class SharedBackend(Protocol):
    def make(self) -> SharedStore:
        """A new, unopened store over this test's place."""
        ...


async def _next(notices: AsyncIterator[Notice | Recheck | None]) -> Notice | Recheck | None:
    async with asyncio.timeout(5):
        return await anext(notices)


async def _watching(
    store: SharedStore, notices: AsyncIterator[Notice | Recheck | None], *ids: str
) -> None:
    """``store.watch(ids)``; returns once the store announces their changes."""
    if not store.watch(ids):
        return
    waiting = set(ids)
    while waiting:
        item = await _next(notices)
        assert not isinstance(item, Notice), f"a notice before the watch took effect: {item}"
        if isinstance(item, Recheck):
            waiting -= item.transcript_ids


class SharedStoreContract:
    """Tests every shared store must pass; see the module docstring."""

    @pytest.fixture
    def shared_backend(self) -> SharedBackend:
        raise NotImplementedError("a backend's test class supplies shared_backend")

    @pytest.fixture
    async def replicas(
        self, shared_backend: SharedBackend
    ) -> AsyncIterator[tuple[SharedStore, SharedStore]]:
        a, b = shared_backend.make(), shared_backend.make()
        await a.open()
        await b.open()
        yield a, b
        await b.close()
        await a.close()

    async def test_is_a_shared_store(self, replicas: tuple[SharedStore, SharedStore]) -> None:
        a, _ = replicas
        assert isinstance(a, SharedStore)

    async def test_notices_begin_with_none_then_one_per_change_of_any_replica(
        self, replicas: tuple[SharedStore, SharedStore]
    ) -> None:
        a, b = replicas
        notices = b.notices()
        try:
            assert await _next(notices) is None  # listening: check every copy
            await _watching(b, notices, "t1", "t2")
            await a.create(NewTranscript("t1", EPOCH, CREATED_AT))
            assert await _next(notices) == Notice("t1", EPOCH, 0)
            await a.append(appended(1, 0))
            assert await _next(notices) == Notice("t1", EPOCH, 1)
            await b.append_many([(appended(2, 1), "k"), (appended(3, 2), None)])
            assert await _next(notices) == Notice("t1", EPOCH, 2)
            assert await _next(notices) == Notice("t1", EPOCH, 3)
            await a.create(
                NewTranscript(
                    "t2", "e2", CREATED_AT, appended(1, 0, transcript_id="t2", epoch="e2")
                )
            )
            assert await _next(notices) == Notice("t2", "e2", 1)
            await a.delete("t1")
            assert await _next(notices) == Notice("t1", "", 0)
        finally:
            await notices.aclose()  # type: ignore[attr-defined]

    async def test_a_refused_change_sends_no_notice(
        self, replicas: tuple[SharedStore, SharedStore]
    ) -> None:
        a, b = replicas
        await a.create(NewTranscript("t1", EPOCH, CREATED_AT))
        notices = b.notices()
        try:
            assert await _next(notices) is None
            await _watching(b, notices, "t1")
            outcomes = await a.append_many([(appended(1, 0), None), (appended(5, 4), None)])
            assert not isinstance(outcomes[0], Exception)
            assert isinstance(outcomes[1], RevisionMismatch)
            await a.append(appended(2, 1))
            # Only the appends that landed are announced.
            assert await _next(notices) == Notice("t1", EPOCH, 1)
            assert await _next(notices) == Notice("t1", EPOCH, 2)
        finally:
            await notices.aclose()  # type: ignore[attr-defined]

    async def test_a_watch_taken_back_and_given_again_keeps_announcing(
        self, replicas: tuple[SharedStore, SharedStore]
    ) -> None:
        a, b = replicas
        await a.create(NewTranscript("t1", EPOCH, CREATED_AT))
        notices = b.notices()
        try:
            assert await _next(notices) is None
            await _watching(b, notices, "t1")
            b.unwatch(["t1"])
            await _watching(b, notices, "t1")
            await a.append(appended(1, 0))
            assert await _next(notices) == Notice("t1", EPOCH, 1)
        finally:
            await notices.aclose()  # type: ignore[attr-defined]

    async def test_heads_say_where_each_transcript_is(
        self, replicas: tuple[SharedStore, SharedStore]
    ) -> None:
        a, b = replicas
        assert await b.heads([]) == {}
        await a.create(NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0)))
        await a.append(appended(2, 1))
        assert await b.heads(["t1", "nope"]) == {"t1": Head(EPOCH, 2), "nope": None}
        await a.delete("t1")
        assert await b.heads(["t1"]) == {"t1": None}

    async def test_a_closed_store_gives_no_notices(self, shared_backend: SharedBackend) -> None:
        store = shared_backend.make()
        await store.open()
        await store.close()
        with pytest.raises(StoreUnavailable):
            await _next(store.notices())
