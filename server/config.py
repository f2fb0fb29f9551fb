"""Server settings: one frozen struct, filled by one function from defaults,
``TSYNC_*`` environment variables and explicit overrides (flags).

``load_config`` is the only way a running server gets its settings: ``tsync
serve``, the ASGI factory ``server.app:create_app`` and the module-level
``server.app:app`` all call it, so the same environment configures the server
the same way however it is started. Every field carries its description
(``Meta(description=...)``); ``server.run.config_docs`` renders
``docs/configuration.md`` from them.

A bad setting raises ``ConfigError``: one line that names the setting the way
it was given (``--port``, ``--set queue_max_frames``, ``TSYNC_PORT``), raised
before anything is opened.

Why one module of over 600 lines: every setting with its type, default, bounds and
description is declared once, here, and read by the CLI, the environment, ``server.app``
and the generated docs; most of the lines are those declarations.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, get_args, get_origin

import msgspec
from msgspec import Meta

from protocol import limits
from server.store.base import DEFAULT_IDEMPOTENCY_RETENTION, DEFAULT_IDEMPOTENCY_TTL_S

__all__ = ["ENV_PREFIX", "ConfigError", "ServerConfig", "env_name", "load_config"]

ENV_PREFIX: Final = "TSYNC_"

#: ``TSYNC_*`` variables that are not server settings (the client commands,
#: the scripts and the tests read them); anything else under the prefix that
#: is not a setting is reported as a likely misspelling.
OTHER_ENV_NAMES: Final = frozenset(
    {"URL", "REQUIRE_ALL", "VENV", "EXTRAS", "FAULT_SEEDS", "TOKEN_FILE"}
)

NonNegInt = Annotated[int, Meta(ge=0)]
PosInt = Annotated[int, Meta(ge=1)]
NonNegFloat = Annotated[float, Meta(ge=0)]
PosFloat = Annotated[float, Meta(gt=0)]
#: A share of a whole, strictly between 0 and 1.
Share = Annotated[float, Meta(gt=0, lt=1)]
#: A setting that is text when set: never empty.
Text = Annotated[str, Meta(min_length=1)]


def _d(text: str, **constraints: Any) -> Meta:
    return Meta(description=text, **constraints)


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every setting of one server process (see ``docs/configuration.md``)."""

    # --- where and how it runs ---
    host: Annotated[
        str, _d("address to bind; `0.0.0.0` or `::` to serve other machines", min_length=1)
    ] = "127.0.0.1"
    port: Annotated[int, _d("port to bind (0 picks a free one)", ge=0, le=65535)] = 8765
    store: Annotated[
        str,
        _d(
            "where transcripts live: `sqlite:PATH` (a data folder, created if missing; "
            "WAL mode, durable against a killed process), `memory` (nothing survives a "
            "restart), `redis://host:port/db` / `rediss://...`, or a Redis Cluster "
            "`redis+cluster://host:port,host:port` / `rediss+cluster://...`, with options as "
            "query parameters (see `deploy.md`)",
            min_length=1,
        ),
    ] = "sqlite:./data"
    token: Annotated[
        Text | None,
        _d(
            "a static admin token (may do everything); with it, `jwt_secret` or `jwt_key` set, "
            "every request but the health, metrics, API descriptions and pages needs "
            "credentials: `Authorization: Bearer <token>` over HTTP; on the WebSocket that "
            "header, `?token=` or a first `auth` op (see `protocol.md`, Credentials)"
        ),
    ] = None
    jwt_secret: Annotated[
        Text | None,
        _d(
            "accept JWTs signed with HS256 and this secret (at least 32 bytes; `tsync token` "
            "mints development tokens with it)"
        ),
    ] = None
    jwt_key: Annotated[
        Text | None,
        _d(
            "accept JWTs signed with RS256-512/PS256-512 (RSA key), ES256-512 (EC key) or EdDSA: "
            "the path of a PEM public key or a JWKS file (keys chosen by `kid`); needs the "
            "`cryptography` package (`pip install 'transcript-sync[keys]'`)"
        ),
    ] = None
    jwt_audience: Annotated[
        Text | None,
        _d(
            "when set, a JWT must name it in its `aud` claim; when not, a JWT that has an "
            "`aud` is refused"
        ),
    ] = None
    auth_timeout_s: Annotated[
        PosFloat,
        _d(
            "a WebSocket that connected without credentials to a server that needs them is "
            "closed with 4001 unless an `auth` op brings valid ones within this many seconds"
        ),
    ] = 10.0
    allowed_origins: Annotated[
        Text | None,
        _d(
            "comma-separated web origins whose pages may open a WebSocket or send a "
            "state-changing request (`https://app.example.com`, `http://localhost:*`, `*` for "
            "any); unset: the server's own origin (same `Host`), and `http://localhost:*` and "
            "`http://127.0.0.1:*` for requests that arrive on a loopback address. Requests "
            "without an `Origin` (not from a browser) are not checked"
        ),
    ] = None
    allowed_hosts: Annotated[
        Text | None,
        _d(
            "comma-separated host names a request's `Host` may name (`tsync.example.com`, "
            "`*.example.com`, `*` for any), besides `localhost` and loopback addresses on a "
            "request that arrives on a loopback address (the local CLI); unset: requests that "
            "arrive on a loopback address must name `localhost` or a loopback address (against "
            "DNS rebinding), others are not checked. `/healthz`, `/readyz` and `/metrics` are "
            "never checked (probes call them by IP)"
        ),
    ] = None
    cors_origins: Annotated[
        Text | None,
        _d(
            "comma-separated web origins whose pages may call the HTTP API from their own "
            "origin (CORS; patterns as in `allowed_origins`); preflight requests are answered "
            "for them; unset: no cross-origin access"
        ),
    ] = None
    page_remote_images: Annotated[
        bool,
        _d(
            "let the chat page load images from other servers (`image_url` parts and Markdown "
            "images); off, it shows a link instead, so that whoever wrote a message cannot "
            "learn who reads it"
        ),
    ] = False
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"], _d("least severe log level written")
    ] = "info"
    log_format: Annotated[
        Literal["text", "json"],
        _d("`text` (readable, with `key=value` fields) or `json` (one object per line)"),
    ] = "text"
    workers: Annotated[
        PosInt,
        _d(
            "`tsync serve` processes on the one port (SO_REUSEPORT: the kernel spreads the "
            "connections); each is a replica, so more than 1 needs a shared store "
            "(`redis://` or `redis+cluster://`); see `deploy.md`"
        ),
    ] = 1

    # --- inbound limits ---
    max_frame_bytes: Annotated[
        PosInt,
        _d("largest inbound WebSocket message answered normally; larger ones get `too-large`"),
    ] = limits.MAX_FRAME_BYTES
    ws_hard_max_bytes: Annotated[
        PosInt | None,
        _d(
            "above this the WebSocket layer closes the connection with 1009 without reading "
            "the rest of the message, counted in bytes across its fragments (messages between "
            "`max_frame_bytes` and this get `too-large`); none: `max_frame_bytes` + 25%, so "
            "that a message never finished holds little more memory than an allowed one (at "
            "64 MiB, 30 such connections held 1.9 GB)"
        ),
    ] = None
    ws_message_timeout_s: Annotated[
        NonNegFloat,
        _d(
            "seconds an inbound WebSocket message may take from its first byte to its last; "
            "a connection still sending one after that is closed with 4010 (0: no limit; "
            "applied by `tsync serve`'s WebSocket protocol). 30 s lets a 4 MiB message "
            "through at about 1 Mbit/s"
        ),
    ] = 30.0
    ws_max_fragments: Annotated[
        NonNegInt,
        _d(
            "fragments an inbound WebSocket message may come in; a message in more closes "
            "the connection with 1009 (0: no limit; applied by `tsync serve`'s WebSocket "
            "protocol). Browsers and the clients here never fragment; a fragment costs the "
            "server the same whatever its size, an empty one included"
        ),
    ] = 1024
    ws_max_fragments_per_s: Annotated[
        NonNegFloat,
        _d(
            "fragments (parts of fragmented messages) a WebSocket connection may send per "
            "second, a second's worth at once; more close it with 1009 (0: no limit; `tsync "
            "serve`). 4 million one-byte fragments once held 192 MB and slowed every other "
            "connection's pings to 455 ms"
        ),
    ] = 4096.0
    max_message_bytes: Annotated[PosInt, _d("largest message (its compact JSON)")] = (
        limits.MAX_MESSAGE_BYTES
    )
    max_messages_per_batch: Annotated[PosInt, _d("most messages in one append")] = (
        limits.MAX_MESSAGES_PER_BATCH
    )
    max_http_body_bytes: Annotated[
        PosInt, _d("largest HTTP request body (imports included); larger get 413 `too-large`")
    ] = 16 << 20
    max_streams: Annotated[
        PosInt,
        _d("most Durable Streams (`/v1/stream/`) held; creating another gets 429"),
    ] = 10_000
    max_stream_bytes: Annotated[
        PosInt,
        _d("most bytes all Durable Streams hold together; an append past it gets 507"),
    ] = 256 << 20
    max_stream_append_values: Annotated[
        PosInt,
        _d(
            "most JSON values one Durable Streams JSON-mode append (or create) may hold; "
            "more gets 413"
        ),
    ] = 10_000
    max_sse_queued_bytes: Annotated[
        PosInt,
        _d(
            "most bytes of events all Durable Streams SSE readers of the process may have "
            "queued together; a reader past its share is ended and resumes"
        ),
    ] = 64 << 20
    max_stream_producers: Annotated[
        PosInt,
        _d(
            "most idempotent producers (`Producer-Id`) one Durable Stream keeps, those heard"
            " from in 7 days; a new one past it gets 409 (their state counts in"
            " `max_stream_bytes`)"
        ),
    ] = 1024
    max_producer_id_bytes: Annotated[
        PosInt, _d("longest Durable Streams `Producer-Id` (UTF-8 bytes); longer gets 400")
    ] = 256
    max_fork_depth: Annotated[
        PosInt,
        _d(
            "most sources a Durable Streams fork reads through (its source, that one's...);"
            " creating a deeper fork gets 400"
        ),
    ] = 64
    stream_long_poll_s: Annotated[
        PosFloat,
        _d("how long a Durable Streams long-poll read waits for data before its 204"),
    ] = 20.0
    max_subscriptions_per_connection: Annotated[
        PosInt, _d("more subscriptions on one connection get `too-many-subscriptions`")
    ] = 256
    max_connections: Annotated[PosInt, _d("more WebSocket connections are closed with 1013")] = (
        20_000
    )
    max_ops_per_second: Annotated[
        NonNegFloat,
        _d(
            "average ops a WebSocket connection may send per second (0: unlimited); more "
            "get `rate-limited` (set it, e.g. to 50, when browsers of untrusted users connect)"
        ),
    ] = 0.0
    max_ops_burst: Annotated[
        Annotated[float, Meta(ge=1)],
        _d("ops a connection may send at once before the rate applies"),
    ] = 1000.0

    # --- what one request may make the server compute (issue 24) ---
    max_views_per_transcript: Annotated[
        PosInt,
        _d(
            "Views a transcript may have at once; setting one more gets `invalid-view` "
            "(leave one first). Every usage query, window and snapshot lists them"
        ),
    ] = 256
    max_usage_ranges: Annotated[
        PosInt,
        _d(
            "segments and Views one `GET .../usage` may count together (`segments=all` "
            "included); more, or the same segment or View asked twice, get `invalid-query`"
        ),
    ] = 1024

    # --- HTTP connections (tsync serve; server.web.http_guard) ---
    http_header_timeout_s: Annotated[
        PosFloat,
        _d(
            "seconds a client has to send a request's headers, from the moment it connects "
            "(or sends the first byte after a keep-alive pause); then 408 and closed "
            "(slowloris)"
        ),
    ] = 10.0
    http_body_timeout_s: Annotated[
        PosFloat,
        _d(
            "seconds a request's body may take once its headers are in, extended by a second "
            "for every `http_body_min_rate` bytes received; then 408 and closed"
        ),
    ] = 20.0
    http_body_min_rate: Annotated[
        NonNegFloat,
        _d(
            "bytes per second a slow upload must keep up to earn more time "
            "(0: the body deadline is fixed)"
        ),
    ] = 1024.0
    http_keep_alive_s: Annotated[
        PosFloat,
        _d("seconds an idle keep-alive HTTP connection stays open after a response"),
    ] = 5.0
    http_send_timeout_s: Annotated[
        PosFloat,
        _d(
            "seconds a response may wait for a client that stopped reading it before the "
            "connection is cut (its memory is freed)"
        ),
    ] = 30.0
    max_http_connections: Annotated[
        PosInt,
        _d(
            "open HTTP connections (WebSockets are counted by `max_connections` only: an "
            "upgrade is never refused by this cap); past it a new connection gets only "
            "`/healthz`, `/readyz` and `/metrics` and WebSocket upgrades, anything else 503 "
            "with `Retry-After`. Shares of it are kept apart: see "
            "`http_unauthenticated_share` and `http_parked_share`"
        ),
    ] = 1000
    http_unauthenticated_share: Annotated[
        Share,
        _d(
            "share of `max_http_connections` that connections which have not yet sent a "
            "complete request with valid credentials (waiting for their headers, or with only "
            "public or refused requests so far) may hold together; one more closes the one of "
            "them that has waited longest for its headers (when all are in requests, the "
            "oldest), so sockets that trickle headers "
            "cannot take the room of clients with credentials (on a server that needs none, "
            "any complete request counts)"
        ),
    ] = 0.25
    http_parked_share: Annotated[
        Share,
        _d(
            "share of `max_http_connections` that parked live reads (Durable Streams "
            "`live=long-poll` and `live=sse`) may hold together; one more is answered 503 "
            "`unavailable` with `Retry-After` at once. With `http_unauthenticated_share` it "
            "must leave a share (their sum below 1) for other requests with credentials"
        ),
    ] = 0.5

    # --- outbound queue per connection (lagged when over either) ---
    queue_max_frames: Annotated[
        PosInt, _d("outbound frames queued per connection before it is `lagged`")
    ] = 10_000
    queue_max_bytes: Annotated[
        PosInt,
        _d(
            "outbound bytes queued per connection before it is `lagged`; a baseline's bytes not "
            "sent yet count on top of it, and a client that passes it while it holds a baseline "
            "it has not read is closed with 4008 instead"
        ),
    ] = 8 << 20
    write_batch_bytes: Annotated[
        PosInt, _d('most bytes coalesced into one WebSocket message (frames joined by "\\n")')
    ] = 256 << 10
    write_delay_ms: Annotated[
        NonNegFloat,
        _d(
            "milliseconds new increments gather before the writers are woken, so that events "
            "arriving close together leave in one WebSocket message per subscriber (0: at the "
            "end of the current event-loop turn); only where frames go through ASGI `send` "
            "(another ASGI server): `tsync serve` writes them as they are delivered"
        ),
    ] = 1.0

    # --- per live transcript ---
    event_window: Annotated[
        NonNegInt, _d("recent encoded events kept per live transcript for resumes")
    ] = 1024
    max_resume_events: Annotated[
        NonNegInt, _d("a resume further behind than this gets a fresh baseline instead")
    ] = 10_000
    live_messages: Annotated[
        NonNegInt,
        _d(
            "messages of each live transcript kept in memory: the newest ones (up to 1.5 times "
            "this many before the oldest are let go); a baseline, range or export that starts "
            "earlier reads the older part from the store, so memory follows the working set, "
            "not the history (0: keep every message)"
        ),
    ] = 2000
    idle_ttl_s: Annotated[
        PosFloat,
        _d("seconds an unsubscribed, unused transcript stays in memory"),
    ] = 60.0
    max_live_transcripts: Annotated[
        PosInt,
        _d(
            "transcripts held in memory at once; to load another, the least recently used "
            "one nobody subscribes to or writes is let go, and when none can be, the request "
            "gets 503 `unavailable` with `Retry-After`"
        ),
    ] = 10_000
    max_live_bytes: Annotated[
        PosInt,
        _d(
            "the stored size of the transcripts held in memory (their objects take about "
            "three times as much); enforced like `max_live_transcripts`, except that one "
            "transcript larger than this is still served when it is the only one held"
        ),
    ] = 1 << 30
    idempotency_ttl_s: Annotated[
        PosFloat,
        _d(
            "seconds every store remembers an idempotency key: a retry within this window "
            "gets the first ack, across restarts and crashes (the store is the authority; "
            "the hub keeps only the newest 1000 keys per transcript in memory)"
        ),
    ] = DEFAULT_IDEMPOTENCY_TTL_S
    idempotency_retention: Annotated[
        NonNegInt,
        _d(
            "most idempotency keys a store honours per transcript (the newest); in memory and "
            "Redis also a bound on the space one transcript's keys take within "
            "`idempotency_ttl_s` (SQLite keeps each key in its event's row)"
        ),
    ] = DEFAULT_IDEMPOTENCY_RETENTION
    max_drafts_per_transcript: Annotated[
        PosInt,
        _d(
            "open drafts (messages being streamed, see `protocol.md`, Drafts) a transcript "
            "may have at once; opening one more gets `too-many-drafts`. A draft's text is "
            "bounded by `max_message_bytes`"
        ),
    ] = 16
    max_draft_parts: Annotated[
        PosInt,
        _d(
            "parts a reply with parts (a draft written with `chunks`: text, reasoning, tool "
            "calls, files, sources, data, steps) may have; a chunk past it gets "
            "`draft-too-large`"
        ),
    ] = 1000
    draft_ttl_s: Annotated[
        PosFloat,
        _d(
            "seconds a draft lives without an update before it expires (subscribers get its "
            "`expired` close); a closed draft's id is remembered as long (a late token is "
            "`draft-closed`, a consumer that resumes from before a commit gets its `final`)"
        ),
    ] = 30.0
    ai_reply_timeout_s: Annotated[
        PosFloat,
        _d(
            "seconds `/v1/ai/chat` (the AI SDK's transports) waits for an agent to open the "
            "draft of a reply to a message it appended; none by then is an `error` frame"
        ),
    ] = 60.0
    max_closed_drafts: Annotated[
        PosInt,
        _d(
            "closed drafts a transcript remembers at once: each close (commit, cancel, "
            "expiry) is remembered for the whole `draft_ttl_s`, so that a late token is "
            "`draft-closed`; while this many are, opening a draft or cancelling one that is "
            "not open gets `too-many-drafts` (a commit is always remembered)"
        ),
    ] = 1024
    max_draft_bytes: Annotated[
        PosInt,
        _d(
            "bytes the drafts on this server may hold in all (each open draft's UTF-8 text "
            "and 1 KiB, each remembered close 256 bytes), counted within `max_live_bytes` too; "
            "an update past it gets `too-many-drafts`, subscribed to or not"
        ),
    ] = 64 << 20
    max_connection_draft_bytes: Annotated[
        PosInt,
        _d(
            "bytes the open drafts one connection wrote last may hold (as for "
            "`max_draft_bytes`); an update past it gets `too-many-drafts`"
        ),
    ] = 16 << 20
    draft_coalesce_s: Annotated[
        Annotated[float, Meta(ge=0, le=1)],
        _d(
            "a draft's deltas written less than this many seconds after its last update wait "
            "and go out together as one update, at most one per draft per interval (the first "
            "delta after a pause goes out at once; a commit, a catch-up or an op with a `ref` "
            "sends what waits). Fewer frames per token for every subscriber, at the cost of up "
            "to this much token latency; 0 sends every delta as its own update"
        ),
    ] = 0.04
    presence_interval_s: Annotated[
        Annotated[float, Meta(gt=0, le=60)],
        _d(
            "a transcript's presence changes (members joining, leaving, changing their state: "
            "see `protocol.md`, Presence) go to its watchers at most once per this many "
            "seconds, together, encoded once (the first change after a quiet interval at once)"
        ),
    ] = 1.0
    presence_max_members: Annotated[
        NonNegInt,
        _d(
            "above this many members a transcript's presence frames carry counts only "
            "(viewers, writers, agents) instead of the members, and "
            "`GET .../presence` lists none"
        ),
    ] = 100
    max_connection_presence_bytes: Annotated[
        PosInt,
        _d(
            "bytes the presence one connection states may hold, over every transcript it is a "
            "member of (each member's state as compact JSON, and 640 bytes); a `presence` op "
            "past it gets `too-large` naming this setting (leave a transcript's presence, or "
            "state less). 25,600 members with 1 KiB states once held 83 MB"
        ),
    ] = 64 << 10
    presence_ttl_s: Annotated[
        PosFloat,
        _d(
            "with a shared store (Redis): seconds a replica's presence entries live unless it "
            "renews them (it does every third of this); the members of a replica that stops "
            "are gone on the others within this time"
        ),
    ] = 30.0
    backplane_resync_s: Annotated[
        PosFloat,
        _d(
            "with a shared store (Redis): seconds between a replica's checks of its live "
            "copies (transcripts, and the Durable Streams its readers wait on) against the "
            "store, the safety net for lost pub/sub notices (see `deploy.md`)"
        ),
    ] = 1.0

    # --- CPU-heavy work (server.web.offload) ---
    offload_processes: Annotated[
        PosInt,
        _d(
            "worker processes that read LMML imports (zip inflation included) and write "
            "exports, so that a large one never stalls the event loop; started on first use"
        ),
    ] = 2
    offload_queue: Annotated[
        NonNegInt,
        _d(
            "imports and exports that may wait for a worker; more are refused at once with "
            "503 `unavailable` and `Retry-After`"
        ),
    ] = 8
    offload_budget_s: Annotated[
        PosFloat,
        _d(
            "the longest one import or export may run; past it the worker is stopped and the "
            "request refused with 422 `too-costly` (the largest accepted body takes a few "
            "seconds)"
        ),
    ] = 20.0

    # --- connections and the process ---
    ping_interval_s: Annotated[
        NonNegFloat, _d("WebSocket ping period in seconds (0 disables pings)")
    ] = 20.0
    ping_timeout_s: Annotated[
        NonNegFloat,
        _d("a connection that does not answer a ping within this many seconds is closed (1011)"),
    ] = 20.0
    permessage_deflate: Annotated[
        bool, _d("WebSocket compression; off because it costs ~4 µs per delivery")
    ] = False
    graceful_shutdown_s: Annotated[
        PosFloat,
        _d(
            "the longest a SIGTERM or Ctrl-C waits for WebSockets to drain (closed with 1001) "
            "and requests to finish before they are cut"
        ),
    ] = 10.0
    gil_switch_interval_ms: Annotated[
        PosFloat,
        _d(
            "`sys.setswitchinterval` of the server process, set at startup: how soon a "
            "store's worker thread gets the GIL back from a busy event loop"
        ),
    ] = 0.5

    @property
    def message_limits(self) -> limits.MessageLimits:
        """The message limits as one value: what the hub validates with and
        what every live ``Transcript`` re-checks with (never the defaults).
        One value per pair of settings (read once per append)."""
        return _message_limits(self.max_messages_per_batch, self.max_message_bytes)

    def ws_max_bytes(self) -> int:
        """The WebSocket layer's limit on one inbound message, in bytes."""
        if self.ws_hard_max_bytes is not None:
            return self.ws_hard_max_bytes
        return self.max_frame_bytes + self.max_frame_bytes // 4


