"""``MemoryStore`` against the store contract."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.types import Message, MessagesAppended, TranscriptEvent
from server.store import MemoryStore, Notice, SharedMemoryStore, SharedStore, Store
from server.store.base import NewTranscript
from tests.server.store.shared_store_contract import SharedBackend, SharedStoreContract
from tests.server.store.store_contract import StoreBackend, StoreContract


class MemoryBackend:
    persistent = False

    def make(self, **options: Any) -> Store:
        return MemoryStore(**options)


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store_backend(self) -> StoreBackend:
        return MemoryBackend()


class SharedMemoryBackend:
    persistent = False

    def __init__(self) -> None:
        self.store: SharedMemoryStore | None = None

    def make(self, **options: Any) -> SharedMemoryStore:
        # One object is the shared place: every replica of a test uses it.
        if self.store is None:
            self.store = SharedMemoryStore(**options)
        return self.store


class TestSharedMemoryStore(StoreContract, SharedStoreContract):
    @pytest.fixture
    def store_backend(self) -> StoreBackend:
        return SharedMemoryBackend()

    @pytest.fixture
    def shared_backend(self) -> SharedBackend:
        return SharedMemoryBackend()


def test_a_plain_memory_store_is_not_shared() -> None:
    """``tsync serve --store memory`` runs no backplane."""
    assert not isinstance(MemoryStore(), SharedStore)


async def test_a_listener_that_falls_behind_is_told_to_check_everything() -> None:
    store = SharedMemoryStore(notice_backlog=3)
    await store.open()
    notices = store.notices()
    assert await anext(notices) is None
    await store.create(NewTranscript("t1", "e", 0))
    for r in range(1, 6):
        await store.append(
            TranscriptEvent("t1", "e", r, 0, MessagesAppended(r - 1, (Message("user", "x"),)))
        )
    # Six notices for a backlog of three: the detail is gone, the news is not.
    got = [await anext(notices) for _ in range(3)]
    assert got == [None, Notice("t1", "e", 4), Notice("t1", "e", 5)]
    await notices.aclose()  # type: ignore[attr-defined]


async def test_idempotency_keys_expire_after_the_ttl() -> None:
    from server.store.base import Receipt
    from tests.server.store.store_contract import CREATED_AT, EPOCH, appended

    now = [1000.0]
    store = MemoryStore(idempotency_ttl_s=60, clock=lambda: now[0])
    await store.open()
    await store.create(NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0), idempotency_key="k"))
    now[0] += 59
    assert (await store.append(appended(2, 1), idempotency_key="k")).duplicate
    assert await store.recorded("t1", "k") == Receipt(1, 0, 1)
    now[0] += 2  # 61 s after: forgotten, the retry is a new append
    assert await store.recorded("t1", "k") is None
    assert not (await store.append(appended(2, 1), idempotency_key="k")).duplicate
