"""Long-poll answers encoded once for every reader, and written raw.

A thousand long-poll readers parked at one offset are all woken by the same
append, and all get the same answer: the same status, headers and body,
except the response cursor (``Stream-Cursor``), which follows each reader's
own. So the answer is built and encoded once (``Answer``: its header lines
as bytes, its body), kept in ``SharedAnswers`` for every reader that asks
for the same offsets of the same stream, and each reader's answer is that,
plus its cursor's header line (``send_answer``). The SSE path does the same
for its events (``server.streams.fanout``).

``FastPath`` is the ASGI app in front of the HTTP app (``tsync serve``'s
``server.web.application``) that answers the common long-poll read (``GET
/v1/stream/...?live=long-poll`` with credentials that may read it, from no
browser origin, with no ``If-None-Match``) without the framework's work
per request: no route lookups, no middleware frames, no ``Request``. It
checks what the middlewares would (the ``Host``, the token and its right
on the stream, the parked share of the connection cap) and hands anything
else, or anything it would refuse, to the app, which answers it as always.
Its answer is written with ``raw_answer`` (``server.web.http_guard``: one
transport write, nothing encoded by h11) when the server offers it, else
through ASGI.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final, NamedTuple, Protocol

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from protocol import rights
from server.auth import GRANT_KEY, Authenticator, bearer
from server.errors import Refused
from server.extensions import HTTP_CONNECTION, RAW_BODY
from server.logs import SAID

__all__ = ["FAST", "Answer", "FastPath", "Parked", "Reply", "SharedAnswers", "Wait", "send_answer"]

access_log = logging.getLogger("tsync.access")

#: Requests with these headers go the app's way: a browser's (CORS), a
#: conditional read (304).
_SLOW_HEADERS: Final = frozenset((b"origin", b"if-none-match"))
#: Host rule answers kept at most (``FastPath._admit``).
_MAX_HOSTS: Final = 1024
#: What marks a long-poll read in a query string (the app checks the rest).
_LONG_POLL: Final = b"live=long-poll"


class Answer:
    """One answer, encoded: ``headers`` (ASGI's raw list) and ``head`` (the
    same as header lines) hold everything but the cursor and the length."""

    __slots__ = ("body", "etag", "head", "headers", "status", "stream")

    def __init__(
        self, status: int, headers: dict[str, str], body: bytes, stream: object = None
    ) -> None:
        self.status = status
        self.headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
        ]
        self.head = b"".join([b"%s: %s\r\n" % pair for pair in self.headers])
        self.body = body
        self.etag = headers.get("etag")
        #: The stream it was read from: an answer is only ever shared by
        #: readers of that very stream (not one made again at its path).
        self.stream = stream

    def raw_head(self, cursor: str | None) -> bytes:
        """``head`` with the reader's cursor, for a raw write."""
        if cursor is None:
            return self.head
        return self.head + b"stream-cursor: %s\r\n" % cursor.encode("latin-1")

    def asgi_headers(self, cursor: str | None) -> list[tuple[bytes, bytes]]:
        headers = list(self.headers)
        if cursor is not None:
            headers.append((b"stream-cursor", cursor.encode("latin-1")))
        if self.status != 204:
            headers.append((b"content-length", str(len(self.body)).encode()))
        return headers


class Reply(NamedTuple):
    """A reader's answer: the shared ``answer`` and its own cursor."""

    answer: Answer
    cursor: str | None


