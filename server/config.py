"""Server settings: one frozen struct, filled by one function from defaults,
``TSYNC_*`` environment variables and explicit overrides (flags).

``load_config`` is the only way a running server gets its settings: ``tsync
serve``, the ASGI factory ``server.app:create_app`` and the module-level
``server.app:app`` all call it, so the same environment configures the server
the same way however it is started. Every field carries its description
(``Meta(description=...)``); ``server.config_docs`` renders
``docs/configuration.md`` from them.

A bad setting raises ``ConfigError``: one line that names the setting the way
it was given (``--port``, ``--set queue_max_frames``, ``TSYNC_PORT``), raised
before anything is opened.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, get_args, get_origin

import msgspec
from msgspec import Meta

from protocol import limits
from server.store.base import DEFAULT_IDEMPOTENCY_RETENTION

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
            "restart), or `redis://host:port/db` / `rediss://...` with options as query "
            "parameters (see `deploy.md`)",
            min_length=1,
        ),
    ] = "sqlite:./data"
    token: Annotated[
        Annotated[str, Meta(min_length=1)] | None,
        _d(
            "a shared secret; when set, every HTTP request but the health, metrics, API "
            "description and static pages needs `Authorization: Bearer <token>`, and the "
            "WebSocket that header or `?token=`"
        ),
    ] = None
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"], _d("least severe log level written")
    ] = "info"
    log_format: Annotated[
        Literal["text", "json"],
        _d("`text` (readable, with `key=value` fields) or `json` (one object per line)"),
    ] = "text"

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
    max_message_bytes: Annotated[PosInt, _d("largest message (its compact JSON)")] = (
        limits.MAX_MESSAGE_BYTES
    )
    max_messages_per_batch: Annotated[PosInt, _d("most messages in one append")] = (
        limits.MAX_MESSAGES_PER_BATCH
    )
    max_http_body_bytes: Annotated[
        PosInt, _d("largest HTTP request body (imports included); larger get 413 `too-large`")
    ] = 16 << 20
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

    # --- outbound queue per connection (lagged when over either) ---
    queue_max_frames: Annotated[
        PosInt, _d("outbound frames queued per connection before it is `lagged`")
    ] = 10_000
    queue_max_bytes: Annotated[
        PosInt, _d("outbound bytes queued per connection before it is `lagged`")
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
    idle_ttl_s: Annotated[
        Annotated[float, Meta(gt=0)],
        _d("seconds an unsubscribed, unused transcript stays in memory"),
    ] = 60.0
    idempotency_retention: Annotated[
        NonNegInt,
        _d(
            "idempotency keys remembered per transcript, the one value for the hub's memory "
            "and the store (SQLite also forgets a key after 24 h)"
        ),
    ] = DEFAULT_IDEMPOTENCY_RETENTION
    backplane_resync_s: Annotated[
        Annotated[float, Meta(gt=0)],
        _d(
            "with a shared store (Redis): seconds between a replica's checks of its live "
            "copies against the store, the safety net for lost pub/sub notices (see `deploy.md`)"
        ),
    ] = 1.0

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
        Annotated[float, Meta(gt=0)],
        _d(
            "the longest a SIGTERM or Ctrl-C waits for WebSockets to drain (closed with 1001) "
            "and requests to finish before they are cut"
        ),
    ] = 10.0
    gil_switch_interval_ms: Annotated[
        Annotated[float, Meta(gt=0)],
        _d(
            "`sys.setswitchinterval` of the server process, set at startup: how soon a "
            "store's worker thread gets the GIL back from a busy event loop"
        ),
    ] = 0.5

    def ws_max_bytes(self) -> int:
        """The WebSocket layer's limit on one inbound message, in bytes."""
        if self.ws_hard_max_bytes is not None:
            return self.ws_hard_max_bytes
        return self.max_frame_bytes + self.max_frame_bytes // 4

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ServerConfig:
        """``load_config(env, overrides)``: kept for callers that pass keywords."""
        return load_config(env, overrides)


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
        try:
            msgspec.convert({name: value}, ServerConfig, strict=False)
        except msgspec.ValidationError as exc:
            if name in _CHOICES:
                reason = "expected one of " + ", ".join(_CHOICES[name])
            else:
                reason = _readable(str(exc).split(" - at `$", 1)[0])
            raise ConfigError(f"{origin[name]}={value!r}: {reason}", name) from None
    config = msgspec.convert(values, ServerConfig, strict=False)
    if config.ws_hard_max_bytes is not None and config.ws_hard_max_bytes < config.max_frame_bytes:
        where = origin.get("ws_hard_max_bytes", "ws_hard_max_bytes")
        raise ConfigError(
            f"{where}={config.ws_hard_max_bytes}: below max_frame_bytes "
            f"({config.max_frame_bytes}); messages in between could never be answered",
            "ws_hard_max_bytes",
        )
    if check_store:
        from server.store.open import open_store

        try:
            open_store(config.store)
        except ValueError as exc:
            where = origin.get("store", "store")
            raise ConfigError(f"{where}={config.store!r}: {exc}", "store") from None
    return config


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
