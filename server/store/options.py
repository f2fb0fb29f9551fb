"""Each store's options: one msgspec Struct per backend, read from the store URL.

``tsync serve --store 'sqlite:./data?synchronous=full'`` sets
``SQLiteOptions.synchronous``; ``redis://host:6379/0?prefix=prod:`` sets
``RedisOptions.prefix``. An unknown or misspelled key, a repeated key or a
value of the wrong type is refused with one line that names it, so a
setting is never silently ignored. The descriptions below are the
documentation: ``render_markdown()`` writes the table in
docs/configuration.md, and a test keeps the two equal.

``idempotency_retention`` is not a store option: it is the server setting of
the same name, passed to the store so that hub and store keep the same keys.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import parse_qsl, unquote

import msgspec
from msgspec import Meta

__all__ = [
    "MemoryOptions",
    "RedisAddress",
    "RedisOptions",
    "SQLiteOptions",
    "StoreOptions",
    "parse_query",
    "redis_address",
    "render_markdown",
    "validated",
]


class MemoryOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``memory``: the store in this process's memory; nothing survives a restart."""


Synchronous = Literal["off", "normal", "full", "extra"]


class SQLiteOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``sqlite:PATH``: SQLite files (WAL mode) in the data folder PATH: transcripts.sqlite3
    for transcripts, streams.sqlite3 for Durable Streams (same options)."""

    synchronous: Annotated[
        Synchronous,
        Meta(
            description="`normal`: every acknowledged append survives the process being killed; "
            "`full`: it also survives a power loss (one fsync per commit); `off` and `extra` "
            "as in SQLite's `PRAGMA synchronous`"
        ),
    ] = "normal"
    max_batch: Annotated[
        int,
        Meta(
            ge=1,
            description="most writes (appends, creates, deletes) committed in one transaction "
            "(group commit)",
        ),
    ] = 256
    busy_timeout_s: Annotated[
        float,
        Meta(
            ge=0,
            description="seconds a write waits for another process's lock on the file before "
            "the store answers `unavailable` (writes run on the event loop's thread, which waits "
            "with them: run one server per data folder)",
        ),
    ] = 5.0
    key_sweep_interval_s: Annotated[
        float,
        Meta(
            gt=0,
            description="no effect since schema 5 (accepted so that existing URLs still "
            "work): idempotency keys live in their events' rows and are no longer deleted; "
            "an expired key is ignored on lookup",
        ),
    ] = 60.0
    checkpoint_pages: Annotated[
        int,
        Meta(
            ge=1,
            description="transcripts.sqlite3: WAL pages written before a checkpoint copies them "
            "into the database file, on a thread of its own, not the event loop's (and a "
            "second after a write); when writes outrun it, it goes again at once, and only "
            "with the WAL at 16 times this does the writer copy what it left; when it keeps "
            "failing, SQLite's own checkpoint on the writer takes over until it succeeds",
        ),
    ] = 1000


class RedisOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``redis://[user:password@]host:port/db`` or ``rediss://`` (TLS): a Redis
    several replicas share; ``redis+cluster://[user:password@]host:port,host:port``
    or ``rediss+cluster://``: a Redis Cluster (any of its nodes; the others are
    found from them; database 0 only)."""

    prefix: Annotated[
        str,
        Meta(
            description="namespace of every key and of the pub/sub channels (several "
            "deployments can share one Redis or one cluster)"
        ),
    ] = "tsync:"
    stream_maxlen: Annotated[
        int,
        Meta(
            ge=0,
            description="events kept (approximately, `MAXLEN ~`) in each transcript's catch-up "
            "stream; 0 keeps none",
        ),
    ] = 10_000
    socket_timeout: Annotated[
        float,
        Meta(gt=0, description="seconds each Redis command may take before it counts as failed"),
    ] = 2.0
    socket_connect_timeout: Annotated[float, Meta(gt=0, description="seconds to connect")] = 1.0
    retries: Annotated[
        int,
        Meta(
            ge=0,
            description="how often a command is sent again after a connection error or a "
            "timeout (safe: every append carries an idempotency key)",
        ),
    ] = 2
    max_connections: Annotated[
        int,
        Meta(
            ge=1,
            description="connection pool size per replica; a request waits up to `pool_timeout` "
            "for a free one (on a cluster: per node, and a request that finds none free fails "
            "with `unavailable` at once: redis-py's cluster client does not wait)",
        ),
    ] = 64
    pool_timeout: Annotated[
        float | None,
        Meta(
            description="seconds to wait for a free pooled connection (none: `socket_timeout`; "
            "one server only)"
        ),
    ] = None
    health_check_interval: Annotated[
        int,
        Meta(
            ge=0,
            description="seconds after which an idle pooled connection is PINGed before use "
            "(0: never)",
        ),
    ] = 0
    ssl_cert_reqs: Annotated[
        Literal["none", "optional", "required"] | None,
        Meta(description="`rediss://`: whether the server's certificate is checked (redis-py)"),
    ] = None
    ssl_ca_certs: Annotated[
        str | None,
        Meta(description="`rediss://`: file of the CA certificates to trust (redis-py)"),
    ] = None
    ssl_check_hostname: Annotated[
        bool | None,
        Meta(description="`rediss://`: whether the certificate must name the host (redis-py)"),
    ] = None

    @property
    def pool_wait_s(self) -> float:
        """How long to wait for a pooled connection."""
        return self.socket_timeout if self.pool_timeout is None else self.pool_timeout