class SharedAnswers:
    """The answers built lately, by what they answer (a stream's path and
    the offsets read, which the caller puts in the key): an answer holds
    whole messages, which never change, so it serves every reader that
    asks the same until the stream is made again (``Answer.stream``). At
    most ``max_entries`` answers of ``max_bytes`` of bodies together, the
    oldest dropped first."""

    def __init__(self, max_entries: int = 256, max_bytes: int = 4 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._answers: dict[tuple[object, ...], Answer] = {}
        self._bytes = 0
        #: Answers built, and answers taken as they were (for the tests and
        #: the benchmark's notes).
        self.built = 0
        self.shared = 0

    def get(self, key: tuple[object, ...], stream: object) -> Answer | None:
        answer = self._answers.get(key)
        if answer is None:
            return None
        if answer.stream is not stream:
            self._drop(key)
            return None
        self.shared += 1
        return answer

    def put(self, key: tuple[object, ...], answer: Answer) -> Answer:
        self.built += 1
        if key in self._answers:
            self._drop(key)
        if len(answer.body) > self.max_bytes:
            return answer
        self._answers[key] = answer
        self._bytes += len(answer.body)
        while len(self._answers) > self.max_entries or self._bytes > self.max_bytes:
            self._drop(next(iter(self._answers)))
        return answer

    def _drop(self, key: tuple[object, ...]) -> None:
        answer = self._answers.pop(key)
        self._bytes -= len(answer.body)

    def clear(self) -> None:
        self._answers.clear()
        self._bytes = 0


class RawAnswer(Protocol):
    """``server.web.http_guard.RawBody.raw_answer``."""

    def __call__(self, status: int, head: bytes, body: bytes) -> bool: ...


class RawRequest(Protocol):
    """``server.web.http_guard.RawBody``: what ``FastPath.answer_now`` uses."""

    def raw_answer(self, status: int, head: bytes, body: bytes) -> bool: ...

    def run_app(self) -> None: ...

    def pin(self) -> object: ...


class Parked:
    """A long-poll read its protocol handed over (``FastPath.answer_now``)
    while it waits, with no task of its own: those parked at one place are
    answered together (``server.streams.transcripts``), each with one raw
    write (``answer``), or handed back to the app (``hand_back``: its task
    answers it as always) when that cannot be."""

    __slots__ = ("began", "cursor", "deadline", "front", "pinned", "raw", "route", "scope")

    def __init__(
        self, front: FastPath, scope: Scope, raw: RawRequest, route: str, cursor: str | None
    ) -> None:
        self.front = front
        self.scope = scope
        self.raw = raw
        #: The request itself (its cycle), which nothing else may hold while
        #: it waits (the raw request holds it weakly).
        self.pinned = raw.pin()
        self.route = route
        #: The client's cursor (the answer's is made when it is sent).
        self.cursor = cursor
        self.began = time.perf_counter()
        #: When it is answered with nothing, in the loop's time (set by whoever parks it).
        self.deadline = 0.0

    def answer(self, reply: Reply) -> None:
        self.front.answer_parked(self, reply)

    def hand_back(self) -> None:
        self.raw.run_app()


class Wait(NamedTuple):
    """A read that waits (``Ready``'s answer): ``join`` parks it with the
    others waiting for the same; ``cursor`` is the client's."""

    join: Callable[[Parked], None]
    cursor: str | None


async def send_answer(scope: Scope, send: Send, reply: Reply) -> None:
    """``reply`` in one raw write if the server offers one, else through ASGI."""
    answer, cursor = reply
    raw: RawAnswer | None = getattr(scope.get("extensions", {}).get(RAW_BODY), "raw_answer", None)
    if raw is not None and raw(answer.status, answer.raw_head(cursor), answer.body):
        return
    headers = answer.asgi_headers(cursor)
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body, "more_body": False})


class Metrics(Protocol):
    """``server.metrics.Metrics``: what ``FastPath`` observes."""

    def http_observer(self, method: str, route: str, status: int) -> Callable[[float], None]: ...


