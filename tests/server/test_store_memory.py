"""``MemoryStore`` against the store contract."""

from __future__ import annotations

from typing import Any

import pytest

from server.store import MemoryStore, Store
from tests.server.store_contract import StoreBackend, StoreContract


class MemoryBackend:
    persistent = False

    def make(self, **options: Any) -> Store:
        return MemoryStore(**options)


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store_backend(self) -> StoreBackend:
        return MemoryBackend()


def test_negative_retention_is_refused() -> None:
    with pytest.raises(ValueError):
        MemoryStore(idempotency_retention=-1)
