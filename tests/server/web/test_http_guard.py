"""``tsync serve``'s HTTP protocol (``server.web.http_guard``) in process,
where a test can reach the server's side of a connection: the shares of
the HTTP cap when unauthenticated connections are all in requests."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import httpx

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


async def test_public_answers_left_unread_do_not_keep_a_client_with_a_token_out() -> None:
    """The unauthenticated share (10 of 40) full of requests in flight whose
    answers their clients do not read, held for the send deadline: the
    oldest gives way to a new connection."""
    async with guarded() as srv:
        port = int(srv.url.rsplit(":", 1)[1])
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