#: ``(scope) -> Reply``, a ``Response`` (a refusal), or ``None`` (the app answers).
Read = Callable[[Scope], Awaitable[Reply | Response | None]]
#: ``(scope) -> Reply`` ready now, a ``Wait`` (nothing to answer yet), or
#: ``None`` (``Read`` answers), with no side effect that matters
#: (``server.streams.transcripts.ready_long_poll``).
Ready = Callable[[Scope], Reply | Wait | None]
#: Headers whose request goes through the app's wrappers (uvicorn's proxy
#: headers rewrite the scope's client and scheme): never answered at once.
_WRAPPED_HEADERS: Final = frozenset((b"x-forwarded-for", b"x-forwarded-proto", b"forwarded"))


class FastCounts:
    """What ``FastPath`` did (for the tests and the benchmark's notes)."""

    __slots__ = ("answered", "at_once", "handed_on", "parked")

    def __init__(self) -> None:
        #: Long-poll reads answered here.
        self.answered = 0
        #: Of those, answered from the HTTP protocol (``answer_now``) as
        #: they came, and parked there with no task to wait.
        self.at_once = 0
        self.parked = 0
        #: Long-poll reads handed to the app (refused, or not the common kind).
        self.handed_on = 0


FAST: Final = FastCounts()


class FastPath:
    """ASGI: the common long-poll read answered here, anything else by ``app``.

    ``read`` is the long-poll read (``server.streams.http.fast_long_poll``);
    ``host_ok`` the ``Host`` check of the app's origin policy; ``route`` the
    route template the request log and metrics name (``observe``)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        read: Read,
        prefix: str,
        reserved: str,
        host_ok: Callable[[Scope], bool],
        authenticator: Authenticator,
        metrics: Metrics,
        route: str,
        transcripts: tuple[Read, str] | None = None,
        ready: Ready | None = None,
    ) -> None:
        self.app = app
        self.read = read
        self.prefix = prefix
        self.reserved = reserved
        self.host_ok = host_ok
        self.authenticator = authenticator
        self.metrics = metrics
        self.route = route
        #: The long-poll read of a transcript's stream (under ``reserved``,
        #: whose rest is the transcript's id) and its route template; ``None``:
        #: the app answers those.
        self.transcripts = transcripts
        #: A transcript's long-poll answer when it is ready at once
        #: (``answer_now``); ``None``: every one goes through ``read``.
        self.ready = ready if transcripts is not None else None
        self._hosts: dict[tuple[bytes | None, object], bool] = {}
        self._observers: dict[tuple[str, int], Callable[[float], None]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if (
            scope["method"] != "GET"
            or not path.startswith(self.prefix)
            or _LONG_POLL not in scope["query_string"]
        ):
            await self.app(scope, receive, send)
            return
        read, route, name = self.read, self.route, path[len(self.prefix) :]
        if path.startswith(self.reserved):
            if self.transcripts is None:
                await self.app(scope, receive, send)
                return
            (read, route), name = self.transcripts, path[len(self.reserved) :]
        if not self._admit(scope, name):
            FAST.handed_on += 1
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500
        handed = False
        try:
            reply = await read(scope)
            if reply is None:
                handed = True
                FAST.handed_on += 1
                await self.app(scope, receive, send)  # which logs it
                return
            FAST.answered += 1
            if isinstance(reply, Reply):
                status = reply.answer.status
                await send_answer(scope, send, reply)
            else:
                status = reply.status_code
                await reply(scope, receive, send)
        except asyncio.CancelledError:
            status = 503  # cut by a shutdown's deadline (as the request log says)
            raise
        finally:
            if not handed:
                self._observe(scope, route, status, time.perf_counter() - began)

    def may_take(self, scope: Scope) -> bool:
        """Whether ``answer_now`` may take this request (a transcript's
        long-poll read, from its method, path and query alone); the HTTP
        protocol starts any other's task as its headers are in."""
        return (
            self.ready is not None
            and scope["method"] == "GET"
            and scope["path"].startswith(self.reserved)
            and _LONG_POLL in scope["query_string"]
        )

    def answer_now(self, scope: Scope, raw: RawRequest) -> bool:
        """Take a transcript's long-poll read from the HTTP protocol as its
        last byte is parsed, with no task and no ASGI call: answered at once
        (one raw write, ``raw.raw_answer``) when its answer is built already
        (the readers one append woke ask for the page one of them built), or
        parked with the readers waiting at the same place (``Parked``,
        answered together when the transcript changes or the wait ends). The
        same checks, answers, metrics and log as ``__call__``'s; False, and
        nothing done, for anything else (the protocol runs the app as
        always). ``scope`` is the request's as uvicorn made it: the app's
        wrappers have not seen it (a request with proxy headers goes their
        way)."""
        ready, transcripts = self.ready, self.transcripts
        if ready is None or transcripts is None or not self.may_take(scope):
            return False
        path: str = scope["path"]
        for header, _ in scope["headers"]:
            if header in _WRAPPED_HEADERS:
                return False
        got = ready(scope)
        if got is None or not self._admit(scope, path[len(self.reserved) :]):
            return False
        if isinstance(got, Wait):
            FAST.parked += 1
            got.join(Parked(self, scope, raw, transcripts[1], got.cursor))
            return True
        began = time.perf_counter()
        answer, cursor = got
        if not raw.raw_answer(answer.status, answer.raw_head(cursor), answer.body):
            return False
        FAST.answered += 1
        FAST.at_once += 1
        self._observe(scope, transcripts[1], answer.status, time.perf_counter() - began)
        return True

    def answer_parked(self, parked: Parked, reply: Reply) -> None:
        """Answer a ``Parked`` read with one raw write, else hand it back
        to the app (its transport is paused: the app's task sends it)."""
        answer, cursor = reply
        if not parked.raw.raw_answer(answer.status, answer.raw_head(cursor), answer.body):
            parked.hand_back()  # (nothing, when the client is gone)
            return
        FAST.answered += 1
        self._observe(parked.scope, parked.route, answer.status, time.perf_counter() - parked.began)

    def _admit(self, scope: Scope, name: str) -> bool:
        """Whether the app's middlewares would let this read through (with
        no answer of theirs to add); also what ``HttpAccess`` leaves in the
        scope (the grant) and the connection (a parked read)."""
        headers = scope["headers"]
        host = None
        for header, value in headers:
            if header in _SLOW_HEADERS:
                return False
            if header == b"host":
                host = value
        # The Host rule's answer depends on the header and on the address the
        # request arrived on: kept (a thousand readers send the same).
        known = (host, scope.get("server"))
        allowed = self._hosts.get(known)
        if allowed is None:
            if len(self._hosts) >= _MAX_HOSTS:
                self._hosts.clear()
            allowed = self._hosts[known] = self.host_ok(scope)
        if not allowed:
            return False
        try:
            grant = self.authenticator.verify(bearer(headers))
        except Refused:
            return False
        if not grant.satisfies(rights.READ, name):
            return False
        connection = scope.get("extensions", {}).get(HTTP_CONNECTION)
        if connection is not None and not connection.authenticated(True):
            return False  # the app answers 503
        scope[GRANT_KEY] = grant
        return True

    def _observe(self, scope: Scope, route: str, status: int, seconds: float) -> None:
        """What ``server.web.http_ops.RequestLog`` records of a request."""
        observe = self._observers.get((route, status))
        if observe is None:
            observe = self._observers[route, status] = self.metrics.http_observer(
                "GET", route, status
            )
        observe(seconds)
        if access_log.isEnabledFor(logging.INFO):
            ms = round(seconds * 1000, 2)
            client = scope.get("client")
            access_log.info(
                "%s %s %d %.1fms",
                "GET",
                route,
                status,
                ms,
                extra={
                    "method": "GET",
                    "route": route,
                    "status": status,
                    "duration_ms": ms,
                    "peer": f"{client[0]}:{client[1]}" if client else None,
                    SAID: ("method", "route", "status", "duration_ms"),
                },
            )
