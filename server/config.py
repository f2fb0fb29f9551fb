"""Server settings: one frozen struct, filled from defaults, env vars and the CLI.

Every limit has a name, a default chosen for a 2-core box serving thousands of
connections, and an env var ``TSYNC_<NAME>`` (upper case) that sets it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import msgspec

from protocol import limits
from server.store.base import DEFAULT_IDEMPOTENCY_RETENTION


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True):
    host: str = "127.0.0.1"
    port: int = 8765
    #: ``sqlite:PATH`` (the embedded default), ``memory``, ``redis://...``.
    store: str = "sqlite:./data"
    #: A shared secret; when set, every request needs ``Authorization: Bearer``
    #: (or ``?token=`` on the WebSocket, for browsers).
    token: str | None = None
    log_level: str = "info"
    log_format: str = "text"  # "text" or "json"

    # --- inbound limits ---
    max_frame_bytes: int = limits.MAX_FRAME_BYTES
    max_message_bytes: int = limits.MAX_MESSAGE_BYTES
    max_messages_per_batch: int = limits.MAX_MESSAGES_PER_BATCH
    max_http_body_bytes: int = 16 << 20
    max_subscriptions_per_connection: int = 256
    max_connections: int = 20_000
    #: Ops a connection may send per second on average (0: unlimited), and
    #: how many it may send at once; more get ``rate-limited``.
    max_ops_per_second: float = 0.0
    max_ops_burst: float = 1000.0

    # --- outbound queue per connection (lagged when over either) ---
    queue_max_frames: int = 10_000
    queue_max_bytes: int = 8 << 20
    #: Most bytes coalesced into one WebSocket message (frames joined by "\n").
    write_batch_bytes: int = 256 << 10
    #: Milliseconds to let increments gather before waking the writers, so
    #: that events arriving close together go out in one message per
    #: subscriber (0: at the end of the current event-loop turn).
    write_delay_ms: float = 1.0

    # --- per live transcript ---
    #: Recent encoded events kept in memory for resumes.
    event_window: int = 1024
    #: A resume further behind than this gets a fresh baseline instead.
    max_resume_events: int = 10_000
    #: Seconds an unused transcript stays in memory.
    idle_ttl_s: float = 60.0
    #: Idempotency keys remembered per transcript, by the hub in memory and by
    #: the store (the one value for both).
    idempotency_retention: int = DEFAULT_IDEMPOTENCY_RETENTION
    #: With a shared store (Redis): seconds between the backplane's checks of
    #: every live copy against the store (pub/sub notices are only a wake-up).
    backplane_resync_s: float = 1.0

    # --- connections ---
    ping_interval_s: float = 20.0
    ping_timeout_s: float = 20.0
    permessage_deflate: bool = False
    #: Hard cap above which the WebSocket layer closes with 1009 instead of
    #: answering ``too-large`` (frames between the two get the error frame).
    ws_hard_max_bytes: int = 64 << 20
    graceful_shutdown_s: float = 10.0
    #: ``sys.setswitchinterval`` of the server process, in milliseconds: how
    #: soon the store's worker thread gets the GIL back from a busy loop.
    gil_switch_interval_ms: float = 0.5

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ServerConfig:
        """Defaults, then ``TSYNC_*`` env vars, then ``overrides`` (non-None only)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field in msgspec.structs.fields(cls):
            raw = env.get("TSYNC_" + field.name.upper())
            if raw is not None:
                values[field.name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return msgspec.convert(values, cls, strict=False)
        except msgspec.ValidationError as exc:
            raise ValueError(f"invalid setting: {exc}") from None
