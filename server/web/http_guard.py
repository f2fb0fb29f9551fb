"""Deadlines and a cap for HTTP connections, below the app (``tsync serve``).

uvicorn closes a keep-alive connection that stays idle after a response
(``timeout_keep_alive``), but nothing else: a connection that never sends a
request, trickles its headers a byte at a time, or sends a body that never
ends (chunked, or shorter than its ``Content-Length``) was held for as long
as the client liked, and enough of them used up the process's file
descriptors (``accept()`` then failed, and every failure was logged).

``guarded_protocol(config)`` is uvicorn's httptools protocol (llhttp, in C;
uvicorn's h11 protocol where httptools is not installed, or when asked for)
with:

- **a header deadline**: a request's headers must be complete within
  ``http_header_timeout_s`` of the connection opening (or of the first byte
  after a keep-alive pause);
- **a body deadline**: ``http_body_timeout_s`` once the headers are in,
  extended by a second for every ``http_body_min_rate`` bytes received (a
  slow but honest upload goes on; a trickle does not);
- **a send deadline**: a response whose bytes the client stops reading for
  ``http_send_timeout_s`` is cut (its memory is freed);
- **shares of the cap kept apart**: a connection is *unauthenticated* until
  one of its requests passed ``HttpAccess`` with credentials (any complete
  request to a route that is not public, on a server that needs none);
  those may hold ``http_unauthenticated_share`` of the cap together, and a
  new connection past that closes the one of them that has waited longest
  for its headers, or when all of them are in requests (public ones: a
  client that does not read a page's answer holds it for
  ``http_send_timeout_s``), the oldest. Parked live reads
  (Durable Streams ``live=long-poll``, ``live=sse``) may hold
  ``http_parked_share``; ``HttpAccess`` answers one more 503 at once. What is
  left (at least ``1 - both shares``) is for other requests with credentials:
  1,000 sockets trickling headers and every long-poll a reader may park do
  not keep a client with a token out (``tests/robustness/test_http_cap.py``).
  The app reaches its connection through the scope extension
  ``HTTP_CONNECTION`` (its ``authenticated``);
- **a connection cap**: past ``max_http_connections`` open HTTP connections
  (WebSockets are counted by ``max_connections`` only: an upgrade is served
  whatever this count), a new connection may still ask ``/healthz``,
  ``/readyz`` and ``/metrics`` (so that a monitor sees the server is alive)
  and upgrade to a WebSocket under a short deadline; anything else is
  answered 503 with ``Retry-After`` and closed. At most ``OVERFLOW`` such
  connections wait for their headers at once: a new one past that closes
  the one that waited longest, so a flood of idle sockets cannot keep a
  monitor out (it only churns).

It also offers a streaming response the **raw body write** (the ASGI scope
extension ``RAW_BODY``, for HTTP/1.1 requests): chunks the app framed itself
(``server.streams.fanout`` frames an SSE event once for all its readers)
go straight to the transport while the response's chunked body is being
sent and the transport takes data, with no ASGI ``send`` and no h11 event
per reader. Neither protocol keeps state per chunk, so its own end of the
body (``more_body: False``) still closes the response correctly.

The guard is written once (``_Guard``) over what each parser says of the
client's side: h11's states, httptools' callbacks (it parses every byte as
it comes, a pipelined request's too). httptools keeps an unfinished header
whatever its size: the guard refuses an incomplete head past h11's bound
(``h11_max_incomplete_event_size``, 16 KiB) with the same 400.

A deadline that passes before the response started answers 408 and closes;
after, it just closes. Nothing is logged per connection (an attack would
write the log full); ``GuardCounters`` counts what happened.

Under another ASGI server (``uvicorn server.app:app``, hypercorn) these
deadlines are not there: put a proxy with its own timeouts in front (see
``docs/deploy.md``).

Why one module of over 600 lines: the guard, its two parser bindings and the
raw writes share one connection's state (its deadlines, its place in the cap,
h11's or httptools' view of the request) and the order in which the parser's
callbacks change it; apart, each binding would reach into the guard's state.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Protocol

import h11
import msgspec
from uvicorn.middleware.message_logger import MessageLoggerMiddleware
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.h11_impl import H11Protocol

try:  # httptools (C, llhttp) parses a request several times faster than h11.
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - a platform without its wheels
    HttpToolsProtocol = None  # type: ignore[assignment, misc]

from protocol import codes
from server.config import ServerConfig
from server.errors import Failure
from server.extensions import HTTP_CONNECTION, RAW_BODY

__all__ = [
    "HTTP_CONNECTION",
    "PARSERS",
    "RAW_BODY",
    "GuardCounters",
    "RawBody",
    "guarded_protocol",
]


#: Connections past the cap that may still ask for the health endpoints;
#: more are closed as soon as they are accepted.
OVERFLOW: Final = 64
#: The header deadline of a connection past the cap.
OVERFLOW_HEADER_TIMEOUT_S: Final = 2.0
#: Paths a connection past the cap may still ask for.
ALWAYS_SERVED: Final = ("/healthz", "/readyz", "/metrics")


def _problem(code: str, detail: str) -> bytes:
    return msgspec.json.encode(Failure(code, detail, {}).problem())


_TIMEOUT_BODY: Final = _problem(codes.REQUEST_TIMEOUT, "the request did not arrive in time")
#: Written straight to the socket: no app is running for a request whose
#: headers never completed.
_TIMEOUT_RESPONSE: Final = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: application/problem+json\r\n"
    b"connection: close\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY)
)
_OVER_CAPACITY_BODY: Final = _problem(
    codes.UNAVAILABLE, "the server holds as many HTTP connections as it may; retry shortly"
)


@dataclass
class GuardCounters:
    """What the guard did, for metrics and tests (shared by a server's connections)."""

    open: int = 0
    #: Connections within the cap (``open`` less those past it).
    admitted: int = 0
    #: Parked live reads now (``http_parked_share``).
    parked: int = 0
    header_timeouts: int = 0
    body_timeouts: int = 0
    send_timeouts: int = 0
    over_capacity: int = 0
    #: Connections past the cap closed to make room for newer ones.
    evicted: int = 0
    #: Idle connections within the cap closed to make room for newer ones.
    evicted_idle: int = 0
    #: Live reads answered 503 because ``http_parked_share`` was taken.
    parked_refused: int = 0
    #: Connections past the cap still waiting for their headers, oldest first.
    waiting: dict[_Guard, None] = field(default_factory=dict)
    #: Admitted connections with no authenticated request yet.
    unauthenticated: dict[_Guard, None] = field(default_factory=dict)
    #: Those of them waiting for a request's headers (not in a request), oldest first.
    idle_unauthenticated: dict[_Guard, None] = field(default_factory=dict)
    #: Authenticated connections kept alive with no byte of a next request yet.
    idle_authenticated: dict[_Guard, None] = field(default_factory=dict)


#: The request parsers the guard runs on: ``auto`` is httptools when it is
#: installed, else h11.
PARSERS: Final = ("auto", "httptools", "h11")


def guarded_protocol(
    config: ServerConfig, counters: GuardCounters | None = None, parser: str = "auto"
) -> type[asyncio.Protocol]:
    """uvicorn's httptools (or h11) protocol with ``config``'s deadlines and
    cap (pass it as ``uvicorn.Config(http=...)``). ``parser``: one of
    ``PARSERS``; ``httptools`` when it is not installed is an error."""
    shared = GuardCounters() if counters is None else counters
    if parser not in PARSERS:
        raise ValueError(f"unknown HTTP parser {parser!r} (one of {', '.join(PARSERS)})")
    base: type[_Guard]
    if parser == "h11" or (parser == "auto" and HttpToolsProtocol is None):
        base = _GuardedH11
    elif HttpToolsProtocol is None:
        raise ValueError("the httptools HTTP parser is not installed")
    else:
        base = _GuardedHttpTools

    class Guarded(base):  # type: ignore[valid-type, misc]
        header_timeout_s = config.http_header_timeout_s
        body_timeout_s = config.http_body_timeout_s
        body_min_rate = config.http_body_min_rate
        send_timeout_s = config.http_send_timeout_s
        max_connections = config.max_http_connections
        max_unauthenticated = _share(config.max_http_connections, config.http_unauthenticated_share)
        max_parked = _share(config.max_http_connections, config.http_parked_share)
        counters = shared

    return Guarded


def _share(cap: int, share: float) -> int:
    """``share`` of ``cap`` connections, at least one."""
    return max(1, int(cap * share))


async def _over_capacity(scope: Any, receive: Any, send: Any) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"retry-after", b"1"),
                (b"connection", b"close"),
            ],
        }
    )
    await send(
        {
            "type": "http.response.body",
            "body": _OVER_CAPACITY_BODY,
        }
    )


