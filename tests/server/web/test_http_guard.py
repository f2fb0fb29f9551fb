"""``tsync serve``'s HTTP protocol (``server.web.http_guard``) in process,
where a test can reach the server's side of a connection: the shares of
the HTTP cap when unauthenticated connections are all in requests, on both
request parsers (httptools, and h11 where httptools is missing). The guard's
other tests (``tests/robustness/test_http_cap.py``, ``test_http_slow.py``,
``tests/durable_streams/``) run on the parser ``TRANSCRIPT_SYNC_HTTP_PARSER`` names."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from server.config import ServerConfig
from server.run.serve import HTTP_PARSER_ENV
from server.web.http_guard import guarded_protocol
from tests.support.servers import RunningServer, running_server
from tests.support.waiting import until

CAP = 40
TOKEN = "http-guard-static-admin-token"


@contextlib.asynccontextmanager
async def guarded() -> AsyncIterator[RunningServer]:
    async with running_server(
        token=TOKEN, max_http_connections=CAP, http_send_timeout_s=60, http_keep_alive_s=60
    ) as srv:
        yield srv


async def _stalled_reader(srv: RunningServer, port: int) -> asyncio.StreamWriter:
    """A connection that asks for a public script (KaTeX's, 270 KB: larger than the
    transport's 64 KiB buffer, which each of the client's modules is not) twice and reads
    none of it; the server's send buffer is made small, as a slow network's would be, so
    that the answers wait in the transport."""
    counters = srv.server.config.http.counters  # type: ignore[attr-defined]
    before = set(counters.unauthenticated)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    _, writer = await asyncio.open_connection(sock=sock)
    writer.transport.pause_reading()
    await until(lambda: set(counters.unauthenticated) - before)
    (server_side,) = set(counters.unauthenticated) - before
    server_side.transport.get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
    )
    # Pipelined: a single answer is complete once it is in the transport's
    # buffer (the send deadline looks after it); the next one waits for it.
    writer.write(b"GET /static/vendor/katex/katex.min.js HTTP/1.1\r\nhost: localhost\r\n\r\n" * 2)
    await until(lambda: server_side.flow.write_paused)
    return writer


BASES = {"httptools": HttpToolsProtocol, "h11": H11Protocol}


@pytest.fixture(params=sorted(BASES))
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``tsync serve``'s HTTP protocol on each parser."""
    name: str = request.param
    monkeypatch.setenv(HTTP_PARSER_ENV, name)
    return name


def test_httptools_is_the_default_and_h11_the_one_asked_for() -> None:
    config = ServerConfig()
    assert issubclass(guarded_protocol(config), HttpToolsProtocol)
    assert issubclass(guarded_protocol(config, parser="httptools"), HttpToolsProtocol)
    h11_guard = guarded_protocol(config, parser="h11")
    assert issubclass(h11_guard, H11Protocol)
    assert not issubclass(h11_guard, HttpToolsProtocol)
    with pytest.raises(ValueError, match="unknown HTTP parser"):
        guarded_protocol(config, parser="picohttp")


async def _exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        async with asyncio.timeout(10):
            return await reader.read()  # the server closes
    finally:
        writer.close()


async def test_a_head_past_the_bound_is_refused_and_a_trickle_times_out(parser: str) -> None:
    """httptools has no bound of its own on a request's head: the guard puts
    h11's (16 KiB) on it; a head that stops halfway gets the header deadline's 408."""
    async with running_server(token=TOKEN, http_header_timeout_s=0.5) as srv:
        assert isinstance(srv.server.server_state.connections, set)
        assert issubclass(srv.server.config.http, BASES[parser])  # type: ignore[arg-type]
        port = int(srv.url.rsplit(":", 1)[1])
        # Sent without its end: h11 refuses an incomplete head past 16 KiB.
        huge = b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nx-big: %s" % (b"a" * 40_000)
        assert (await _exchange(port, huge)).startswith(b"HTTP/1.1 400 ")
        half = b"GET /healthz HTTP/1.1\r\nhost: local"
        assert (await _exchange(port, half)).startswith(b"HTTP/1.1 408 ")
        counters = srv.server.config.http.counters  # type: ignore[attr-defined]
        assert counters.header_timeouts == 1
        # Kept alive, pipelined: both answered, in order, on one connection.
        two = b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n" * 2
        two += b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
        answers = await _exchange(port, two)
        assert answers.count(b"HTTP/1.1 200 ") == 3


