"""Where requests come from: the checks that keep web pages the user visits
from driving this server through the user's browser.

- **Host** (DNS rebinding: a page on ``evil.example`` whose name now resolves
  to 127.0.0.1). A request that arrives on a loopback address must name
  ``localhost`` (or ``*.localhost``) or a loopback address in its ``Host``;
  with ``allowed_hosts`` set, a request must name one of those, or arrive on
  a loopback address naming a loopback name (the local CLI, a probe on the
  machine: no page of another site can send that ``Host``). The probes
  (``/healthz``, ``/readyz``, ``/metrics``: ``PROBE_PATHS``) are never
  Host-checked, so a load balancer or a liveness probe may call them by IP.
- **Origin**. A browser names the page's origin on every WebSocket handshake
  and every state-changing request; one that is not allowed is refused.
  Allowed: the server's own origin (the ``Origin``'s host is the request's
  ``Host``), ``cors_origins``, and ``allowed_origins`` when set, else (for
  requests that arrive on a loopback address) ``http://localhost:*`` and
  ``http://127.0.0.1:*``. A request without ``Origin`` did not come from a
  page (command-line tools and other programs send none) and is not checked:
  what guards the server against those is its credentials.
- **CORS** (``cors_origins``): pages of those origins may call the HTTP API
  and read its answers; Starlette's ``CORSMiddleware`` answers preflights.

State-changing requests must also carry a JSON body (``application/json``; the
LMML types on import): see ``server.web.http_api.read_body_as``. Together
these leave no "simple" cross-site request (a form post, a ``text/plain``
fetch, a no-cors beacon) that can change anything.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from starlette.middleware.cors import CORSMiddleware

from protocol import codes
from protocol.rights import pattern_regex
from server.errors import Refused
from server.web.problems import problem_response

if TYPE_CHECKING:
    from server.config import ServerConfig

log = logging.getLogger("tsync.http")

#: Origins of pages on this machine, allowed by default on a loopback address.
LOOPBACK_ORIGINS: Final = (
    "http://localhost",
    "http://localhost:*",
    "http://127.0.0.1",
    "http://127.0.0.1:*",
    "http://[::1]",
    "http://[::1]:*",
)
#: The operational endpoints: read-only, no transcript data, called by load
#: balancers and liveness probes by IP address, so never refused for their Host.
PROBE_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics"})
#: Methods that never change anything (the Origin of these is not checked).
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
#: What a cross-origin page may send and read (CORS).
CORS_HEADERS: Final = ("authorization", "content-type", "idempotency-key", "x-request-id")
CORS_EXPOSED: Final = ("x-transcript-revision", "content-disposition", "retry-after")


def split_list(value: str | None) -> list[str]:
    """``"a, b"`` -> ``["a", "b"]`` (``None`` -> ``[]``)."""
    return [item.strip().lower() for item in (value or "").split(",") if item.strip()]


def _regex(patterns: Iterable[str]) -> re.Pattern[str] | None:
    return pattern_regex(p.lower() for p in patterns)


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def host_name(host: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:80`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def arrived_on_loopback(scope: dict[str, Any]) -> bool:
    """Whether the request came in on a loopback address of this machine
    (whatever the server was told to bind: what counts is where it arrived)."""
    server = scope.get("server")
    return server is not None and isinstance(server[0], str) and _is_loopback(server[0])


def is_loopback_name(name: str) -> bool:
    return name == "localhost" or name.endswith(".localhost") or _is_loopback(name)


class OriginPolicy:
    """The Host, Origin and CORS rules of one configuration."""

    def __init__(self, config: ServerConfig) -> None:
        origins = split_list(config.allowed_origins)
        self.cors_origins = split_list(config.cors_origins)
        self.hosts = _regex(split_list(config.allowed_hosts))
        #: ``None``: the default rules (same host, loopback pages on loopback).
        self.origins = _regex([*origins, *self.cors_origins]) if origins else None
        self.cors = _regex(self.cors_origins)
        self.loopback_origins = _regex(LOOPBACK_ORIGINS)

    @staticmethod
    @functools.lru_cache(maxsize=16)
    def for_config(config: ServerConfig) -> OriginPolicy:
        return OriginPolicy(config)

    def host_refusal(self, scope: dict[str, Any]) -> str | None:
        """Why the request's ``Host`` is not allowed, or ``None``."""
        host = _header(scope, b"host")
        if host is None:
            return None
        if scope["type"] == "http" and scope["path"] in PROBE_PATHS:
            return None
        name = host_name(host)
        loopback = arrived_on_loopback(scope)
        if loopback and is_loopback_name(name):
            return None
        if self.hosts is not None:
            if self.hosts.fullmatch(name):
                return None
            return f"Host {name!r} is not one of allowed_hosts"
        if not loopback:
            return None
        return (
            f"Host {name!r} is not a loopback name, and this request arrived on a loopback "
            "address (set allowed_hosts to serve it)"
        )

    def origin_refusal(self, scope: dict[str, Any]) -> str | None:
        """Why the request's ``Origin`` (the page that sent it) is not allowed,
        or ``None`` (allowed, or no ``Origin``: not sent by a page)."""
        origin = _header(scope, b"origin")
        if origin is None:
            return None
        origin = origin.strip().lower()
        host = _header(scope, b"host")
        if host is not None and origin.partition("://")[2] == host.strip().lower():
            return None  # the server's own pages
        if self.origins is not None:
            allowed = self.origins.fullmatch(origin) is not None
        else:
            allowed = (self.cors is not None and self.cors.fullmatch(origin) is not None) or (
                arrived_on_loopback(scope)
                and self.loopback_origins is not None
                and self.loopback_origins.fullmatch(origin) is not None
            )
        if allowed:
            return None
        return f"a page of {origin!r} may not use this server (allowed_origins)"

    def refusal(self, scope: dict[str, Any], *, changes: bool) -> str | None:
        """Host, then (for a WebSocket or a request that ``changes``
        something) Origin."""
        return self.host_refusal(scope) or (self.origin_refusal(scope) if changes else None)


class BrowserGuard:
    """ASGI middleware (outermost of the HTTP app): refuses a request whose
    ``Host`` is not allowed, and a state-changing one whose ``Origin`` is
    not, with 403 ``forbidden``."""

    def __init__(self, app: Any, policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            why = self.policy.refusal(scope, changes=scope["method"] not in SAFE_METHODS)
            if why is not None:
                log.info("request refused: %s", why, extra={"status": 403})
                await problem_response(Refused(codes.FORBIDDEN, why))(scope, receive, send)
                return
        await self.app(scope, receive, send)


def cors_options(policy: OriginPolicy) -> dict[str, Any] | None:
    """The ``CORSMiddleware`` options of ``cors_origins`` (``None``: no CORS)."""
    if policy.cors is None:
        return None
    return {
        "allow_origin_regex": policy.cors.pattern,
        "allow_methods": ["GET", "POST", "DELETE"],
        "allow_headers": list(CORS_HEADERS),
        "expose_headers": list(CORS_EXPOSED),
        "max_age": 600,
    }


__all__ = ["BrowserGuard", "CORSMiddleware", "OriginPolicy", "cors_options"]