class RawBody:
    """The raw body write of one HTTP/1.1 response (scope extension ``RAW_BODY``).

    It holds its request's cycle weakly: the cycle holds the scope, whose
    extensions hold this, and a strong reference back would make every
    request's cycle, scope, event and headers a reference cycle, freed only
    by the cyclic garbage collector (at 10,000 long-poll requests a second
    that collector took over a quarter of the server's CPU)."""

    __slots__ = ("_cycle", "_protocol")

    def __init__(self, protocol: _Guard, cycle: Any) -> None:
        self._protocol = protocol
        self._cycle: Callable[[], Any] = weakref.ref(cycle)

    def raw_ready(self) -> bool:
        """Whether a chunk written now goes out: the response's body is
        being sent, the client is there and the transport is not paused."""
        cycle = self._cycle()
        protocol = self._protocol
        return (
            cycle is not None
            and cycle.response_started
            and not cycle.response_complete
            and not cycle.disconnected
            and protocol.cycle is cycle
            and not protocol.flow.write_paused
            and not protocol.transport.is_closing()
        )

    def raw_write(self, data: bytes) -> None:
        """Write whole chunks, framed (``size CRLF data CRLF``) by the caller."""
        self._protocol.transport.write(data)

    def pin(self) -> object:
        """The request's cycle, for whoever keeps the request while it waits
        with no task (``server.streams.longpoll.Parked``): this holds it
        weakly, and once a pipelined request came after it, nothing else does."""
        return self._cycle()

    def run_app(self) -> None:
        """Run the app for the request after all (a request the app took
        from the protocol, ``answer_now``, and cannot answer raw: its
        transport is paused); nothing when it is answered or the client is
        gone."""
        cycle = self._cycle()
        if self._settled(cycle):
            return
        # (Even when a pipelined request came after it: as uvicorn runs a
        # request whose cycle is no longer the protocol's.)
        self._protocol.run_app(cycle)

    def _settled(self, cycle: Any) -> bool:
        """Whether the request needs nothing more: collected, answered, or
        its client gone."""
        return (
            cycle is None
            or cycle.response_started
            or cycle.disconnected
            or self._protocol.transport.is_closing()
        )

    def raw_answer(self, status: int, head: bytes, body: bytes) -> bool:
        """Send a whole answer the app encoded itself, in one write: the
        status line, the server's default headers (``date``, ``server``),
        ``head`` (header lines, each ending in CRLF), ``content-length`` and
        ``body``. The parser's protocol is told of a response of that length,
        so that the connection goes on as after any other answer, but encodes
        nothing (``server.streams.longpoll`` shares one encoding among the
        readers one append wakes). False, and nothing sent, when the answer
        cannot go now (the response started, the client is gone, the
        transport is paused): the app sends it through ASGI instead.
        ``status``: 200 or 204 (without a body)."""
        cycle = self._cycle()
        protocol = self._protocol
        if (
            self._settled(cycle)
            or protocol.cycle is not cycle
            or protocol.flow.write_paused
            or cycle.scope["method"] == "HEAD"
        ):
            return False
        length = str(len(body)).encode()
        # A 204 has no length (h11 frames it so, as uvicorn sends it).
        sized = status != 204
        close = protocol.answered(status, length if sized else None, body)
        cycle.response_started = True
        cycle.response_complete = True
        cycle.message_event.set()
        phrase = _STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status
        protocol.transport.write(
            b"".join(
                (
                    phrase,
                    _default_head(cycle.default_headers),
                    head,
                    b"connection: close\r\n" if close else b"",
                    b"content-length: %s\r\n\r\n" % length if sized else b"\r\n",
                    body,
                )
            )
        )
        if close:
            protocol.closing_after_answer()
            protocol.transport.close()
        cycle.on_response()
        return True


