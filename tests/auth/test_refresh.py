"""Credentials that expire on an open WebSocket: refreshed before ``exp`` with
the ``auth`` op, the connection goes on; not refreshed, it is closed with
4001 at ``exp``; new credentials that allow less end the subscriptions they
no longer allow."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import websockets

from client_py.tokens import expiry_of
from protocol import wire
from server.config import ServerConfig
from tests.auth.conftest import SECRET, mint
from tests.support.servers import running_server
from tests.support.wsclient import RawClient

USER = {"role": "user", "content": "hi"}


def _config(**settings: Any) -> ServerConfig:
    return ServerConfig(store="memory", jwt_secret=SECRET, graceful_shutdown_s=2.0, **settings)


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def _closed_with(client: RawClient, timeout: float = 10.0) -> int | None:
    """Read until the server closes; its close code."""
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await client.recv(timeout)
    return client.ws.close_code


async def test_a_token_refreshed_before_exp_keeps_the_connection_and_one_not_is_closed_at_exp() -> (
    None
):
    async with running_server(_config(jwt_audience=None)) as srv:
        await srv.hub.writes.create("t")
        short = mint(audience=None, ttl=2, read=["t"], write=["t"])
        async with await RawClient.connect(srv.ws_url, additional_headers=_bearer(short)) as c:
            await c.send(op="subscribe", transcriptId="t")
            await c.expect(wire.Baseline)
            longer = mint(audience=None, ttl=600, read=["t"], write=["t"])
            await c.send(op="auth", token=longer, ref="renew")
            assert (await c.expect(wire.Pong)).ref == "renew"
            # Past the first token's exp, still connected and allowed.
            exp = expiry_of(short)
            assert exp is not None
            await asyncio.sleep(exp - time.time() + 0.2)  # a clock to pass, not a sync
            await c.send(op="append", transcriptId="t", messages=[USER], ref="a")
            frames = [await c.recv(), await c.recv()]
            assert {type(f) for f in frames} == {wire.Ack, wire.Increment}
        # Without a refresh: closed at exp with 4001, what it sent before still answered.
        expiring = mint(audience=None, ttl=1, read=["t"])
        began = time.monotonic()
        async with await RawClient.connect(srv.ws_url, additional_headers=_bearer(expiring)) as c:
            await c.send(op="ping", ref="p")
            assert (await c.expect(wire.Pong)).ref == "p"
            assert await _closed_with(c) == 4001
        assert time.monotonic() - began < 5
        # A refresh after exp is too late: the server already closed.


async def test_a_refresh_must_name_the_same_sub_and_a_refused_one_changes_nothing() -> None:
    async with running_server(_config()) as srv:
        await srv.hub.writes.create("t")
        alice = mint(read=["t"], audience=None)
        async with await RawClient.connect(srv.ws_url, additional_headers=_bearer(alice)) as c:
            for token in (mint("mallory", admin=True, audience=None), "nonsense", mint(ttl=-5)):
                await c.send(op="auth", token=token, ref="x")
                error = await c.expect(wire.ErrorFrame)
                assert (error.code, error.ref) == ("unauthorized", "x")
            # Still alice's rights, still connected.
            await c.send(op="subscribe", transcriptId="t")
            await c.expect(wire.Baseline)
            await c.send(op="append", transcriptId="t", messages=[USER], ref="w")
            assert (await c.expect(wire.ErrorFrame)).code == "forbidden"


async def test_new_credentials_that_no_longer_allow_reading_end_those_subscriptions() -> None:
    async with running_server(_config()) as srv:
        for tid in ("a", "b"):
            await srv.hub.writes.create(tid)
        both = mint(read=["a", "b"], audience=None)
        async with await RawClient.connect(srv.ws_url, additional_headers=_bearer(both)) as c:
            for tid in ("a", "b"):
                await c.send(op="subscribe", transcriptId=tid)
                await c.expect(wire.Baseline)
            await c.send(op="auth", token=mint(read=["a"], audience=None), ref="narrow")
            error = await c.expect(wire.ErrorFrame)
            assert (error.code, error.transcript_id) == ("forbidden", "b")
            assert (await c.expect(wire.Pong)).ref == "narrow"
            await srv.hub.writes.append("a", [USER])
            await srv.hub.writes.append("b", [USER])
            event = (await c.expect(wire.Increment)).event
            assert event.transcript_id == "a"
            assert await c.nothing_pending()


async def test_a_connection_without_credentials_authenticates_with_its_first_op() -> None:
    async with running_server(_config()) as srv:
        await srv.hub.writes.create("t")
        async with await RawClient.connect(srv.ws_url) as c:
            # exp is whole seconds (``mint`` truncates): 3 leaves the token at
            # least 2 s to be checked, which a loaded machine's 1 did not.
            await c.send(op="auth", token=mint(read=["t"], audience=None, ttl=3), ref=1)
            await c.send(op="subscribe", transcriptId="t")
            assert (await c.expect(wire.Pong)).ref == 1
            await c.expect(wire.Baseline)
            # Its exp holds as for a token given at the handshake.
            assert await _closed_with(c) == 4001
