"""Building the ASGI application: routes, error mapping, startup and shutdown.

``server.app`` is the module ASGI servers import (``server.app:app``,
``server.app:create_app``); this one builds the app, so that code can import
``create_app`` without building anything. One configuration everywhere
(``server.config.load_config``):

- ``tsync serve`` builds ``create_app(config)`` from its flags and ``TSYNC_*``;
- ``uvicorn --factory server.app:create_app`` calls ``create_app()``;
- ``uvicorn server.app:app`` (or hypercorn, or gunicorn with uvicorn
  workers) takes ``server.app.app``, built when that module is imported.

The last two read ``TSYNC_*`` exactly as ``tsync serve`` does; a bad setting
is one line on stderr and exit status 2 before anything is opened.

The app looks after itself whatever server runs it: it configures logging
when built, opens the store at lifespan startup and closes (flushes) it at
lifespan shutdown, which every ASGI server runs after its connections are
gone. What ``tsync serve`` adds on SIGTERM (``drain``: readiness 503,
queues drained, close code 1001 instead of the server's own, e.g. uvicorn's
1012) is described in the README.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from protocol import codes
from server import logs
from server.auth import Authenticator
from server.config import ConfigError, ServerConfig, load_config, unknown_env_names
from server.errors import Refused
from server.live.hub import Hub
from server.metrics import Metrics
from server.replicas.backplane import Backplane
from server.store.base import Store, StoreError
from server.store.open import backend_of, open_backend
from server.streams import http as streams_http
from server.streams import transcripts as streams_transcripts
from server.streams.longpoll import FastPath
from server.streams.open import stream_port
from server.streams.registry import Limits, StreamRegistry
from server.web import (
    ai_chat,
    ai_chat_http,
    http_api,
    http_lmml,
    http_ops,
    http_replies,
    http_views,
    openapi,
    pages,
    problems,
)
from server.web.access import HttpAccess
from server.web.offload import Offload
from server.web.origins import BrowserGuard, CORSMiddleware, OriginPolicy, cors_options
from server.web.ws import refuse, websocket_endpoint

__all__ = ["StartupFailed", "TsyncApp", "create_app"]

log = logging.getLogger("tsync.app")
GOING_AWAY = codes.CLOSE_GOING_AWAY
GOING_AWAY_REASON = codes.CLOSES[GOING_AWAY].reason


class StartupFailed(Exception):
    """The app cannot start (its store cannot be opened). ``str()`` is one
    line, what the ASGI server logs instead of a traceback."""


async def _handle_error(request: Request, exc: Exception) -> Response:
    return problems.problem_response(exc)


async def _handle_client_gone(request: Request, exc: Exception) -> Response:
    """The client hung up while sending its body: nobody reads the answer,
    nothing is logged beyond the access line."""
    return Response(status_code=http_ops.CLIENT_GONE)


async def _handle_http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no route) and 405 (route, other method) as problems."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        refused = Refused(
            codes.METHOD_NOT_ALLOWED, f"{request.method} is not allowed on {request.url.path}"
        )
    elif exc.status_code == 404:
        refused = Refused(codes.NOT_FOUND, f"no such path: {request.url.path}")
    else:
        refused = Refused(codes.code_for_status(exc.status_code), str(exc.detail))
    response = problems.problem_response(refused)
    response.headers.update(exc.headers or {})
    return response


class TsyncApp:
    """The ASGI application: WebSockets on ``/v1/ws`` go straight to their
    handler (no router or middleware frames kept alive per connection); HTTP
    goes through the request log to the Starlette app, lifespan straight to
    it."""

    def __init__(
        self,
        starlette: Starlette,
        metrics: Metrics,
        lifespan: Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]],
        http_front: Callable[[Any], Any] | None = None,
    ) -> None:
        self.starlette = starlette
        self._lifespan_context = lifespan
        self.state = starlette.state
        self.lifecycle: http_ops.Lifecycle = starlette.state.lifecycle
        logged = http_ops.RequestLog(starlette, metrics, starlette.routes)
        # In front of it all: the long-poll reads' own path (server.streams.longpoll).
        self._http = http_front(logged) if http_front is not None else logged
        #: What takes requests from the HTTP protocol itself, with no task
        #: (``FastPath``: ``may_take``, ``answer_now``; a ``Taker`` of
        #: ``server.web.http_guard``); ``None``: every request runs the app.
        self.taker: Any = self._http if hasattr(self._http, "answer_now") else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket" and scope["path"] == "/v1/ws":
            if self.lifecycle.draining:
                await refuse(receive, send, GOING_AWAY, scope)
                return
            await websocket_endpoint(scope, receive, send, self.state.hub)
        elif kind == "websocket" and scope["path"] == ai_chat.PATH:
            if self.lifecycle.draining:
                await refuse(receive, send, GOING_AWAY, scope)
                return
            await ai_chat.ai_chat_endpoint(scope, receive, send, self.state.hub)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        else:
            await self.starlette(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        """The ASGI lifespan protocol around the app's startup and shutdown
        (Starlette's, except that a ``StartupFailed`` is reported as its one
        line: the server logs that, not a traceback, and exits)."""
        started = False
        await receive()  # lifespan.startup
        try:
            async with self._lifespan_context(self.starlette):
                await send({"type": "lifespan.startup.complete"})
                started = True
                await receive()  # lifespan.shutdown
        except StartupFailed as exc:
            await send({"type": "lifespan.startup.failed", "message": f"tsync: {exc}"})
            return
        except BaseException:
            phase = "shutdown" if started else "startup"
            await send({"type": f"lifespan.{phase}.failed", "message": traceback.format_exc()})
            raise
        await send({"type": "lifespan.shutdown.complete"})

    async def drain(self, timeout: float) -> None:
        """Begin a graceful shutdown: ``/readyz`` answers 503, new WebSockets
        are refused, and every open one gets a moment to send what is queued
        and is then closed with 1001 (going away). Every step is bounded by
        ``timeout``: a client that does not read cannot hold it up."""
        self.lifecycle.draining = True
        # Long-poll reads parked with no task get one (new ones too, now).
        streams_transcripts.hand_back_parked()
        hub: Hub | None = getattr(self.state, "hub", None)
        if hub is None or not hub.subscriptions.connections:
            return
        conns = list(hub.subscriptions.connections.values())
        log.info("closing connections", extra={"count": len(conns)})

        async def goodbye(conn: Any) -> None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.drain(), timeout / 2)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.send_close(GOING_AWAY, GOING_AWAY_REASON), timeout / 2)

        await asyncio.gather(*(goodbye(c) for c in conns))


def create_app(
    config: ServerConfig | None = None,
    *,
    store: Store | None = None,
    configure_logging: bool = True,
) -> TsyncApp:
    """Build the app. Without ``config`` it is read from ``TSYNC_*`` (this is
    the ASGI factory: a bad setting exits with status 2 and one line).

    The store is opened at startup and closed (flushed) at shutdown; pass one
    to share it with a test. ``configure_logging`` installs the app's log
    format (``server.logs``) at ``config.log_level``.
    """
    if config is None:
        config = _config_from_environment()
    backend = (
        backend_of(store)
        if store is not None
        else open_backend(
            config.store,
            idempotency_retention=config.idempotency_retention,
            idempotency_ttl_s=config.idempotency_ttl_s,
        )
    )
    the_store = backend.store
    if configure_logging:
        logs.configure(config.log_level, config.log_format)
    metrics = Metrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # The store's worker thread (SQLite) needs the GIL for a few steps
        # per commit; with the default 5 ms switch interval each of those
        # waits up to 5 ms behind a busy event loop (measured: ~20 ms per
        # append under fan-out load). A shorter interval hands it over sooner.
        sys.setswitchinterval(config.gil_switch_interval_ms / 1000)
        if configure_logging:
            logs.adopt_server_loggers(logging.getLogger().level)
        for name in unknown_env_names():
            log.warning("%s is not a setting and is ignored (misspelt?)", name)
        try:
            await the_store.open()
        except (StoreError, OSError) as exc:
            # A read-only folder, a corrupt database, a schema from the future:
            # nothing a traceback would explain better than the error itself.
            raise StartupFailed(f"cannot open the {the_store.name} store: {exc}") from None
        streams: StreamRegistry = app.state.streams
        try:
            streams.attach(stream_port(backend, resync_s=config.backplane_resync_s))
        except (StoreError, OSError) as exc:
            await the_store.close()
            raise StartupFailed(
                f"cannot open the streams of the {the_store.name} store: {exc}"
            ) from None
        await streams.start()
        hub = Hub(the_store, config, metrics)
        await hub.start()
        offload = Offload(
            processes=config.offload_processes,
            queue=config.offload_queue,
            budget_s=config.offload_budget_s,
        )
        # Replicas sharing a store (Redis) mirror each other's changes.
        backplane = Backplane.for_hub(hub, resync_interval_s=config.backplane_resync_s)
        if backplane is not None:
            await backplane.start()
        app.state.hub = hub
        app.state.backplane = backplane
        app.state.offload = offload
        log.info("serving", extra={"store": the_store.name})
        try:
            yield
        finally:
            if backplane is not None:
                await backplane.stop()
            await hub.stop()
            await offload.close()
            await streams.stop()
            streams.detach()
            await the_store.close()
            log.info("stopped: store closed", extra={"store": the_store.name})

    routes = [
        _route("/v1/transcripts", post=http_api.create_transcript, get=http_api.list_transcripts),
        _route("/v1/transcripts/import", post=http_lmml.import_transcript),
        _route(
            "/v1/transcripts/{transcript_id}",
            get=http_api.get_transcript,
            delete=http_api.delete_transcript,
        ),
        _route("/v1/transcripts/{transcript_id}/events", get=http_api.get_events),
        _route(
            "/v1/transcripts/{transcript_id}/messages",
            post=http_api.append_messages,
            get=http_views.get_messages,
        ),
        _route("/v1/transcripts/{transcript_id}/views", get=http_views.get_views),
        _route(
            "/v1/transcripts/{transcript_id}/views/{name}",
            put=http_views.put_view,
            delete=http_views.leave_view,
        ),
        _route("/v1/transcripts/{transcript_id}/usage", get=http_views.get_usage),
        _route("/v1/transcripts/{transcript_id}/presence", get=http_views.get_presence),
        _route("/v1/transcripts/{transcript_id}/segments", post=http_api.start_segment),
        _route("/v1/transcripts/{transcript_id}/chat", get=http_lmml.chat),
        _route("/v1/transcripts/{transcript_id}/ui-messages", get=http_lmml.ui_messages),
        _route("/v1/transcripts/{transcript_id}/replies", post=http_replies.post_reply),
        _route("/v1/transcripts/{transcript_id}/export.lmml", get=http_lmml.export_lmml),
        _route("/v1/transcripts/{transcript_id}/export.lmmlz", get=http_lmml.export_lmmlz),
        _route("/v1/ai/chat", post=ai_chat_http.post_chat),
        _route("/v1/ai/chat/{transcript_id}/stream", get=ai_chat_http.resume_stream),
        _route("/v1/auth", get=http_api.auth_info),
        _route("/v1/openapi.json", get=openapi.openapi_json),
        _route("/v1/schema.json", get=openapi.schema_json),
        _route("/healthz", get=http_ops.healthz),
        _route("/readyz", get=http_ops.readyz),
        _route("/metrics", get=http_ops.metrics),
        *streams_transcripts.routes,
        *streams_http.routes,
        *pages.routes,
    ]
    app = Starlette(
        routes=routes,
        # Domain errors are answered by ExceptionMiddleware; only unexpected
        # ones reach the catch-all (which logs them with their traceback).
        exception_handlers={exc: _handle_error for exc in http_api.HANDLED}
        | {
            HTTPException: _handle_http_exception,
            ClientDisconnect: _handle_client_gone,
            Exception: _handle_error,
        },
    )
    app.state.config = config
    app.state.metrics = metrics
    # Durable on the SQLite store, in Redis on the Redis store (shared by its
    # replicas): the store's streams part is attached at startup.
    app.state.streams = StreamRegistry(
        Limits(
            max_streams=config.max_streams,
            max_bytes=config.max_stream_bytes,
            max_append_values=config.max_stream_append_values,
            max_sse_queued_bytes=config.max_sse_queued_bytes,
            max_producers=config.max_stream_producers,
            max_producer_id_bytes=config.max_producer_id_bytes,
            max_fork_depth=config.max_fork_depth,
            max_live_bytes=config.max_live_bytes,
        ),
    )
    app.state.stream_settings = streams_http.StreamSettings(
        long_poll_s=config.stream_long_poll_s,
        max_body_bytes=config.max_http_body_bytes,
    )
    app.state.lifecycle = http_ops.Lifecycle()
    # Outermost last: Host and Origin first, then CORS (preflights carry no
    # credentials), then the credentials and rights of the route.
    authenticator = Authenticator.for_config(config)
    app.add_middleware(HttpAccess, routes=routes, authenticator=authenticator)
    policy = OriginPolicy.for_config(config)
    cors = cors_options(policy)
    if cors is not None:
        app.add_middleware(CORSMiddleware, **cors)
    app.add_middleware(BrowserGuard, policy=policy)
    # The common long-poll read skips the middlewares' and the router's work
    # per request, checking what they would (server.streams.longpoll).
    long_poll_front = functools.partial(
        FastPath,
        read=functools.partial(streams_http.fast_long_poll, app.state),
        prefix=streams_http.PREFIX,
        reserved=streams_http.TRANSCRIPTS,
        host_ok=lambda scope: policy.host_refusal(cast(dict[str, Any], scope)) is None,
        authenticator=authenticator,
        metrics=metrics,
        route=streams_http.ROUTE,
        transcripts=(
            functools.partial(streams_transcripts.fast_long_poll, app.state),
            streams_transcripts.ROUTE,
        ),
        ready=functools.partial(streams_transcripts.ready_long_poll, app.state),
    )
    return TsyncApp(app, metrics, lifespan, long_poll_front)


Endpoint = Callable[[Request], Awaitable[Response]]


def _route(path: str, **endpoints: Endpoint) -> Route:
    """One route per path, whatever its methods, so that a 405 names them all
    in ``Allow`` (``post=``, ``get=``, ``delete=``; GET answers HEAD too).
    Every endpoint refuses a query parameter given more than once."""
    endpoints = {method: _single_valued(endpoint) for method, endpoint in endpoints.items()}
    if len(endpoints) == 1:
        ((method, endpoint),) = endpoints.items()
        return Route(path, endpoint, methods=[method.upper()])

    async def by_method(request: Request) -> Response:
        method = request.method.lower()
        return await endpoints["get" if method == "head" else method](request)

    return Route(path, by_method, methods=[m.upper() for m in endpoints])


def _single_valued(endpoint: Endpoint) -> Endpoint:
    @functools.wraps(endpoint)
    async def checked(request: Request) -> Response:
        http_api.refuse_repeated_query(request)
        return await endpoint(request)

    return checked


def _config_from_environment() -> ServerConfig:
    """``TSYNC_*`` as ``tsync serve`` reads them; a bad one ends the process
    with one line and status 2 (an ASGI server would print a traceback)."""
    try:
        return load_config()
    except ConfigError as exc:
        print(f"tsync: {exc} (see docs/configuration.md)", file=sys.stderr)
        # A gunicorn worker that exits with 2 is started again, forever; 4
        # (its "app failed to load") stops gunicorn instead.
        raise SystemExit(4 if "gunicorn.arbiter" in sys.modules else 2) from None