_STATUS_LINES: Final = {
    status: b"HTTP/1.1 %d %s\r\n" % (status, phrase.encode())
    for status, phrase in ((200, "OK"), (204, "No Content"))
}
_END: Final = h11.EndOfMessage()
#: h11's events are immutable: the response of each status and length is
#: made (and its header validated) once, not per answer.
_responses: dict[tuple[int, bytes | None], h11.Response] = {}


def _response_event(status: int, length: bytes | None) -> h11.Response:
    event = _responses.get((status, length))
    if event is None:
        if len(_responses) >= 1024:
            _responses.clear()
        framing = [(b"content-length", length)] if length is not None else []
        event = _responses[(status, length)] = h11.Response(status_code=status, headers=framing)
    return event


#: uvicorn's default headers (a new list each second, for ``date``), encoded once.
_default_heads: dict[int, tuple[list[tuple[bytes, bytes]], bytes]] = {}


def _default_head(headers: list[tuple[bytes, bytes]]) -> bytes:
    cached = _default_heads.get(id(headers))
    if cached is not None and cached[0] is headers:
        return cached[1]
    encoded = b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers)
    _default_heads.clear()
    _default_heads[id(headers)] = (headers, encoded)
    return encoded


class _Guard(asyncio.Protocol):
    """The guard, on either parser's protocol (``_GuardedH11``,
    ``_GuardedHttpTools`` say how their parser's state reads)."""

    # The uvicorn protocol's own (both have them).
    transport: Any
    cycle: Any
    flow: Any
    loop: Any
    app: Any

    header_timeout_s: ClassVar[float]
    body_timeout_s: ClassVar[float]
    body_min_rate: ClassVar[float]
    send_timeout_s: ClassVar[float]
    max_connections: ClassVar[int]
    max_unauthenticated: ClassVar[int]
    max_parked: ClassVar[int]
    counters: ClassVar[GuardCounters]

    #: One timer per connection, for whichever deadline runs: it fires at
    #: ``_timer_at``, at or before ``_deadline``, and looks again then (a
    #: deadline moved later, or gone, does not touch it: a kept-alive
    #: connection's requests make and cancel no timer each).
    _timer: asyncio.TimerHandle | None = None
    _timer_at = 0.0
    #: "headers", "body", "send", "idle" (kept alive between requests, on
    #: httptools: uvicorn's ``timeout_keep_alive``) or "" (no deadline).
    _phase = ""
    _deadline = 0.0
    _counted = False
    _over = False
    _admitted = False
    _authenticated = False
    _parked = False

    # --- what each parser says -------------------------------------------------

    def _reading(self) -> str:
        """The client's side: ``waiting`` (for a request's headers),
        ``body`` (sending one), ``in`` (a request is in)."""
        raise NotImplementedError

    def _http11(self) -> bool:
        raise NotImplementedError

    def answered(self, status: int, length: bytes | None, body: bytes) -> bool:
        """Tell the parser's protocol of a whole answer written raw (of
        ``length``); whether the connection closes after it."""
        raise NotImplementedError

    def closing_after_answer(self) -> None:
        """The connection closes after a raw answer."""

    # --- counting ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        counters = self.counters
        counters.open += 1
        self._counted = True
        if self._full():
            # Make room: the unauthenticated connection that has waited
            # longest for its headers goes (it had a whole deadline to send
            # them); when the cap itself is full, else the authenticated one
            # kept alive longest with no request (its client opens another).
            oldest = next(iter(counters.idle_unauthenticated), None)
            if oldest is None and counters.admitted >= self.max_connections:
                oldest = next(iter(counters.idle_authenticated), None)
            if oldest is None and len(counters.unauthenticated) >= self.max_unauthenticated:
                # All of them are in requests: public ones (a page, the API
                # description) whose answers may go unread for as long as
                # the send deadline. The oldest goes.
                oldest = next(iter(counters.unauthenticated), None)
            if oldest is not None:
                counters.evicted_idle += 1
                oldest._uncount()
                oldest.transport.abort()
        if not self._full():
            self._admitted = True
            counters.admitted += 1
            counters.unauthenticated[self] = None
            counters.idle_unauthenticated[self] = None
        else:
            counters.over_capacity += 1
            self._over = True
            self.app = _ServeOnly(self.app)
            waiting = counters.waiting
            if len(waiting) >= OVERFLOW:
                oldest = next(iter(waiting))
                del waiting[oldest]
                counters.evicted += 1
                oldest.transport.abort()
            waiting[self] = None
        self._arm("headers", self._header_timeout())

    def connection_lost(self, exc: Exception | None) -> None:
        self._uncount()
        self._stop_timer()
        super().connection_lost(exc)

    def _full(self) -> bool:
        counters = self.counters
        return (
            counters.admitted >= self.max_connections
            or len(counters.unauthenticated) >= self.max_unauthenticated
        )

    def _uncount(self) -> None:
        counters = self.counters
        counters.waiting.pop(self, None)
        counters.unauthenticated.pop(self, None)
        counters.idle_unauthenticated.pop(self, None)
        counters.idle_authenticated.pop(self, None)
        self._unpark()
        if self._admitted:
            self._admitted = False
            counters.admitted -= 1
        if self._counted:
            self._counted = False
            counters.open -= 1

    def _unpark(self) -> None:
        if self._parked:
            self._parked = False
            self.counters.parked -= 1

    def authenticated(self, parks: bool) -> bool:
        """The app found valid credentials on this connection's request (the
        scope extension ``HTTP_CONNECTION``): it no longer counts as
        unauthenticated. ``parks``: the request is a live read that may wait
        long; False when ``http_parked_share`` is taken (answer 503)."""
        counters = self.counters
        if not self._authenticated:
            self._authenticated = True
            counters.unauthenticated.pop(self, None)
            counters.idle_unauthenticated.pop(self, None)
        if not parks or not self._counted:
            return True
        if self._parked:  # (a pipelined request after a parked one)
            return True
        if counters.parked >= self.max_parked:
            counters.parked_refused += 1
            return False
        self._parked = True
        counters.parked += 1
        return True

    def on_response_complete(self) -> None:
        self._answered()
        super().on_response_complete()  # type: ignore[misc]

    def _answered(self) -> None:
        self._unpark()
        if self._admitted and not self.transport.is_closing():
            # Kept alive, waiting for the next request.
            if self._authenticated:
                self.counters.idle_authenticated[self] = None
            else:
                self.counters.idle_unauthenticated[self] = None

    def _upgraded(self) -> None:
        # From here on the connection is a WebSocket: ``max_connections``
        # and the WebSocket layer's pings look after it.
        self._stop_timer()
        self._uncount()

    def run_app(self, cycle: Any) -> None:
        """Start the app's task for ``cycle`` (``RawBody.run_app``): only a
        protocol whose ``answer_now`` takes requests has one."""
        raise NotImplementedError

    def _header_timeout(self) -> float:
        if self._over:
            return min(self.header_timeout_s, OVERFLOW_HEADER_TIMEOUT_S)
        return self.header_timeout_s

    def _new_cycle(self, before: Any) -> None:
        cycle = self.cycle
        if cycle is not None and cycle is not before:
            # In a request now (a pipelined one comes with no new data).
            self.counters.idle_unauthenticated.pop(self, None)
            self.counters.idle_authenticated.pop(self, None)
            scope: dict[str, Any] = cycle.scope
            extensions = scope.setdefault("extensions", {})
            extensions[HTTP_CONNECTION] = self
            if self._http11():
                # A response to HTTP/1.1 without a length is sent chunked.
                extensions[RAW_BODY] = RawBody(self, cycle)

    # --- deadlines --------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.counters.idle_authenticated.pop(self, None)
        if (
            (not self._phase or self._phase == "idle")
            and self._reading() == "waiting"
            and (self.cycle is None or self.cycle.response_complete)
        ):
            # The first byte of the next request on a kept-alive connection.
            self._arm("headers", self._header_timeout())
        elif self._phase == "body" and self.body_min_rate > 0:
            self._extend(len(data) / self.body_min_rate)
        super().data_received(data)
        if self.transport.get_protocol() is not self or self.transport.is_closing():
            return
        state = self._reading()
        if state == "body":
            if self._phase == "headers":
                self._arm("body", self.body_timeout_s)
        elif state != "waiting" and self._phase in ("headers", "body"):
            self._disarm()  # the request is in: the app's time is not the client's
        if state != "waiting":
            self.counters.waiting.pop(self, None)
            self.counters.idle_unauthenticated.pop(self, None)

    def pause_writing(self) -> None:
        super().pause_writing()
        if not self._phase:
            self._arm("send", self.send_timeout_s)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._phase == "send":
            self._disarm()

    def _arm(self, phase: str, seconds: float) -> None:
        self._phase = phase
        self._deadline = deadline = self.loop.time() + seconds
        timer = self._timer
        if timer is not None:
            if self._timer_at <= deadline:
                return  # it fires first, and looks again
            timer.cancel()
        self._timer_at = deadline
        self._timer = self.loop.call_at(deadline, self._expired)

    def _extend(self, seconds: float) -> None:
        self._deadline += seconds  # (the timer fires first, and looks again)

    def _disarm(self) -> None:
        self._phase = ""  # (the timer, when it fires, finds nothing to do)

    def _stop_timer(self) -> None:
        self._phase = ""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        phase = self._phase
        if not phase:
            return
        if self._deadline - self.loop.time() > _TIMER_SLACK_S:  # moved later
            self._timer_at = self._deadline
            self._timer = self.loop.call_at(self._deadline, self._expired)
            return
        self._phase = ""
        if self.transport.is_closing():
            return
        if phase == "idle":  # kept alive for as long as it may (as uvicorn closes it)
            self.transport.close()
            return
        counters = self.counters
        if phase == "headers":
            counters.header_timeouts += 1
        elif phase == "body":
            counters.body_timeouts += 1
        else:
            counters.send_timeouts += 1
        cycle = self.cycle
        started = cycle is not None and cycle.response_started
        if phase != "send" and not started:
            self.transport.write(_TIMEOUT_RESPONSE)
        if cycle is not None and not cycle.response_complete:
            # The app stops waiting for the rest of the body (it reads a disconnect).
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()