@functools.lru_cache(maxsize=16)
def _message_limits(max_messages_per_batch: int, max_message_bytes: int) -> limits.MessageLimits:
    return limits.MessageLimits(
        max_messages_per_batch=max_messages_per_batch, max_message_bytes=max_message_bytes
    )


class ConfigError(ValueError):
    """A setting is unknown or has a bad value. ``str()`` is one line naming
    the setting as it was given; ``setting`` is the field name."""

    def __init__(self, message: str, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


FIELDS: Final = {f.name: f for f in msgspec.structs.fields(ServerConfig)}
#: The settings that take one of a few words (case does not matter).
_CHOICES: Final = {
    name: get_args(get_args(field.type)[0])
    for name, field in FIELDS.items()
    if get_origin(get_args(field.type)[0] if get_origin(field.type) is Annotated else field.type)
    is Literal
}


def env_name(setting: str) -> str:
    """``queue_max_frames`` -> ``TSYNC_QUEUE_MAX_FRAMES``."""
    return ENV_PREFIX + setting.upper()


def load_config(
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    given_as: Mapping[str, str] | None = None,
    check_store: bool = True,
) -> ServerConfig:
    """Defaults, then ``TSYNC_<NAME>`` variables of ``env`` (default
    ``os.environ``), then ``overrides`` (``None`` values are skipped).

    ``given_as`` names how each override was given (``{"port": "--port"}``)
    so that an error points at it. With ``check_store`` the store URL is
    parsed (``open_store``), which opens nothing. Raises ``ConfigError``.
    """
    env = os.environ if env is None else env
    given_as = given_as or {}
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for name in FIELDS:
        raw = env.get(env_name(name))
        if raw is not None:
            values[name] = raw
            origin[name] = env_name(name)
    for name, value in (overrides or {}).items():
        if value is None:
            continue
        if name not in FIELDS:
            raise ConfigError(f"{given_as.get(name, name)}: {unknown_setting(name)}", name)
        values[name] = value
        origin[name] = given_as.get(name, name)
    # One field at a time first, so that the error names the setting and
    # where it came from; every field has a default, so this is enough.
    for name, value in values.items():
        if isinstance(value, str):
            if not value.strip():
                default = FIELDS[name].default
                hint = "to leave it off" if default is None else f"for the default {default!r}"
                raise ConfigError(f"{origin[name]} is empty (unset it {hint})", name)
            if name in _CHOICES:
                value = values[name] = value.strip().lower()
            else:
                try:
                    value = values[name] = with_unit(name, value)
                except ValueError as exc:
                    raise ConfigError(f"{origin[name]}={value!r}: {exc}", name) from None
        try:
            msgspec.convert({name: value}, ServerConfig, strict=False)
        except msgspec.ValidationError as exc:
            if name in _CHOICES:
                reason = "expected one of " + ", ".join(_CHOICES[name])
            else:
                reason = _readable(str(exc).split(" - at `$", 1)[0])
            raise ConfigError(f"{origin[name]}={value!r}: {reason}", name) from None
    config = msgspec.convert(values, ServerConfig, strict=False)
    from server.auth import SettingError, check_settings

    try:
        check_settings(config)
    except SettingError as exc:
        where = origin.get(exc.setting or "", exc.setting or "settings")
        raise ConfigError(f"{where}: {exc}", exc.setting) from None
    if config.ws_hard_max_bytes is not None and config.ws_hard_max_bytes < config.max_frame_bytes:
        where = origin.get("ws_hard_max_bytes", "ws_hard_max_bytes")
        raise ConfigError(
            f"{where}={config.ws_hard_max_bytes}: below max_frame_bytes "
            f"({config.max_frame_bytes}); messages in between could never be answered",
            "ws_hard_max_bytes",
        )
    if config.http_unauthenticated_share + config.http_parked_share >= 1:
        name = "http_unauthenticated_share"
        if "http_parked_share" in origin:
            name = "http_parked_share"
        raise ConfigError(
            f"{origin.get(name, name)}: http_unauthenticated_share "
            f"({config.http_unauthenticated_share:g}) and http_parked_share "
            f"({config.http_parked_share:g}) add up to 1 or more, leaving no HTTP connection "
            "for requests with credentials",
            name,
        )
    if check_store:
        from server.store.base import SharedStore
        from server.store.open import open_store

        try:
            store = open_store(config.store)
        except ValueError as exc:
            where = origin.get("store", "store")
            raise ConfigError(f"{where}={config.store!r}: {exc}", "store") from None
        if config.workers > 1 and not isinstance(store, SharedStore):
            raise ConfigError(
                f"{origin.get('workers', 'workers')}={config.workers}: each worker is a "
                f"replica and needs a store they share (redis:// or redis+cluster://), "
                f"not {config.store!r}",
                "workers",
            )
    return config


#: Sizes as the docs print them (``4 MiB``): binary and decimal units.
SIZE_UNITS: Final = {
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
}
#: Durations (``30s``, ``5m``), in seconds.
TIME_UNITS: Final = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_NUMBER_AND_UNIT: Final = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]+)\s*")


