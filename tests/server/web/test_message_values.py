"""Values one format cannot carry never get in (issue 23, item 1): refused
with ``invalid-message`` and their path on HTTP and on both WebSocket
subprotocols, on every store, and nothing accepted before them breaks.

A real server (127.0.0.1, ephemeral port) per store: memory, SQLite in a
temporary folder, and a private ``redis-server``.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from protocol.wire import Ack, Baseline, ErrorFrame, Increment
from server.config import ServerConfig
from tests.conftest import require_binary
from tests.support.redis_server import RedisServer
from tests.support.servers import RunningServer, running_server
from tests.support.wsclient import RawClient

BIG = 18446744073709551616  # 2**64: JSON carries it, MessagePack does not
PATH = "messages[0].metadata.n: integer out of range"


def with_n(value: Any) -> dict[str, Any]:
    return {"role": "user", "content": "x", "metadata": {"n": value}}


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = require_binary("redis-server")
    with RedisServer(binary, tmp_path_factory.mktemp("redis")) as server:
        yield server.url


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory"
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'data'}"
    url: str = request.getfixturevalue("redis_url")
    return f"{url}?prefix={request.node.name[-40:].replace('[', ':').replace(']', ':')}"


@contextlib.asynccontextmanager
async def serving(store_url: str) -> AsyncIterator[RunningServer]:
    async with running_server(ServerConfig(store=store_url, graceful_shutdown_s=2.0)) as srv:
        yield srv


async def test_http_refuses_with_the_path_and_creates_nothing(store_url: str) -> None:
    async with serving(store_url) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post("/v1/transcripts", json={"id": "b", "messages": [with_n(BIG)]})
        assert r.status_code == 422, r.text
        problem = r.json()
        assert (problem["code"], problem["detail"]) == ("invalid-message", PATH)
        assert (await http.get("/v1/transcripts/b")).status_code == 404
        r = await http.post("/v1/transcripts", json={"id": "b", "messages": [with_n(2**64 - 1)]})
        assert r.status_code == 201, r.text
        r = await http.post("/v1/transcripts/b/messages", json={"messages": [with_n(-(2**63) - 1)]})
        assert r.status_code == 422, r.text
        assert r.json()["detail"] == PATH
        # What was accepted reads back exactly, and exports.
        snapshot = (await http.get("/v1/transcripts/b")).json()
        assert snapshot["revision"] == 1
        assert snapshot["messages"][0]["metadata"] == {"n": 2**64 - 1}
        for export in ("export.lmml", "export.lmmlz"):
            assert (await http.get(f"/v1/transcripts/b/{export}")).status_code == 200


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
async def test_websocket_refuses_with_the_path_and_every_subscriber_goes_on(
    store_url: str, binary: bool
) -> None:
    async with serving(store_url) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as http:
            r = await http.post("/v1/transcripts", json={"id": "w", "messages": [with_n(1)]})
            assert r.status_code == 201, r.text
        async with (
            await RawClient.connect(srv.ws_url, binary=binary) as writer,
            await RawClient.connect(srv.ws_url) as json_reader,
            await RawClient.connect(srv.ws_url, binary=True) as msgpack_reader,
        ):
            for reader in (json_reader, msgpack_reader):
                await reader.send(op="subscribe", transcriptId="w")
                assert (await reader.expect(Baseline)).snapshot.revision == 1
            if not binary:  # (MessagePack cannot even write it)
                await writer.send(op="append", transcriptId="w", messages=[with_n(BIG)], ref="big")
                err = await writer.expect(ErrorFrame)
                assert (err.code, err.message, err.ref) == ("invalid-message", PATH, "big")
            else:
                # What only MessagePack can send: NaN, infinity, a non-string
                # key, bytes, a timestamp extension.
                refused = [
                    (float("nan"), "messages[0].metadata.n: not a finite number"),
                    (float("inf"), "messages[0].metadata.n: not a finite number"),
                    ({1: "a"}, "messages[0].metadata.n: object key 1 is not a string"),
                    (b"\x00", "messages[0].metadata.n: not a JSON value (bytes)"),
                    (
                        datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
                        "messages[0].metadata.n: not a JSON value (datetime)",
                    ),
                ]
                for i, (value, reason) in enumerate(refused):
                    batch = [with_n(value)]
                    await writer.send(op="append", transcriptId="w", messages=batch, ref=i)
                    err = await writer.expect(ErrorFrame)
                    assert (err.code, err.message, err.ref) == ("invalid-message", reason, i)
            await writer.send(op="append", transcriptId="w", messages=[with_n(-0.0)], ref="ok")
            ack = await writer.expect(Ack)
            assert (ack.ref, ack.revision) == ("ok", 2)
            # Both readers get revision 2, and nothing else came before it.
            for reader in (json_reader, msgpack_reader):
                increment = await reader.expect(Increment)
                assert increment.event.revision == 2
        async with httpx.AsyncClient(base_url=srv.url) as http:
            assert (await http.get("/v1/transcripts/w/export.lmml")).status_code == 200