class RedisAddress(msgspec.Struct, frozen=True, kw_only=True):
    """Where a Redis store connects, read from its URL by ``redis_address``."""

    #: A Redis Cluster (``redis+cluster://``), else one server.
    cluster: bool
    tls: bool
    #: (host, port) of the server, or of the cluster nodes to start from.
    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    db: int = 0
    #: The URL without its query (for one server, what redis-py reads).
    url: str

    @property
    def where(self) -> str:
        """For messages: ``redis at h:6379`` or ``redis cluster at h:7000,h:7001``."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.nodes)
        return f"redis cluster at {hosts}" if self.cluster else f"redis at {hosts}"


_REDIS_SCHEMES = {
    "redis": (False, False),
    "rediss": (False, True),
    "redis+cluster": (True, False),
    "rediss+cluster": (True, True),
}


def redis_address(url: str) -> tuple[RedisAddress, str]:
    """The address a Redis store URL names, and its query (the options).
    Raises ``ValueError`` with one line naming what is wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in _REDIS_SCHEMES:
        raise ValueError(
            f"not a Redis URL: {url!r} (expected redis://, rediss://, redis+cluster:// "
            "or rediss+cluster://)"
        )
    cluster, tls = _REDIS_SCHEMES[scheme.lower()]
    rest, _, _fragment = rest.partition("#")
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username, password = _credentials(userinfo) if at else (None, None)
    return (
        RedisAddress(
            cluster=cluster,
            tls=tls,
            nodes=_nodes(hosts, cluster, url),
            username=username,
            password=password,
            db=_database(path, cluster, url),
            url=url.partition("?")[0].partition("#")[0],
        ),
        query,
    )


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    """The user name and the password of a URL's ``user:secret@`` (either may be absent)."""
    user, colon, secret = userinfo.partition(":")
    return unquote(user) or None, unquote(secret) if colon else None


def _nodes(hosts: str, cluster: bool, url: str) -> tuple[tuple[str, int], ...]:
    """The (host, port) of each of a URL's ``host:port,...`` (``localhost``
    when none); several only on a cluster."""
    nodes = tuple(_host_port(part, url) for part in (hosts.split(",") if hosts else ["localhost"]))
    if not cluster and len(nodes) > 1:
        raise ValueError(f"store URL {url!r}: several hosts need redis+cluster://")
    return nodes


def _database(path: str, cluster: bool, url: str) -> int:
    """The database number a URL's path names (0 when none; a cluster has only 0)."""
    db_text = path.strip("/") or "0"
    if not db_text.isdigit():
        raise ValueError(f"store URL {url!r}: the database must be a number, not {db_text!r}")
    db = int(db_text)
    if cluster and db != 0:
        raise ValueError(f"store URL {url!r}: a Redis Cluster has only database 0")
    return db


