"""The WebSocket keep-alive of every connection of an event loop, on one timer.

uvicorn's keep-alive (``WebSocketsSansIOProtocol``) gives each connection two
timers per ping (``call_later`` for the next ping, ``call_later`` for its pong
deadline, a cancel when the pong comes), a random payload, a frame built by
``websockets`` and a payload compared on the pong. At 10,000 idle
connections and one ping each per 20 s that was 11 % of the server's profile
at 10,000 x 5 appends/s (``docs/benchmarks.md``, target 3). Here:

- **One timer for all.** The connections sit on a wheel of ``slices`` sets;
  one timer visits one set per tick, so each connection is looked at
  ``VISITS`` times per ping interval and a burst of connections made at once
  is spread round-robin over the sets (their pings too).
- **Any inbound data is an answer.** The connection sets its
  ``keepalive_heard`` flag on each socket read and ``keepalive_wrote`` on
  each write of the app's (one attribute store each). A connection both
  heard from and written to at every visit is alive and its proxies see
  traffic both ways: it is not pinged. One that went ``VISITS - 1`` visits
  in a row (between 3/4 and one interval) without both gets a ping, a
  pre-built empty ping frame written raw (server frames are not masked); if
  nothing at all comes back within the timeout it is closed with 1011, as
  uvicorn does. So an idle subscriber, or one that only receives, is pinged
  once per interval as before; a client that talks and is answered is not
  pinged at all; and a client that talks but is never answered (a draft
  streamed without ``ref``) still gets a frame from the server every
  interval, which a proxy's read timeout (nginx's ``proxy_read_timeout``)
  needs. The pong needs no matching: it is inbound data. A connection whose
  reading the server paused (the app is behind on its messages) cannot be
  heard and is not judged meanwhile.
- **Bounds.** A peer that goes silent at ``t`` is pinged by ``t + interval``
  and closed by ``t + interval + timeout`` (plus a tick, and whatever the loop
  is late by: time on the wheel passes only while the loop runs its timers,
  so a loop that stalled does not close connections whose pongs wait unread
  in the kernel).

``KeepAliveWheel`` is the bookkeeping, without I/O or a clock (a tick in,
the connections to ping and to close out); ``KeepAlive`` runs one on the
loop's timer, and ``keepalive_for`` finds or makes the one of a loop and
setting (dropped again when its last connection goes).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Final, Protocol

__all__ = [
    "MAX_SLICES",
    "PING_FRAME",
    "TICK_S",
    "VISITS",
    "KeepAlive",
    "KeepAliveWheel",
    "Keeper",
    "keepalive_for",
]

log = logging.getLogger("tsync.ws")

#: A ping with no payload, as a server sends it (FIN, opcode 9, unmasked,
#: length 0). Its pong carries no payload either: six bytes from the client.
PING_FRAME: Final = b"\x89\x00"
#: Visits of each connection per ping interval: a connection not both heard
#: from and written to at ``VISITS - 1`` visits in a row is pinged (so after
#: 3/4 to 1 interval).
VISITS: Final = 4
#: About how often the timer runs (one slice of the wheel per tick): a tenth
#: of a second keeps each tick's share of 10,000 connections small (a few
#: hundred visits, and their pings, spread evenly over the interval).
TICK_S: Final = 0.1
#: At most this many slices (a minute of ticks): a ping interval of an hour
#: ticks every 1.5 s rather than holding 9,000 sets.
MAX_SLICES: Final = 600


class Keeper(Protocol):
    """What the keep-alive needs of a connection (``TsyncWebSocketProtocol``)."""

    #: Set by the connection on every socket read; cleared by the visit.
    keepalive_heard: bool
    #: Set by the connection on every write of the app's; cleared by the visit.
    keepalive_wrote: bool
    #: Visits in a row that found it not both heard from and written to.
    keepalive_quiet: int
    #: The tick by which a ping must be answered; 0: no ping outstanding.
    keepalive_deadline: int
    #: The slice of the wheel the connection is on.
    keepalive_slot: int

    def keepalive_listening(self) -> bool:
        """False while the server itself does not read the socket (nothing
        can be heard, so silence means nothing)."""
        ...

    def keepalive_ping(self) -> bool:
        """Write a ping; False when the connection is closing (no ping went)."""
        ...

    def keepalive_timeout(self) -> None:
        """Close the connection: it did not answer in time (1011)."""
        ...


class KeepAliveWheel:
    """Which connections to ping and which to close, tick by tick; no I/O.

    ``tick()`` visits the next slice and expires the deadlines that fall on
    this tick; it returns the connections to ping (their deadline already
    set) and those to close. Call it every ``tick_s`` seconds."""

    __slots__ = (
        "deadlines",
        "interval_s",
        "next_slot",
        "size",
        "slices",
        "tick_s",
        "ticks",
        "timeout_s",
        "timeout_ticks",
        "wheel",
    )

    def __init__(self, interval_s: float, timeout_s: float | None) -> None:
        if interval_s <= 0:
            raise ValueError("the ping interval must be positive")
        self.interval_s = interval_s
        self.timeout_s = timeout_s or None
        revolution = interval_s / VISITS
        self.slices = max(1, min(MAX_SLICES, round(revolution / TICK_S)))
        self.tick_s = revolution / self.slices
        #: Ticks a ping may wait for an answer (0: no timeout, pings only).
        self.timeout_ticks = math.ceil(timeout_s / self.tick_s) if timeout_s else 0
        self.wheel: list[set[Keeper]] = [set() for _ in range(self.slices)]
        self.deadlines: dict[int, list[Keeper]] = {}
        self.ticks = 0
        self.next_slot = 0
        self.size = 0

    def add(self, conn: Keeper) -> None:
        """Start keeping ``conn`` alive (its handshake just completed)."""
        slot = self.next_slot
        self.next_slot = (slot + 1) % self.slices
        conn.keepalive_slot = slot
        conn.keepalive_heard = conn.keepalive_wrote = True
        conn.keepalive_quiet = 0
        conn.keepalive_deadline = 0
        wheel = self.wheel[slot]
        if conn not in wheel:
            wheel.add(conn)
            self.size += 1

    def discard(self, conn: Keeper) -> None:
        """Stop (the connection is gone or closing); a no-op if not kept."""
        wheel = self.wheel[conn.keepalive_slot % self.slices]
        if conn in wheel:
            wheel.remove(conn)
            self.size -= 1
        conn.keepalive_deadline = 0  # its entry in ``deadlines`` is skipped

    def tick(self) -> tuple[list[Keeper], list[Keeper]]:
        """One tick: (connections to ping now, connections to close now)."""
        self.ticks = tick = self.ticks + 1
        expired: list[Keeper] = []
        for conn in self.deadlines.pop(tick, ()):
            if conn.keepalive_deadline != tick:
                continue  # answered since, gone, or pinged again later
            conn.keepalive_deadline = 0
            if conn.keepalive_heard or not conn.keepalive_listening():
                continue
            expired.append(conn)
        ping: list[Keeper] = []
        last_quiet = VISITS - 1
        for conn in self.wheel[tick % self.slices]:
            heard, wrote = conn.keepalive_heard, conn.keepalive_wrote
            conn.keepalive_wrote = False
            if heard:
                conn.keepalive_heard = False
                conn.keepalive_deadline = 0
            elif conn.keepalive_deadline:
                continue  # its ping's deadline decides
            elif not conn.keepalive_listening():
                heard = True  # not read by the server: nothing to judge
            if heard and wrote:
                conn.keepalive_quiet = 0
            elif conn.keepalive_quiet + 1 < last_quiet:
                conn.keepalive_quiet += 1
            else:
                conn.keepalive_quiet = 0
                conn.keepalive_wrote = True  # the ping: the next visit sees a write
                ping.append(conn)
        if ping and self.timeout_ticks:
            deadline = tick + self.timeout_ticks
            for conn in ping:
                conn.keepalive_deadline = deadline
            self.deadlines.setdefault(deadline, []).extend(ping)
        return ping, expired


class KeepAlive:
    """A ``KeepAliveWheel`` on the loop's clock: one timer, running while
    any connection is kept. ``pings`` and ``timeouts`` count what it did."""

    __slots__ = ("_key", "_next_at", "_timer", "loop", "pings", "timeouts", "wheel")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, interval_s: float, timeout_s: float | None
    ) -> None:
        self.loop = loop
        self.wheel = KeepAliveWheel(interval_s, timeout_s)
        self.pings = 0
        self.timeouts = 0
        self._timer: asyncio.TimerHandle | None = None
        self._next_at = 0.0
        self._key: tuple[float, float | None] = (interval_s, timeout_s or None)

    def add(self, conn: Keeper) -> None:
        self.wheel.add(conn)
        if self._timer is None:
            self._next_at = self.loop.time()
            self._arm()

    def discard(self, conn: Keeper) -> None:
        self.wheel.discard(conn)
        if not self.wheel.size:
            self._stop()

    def _arm(self) -> None:
        # On the grid of ticks while the loop keeps up; a late tick is
        # followed by the next no sooner than half a tick later, so the
        # sockets are read in between (a pong that waited counts).
        tick_s = self.wheel.tick_s
        self._next_at = max(self._next_at + tick_s, self.loop.time() + tick_s / 2)
        self._timer = self.loop.call_at(self._next_at, self._tick)

    def _tick(self) -> None:
        self._timer = None
        ping, expired = self.wheel.tick()
        # One connection that fails here must not stop every other's
        # keep-alive (nor leave a deadline on a ping that never went).
        for conn in expired:
            self.timeouts += 1
            try:
                conn.keepalive_timeout()
            except Exception:
                log.exception("closing a connection that did not answer its ping failed")
        for conn in ping:
            try:
                sent = conn.keepalive_ping()
            except Exception:
                log.exception("writing a keep-alive ping failed")
                sent = False
            if sent:
                self.pings += 1
            else:
                conn.keepalive_deadline = 0
        if self.wheel.size:
            self._arm()
        else:
            self._stop()

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        keepers = _KEEPALIVES.get(self.loop)
        if keepers is not None and keepers.get(self._key) is self:
            del keepers[self._key]
            if not keepers:
                del _KEEPALIVES[self.loop]


#: The keep-alive of each loop and setting that has connections to keep.
_KEEPALIVES: dict[asyncio.AbstractEventLoop, dict[tuple[float, float | None], KeepAlive]] = {}


def keepalive_for(
    loop: asyncio.AbstractEventLoop, interval_s: float, timeout_s: float | None
) -> KeepAlive:
    """The keep-alive of ``loop`` for this interval and timeout (made on first
    use; forgotten once it keeps no connection, so a stopped server's loop is
    not held)."""
    key = (interval_s, timeout_s or None)
    keepers = _KEEPALIVES.setdefault(loop, {})
    keeper = keepers.get(key)
    if keeper is None:
        keeper = keepers[key] = KeepAlive(loop, interval_s, timeout_s)
    return keeper
