"""Where transcripts live when no process holds them: the ``Store`` interface,
its backends, their options and ``open_store`` to pick one by URL."""

from server.store.base import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    AppendResult,
    Head,
    NewTranscript,
    Notice,
    Receipt,
    Recheck,
    RevisionMismatch,
    SharedStore,
    Store,
    StoredRange,
    StoredState,
    StoredTranscript,
    StoreError,
    StoreUnavailable,
    TranscriptExists,
    TranscriptInfo,
    TranscriptNotFound,
)
from server.store.memory import MemoryStore, SharedMemoryStore
from server.store.open import open_store
from server.store.options import MemoryOptions, RedisOptions, SQLiteOptions
from server.store.sqlite import SQLiteStore

__all__ = [
    "DEFAULT_IDEMPOTENCY_RETENTION",
    "AppendResult",
    "Head",
    "MemoryOptions",
    "MemoryStore",
    "NewTranscript",
    "Notice",
    "Receipt",
    "Recheck",
    "RedisOptions",
    "RevisionMismatch",
    "SQLiteOptions",
    "SQLiteStore",
    "SharedMemoryStore",
    "SharedStore",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoredRange",
    "StoredState",
    "StoredTranscript",
    "TranscriptExists",
    "TranscriptInfo",
    "TranscriptNotFound",
    "open_store",
]
