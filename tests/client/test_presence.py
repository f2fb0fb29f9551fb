"""Presence through the Python client against a real in-process server:
``mirror.presence`` follows who joins, changes and leaves; a client states
its presence again after a reconnect; a state over 1 KiB is refused before
it is sent."""

from __future__ import annotations

import pytest

import client_py
from protocol.presence import PresenceCopy
from tests.support.servers import running_server

TIMEOUT = 10
FAST = {"presence_interval_s": 0.1}


def _who(presence: PresenceCopy) -> list[str]:
    return [m.who for m in presence.listed()]


async def test_mirror_presence_follows_joins_changes_and_leaves() -> None:
    async with (
        running_server(**FAST) as srv,
        client_py.connect(srv.ws_url) as ana,
        client_py.connect(srv.ws_url) as bo,
    ):
        await ana.create("p1")
        mirror = await ana.subscribe("p1", presence=True)
        assert mirror.presence is not None
        await ana.state_presence("p1", name="Ana", kind="writer")
        await mirror.wait_presence(lambda p: _who(p) == ["Ana"], TIMEOUT)
        await bo.subscribe("p1")
        await bo.state_presence("p1", name="Bo", state={"typing": True})
        presence = await mirror.wait_presence(lambda p: _who(p) == ["Ana", "Bo"], TIMEOUT)
        assert presence.listed()[1].state == {"typing": True}
        assert (presence.counts.writers, presence.counts.viewers) == (1, 1)
        await bo.state_presence("p1", state=None)  # cleared; the name is kept
        await mirror.wait_presence(lambda p: p.listed()[1].state == {}, TIMEOUT)
        assert _who(mirror.presence) == ["Ana", "Bo"]
        await bo.leave_presence("p1")
        await mirror.wait_presence(lambda p: _who(p) == ["Ana"], TIMEOUT)
        with pytest.raises(ValueError, match="1024 bytes"):
            await bo.state_presence("p1", state={"x": "y" * 2000})
        plain = await bo.subscribe("p1")
        assert plain.presence is None


async def test_presence_is_stated_again_after_a_reconnect() -> None:
    async with (
        running_server(**FAST) as srv,
        client_py.connect(srv.ws_url, backoff_min=0.01, backoff_max=0.05) as ana,
        client_py.connect(srv.ws_url) as watcher,
    ):
        await ana.create("p2")
        await ana.subscribe("p2", presence=True)
        await ana.state_presence("p2", name="Ana", state={"typing": True})
        mirror = await watcher.subscribe("p2", presence=True)
        await mirror.wait_presence(lambda p: _who(p) == ["Ana"], TIMEOUT)
        first = mirror.presence.listed()[0].id if mirror.presence else ""
        ws = ana._ws
        assert ws is not None
        await ws.close()  # the connection is lost: Ana leaves, then comes back
        await mirror.wait_presence(
            lambda p: _who(p) == ["Ana"] and p.listed()[0].id != first, TIMEOUT
        )
        assert mirror.presence is not None
        assert mirror.presence.listed()[0].state == {"typing": True}
        assert ana.counters.reconnects == 1