class _GuardedH11(_Guard, H11Protocol):
    def _reading(self) -> str:
        state = self.conn.their_state
        if state is h11.IDLE:
            return "waiting"
        return "body" if state is h11.SEND_BODY else "in"

    def _http11(self) -> bool:
        return bool(self.conn.their_http_version == b"1.1")

    def answered(self, status: int, length: bytes | None, body: bytes) -> bool:
        conn = self.conn
        conn.send(_response_event(status, length))
        if body:
            conn.send_with_data_passthrough(h11.Data(data=body))
        conn.send(_END)
        return conn.our_state is h11.MUST_CLOSE or not self.cycle.keep_alive

    def closing_after_answer(self) -> None:
        self.conn.send(h11.ConnectionClosed())

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._upgraded()
        super().handle_websocket_upgrade(event)

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        self._new_cycle(before)


#: A timer that fires this early looks no further (the loop's timers may
#: fire a clock tick before their time).
_TIMER_SLACK_S: Final = 0.001
#: h11's bound on a request's head (uvicorn's default).
_MAX_HEAD: Final = 16 * 1024
_BAD_REQUEST_BODY: Final = _problem(codes.INVALID_BODY, "the request is not valid HTTP/1.1")
#: A body whose length is not known until its end (HTTP/1.0, no ``content-length``).
_UNTIL_CLOSE: Final = 1 << 62


