"""Where transcripts live when no process holds them: the ``Store`` interface,
its backends and ``open_store`` to pick one by URL."""

from server.store.base import (
    AppendAck,
    AppendResult,
    RevisionMismatch,
    Store,
    StoredTranscript,
    StoreError,
    StoreUnavailable,
    TranscriptExists,
    TranscriptInfo,
    TranscriptNotFound,
)
from server.store.memory import MemoryStore
from server.store.open import open_store
from server.store.sqlite import SQLiteStore

__all__ = [
    "AppendAck",
    "AppendResult",
    "MemoryStore",
    "RevisionMismatch",
    "SQLiteStore",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoredTranscript",
    "TranscriptExists",
    "TranscriptInfo",
    "TranscriptNotFound",
    "open_store",
]
