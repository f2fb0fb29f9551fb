"""The WebSocket keep-alive on one timer (``server.web.keepalive``).

The wheel's bookkeeping is driven tick by tick with stand-in connections (no
I/O, no clock); and the whole against a real server and real sockets: a peer that
stops answering is closed within interval + timeout (1011, as uvicorn
closed it), a live idle peer stays open, and one that talks is not pinged.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.uri import parse_uri

from server.web.keepalive import (
    MAX_SLICES,
    PING_FRAME,
    VISITS,
    KeepAlive,
    KeepAliveWheel,
    Keeper,
    keepalive_for,
)
from server.web.ws_protocol import UVICORN_KEEPALIVE_STATE, TsyncWebSocketProtocol
from tests.support.rawsocket import RawSocket
from tests.support.servers import RunningServer, running_server
from tests.support.waiting import until

# --- the wheel, tick by tick ------------------------------------------------------------


@dataclass(eq=False)
class Conn:
    """A connection as the wheel sees it."""

    keepalive_heard: bool = True
    keepalive_wrote: bool = True
    keepalive_quiet: int = 0
    keepalive_deadline: int = 0
    keepalive_slot: int = 0
    listening: bool = True

    def keepalive_listening(self) -> bool:
        return self.listening

    def keepalive_ping(self) -> bool:
        return True

    def keepalive_timeout(self) -> None:
        pass


def run(
    wheel: KeepAliveWheel,
    ticks: int,
    talk: frozenset[Conn] = frozenset(),
    answer: frozenset[Conn] = frozenset(),
) -> tuple[dict[Keeper, list[int]], dict[Keeper, int]]:
    """``ticks`` ticks; the ticks of each ping and the tick of each close, per
    connection. Connections in ``talk`` send something every tick, and those
    in ``answer`` are written to every tick."""
    pinged: dict[Keeper, list[int]] = {}
    closed: dict[Keeper, int] = {}
    for _ in range(ticks):
        for conn in talk:
            conn.keepalive_heard = True
        for conn in answer:
            conn.keepalive_wrote = True
        ping, expired = wheel.tick()
        for keeper in ping:
            pinged.setdefault(keeper, []).append(wheel.ticks)
        for keeper in expired:
            closed[keeper] = wheel.ticks
            wheel.discard(keeper)
    return pinged, closed


def test_a_silent_connection_is_pinged_within_an_interval_and_closed_after_the_timeout() -> None:
    wheel = KeepAliveWheel(interval_s=2.0, timeout_s=1.0)
    per_interval = round(2.0 / wheel.tick_s)
    conn = Conn()
    wheel.add(conn)
    pinged, closed = run(wheel, 4 * per_interval)
    # Heard at the handshake; silent from there: pinged within an interval
    # and at least 3/4 of one later, closed a timeout after the ping.
    (first,) = pinged[conn]
    assert (VISITS - 1) / VISITS * per_interval <= first <= per_interval + 1
    assert closed[conn] == first + wheel.timeout_ticks
    assert wheel.timeout_ticks * wheel.tick_s >= 1.0
    assert wheel.size == 0


def test_an_answered_ping_keeps_the_connection_and_the_next_comes_an_interval_later() -> None:
    wheel = KeepAliveWheel(interval_s=2.0, timeout_s=1.0)
    per_interval = round(2.0 / wheel.tick_s)
    conn = Conn()
    wheel.add(conn)
    pings: list[int] = []
    for _ in range(6 * per_interval):
        ping, expired = wheel.tick()
        assert not expired
        if ping:
            pings.append(wheel.ticks)
            conn.keepalive_heard = True  # the pong
    gaps = {b - a for a, b in itertools.pairwise(pings)}
    assert len(pings) >= 5 and gaps == {per_interval}


def test_who_is_pinged_and_closed() -> None:
    wheel = KeepAliveWheel(interval_s=1.0, timeout_s=0.5)
    per_interval = round(1.0 / wheel.tick_s)
    talking, unanswered, receiving, unread, silent = (
        Conn(),
        Conn(),
        Conn(),
        Conn(listening=False),
        Conn(),
    )
    for conn in (talking, unanswered, receiving, unread, silent):
        wheel.add(conn)
    pinged, closed = run(
        wheel,
        10 * per_interval,
        talk=frozenset({talking, unanswered}),
        answer=frozenset({talking, receiving, unread}),
    )
    # Talks and is answered: alive, and its proxies see traffic both ways.
    assert talking not in pinged
    # Talks and is never written to: a ping every interval all the same (a
    # proxy's read timeout needs the server to send something).
    assert len(pinged[unanswered]) >= 9
    # Only receives, and never answers the ping: closed like the silent one.
    assert receiving in pinged and set(closed) == {receiving, silent}
    # Not read by the server (and written to): nothing to judge.
    assert unread not in pinged and unread not in closed


def test_connections_made_at_once_are_spread_over_the_interval() -> None:
    wheel = KeepAliveWheel(interval_s=20.0, timeout_s=20.0)
    conns = [Conn() for _ in range(10_000)]
    for conn in conns:
        wheel.add(conn)
    assert wheel.slices == 50 and abs(wheel.tick_s - 0.1) < 1e-9
    per_tick = [len(ping) for ping, _ in (wheel.tick() for _ in range(wheel.slices * VISITS))]
    # Every connection pinged once, a slice's share per tick, not all at once.
    assert sum(per_tick) == 10_000 and max(per_tick) == 10_000 // wheel.slices


def test_a_long_interval_ticks_less_often_rather_than_holding_more_slices() -> None:
    wheel = KeepAliveWheel(interval_s=3600.0, timeout_s=20.0)
    assert wheel.slices == MAX_SLICES and wheel.tick_s == 3600.0 / VISITS / MAX_SLICES
    assert wheel.timeout_ticks * wheel.tick_s >= 20.0
    short = KeepAliveWheel(interval_s=0.2, timeout_s=0.3)
    assert short.slices == 1 and short.tick_s == 0.05 and short.timeout_ticks == 6


def test_a_later_ping_is_not_cut_short_by_an_earlier_deadline() -> None:
    # A timeout longer than the interval: the deadline of an answered ping
    # is still pending when the next ping goes; only the new one counts.
    wheel = KeepAliveWheel(interval_s=1.0, timeout_s=3.0)
    conn = Conn()
    wheel.add(conn)
    per_interval = round(1.0 / wheel.tick_s)
    answered = 0
    for _ in range(8 * per_interval):
        ping, expired = wheel.tick()
        if ping and answered < 2:
            answered += 1
            conn.keepalive_heard = True
        if expired:
            break
    # Two pings answered, the third not: closed its full timeout after it.
    third_ping = wheel.ticks - wheel.timeout_ticks
    assert expired == [conn] and answered == 2
    assert third_ping > 2 * per_interval


class Failing(Conn):
    def keepalive_ping(self) -> bool:
        raise OSError("the transport broke")


@dataclass(eq=False)
class Counted(Conn):
    pinged: asyncio.Event | None = None
    count: int = 0

    def keepalive_ping(self) -> bool:
        self.count += 1
        assert self.pinged is not None
        if self.count >= 3:
            self.pinged.set()
        self.keepalive_heard = True  # answers at once
        return True


async def test_one_connection_failing_does_not_stop_the_others_keepalive(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keepalive = KeepAlive(asyncio.get_running_loop(), interval_s=0.08, timeout_s=0.05)
    good = Counted(pinged=asyncio.Event())
    keepalive.add(Failing())
    keepalive.add(good)
    try:
        async with asyncio.timeout(5):
            await good.pinged.wait()  # type: ignore[union-attr]
    finally:
        for conn in list(keepalive.wheel.wheel[0] | keepalive.wheel.wheel[-1]):
            keepalive.discard(conn)
    assert good.count >= 3 and keepalive.pings >= 3
    assert "writing a keep-alive ping failed" in caplog.text


# --- a pong needs no parsing --------------------------------------------------------------


def open_protocol() -> ServerProtocol:
    conn = ServerProtocol()
    conn.state = State.OPEN
    conn.parser = conn.parse()
    next(conn.parser)
    return conn


def masked(opcode: Opcode, data: bytes, *, fin: bool = True) -> bytes:
    return Frame(opcode, data, fin=fin).serialize(mask=True, extensions=[])


# --- on the wire ----------------------------------------------------------------------------

INTERVAL_S = 0.4
TIMEOUT_S = 0.3


def pings(frames: list[Frame]) -> int:
    return sum(f.opcode is Opcode.PING for f in frames)


@asynccontextmanager
async def peer() -> AsyncIterator[tuple[RunningServer, RawSocket]]:
    """A server pinging every ``INTERVAL_S`` and one raw WebSocket to it
    (aborted at the end), which answers nothing unless told to."""
    async with running_server(ping_interval_s=INTERVAL_S, ping_timeout_s=TIMEOUT_S) as srv:
        raw = await RawSocket.connect(srv.ws_url)
        try:
            yield srv, raw
        finally:
            raw.abort()


async def test_a_peer_that_stops_answering_is_closed_within_interval_plus_timeout() -> None:
    # Reads everything and answers nothing (RawSocket.read never sends).
    async with peer() as (srv, raw):
        silent_from = time.monotonic()
        frames = await raw.read(timeout=5 * (INTERVAL_S + TIMEOUT_S))
        took = time.monotonic() - silent_from
        raw.abort()  # (again at the end: aborting is idempotent)
        assert raw.proto is not None and raw.proto.close_rcvd is not None
        assert (raw.proto.close_rcvd.code, raw.proto.close_rcvd.reason) == (
            1011,
            "keepalive ping timeout",
        )
        assert pings(frames) == 1 and frames[0].data == b""
        # Pinged after 3/4 of an interval of silence at least, closed a
        # timeout later: within interval + timeout (plus a margin for a busy
        # machine's late timers).
        assert 0.75 * INTERVAL_S + TIMEOUT_S - 0.05 <= took <= INTERVAL_S + TIMEOUT_S + 0.5
        await until_gone(srv)


async def test_a_peer_that_reads_nothing_is_closed_and_its_keepalive_let_go() -> None:
    async with peer() as (srv, _):  # whose peer never reads
        (protocol,) = srv.server.server_state.connections
        assert isinstance(protocol, TsyncWebSocketProtocol)
        # uvicorn's own keep-alive state is let go with the handshake.
        assert not set(UVICORN_KEEPALIVE_STATE) & set(vars(protocol))
        keepalive = keepalive_for(asyncio.get_running_loop(), INTERVAL_S, TIMEOUT_S)
        assert keepalive.wheel.size == 1
        timeouts = keepalive.timeouts
        await until_gone(srv, timeout=INTERVAL_S + TIMEOUT_S + 2)
        assert keepalive.timeouts == timeouts + 1 and keepalive.wheel.size == 0


async def test_a_live_idle_peer_stays_open_over_several_intervals() -> None:
    async with peer() as (_, raw):
        # Answer each ping (the client protocol queued its pong) and
        # send nothing else, until five pings came: over 4 intervals.
        async with asyncio.timeout(10 * INTERVAL_S):
            while pings(raw.frames) < 5:
                seen = len(raw.frames)
                await raw.read(until=lambda frames, seen=seen: len(frames) > seen)
                raw.flush()
                assert raw.proto is not None and raw.proto.close_rcvd is None
        assert all(f.opcode is Opcode.PING for f in raw.frames)
        raw.send_op(op="ping", ref="still-here")
        frames = await raw.read(until=lambda frames: frames[-1].opcode is Opcode.TEXT)
        assert b'"still-here"' in frames[-1].data


async def test_a_peer_that_talks_more_often_than_the_interval_is_not_pinged() -> None:
    async with peer() as (srv, raw):
        # An op every third of an interval, for four intervals; between
        # two, read whatever comes.
        for ref in range(12):
            raw.send_op(op="ping", ref=ref)
            await raw.read(timeout=INTERVAL_S / 3)
        assert raw.proto is not None and raw.proto.close_rcvd is None
        assert pings(raw.frames) == 0
        answers = [f for f in raw.frames if f.opcode is Opcode.TEXT]
        assert len(answers) == 12
        assert len(srv.server.server_state.connections) == 1


async def until_gone(srv: RunningServer, timeout: float = 5.0) -> None:
    """Until the server holds no connection (the client's is closed)."""
    await until(lambda: not srv.server.server_state.connections, timeout)


def test_our_ping_is_what_a_client_library_answers_with_a_bare_pong() -> None:
    client = ClientProtocol(parse_uri("ws://x/"))
    client.state = State.OPEN
    client.parser = client.parse()
    next(client.parser)
    client.receive_data(PING_FRAME)
    (frame,) = client.events_received()
    assert (frame.opcode, frame.data) == (Opcode.PING, b"")
    (pong,) = client.data_to_send()
    assert len(pong) == 6 and pong[:2] == b"\x8a\x80"  # an empty masked pong