async def test_public_answers_left_unread_do_not_keep_a_client_with_a_token_out(
    parser: str,
) -> None:
    """The unauthenticated share (10 of 40) full of requests in flight whose
    answers their clients do not read, held for the send deadline: the
    oldest gives way to a new connection."""
    async with guarded() as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        assert issubclass(srv.server.config.http, BASES[parser])  # type: ignore[arg-type]
        writers = [await _stalled_reader(srv, port) for _ in range(CAP // 4)]
        counters = srv.server.config.http.counters  # type: ignore[attr-defined]
        assert not counters.idle_unauthenticated  # all in requests
        try:
            statuses = []
            for _ in range(5):
                async with httpx.AsyncClient(
                    headers={"authorization": f"Bearer {TOKEN}"}, timeout=10
                ) as client:
                    statuses.append((await client.get(srv.url + "/v1/transcripts")).status_code)
            assert statuses == [200] * 5
        finally:
            for writer in writers:
                writer.transport.abort()


async def test_requests_leave_no_reference_cycles(parser: str) -> None:
    """A request's cycle, scope and raw write are freed when it is answered,
    not left for the cyclic garbage collector (which took over a quarter of
    the server's CPU at 10,000 long-poll answers a second): long-poll reads
    answered raw, parked ones woken by an append, and a plain request."""
    async with running_server(token=TOKEN) as srv:
        assert issubclass(srv.server.config.http, BASES[parser])  # type: ignore[arg-type]
        path = srv.url + "/v1/stream/no-cycles"
        auth = {"authorization": f"Bearer {TOKEN}"}
        json = {"content-type": "application/json"}
        counters = srv.server.config.http.counters  # type: ignore[attr-defined]
        async with httpx.AsyncClient(headers=auth, timeout=10) as client:
            created = await client.put(path, headers=json)
            assert created.status_code == 201
            assert (await client.post(path, content=b"[1]", headers=json)).status_code == 204
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                offset = "-1"
                for i in range(10):
                    read = client.get(path, params={"offset": offset, "live": "long-poll"})
                    if i % 2:  # parked until the append
                        parked = asyncio.ensure_future(read)
                        await until(lambda: counters.parked)
                        appended = await client.post(path, content=b"[2]", headers=json)
                        assert appended.status_code == 204
                        answer = await parked
                    else:  # answered at once (what the last append added)
                        answer = await read
                    assert answer.status_code == 200, answer.text
                    assert answer.json() == ([1] if i == 0 else [2])
                    offset = answer.headers["stream-next-offset"]
                    if i % 2:
                        appended = await client.post(path, content=b"[2]", headers=json)
                        assert appended.status_code == 204
                    assert (await client.get(srv.url + "/healthz")).status_code == 200
                gc.collect()
                left = [
                    type(o).__name__
                    for o in gc.garbage
                    if type(o).__name__ in ("RequestResponseCycle", "RawBody")
                ]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
        assert left == []


async def _answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    return head


async def test_a_kept_alive_connection_closes_when_idle_not_while_busy(parser: str) -> None:
    """One timer per connection for every deadline (not one made and
    cancelled per request): a client that keeps asking for longer than the
    keep-alive and the header deadline together keeps its connection; one
    idle past the keep-alive is closed without an answer; one that starts a
    request after a pause and stops halfway is closed at the header deadline
    (counted as such; closed without an answer, as after any answered
    request)."""
    async with running_server(token=TOKEN, http_keep_alive_s=0.4, http_header_timeout_s=0.6) as srv:
        assert issubclass(srv.server.config.http, BASES[parser])  # type: ignore[arg-type]
        port = int(srv.url.rsplit(":", 1)[1])
        loop = asyncio.get_running_loop()
        request = b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            began = loop.time()
            answered = 0
            while loop.time() - began < 1.5:
                writer.write(request)
                assert (await _answer(reader)).startswith(b"HTTP/1.1 200 ")
                answered += 1
                await asyncio.sleep(0.05)  # the client's pause between requests
            assert answered >= 10
            idle_from = loop.time()
            async with asyncio.timeout(5):
                assert await reader.read() == b""  # closed, nothing said
            assert loop.time() - idle_from >= 0.3  # (idle since before the last pause)
        finally:
            writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request)
            assert (await _answer(reader)).startswith(b"HTTP/1.1 200 ")
            await asyncio.sleep(0.2)  # the client's pause, within the keep-alive
            writer.write(request[:20])
            stalled_from = loop.time()
            async with asyncio.timeout(5):
                assert await reader.read() == b""
            assert loop.time() - stalled_from >= 0.5  # the header deadline, not the keep-alive
        finally:
            writer.close()
        counters = srv.server.config.http.counters  # type: ignore[attr-defined]
        assert counters.header_timeouts == 1
