"""Issue "The Durable Streams face as tight as the WebSocket face", item 5:
the HTTP connection cap is no lock anyone can take.

Before: sockets trickling headers with no credentials (or parked long-polls)
filled ``max_http_connections``, and a client with a valid token then got
503 on 13 of 15 HTTP requests and 13 of 15 WebSocket handshakes, although
WebSockets count only against ``max_connections``. Here the cap is scaled
down (40) and the attack scaled up against it: every live read a reader may
park, and 15 times the cap in trickling sockets, still coming while the
client works."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.robustness.harness import Target, closed_by_peer, raw_socket

TOKEN = "http-cap-static-admin-token"
CAP = 40
SETTINGS = {
    "token": TOKEN,
    "max_http_connections": CAP,
    # Low enough that tsync serve need not lower the caps to fit its open-file limit.
    "max_connections": 1000,
    # Neither deadline rescues the server within the test: the shares do.
    "http_header_timeout_s": 60,
    "stream_long_poll_s": 60,
}
#: http_parked_share's default (0.5) of CAP.
PARKED = CAP // 2
#: Trickling sockets opened before the client starts, and per round while it works.
TRICKLERS = 15 * CAP
TRICKLERS_PER_ROUND = 40
ROUNDS = 15


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def _trickle(target: Target, sockets: list[socket.socket], count: int) -> None:
    """``count`` connections that send half a request's headers, no credentials."""
    for _ in range(count):
        sock = raw_socket(target.port)
        sock.sendall(b"GET /v1/transcripts HTTP/1.1\r\nhost: local")
        sockets.append(sock)


def _head(sock: socket.socket, timeout: float) -> bytes:
    """What the server answers up to the end of the status line and headers."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while b"\r\n\r\n" not in data and time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        data += chunk
    return data


def _handshake(target: Target) -> bytes:
    """A WebSocket handshake with the token on a new connection: its status line."""
    with raw_socket(target.port) as sock:
        sock.sendall(
            (
                f"GET /v1/ws HTTP/1.1\r\nhost: 127.0.0.1:{target.port}\r\n"
                "upgrade: websocket\r\nconnection: Upgrade\r\n"
                "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n"
                f"authorization: Bearer {TOKEN}\r\n\r\n"
            ).encode()
        )
        return _head(sock, 10).split(b"\r\n", 1)[0]


def _park(target: Target, sockets: list[socket.socket], count: int) -> list[socket.socket]:
    """``count`` long-polls at the tail of a stream, with the token."""
    parked = []
    for _ in range(count):
        sock = raw_socket(target.port)
        sock.sendall(
            b"GET /v1/stream/cap?offset=now&live=long-poll HTTP/1.1\r\n"
            b"host: localhost\r\nauthorization: Bearer " + TOKEN.encode() + b"\r\n\r\n"
        )
        sockets.append(sock)
        parked.append(sock)
    return parked


def _answered(socks: list[socket.socket], count: int, timeout: float) -> list[socket.socket]:
    """The sockets of ``socks`` the server answered (or closed) within ``timeout``,
    waiting no longer once ``count`` were."""
    answered: list[socket.socket] = []
    waiting = list(socks)
    deadline = time.monotonic() + timeout
    while waiting and len(answered) < count and time.monotonic() < deadline:
        ready, _, _ = select.select(waiting, [], [], max(0.0, deadline - time.monotonic()))
        for sock in ready:
            waiting.remove(sock)
            answered.append(sock)
    return answered


def test_a_client_with_a_token_gets_through_trickling_sockets_and_parked_long_polls(
    target_factory: Callable[..., Target], sockets: list[socket.socket]
) -> None:
    target = target_factory(settings=SETTINGS)
    auth = {"authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=target.url, headers=auth, timeout=10) as client:
        created = client.put("/v1/stream/cap", headers={"content-type": "text/plain"})
        assert created.status_code == 201, created.text

    # Every live read a reader may park, and a third more: those are refused at once.
    polls = _park(target, sockets, PARKED + PARKED // 2)
    refused = _answered(polls, PARKED // 2, 10)
    assert len(refused) == PARKED // 2
    for sock in refused:
        head = _head(sock, 5)
        assert head.startswith(b"HTTP/1.1 503"), head[:200]
        assert b"retry-after: 1" in head.lower()
        # Closed: kept alive, it would hold a place meant for other requests.
        assert closed_by_peer(sock, 2)  # (not the 5 s keep-alive)
    # The rest wait for data.
    assert not _answered([s for s in polls if s not in refused], 1, 0.2)

    _trickle(target, sockets, TRICKLERS)

    statuses: list[int] = []
    handshakes: list[bytes] = []
    for _ in range(ROUNDS):
        _trickle(target, sockets, TRICKLERS_PER_ROUND)
        # A new connection each time: keep-alive would hide the cap.
        answer = httpx.get(target.url + "/v1/transcripts", headers=auth, timeout=10)
        statuses.append(answer.status_code)
        handshakes.append(_handshake(target))
    assert statuses == [200] * ROUNDS
    assert handshakes == [b"HTTP/1.1 101 Switching Protocols"] * ROUNDS
    # Monitors still get in, without credentials.
    assert httpx.get(target.url + "/healthz", timeout=10).status_code == 200
    # The parked long-polls were never cut to make room.
    assert not _answered([s for s in polls if s not in refused], 1, 0.1)


def test_connections_kept_alive_with_a_token_give_way_to_a_new_one(
    target_factory: Callable[..., Target], sockets: list[socket.socket]
) -> None:
    target = target_factory(settings={**SETTINGS, "http_keep_alive_s": 60})
    auth = f"authorization: Bearer {TOKEN}\r\n".encode()
    # The whole cap: connections that made a request with the token and stay open.
    for _ in range(CAP):
        sock = raw_socket(target.port)
        sockets.append(sock)
        sock.sendall(b"GET /v1/transcripts HTTP/1.1\r\nhost: localhost\r\n" + auth + b"\r\n")
        assert _head(sock, 10).startswith(b"HTTP/1.1 200")
    statuses = [
        httpx.get(
            target.url + "/v1/transcripts", headers={"authorization": f"Bearer {TOKEN}"}
        ).status_code
        for _ in range(5)
    ]
    assert statuses == [200] * 5
