"""The Python client and credentials: it retries what the close code says to
retry (a full server), stops on what needs new credentials when it has no
way to get them, and with a token provider renews before ``exp`` and after
a 4001."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import client_py
from client_py.errors import ServerError
from client_py.tokens import TokenSource, expiry_of
from tests.auth.conftest import OTHER_SECRET, SECRET, mint
from tests.support.servers import running_server
from tests.support.waiting import until

USER = {"role": "user", "content": "hi"}


async def test_a_full_server_is_retried_until_there_is_room() -> None:
    async with running_server(max_connections=1, jwt_secret=SECRET) as srv:
        token = mint(audience=None, admin=True)
        async with client_py.connect(srv.url, token=token) as first:
            second = client_py.Client(srv.url, token, backoff_min=0.05, backoff_max=0.2)
            await second.start(wait=False)
            try:
                # Turned away with 1013 after the handshake, again and again: it keeps trying.
                await until(lambda: second._connection >= 2)
                assert not second.connected and second._fatal is None
                await first.aclose()
                await until(lambda: second.connected, timeout=10)
                assert await second.ping() >= 0
            finally:
                await second.aclose()


@pytest.mark.parametrize("token", [None, "wrong", "expired"])
async def test_refused_credentials_stop_the_client_at_once(token: str | None) -> None:
    async with running_server(jwt_secret=SECRET) as srv:
        if token == "expired":
            token = mint(audience=None, ttl=-5, admin=True)
        began = time.monotonic()
        with pytest.raises(client_py.Unauthorized) as refused:
            async with client_py.connect(srv.url, token=token, connect_timeout=10):
                pass
        assert refused.value.code == "unauthorized"
        assert time.monotonic() - began < 5  # not a connect_timeout: a refusal
        await until(lambda: not srv.hub.subscriptions.connections)


@contextlib.asynccontextmanager
async def _host_rewriting_relay(port: int, host: bytes) -> AsyncIterator[str]:
    """A TCP relay on 127.0.0.1 to ``port`` that puts ``Host: <host>`` in each
    request head: what the server sees when a name was made to resolve to
    127.0.0.1 (DNS rebinding). Yields the relay's URL."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        head = re.sub(rb"(?im)^host:[^\r]*", b"Host: " + host, head)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        up_writer.write(head)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def test_a_host_the_server_refuses_stops_the_client() -> None:
    """1008 says "not before fixing the cause": no reconnecting."""
    async with running_server(allowed_hosts="only.example") as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        async with _host_rewriting_relay(port, b"rebound.example") as url:
            with pytest.raises(ServerError) as refused:
                async with client_py.connect(url, connect_timeout=10):
                    pass
        assert refused.value.code == "forbidden"


async def test_a_provider_renews_the_token_before_exp_on_the_open_connection() -> None:
    calls: list[str] = []

    async def provider() -> str:
        token = mint(audience=None, ttl=2, read=["t"], write=["t"])
        calls.append(token)
        return token

    async with running_server(jwt_secret=SECRET) as srv:
        await srv.hub.writes.create("t")
        async with client_py.connect(srv.url, token=provider) as client:
            mirror = await client.subscribe("t")
            first_exp = expiry_of(calls[0])
            assert first_exp is not None
            await until(lambda: time.time() > first_exp + 0.5, timeout=10)
            # Renewed (the auth op) before exp: the same connection, still allowed.
            assert len(calls) >= 2
            assert client.counters.connections == 1
            await client.append("t", [USER])
            await mirror.wait_for_revision(1, timeout=5)


async def test_a_provider_is_asked_again_after_a_4001_and_a_refused_new_token_stops() -> None:
    tokens = [mint(audience=None, ttl=1, read=["t"]), mint(audience=None, read=["t"])]
    asked = 0

    async def provider() -> str:
        nonlocal asked
        asked += 1
        return tokens[min(asked - 1, len(tokens) - 1)]

    async with running_server(jwt_secret=SECRET) as srv:
        await srv.hub.writes.create("t")
        client = client_py.Client(srv.url, provider, backoff_min=0.01, backoff_max=0.05)
        # Renewal before exp off: the server's 4001 at exp must bring the new token.
        client.tokens.renew_in = lambda: float("inf")  # type: ignore[method-assign]
        try:
            await client.start()
            await until(lambda: client.counters.connections >= 2, timeout=10)
            await until(lambda: client.connected)
            assert asked == 2 and client._fatal is None
        finally:
            await client.aclose()

    # A provider that keeps handing out the refused token: stop, do not hammer.
    async def same() -> str:
        return "refused-token"

    async with running_server(jwt_secret=SECRET) as srv:
        with pytest.raises(client_py.Unauthorized):
            async with client_py.connect(srv.url, token=same, connect_timeout=10):
                pass


async def test_the_http_api_takes_a_provider_and_retries_a_401_once() -> None:
    tokens = iter(["stale-token", mint(audience=None, admin=True)])

    async def provider() -> str:
        return next(tokens)

    async with running_server(jwt_secret=SECRET) as srv:
        source = TokenSource(provider)
        await source.renew()  # holds the stale one
        async with client_py.HttpApi(srv.url, source) as http:
            created = await http.create("made")
        assert created.transcript_id == "made"
        assert [i.transcript_id for i in await srv.hub.store.list()] == ["made"]


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (lambda: mint(audience=None, ttl=-60, admin=True), "expired"),
        (lambda: mint(audience=None, secret=OTHER_SECRET, admin=True), "signature"),
        (lambda: mint(audience=None, read=["other-*"]), "may not read"),
    ],
)
async def test_tail_refused_for_its_token_says_why(token: Any, says: str) -> None:
    """As the HTTP answer's detail does: expired, a bad signature, no right."""
    async with running_server(jwt_secret=SECRET) as srv:
        await srv.hub.writes.create("t")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "server.run.cli", "tail", "t",
            "--url", srv.url, "--token", token(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 1 and out == b""
        lines = err.decode().strip().splitlines()
        assert len(lines) == 1 and says in lines[0], lines