def _length_known(headers: Any) -> bool:
    return any(
        name.lower() in (b"content-length", b"transfer-encoding") for name, _ in headers or ()
    )


def _close_delimited(cycle: Any) -> None:
    """Answer an HTTP/1.0 request as h11 does when the app gives no length:
    the body ends with the connection (uvicorn's httptools protocol would send
    it chunked, which an HTTP/1.0 client does not read)."""
    send = cycle.send
    until_close = False

    async def send_close_delimited(message: Any) -> None:
        nonlocal until_close
        if message["type"] == "http.response.start" and not cycle.response_started:
            if not _length_known(message.get("headers")) and message["status"] not in (204, 304):
                until_close = True
                cycle.chunked_encoding = False
                cycle.expected_content_length = _UNTIL_CLOSE
                cycle.keep_alive = False
        elif until_close and not message.get("more_body", False):
            cycle.expected_content_length = len(message.get("body", b""))
        await send(message)

    cycle.send = send_close_delimited


class Taker(Protocol):
    """What an app offers to take requests from the protocol, with no task
    (``server.streams.longpoll.FastPath``: a transcript's long-poll)."""

    def may_take(self, scope: Any) -> bool:
        """Whether ``answer_now`` may take the request (its method, path and
        query say): else its task starts as its headers are in."""
        ...

    def answer_now(self, scope: Any, raw: RawBody) -> bool:
        """Take the request as its last byte is parsed (answered, or kept
        to answer with ``raw``); False: its task runs the app."""
        ...