def with_unit(name: str, text: str) -> str | int | float:
    """``text`` of the setting ``name`` with its unit applied: a ``*_bytes``
    setting takes ``4MiB``, ``512 KiB``, ``1GB``; a ``*_s`` one ``30s``,
    ``5m``, ``500ms``; a ``*_ms`` one ``2s``, ``500ms``. A plain number is
    returned as it is (its unit is the setting's). Raises ``ValueError``
    for a unit the setting does not take."""
    sized = name.endswith("_bytes")
    per = 1.0 if name.endswith("_s") else 0.001 if name.endswith("_ms") else None
    match = _NUMBER_AND_UNIT.fullmatch(text.lower())
    if match is None or (not sized and per is None):
        return text  # not a number with a unit, or a setting without units
    number, unit = float(match[1]), match[2]
    if not math.isfinite(number):
        raise ValueError("expected a finite number")
    if sized:
        if unit not in SIZE_UNITS:
            raise ValueError("expected a size such as 4MiB, 512KiB, 1GB or a number of bytes")
        size = number * SIZE_UNITS[unit]
        if size != int(size):
            raise ValueError("not a whole number of bytes")
        return int(size)
    assert per is not None
    if unit not in TIME_UNITS:
        raise ValueError("expected a duration such as 30s, 5m, 500ms or a plain number")
    return number * TIME_UNITS[unit] / per


def unknown_setting(name: str) -> str:
    """``unknown setting 'x'``, with the closest names when there are any."""
    close = difflib.get_close_matches(name, FIELDS, n=2)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return f"unknown setting {name!r}{hint}"


def unknown_env_names(env: Mapping[str, str] | None = None) -> list[str]:
    """``TSYNC_*`` variables of ``env`` that name no setting: most likely
    misspelt, and ignored, so the server warns about them at startup."""
    env = os.environ if env is None else env
    return sorted(
        key
        for key in env
        if key.startswith(ENV_PREFIX)
        and key[len(ENV_PREFIX) :].lower() not in FIELDS
        and key[len(ENV_PREFIX) :] not in OTHER_ENV_NAMES
    )


def _readable(reason: str) -> str:
    """msgspec's "Expected `int`, got `str`" as a person would say it."""
    return reason.replace("Expected", "expected").replace("`", "")
