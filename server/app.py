"""The Starlette application: routes, error mapping, startup and shutdown."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server import http_api, http_lmml, pages
from server.backplane import Backplane
from server.config import ServerConfig
from server.errors import Refused
from server.hub import Hub
from server.metrics import Metrics
from server.store.base import Store
from server.store.open import open_store
from server.ws import websocket_endpoint

log = logging.getLogger("tsync.app")


async def _handle_error(request: Request, exc: Exception) -> Response:
    return http_api.problem_response(exc)


class _AuthMiddleware:
    """Checks the bearer token of every HTTP request but the health and the
    static pages; WebSockets check theirs in the endpoint (browsers cannot set
    headers there, so ``?token=`` is accepted too)."""

    OPEN = ("/healthz", "/metrics", "/v1/client.js", "/static/", "/t/")

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            if path != "/" and not path.startswith(self.OPEN):
                try:
                    http_api.check_auth(Request(scope))
                except Refused as refused:
                    await http_api.problem_response(refused)(scope, receive, send)
                    return
        await self.app(scope, receive, send)


class TsyncApp:
    """The ASGI application: WebSockets on ``/v1/ws`` go straight to their
    handler (no router or middleware frames kept alive per connection);
    everything else, lifespan included, goes to the Starlette app."""

    def __init__(self, starlette: Starlette) -> None:
        self.starlette = starlette
        self.state = starlette.state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket" and scope["path"] == "/v1/ws":
            await websocket_endpoint(scope, receive, send, self.state.hub)
            return
        await self.starlette(scope, receive, send)


def create_app(config: ServerConfig | None = None, *, store: Store | None = None) -> TsyncApp:
    """Build the app. The store is opened at startup and closed at shutdown
    (after committing what is queued); pass one to share it with a test."""
    config = config or ServerConfig()
    metrics = Metrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        the_store = (
            store
            if store is not None
            else open_store(config.store, idempotency_retention=config.idempotency_retention)
        )
        await the_store.open()
        hub = Hub(the_store, config, metrics)
        await hub.start()
        # Replicas sharing a store (Redis) mirror each other's changes.
        backplane = Backplane.for_hub(hub, resync_interval_s=config.backplane_resync_s)
        if backplane is not None:
            await backplane.start()
        app.state.hub = hub
        app.state.backplane = backplane
        log.info("serving", extra={"store": the_store.name})
        try:
            yield
        finally:
            if backplane is not None:
                await backplane.stop()
            await hub.stop()
            await the_store.close()
            log.info("stopped")

    routes = [
        Route("/v1/transcripts", http_api.create_transcript, methods=["POST"]),
        Route("/v1/transcripts", http_api.list_transcripts, methods=["GET"]),
        Route("/v1/transcripts/import", http_lmml.import_transcript, methods=["POST"]),
        Route("/v1/transcripts/{transcript_id}", http_api.get_transcript, methods=["GET"]),
        Route("/v1/transcripts/{transcript_id}", http_api.delete_transcript, methods=["DELETE"]),
        Route("/v1/transcripts/{transcript_id}/events", http_api.get_events, methods=["GET"]),
        Route(
            "/v1/transcripts/{transcript_id}/messages", http_api.append_messages, methods=["POST"]
        ),
        Route("/v1/transcripts/{transcript_id}/segments", http_api.start_segment, methods=["POST"]),
        Route("/v1/transcripts/{transcript_id}/chat", http_lmml.chat, methods=["GET"]),
        Route(
            "/v1/transcripts/{transcript_id}/export.lmml", http_lmml.export_lmml, methods=["GET"]
        ),
        Route(
            "/v1/transcripts/{transcript_id}/export.lmmlz",
            http_lmml.export_lmmlz,
            methods=["GET"],
        ),
        Route("/healthz", http_api.healthz, methods=["GET"]),
        Route("/metrics", http_api.metrics, methods=["GET"]),
        *pages.routes,
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        # Domain errors are answered by ExceptionMiddleware; only unexpected
        # ones reach the catch-all (which logs them with their traceback).
        exception_handlers={exc: _handle_error for exc in http_api.HANDLED}
        | {Exception: _handle_error},
    )
    app.state.config = config
    app.state.metrics = metrics
    app.add_middleware(_AuthMiddleware)
    return TsyncApp(app)