def _host_port(text: str, url: str) -> tuple[str, int]:
    if text.startswith("["):  # [IPv6]:port
        host, _, port = text[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    if not host:
        raise ValueError(f"store URL {url!r}: a host is missing")
    if port and not port.isdigit():
        raise ValueError(f"store URL {url!r}: bad port {port!r}")
    return host, int(port) if port else 6379


StoreOptions = MemoryOptions | SQLiteOptions | RedisOptions
_O = TypeVar("_O", MemoryOptions, SQLiteOptions, RedisOptions)

#: The backends in the order the documentation lists them.
_BACKENDS: tuple[tuple[str, type[StoreOptions]], ...] = (
    ("sqlite", SQLiteOptions),
    ("redis", RedisOptions),
    ("memory", MemoryOptions),
)

#: Keys that are settings of the server rather than of a store.
_SERVER_SETTINGS = {"idempotency_retention", "idempotency_ttl_s"}


def _field_names(cls: type[StoreOptions]) -> list[str]:
    return [f.name for f in msgspec.structs.fields(cls)]


def parse_query(cls: type[_O], query: str, *, url: str) -> _O:
    """``cls`` from a URL query string (``a=1&b=x``). Raises ``ValueError``
    with one line naming every unknown, repeated or invalid key of ``url``."""
    pairs = parse_qsl(query, keep_blank_values=True)
    known = _field_names(cls)
    backend = next(name for name, c in _BACKENDS if c is cls)
    problems: list[str] = []
    values: dict[str, Any] = {}
    for key, value in pairs:
        if key in values:
            problems.append(f"{key!r} is given twice")
        elif key in _SERVER_SETTINGS:
            problems.append(
                f"{key!r} is a server setting (TSYNC_{key.upper()}), not a store option"
            )
        elif key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown option {key!r}{hint}")
        values[key] = value
    if problems:
        options = ", ".join(known) if known else "none"
        raise ValueError(f"store URL {url!r}: {'; '.join(problems)}; {backend} options: {options}")
    try:
        return msgspec.convert(values, cls, strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"store URL {url!r}: {_explain(exc, cls)}") from None


def validated(options: _O) -> _O:
    """``options`` checked against their constraints (a Struct made in code
    is not checked by msgspec; one read from a URL is)."""
    try:
        return msgspec.convert(msgspec.structs.asdict(options), type(options))
    except msgspec.ValidationError as exc:
        raise ValueError(
            f"invalid {type(options).__name__}: {_explain(exc, type(options))}"
        ) from None


def _explain(exc: msgspec.ValidationError, cls: type[StoreOptions]) -> str:
    # "Expected `int` >= 1 - at `$.max_batch`" -> "max_batch: expected `int` >= 1"
    message, _, where = str(exc).partition(" - at `$.")
    name = where.rstrip("`")
    message = message[:1].lower() + message[1:]
    if not name:
        return message
    choices = _choices(cls, name)
    if choices:
        message += f" (one of {', '.join(sorted(map(str, choices)))})"
    return f"{name}: {message}"


# --- documentation ----------------------------------------------------------------------


def _default(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def _field_info(cls: type[StoreOptions], name: str) -> msgspec.inspect.Type | None:
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    return next((f.type for f in info.fields if f.name == name), None)


def _description(cls: type[StoreOptions], name: str) -> str:
    field = _field_info(cls, name)
    schema = getattr(field, "extra_json_schema", None) or {}
    return str(schema.get("description", ""))


def _choices(cls: type[StoreOptions], name: str) -> tuple[Any, ...]:
    """The values a Literal field takes (none for other fields)."""
    field = _field_info(cls, name)
    while isinstance(field, msgspec.inspect.Metadata):
        field = field.type
    types = field.types if isinstance(field, msgspec.inspect.UnionType) else (field,)
    for t in types:
        if isinstance(t, msgspec.inspect.LiteralType):
            return tuple(t.values)
    return ()


def render_markdown() -> str:
    """The store options as the Markdown that docs/configuration.md holds
    between its ``store-options`` markers."""
    lines: list[str] = []
    for backend, cls in _BACKENDS:
        doc = " ".join((cls.__doc__ or "").split()).replace("``", "`")
        lines += [f"### `{backend}`", "", doc, ""]
        fields = msgspec.structs.fields(cls)
        if not fields:
            lines += ["No options.", ""]
            continue
        lines += ["| option | default | meaning |", "|---|---|---|"]
        for field in fields:
            lines.append(
                f"| `{field.name}` | {_default(field.default)} | {_description(cls, field.name)} |"
            )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
