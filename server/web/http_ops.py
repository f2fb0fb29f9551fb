"""What operators and their tools ask of a running server.

- ``GET /healthz``: liveness. 200 while the process answers; it checks no
  dependency, so a restart is never triggered by a store outage.
- ``GET /readyz``: readiness. 200 when the store answers within
  ``READY_TIMEOUT_S``; 503 with the reason while it does not (Redis down) or
  while the server drains for a shutdown, so a load balancer stops sending
  new clients here.
- ``GET /metrics``: Prometheus text.
- ``RequestLog``: one access line and one metrics observation per HTTP
  request (method, route template, status, duration; never the query string).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount

from protocol import api
from server.live.hub import Hub
from server.logs import SAID
from server.metrics import CONTENT_TYPE_LATEST, Metrics
from server.store.base import StoreError
from server.web.problems import json_response

log = logging.getLogger("tsync.http")
access_log = logging.getLogger("tsync.access")

#: How long ``/readyz`` waits for the store before it calls it unreachable.
READY_TIMEOUT_S = 2.0
#: The status logged for a request whose client went away before the answer
#: (nginx's "client closed request"), and for one cut by a shutdown.
CLIENT_GONE = 499
CANCELLED = 503
#: The route label of requests no route matched (the path itself would let a
#: client grow the metrics without bound).
UNMATCHED = "<unmatched>"


class Lifecycle:
    """What the app knows about its own life: whether it is draining."""

    __slots__ = ("draining",)

    def __init__(self) -> None:
        #: Set when a shutdown began: ``/readyz`` answers 503 and new
        #: WebSocket connections are refused (1001).
        self.draining = False


def _hub(request: Request) -> Hub:
    hub: Hub = request.app.state.hub
    return hub


def _json(body: Any, status: int = 200) -> Response:
    return json_response(body, status)


async def healthz(request: Request) -> Response:
    hub = _hub(request)
    return _json(api.Health(status="ok", store=hub.store.name, pid=os.getpid(), **hub.stats()))


async def readyz(request: Request) -> Response:
    lifecycle: Lifecycle = request.app.state.lifecycle
    if lifecycle.draining:
        return _json(api.Readiness("unready", "draining: the server is shutting down"), 503)
    reason = await store_problem(_hub(request))
    if reason is not None:
        return _json(api.Readiness("unready", reason), 503)
    return _json(api.Readiness("ready"))


async def store_problem(hub: Hub) -> str | None:
    """Why the store cannot serve now, or ``None`` when a small read works."""
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await hub.store.list(limit=1)
    except TimeoutError:
        return f"store unreachable: no answer within {READY_TIMEOUT_S:g} s"
    except StoreError as exc:
        return f"store unreachable: {exc}"
    except Exception as exc:
        log.warning("readiness check failed", exc_info=exc)
        return f"store check failed: {type(exc).__name__}"
    return None


async def metrics(request: Request) -> Response:
    return Response(_hub(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


def route_template(scope: dict[str, Any], routes: Sequence[BaseRoute] = ()) -> str:
    """``/v1/transcripts/{transcript_id}`` for the route that served ``scope``,
    or that would have (a request refused before routing, e.g. a 401)."""
    route = scope.get("route")
    if route is None:
        route = next((r for r in routes if r.matches(scope)[0] is not Match.NONE), None)
        if route is None:
            return UNMATCHED
    path: str = getattr(route, "path", UNMATCHED)
    return f"{path}/{{path}}" if isinstance(route, Mount) else path


class RequestLog:
    """Wraps the HTTP app: one access line (``tsync.access``) and one
    observation of ``tsync_http_requests``/``..._duration_seconds`` per
    request, by route template. Costs a clock read and a closure per
    request; WebSockets never pass through it."""

    def __init__(self, app: Any, metrics: Metrics, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        began = time.perf_counter()
        status = 500  # when the app raises before answering

        async def observe(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observe)
        except asyncio.CancelledError:
            status = CANCELLED  # cut by a shutdown's deadline
            raise
        finally:
            seconds = time.perf_counter() - began
            method = scope["method"]
            route = route_template(scope, self.routes)
            self.metrics.observe_http(method, route, status, seconds)
            ms = round(seconds * 1000, 2)
            client = scope.get("client")
            access_log.info(
                "%s %s %d %.1fms",
                method,
                route,
                status,
                ms,
                extra={
                    "method": method,
                    "route": route,
                    "status": status,
                    "duration_ms": ms,
                    "peer": f"{client[0]}:{client[1]}" if client else None,
                    SAID: ("method", "route", "status", "duration_ms"),
                },
            )