def _taker(app: Any) -> Taker | None:
    """The app's ``Taker`` (``TsyncApp.taker``), under uvicorn's proxy
    headers (which leave alone a request that has none of theirs; the taker
    lets those through the app) and its trace log of ASGI messages (at log
    level ``trace``: a request taken is not in it). ``None`` under anything
    else, or when the app has none."""
    if isinstance(app, MessageLoggerMiddleware):  # (trace logs: it only logs)
        app = app.app
    if isinstance(app, ProxyHeadersMiddleware):
        app = app.app
    taker: Taker | None = getattr(app, "taker", None)
    return taker


if HttpToolsProtocol is not None:

    class _GuardedHttpTools(_Guard, HttpToolsProtocol):
        """httptools parses as the bytes come (a pipelined request too):
        where the client is is kept from its callbacks.

        A ``GET`` with no body whose answer the app has ready
        (``answer_now``: the long-poll readers one append woke) is answered
        as its last byte is parsed, with no task and no ASGI call: its task
        is held back when its headers are in (``_start_asgi_task``), and
        started only if the app cannot answer it at once."""

        _state = "idle"  # "idle", "headers", "body", "done"
        _head_bytes = 0
        #: In ``on_headers_complete`` (where a request's task may be held back).
        _heading = False
        #: The request whose task was held back: ``(cycle, app)``.
        _held: tuple[Any, Any] | None = None
        _taker: Taker | None = None
        _taker_known = False

        def _start_asgi_task(self, cycle: Any, app: Any) -> None:
            if (
                self._heading
                and app is self.app
                and not self._over
                and cycle.scope["method"] == "GET"
                and self._http11()
                and not _length_known(cycle.scope["headers"])
                and (taker := self._app_taker()) is not None
                and taker.may_take(cycle.scope)
            ):
                self._held = (cycle, app)  # (its last byte comes in this same parse)
                return
            super()._start_asgi_task(cycle, app)

        def run_app(self, cycle: Any) -> None:
            HttpToolsProtocol._start_asgi_task(self, cycle, self.app)

        def _app_taker(self) -> Taker | None:
            if not self._taker_known:
                self._taker_known = True
                self._taker = _taker(self.app)
            return self._taker

        def _answered_now(self, cycle: Any) -> bool:
            """Whether the app answered the held request itself."""
            raw = cycle.scope.get("extensions", {}).get(RAW_BODY)
            taker = self._taker
            if raw is None or taker is None:
                return False
            try:
                return bool(taker.answer_now(cycle.scope, raw))
            except Exception:  # its task answers (or logs) what went wrong
                self.logger.exception("answering a request at once failed")
                return cycle.response_started is True

        def _reading(self) -> str:
            state = self._state
            if state == "idle" or state == "headers":
                return "waiting"
            return "body" if state == "body" else "in"

        def _http11(self) -> bool:
            return bool(self.scope["http_version"] == "1.1")

        def answered(self, status: int, length: bytes | None, body: bytes) -> bool:
            return not self.cycle.keep_alive

        def handle_websocket_upgrade(self) -> None:
            self._upgraded()
            super().handle_websocket_upgrade()

        def on_message_begin(self) -> None:
            self._state = "headers"
            self._head_bytes = 0
            super().on_message_begin()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._state != "headers" or self.transport.is_closing():
                return
            # h11 refuses an incomplete head past ``h11_max_incomplete_event_size``
            # (400); httptools keeps a header's bytes until it ends, unbounded.
            self._head_bytes += len(data)
            if self._head_bytes > (self.config.h11_max_incomplete_event_size or _MAX_HEAD):
                self._disarm()
                self.send_400_response("Invalid HTTP request received.")

        def on_headers_complete(self) -> None:
            self._state = "body"
            before = self.cycle
            self._heading = True
            try:
                super().on_headers_complete()
            finally:
                self._heading = False
            self._new_cycle(before)
            cycle = self.cycle
            if cycle is not before and cycle is not None and not self._http11():
                _close_delimited(cycle)

        def send_400_response(self, msg: str) -> None:
            # As the app answers a request it cannot read (llhttp refuses
            # some that h11 lets through to the app: a control character
            # in a header's value).
            self.transport.write(
                b"".join(
                    (
                        b"HTTP/1.1 400 Bad Request\r\n",
                        _default_head(self.server_state.default_headers),
                        b"content-type: application/problem+json\r\n",
                        b"connection: close\r\n",
                        b"content-length: %d\r\n\r\n" % len(_BAD_REQUEST_BODY),
                        _BAD_REQUEST_BODY,
                    )
                )
            )
            self.transport.close()

        def on_message_complete(self) -> None:
            self._state = "done"
            super().on_message_complete()
            held = self._held
            if held is not None:
                self._held = None
                self.loop.call_soon(self._answer_held, *held)

        def _answer_held(self, cycle: Any, app: Any) -> None:
            if not self._answered_now(cycle):
                super()._start_asgi_task(cycle, app)

        def connection_lost(self, exc: Exception | None) -> None:
            self._held = None
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            # uvicorn's own, but for its keep-alive timer (one made and
            # cancelled per request): the guard's "idle" deadline instead.
            queued = bool(self.pipeline)
            if self._state == "done" and not queued:
                self._state = "idle"
            self._answered()
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            self.flow.resume_reading()
            if queued:  # the next request (parsed already) goes on
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
                self.counters.idle_unauthenticated.pop(self, None)
                self.counters.idle_authenticated.pop(self, None)
            else:
                self._arm("idle", self.timeout_keep_alive)

else:  # pragma: no cover
    _GuardedHttpTools = None  # type: ignore[assignment, misc]


class _ServeOnly:
    """The app for a connection past the cap: the health endpoints only."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("path") in ALWAYS_SERVED:
            await self.app(scope, receive, send)
        else:
            await _over_capacity(scope, receive, send)
