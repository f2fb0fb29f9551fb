"""The Durable Streams protocol's names and shared rules: the header names,
the headers every answer carries (``SECURITY``), what a browser may send and
read, the cursor rule (``response_cursor``) and the face's settings
(``StreamSettings``): what the HTTP face (``server.streams.http``), its live
SSE read (``server.streams.sse``) and the transcripts' read-only face
(``server.streams.transcripts``) share.
"""

from __future__ import annotations

import random
import re
import time
from typing import Final

PREFIX: Final = "/v1/stream/"
TRANSCRIPTS: Final = PREFIX + "transcripts/"
#: The longest stream path (after the prefix), in characters.
MAX_PATH: Final = 1024

NEXT_OFFSET: Final = "Stream-Next-Offset"
UP_TO_DATE: Final = "Stream-Up-To-Date"
CLOSED: Final = "Stream-Closed"
CURSOR: Final = "Stream-Cursor"
TTL: Final = "Stream-TTL"
EXPIRES_AT: Final = "Stream-Expires-At"
SEQ: Final = "Stream-Seq"
PRODUCER_ID: Final = "Producer-Id"
PRODUCER_EPOCH: Final = "Producer-Epoch"
PRODUCER_SEQ: Final = "Producer-Seq"
EXPECTED_SEQ: Final = "Producer-Expected-Seq"
RECEIVED_SEQ: Final = "Producer-Received-Seq"
FORKED_FROM: Final = "Stream-Forked-From"
FORK_OFFSET: Final = "Stream-Fork-Offset"
FORK_SUB_OFFSET: Final = "Stream-Fork-Sub-Offset"
SSE_ENCODING: Final = "Stream-SSE-Data-Encoding"
#: ``DELETE`` with ``true``: forks get a copy of what they read through the
#: stream, which is deleted at once (its path free), not soft-deleted.
DETACH_FORKS: Final = "Stream-Detach-Forks"

#: What a browser may send and read (CORS), for the answers to preflights.
REQUEST_HEADERS: Final = (
    "content-type, authorization, if-none-match, stream-seq, stream-ttl, stream-expires-at, "
    "stream-closed, producer-id, producer-epoch, producer-seq, stream-forked-from, "
    "stream-fork-offset, stream-fork-sub-offset, stream-detach-forks"
)
EXPOSED_HEADERS: Final = (
    "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, "
    "Stream-Expires-At, Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, "
    "Producer-Expected-Seq, Producer-Received-Seq, ETag, Content-Type, Location"
)
SECURITY: Final = {
    "x-content-type-options": "nosniff",
    "cross-origin-resource-policy": "cross-origin",
}
CATCH_UP_CACHE: Final = "public, max-age=60, stale-while-revalidate=300"

#: The longest ``cursor`` a read may carry (this server's are 6-7 digits).
MAX_CURSOR: Final = 20

#: The protocol's cursor clock: 20-second intervals since 2024-10-09T00:00Z.
CURSOR_EPOCH_S: Final = 1728432000
CURSOR_INTERVAL_S: Final = 20
_CURSOR: Final = re.compile(r"[0-9]{1,20}")


class StreamSettings:
    """What the face needs besides the registry (from ``ServerConfig``)."""

    def __init__(
        self,
        *,
        long_poll_s: float = 20.0,
        sse_max_s: float = 60.0,
        max_body_bytes: int = 16 * 1024 * 1024,
        read_chunk_bytes: int = 1024 * 1024,
    ) -> None:
        self.long_poll_s = long_poll_s
        self.sse_max_s = sse_max_s
        self.max_body_bytes = max_body_bytes
        self.read_chunk_bytes = read_chunk_bytes


def response_cursor(client_cursor: str | None) -> str:
    """The interval number now, or (when the client already has it or a
    later one) past the client's by 1-3600 seconds of jitter, so cursors
    never go back and a CDN never loops on a cached empty answer."""
    current = int((time.time() - CURSOR_EPOCH_S) // CURSOR_INTERVAL_S)
    if not client_cursor or not _CURSOR.fullmatch(client_cursor):
        return str(current)
    previous = int(client_cursor)
    if previous < current:
        return str(current)
    jitter_s = random.randint(1, 3600)
    return str(previous + max(1, -(-jitter_s // CURSOR_INTERVAL_S)))
