"""What a connection or a request may do, given its credentials
(``server.auth`` verifies them; ``protocol.rights`` says what each op and
route needs).

::

    admit              a new WebSocket: its ConnectionAccess, or Turnaway (1008, 4001)
    ConnectionAccess   one WebSocket's grant: ops checked in arrival order, the
                       ``auth`` op, the 4001 close at ``exp`` (or when none came)
    HttpAccess         the ASGI middleware that checks every HTTP request's route
    list_readable      ``GET /v1/transcripts``: only what the caller may read
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, get_args

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount

from protocol import api, codes, rights, wire
from protocol.rights import EVERYTHING, Grant, Need
from server.auth import GRANT_KEY, Authenticator, bearer, handshake_token, unauthorized
from server.errors import Refused
from server.extensions import HTTP_CONNECTION
from server.store.base import TranscriptInfo
from server.web.origins import OriginPolicy
from server.web.problems import problem_response

if TYPE_CHECKING:
    from server.config import ServerConfig

__all__ = [
    "OPEN",
    "ConnectionAccess",
    "HttpAccess",
    "Turnaway",
    "admit",
    "auth_info",
    "forbidden",
    "grant_of",
    "list_readable",
]


#: What each op needs, by its struct (``protocol.rights.OPS`` names them by tag).
_OP_NEEDS: Final[dict[type, Need]] = {
    cls: rights.OPS[cls.__struct_config__.tag].need for cls in get_args(wire.ClientOp)
}

_VERBS: Final = {"read": "read", "write": "write to", "admin": "administer"}


def forbidden(grant: Grant | None, need: Need, transcript_id: str | None) -> Refused:
    """``forbidden``, naming who may not do what to which transcript."""
    who = f"the token of {grant.sub!r}" if grant is not None and grant.sub else "this token"
    what = f"transcript {transcript_id!r}" if transcript_id else "transcripts"
    fields = {"transcriptId": transcript_id} if transcript_id else {}
    return Refused(codes.FORBIDDEN, f"{who} may not {_VERBS[need]} {what}", **fields)


class Turnaway(Exception):
    """A WebSocket the server will not serve: accept it, then close it with
    ``close_code`` (so that browsers learn why too)."""

    def __init__(self, close_code: int, why: str) -> None:
        super().__init__(why)
        self.close_code = close_code
        self.why = why


def admit(scope: dict[str, Any], config: ServerConfig) -> ConnectionAccess:
    """The credentials of a new WebSocket; raises ``Turnaway`` with 1008 for
    a Host or Origin the server does not allow, 4001 for credentials that
    are there but not valid. One that brings none may still send ``auth``."""
    why = OriginPolicy.for_config(config).refusal(scope, changes=True)
    if why is not None:
        raise Turnaway(codes.CLOSE_POLICY, why)
    try:
        return ConnectionAccess.admit(Authenticator.for_config(config), scope)
    except Refused as refused:
        raise Turnaway(codes.CLOSE_UNAUTHORIZED, refused.message) from None


class ConnectionAccess:
    """One WebSocket connection's credentials.

    ``grant`` is ``None`` while a connection that came without credentials
    waits for its first ``auth`` op. ``arm`` schedules the close (4001) at
    the credentials' expiry, or at ``auth_timeout_s`` while there are none;
    a refresh moves it.
    """

    __slots__ = ("_close", "_closing", "_timer", "authenticator", "grant")

    def __init__(self, authenticator: Authenticator | None, grant: Grant | None) -> None:
        #: ``None`` on a server that asks for no credentials.
        self.authenticator = authenticator
        self.grant = grant
        self._timer: asyncio.TimerHandle | None = None
        self._close: Callable[[str], Awaitable[None]] | None = None
        self._closing: asyncio.Task[None] | None = None

    @classmethod
    def admit(cls, authenticator: Authenticator, scope: dict[str, Any]) -> ConnectionAccess:
        """The access of a new connection; raises ``Refused(unauthorized)`` for
        credentials that are there but not valid."""
        if not authenticator.required:
            return OPEN
        token = handshake_token(scope)
        return cls(authenticator, authenticator.verify(token) if token else None)

    @property
    def sub(self) -> str | None:
        return self.grant.sub if self.grant is not None else None

    def check(self, op: wire.ClientOp) -> None:
        """Raise ``Refused`` unless these credentials allow ``op``."""
        grant = self.grant
        if grant is EVERYTHING:
            return
        need = _OP_NEEDS[type(op)]
        if need == rights.PUBLIC:
            return
        if grant is None:
            # Came without credentials and did not send them first: nothing this
            # connection does can work. Say so, then close it (4001).
            self._schedule(0.0)
            raise unauthorized(
                "no credentials: the first op must be `auth` (or connect with a token)"
            )
        if grant.expires_at is not None and grant.expired(time.time()):
            raise unauthorized("the token has expired: send an `auth` op with a new one")
        transcript_id = getattr(op, "transcript_id", None)
        if not grant.satisfies(need, transcript_id):
            raise forbidden(grant, need, transcript_id)

    def refresh(self, token: str) -> None:
        """Take new credentials (an ``auth`` op). Refused ones change nothing,
        except that a connection without any valid ones is closed."""
        if self.authenticator is None:
            return  # a server that asks for no credentials: nothing to check
        try:
            grant = self.authenticator.verify(token)
            if self.grant is not None and grant.sub != self.grant.sub:
                raise unauthorized(
                    f"new credentials must name the same sub as the connection's ({self.sub!r})"
                )
        except Refused:
            if self.grant is None or (
                self.grant.expires_at is not None and self.grant.expired(time.time())
            ):
                self._schedule(0.0)
            raise
        self.grant = grant
        self._schedule(None)

    def unreadable(self, transcript_ids: Iterable[str]) -> list[str]:
        """Those of ``transcript_ids`` the current credentials may not read."""
        grant = self.grant
        return [t for t in transcript_ids if grant is None or not grant.allows(rights.READ, t)]

    def arm(self, close: Callable[[str], Awaitable[None]]) -> None:
        """Call ``close(why)`` (it closes the connection with 4001, ``why``
        as the reason) when the credentials expire, or when none came in
        time."""
        if self.authenticator is None:
            return  # OPEN is shared, and never expires
        self._close = close
        self._schedule(None)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._closing is not None and not self._closing.done():
            self._closing.cancel()

    def _schedule(self, delay: float | None) -> None:
        if self._close is None or (self.grant is EVERYTHING and delay is None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if delay is None:
            if self.grant is None:
                assert self.authenticator is not None  # an open server grants everything
                delay = self.authenticator.auth_timeout_s
            elif self.grant.expires_at is not None:
                delay = max(0.0, self.grant.expires_at - time.time())
            else:
                return
        self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self._close is not None and self._closing is None:
            grant = self.grant
            if grant is None:
                why = "no valid credentials came in time: send an `auth` op first"
            elif grant.expires_at is not None and grant.expired(time.time()):
                why = "the token has expired: connect with a new one"
            else:
                why = "the credentials were refused"
            self._closing = asyncio.ensure_future(self._close(why))


#: The access of every connection to a server that asks for no credentials.
OPEN: Final = ConnectionAccess(None, EVERYTHING)


# --- HTTP ------------------------------------------------------------------------------


def grant_of(request: Request) -> Grant:
    """The grant ``HttpAccess`` found for this request (a request it did not
    see has none: that is a bug, and fails closed)."""
    grant: Grant = request.scope[GRANT_KEY]
    return grant


def _route_of(
    scope: dict[str, Any], routes: Iterable[BaseRoute]
) -> tuple[str, dict[str, Any]] | None:
    """The template and path parameters of the route that fully matches ``scope``."""
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            path: str = re.sub(r":\w+}", "}", getattr(route, "path", ""))  # {p:path} is {p}
            template = f"{path}/{{path}}" if isinstance(route, Mount) else path
            return template, child.get("path_params", {})
        if match is Match.PARTIAL:
            return None
    return None


class HttpAccess:
    """ASGI middleware: every HTTP request gets the rule of its route
    (``protocol.rights.ROUTES``), its bearer token verified and its right on
    the transcript the path names checked, before any endpoint runs. A
    refusal is a problem+json answer (401 with ``WWW-Authenticate``, or 403
    naming the transcript)."""

    def __init__(self, app: Any, routes: Iterable[BaseRoute], authenticator: Authenticator) -> None:
        self.app = app
        self.routes = list(routes)
        self.authenticator = authenticator

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        found = _route_of(scope, self.routes)
        rule = rights.route_rule(scope["method"], found[0]) if found else rights.UNMATCHED
        if rule.need != rights.PUBLIC:
            try:
                grant = self.authenticator.verify(bearer(scope.get("headers", ())))
                # A Durable Stream's rights are over its path, as a transcript's
                # over its id.
                params = found[1] if found else {}
                transcript_id = params.get("transcript_id") or params.get("stream_path")
                if not grant.satisfies(rule.need, transcript_id):
                    raise forbidden(grant, rule.need, transcript_id)
            except Refused as refused:
                await _problem(refused)(scope, receive, send)
                return
            scope[GRANT_KEY] = grant
            connection = scope.get("extensions", {}).get(HTTP_CONNECTION)
            if connection is not None and not connection.authenticated(parks(scope)):
                refusal = _problem(_PARKED_FULL)
                # The connection goes too: kept alive, it would hold a place
                # of the cap's share for requests with credentials.
                refusal.headers["connection"] = "close"
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


#: A live read past ``http_parked_share`` (``tsync serve``'s HTTP protocol).
_PARKED_FULL: Final = Refused(
    codes.UNAVAILABLE,
    "the server holds as many parked live reads as it may (http_parked_share); retry shortly",
)
_LIVE_READ: Final = re.compile(rb"(?:^|&)live=(?:long-poll|sse)(?:&|$)")


def parks(scope: dict[str, Any]) -> bool:
    """Whether the request is a Durable Streams live read (``live=long-poll``
    or ``live=sse``), which may wait long for data."""
    return (
        scope["method"] == "GET"
        and scope["path"].startswith("/v1/stream/")
        and _LIVE_READ.search(scope.get("query_string", b"")) is not None
    )


def _problem(refused: Refused) -> Response:
    response = problem_response(refused)
    if refused.code == codes.UNAUTHORIZED:
        response.headers["www-authenticate"] = 'Bearer realm="tsync", error="invalid_token"'
    return response


async def list_readable(
    page: Callable[..., Awaitable[list[TranscriptInfo]]],
    grant: Grant,
    *,
    after: str | None,
    limit: int,
) -> list[TranscriptInfo]:
    """Up to ``limit`` transcripts after ``after`` that ``grant`` may read, in
    id order: pages of the store are read until enough are found or it ends,
    so a short answer means there are no more."""
    if grant.admin:
        return await page(after=after, limit=limit)
    found: list[TranscriptInfo] = []
    while len(found) < limit:
        infos = await page(after=after, limit=limit)
        found += [i for i in infos if grant.allows(rights.READ, i.transcript_id)]
        if len(infos) < limit:
            break
        after = infos[-1].transcript_id
    return found[:limit]


def auth_info(grant: Grant, transcript_id: str | None) -> api.AuthInfo:
    """The body of ``GET /v1/auth``."""
    return api.AuthInfo(
        sub=grant.sub,
        expires_at=None if grant.expires_at is None else int(grant.expires_at * 1000),
        admin=grant.admin,
        read=["*"] if grant.admin else list(grant.read),
        write=["*"] if grant.admin else list(grant.write),
        transcript=None
        if transcript_id is None
        else api.TranscriptRights(
            transcript_id=transcript_id,
            read=grant.allows(rights.READ, transcript_id),
            write=grant.allows(rights.WRITE, transcript_id),
        ),
    )
