"""A client that is done closes its WebSocket with 1000 (normal closure),
so that the server's log does not read as failures (issue "Third contact",
item 8: the Python client and ``tsync`` closed with 1011, internal error,
because leaving ``async with`` cancelled the runner inside ``async with ws``,
which closes with 1011 on an exception).

The server's own log line ("connection closed", with the code it got) is
what is checked: the ``async with client_py.connect(...)`` exit, and the
CLI's WebSocket commands (``verify``, ``stream``) as real processes.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

import client_py
from tests.support.servers import RunningServer, running_server
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(60)


def _closes(caplog: pytest.LogCaptureFixture) -> list[int]:
    return [
        r.code  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "tsync.ws" and r.getMessage() == "connection closed"
    ]


async def _all_closed(srv: RunningServer) -> None:
    await until(lambda: not srv.hub.subscriptions.connections, timeout=10)


async def test_leaving_async_with_closes_with_1000(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tsync.ws")
    async with running_server() as srv:
        async with client_py.connect(srv.url) as client:
            await client.create("bye", [{"role": "user", "content": "hi"}])
            mirror = await client.subscribe("bye")
            await client.append("bye", [{"role": "assistant", "content": "hello"}])
            await mirror.wait_for_revision(2, timeout=5)
        await _all_closed(srv)
        async with client_py.connect(srv.url):  # connected, nothing asked
            pass
        await _all_closed(srv)
    assert _closes(caplog) == [1000, 1000]


async def _tsync(srv: RunningServer, *argv: str, stdin: bytes | None = None) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "server.run.cli", *argv, "--url", srv.url,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(stdin), 30)
    assert proc.returncode == 0, (argv, out, err)


async def test_the_clis_websocket_commands_close_with_1000(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tsync.ws")
    async with running_server() as srv:
        async with client_py.HttpApi(srv.url) as api:
            await api.create("cli-bye", [{"role": "user", "content": "hi"}])
        await _tsync(srv, "stream", "cli-bye", stdin=b"It is 4.\n")
        await _all_closed(srv)
        await _tsync(srv, "verify", "cli-bye")
        await _all_closed(srv)
    assert _closes(caplog) == [1000, 1000]
