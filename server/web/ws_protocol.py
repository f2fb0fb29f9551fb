"""uvicorn's sans-I/O WebSocket protocol with a raw frame write for the app.

``tsync serve`` runs uvicorn with this protocol class (``ws=``). It adds
four things to uvicorn's ``WebSocketsSansIOProtocol``:

- **Pre-framed delivery.** The connection's scope carries the protocol itself
  under the ASGI extension ``"tsync.raw_frames"`` (``RAW_FRAMES``). The app's
  outbound queue (``server.live.outbound``) then writes WebSocket frames it built
  itself (server frames are not masked: a header and the payload) straight to
  the transport, with no ASGI ``send``, no ``websockets`` framing and no
  writer-task wake-up per message. ``raw_ready()`` says whether a write may
  go out now: the handshake is done, no close was sent or received, and the
  transport is not paused (its buffer is under the high-water mark).
  Everything else (the handshake, pongs to the client's pings, the closing
  handshake) still goes through uvicorn and ``websockets``, and the
  keep-alive's pings are one pre-built frame; all are written whole, so
  frames never interleave: the app writes only whole frames (or whole
  fragments of a message, between which control frames may go).
  Under another ASGI server the extension is absent and the app sends
  through ASGI (``docs/architecture.md``).
- **Inbound limits.** A message must be complete within
  ``ws_message_timeout_s`` of its first byte (the clock stops while the app
  has not taken the previous message: that wait is the server's), else the
  connection is closed with 4010. The size limit is uvicorn's ``ws_max_size``
  (``ServerConfig.ws_hard_max_bytes``), counted in bytes across fragments.
  Fragments are counted too, since a fragment costs the parser and the
  message's list of parts the same whatever its size (an empty one
  included): a message in more than ``ws_max_fragments`` of them, or
  fragments arriving faster than ``ws_max_fragments_per_s``, close the
  connection with 1009. (4 million one-byte fragments once held 192 MB and
  slowed every other connection's pings to 455 ms for 25 s.)
- **Parsing in slices.** A socket read is parsed ``INBOUND_PARSE_SLICE_BYTES``
  at a time, and the loop runs once a turn took ``INBOUND_PARSE_TURN_S``
  (reading paused meanwhile), so that a read full of tiny frames never holds
  the loop for long.
- **Quiet invalid UTF-8.** A text message that is not UTF-8 closes the
  connection with 1007 and one log line (uvicorn logs a traceback each time).
- **Less held per connection.** uvicorn gives each connection an
  ``asyncio.Queue`` (three deques) for the app's ``receive`` and an
  ``asyncio.Event`` (a deque) for ``send``'s wait while the transport is
  paused, and keeps the handshake's request and response (their headers
  parsed twice over) for the connection's life. Here the two are
  ``Inbox`` and ``Writable`` (a list and a future made only while someone
  waits), and the request and response go once the handshake is answered:
  about 5 KiB less per idle connection (``docs/benchmarks.md``).
- **A cheaper keep-alive.** uvicorn's two timers, random payload and
  ``websockets`` frame per ping and connection give way to one timer for
  all the loop's connections (``server.web.keepalive``): a pre-built ping
  written raw to a connection the server has not both heard from and
  written to for about an interval (any inbound data is a sign of life),
  and a close with 1011, as uvicorn's, when nothing
  comes back within the timeout.
- **Fewer read pauses.** uvicorn stops reading the socket after each message
  until the app takes it; here reading stops once ``INBOUND_QUEUED_MESSAGES``
  messages (or one of ``INBOUND_PAUSE_BYTES``) wait, which spares two
  ``epoll_ctl`` calls per message and still bounds what a connection holds.

It relies on the internals of uvicorn's class (``frames``, ``read_paused``,
``close_sent``, ``handle_parser_exception``...): ``pyproject.toml`` holds
uvicorn to the series it was tested with, and the tests of the raw path and
of the inbound limits run against a real server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState

from protocol import codes
from server.live.outbound import RAW_FRAMES
from server.tuning import (
    INBOUND_PARSE_SLICE_BYTES,
    INBOUND_PARSE_TURN_S,
    INBOUND_PAUSE_BYTES,
    INBOUND_QUEUED_MESSAGES,
)
from server.web.keepalive import PING_FRAME, KeepAlive, keepalive_for

__all__ = ["RAW_FRAMES", "TsyncWebSocketProtocol", "protocol_class"]

log = logging.getLogger("tsync.ws")

#: What uvicorn's ``__init__`` sets for its own keep-alive, which this class
#: replaces (``start_keepalive``): let go with the handshake.
UVICORN_KEEPALIVE_STATE = (
    "ping_timer",
    "pong_timer",
    "pending_ping_payload",
    "ping_sent_at",
    "last_ping_rtt",
)


class TsyncWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol plus a raw frame write, a time
    limit per inbound message and a one-line log for invalid UTF-8."""

    # Our own state in slots: with it in the instance dict too (48 keys
    # instead of uvicorn's 37) even a compact copy of the dict
    # (``_forget_handshake``) needs the next table size, 1.6 KiB, not 0.8.
    __slots__ = (
        "_backlog",
        "_completed",
        "_fragment_time",
        "_fragment_tokens",
        "_fragments",
        "_holding",
        "_keepalive",
        "_message_timer",
        "_parsed",
        "_paused",
        "_raw_open",
        "_resumed",
        "keepalive_deadline",
        "keepalive_heard",
        "keepalive_quiet",
        "keepalive_slot",
        "keepalive_wrote",
    )

    #: Seconds a message may take from its first byte to its last; set by
    #: ``tsync serve`` (``ServerConfig.ws_message_timeout_s``; 0: no limit).
    message_timeout_s: float = 30.0
    #: Fragments one message may come in, and fragments per second a
    #: connection may send (``ServerConfig.ws_max_fragments`` and
    #: ``ws_max_fragments_per_s``; 0: no limit).
    max_fragments: int = 1024
    max_fragments_per_s: float = 4096.0

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # uvicorn's asyncio.Queue and asyncio.Event, without their deques.
        self.queue = Inbox()  # type: ignore[assignment]
        self.writable = Writable()  # type: ignore[assignment]
        #: Raw writes may go out (handshake done, no close, not paused).
        self._raw_open = False
        self._paused = False
        self._resumed: asyncio.Future[None] | None = None
        self._message_timer: asyncio.TimerHandle | None = None
        self._completed = False  # a message completed in this data_received
        #: What a socket read brought beyond the slice parsed so far.
        self._backlog = bytearray()
        self._parsed = 0  # bytes of the backlog parsed so far
        self._holding = False  # reading paused while the backlog is parsed
        #: Fragments of the message being received, and the fragment budget
        #: (a token bucket holding one second's worth).
        self._fragments = 0
        self._fragment_tokens = self.max_fragments_per_s
        self._fragment_time = self.loop.time()
        #: The loop's keep-alive while this connection is kept (after the
        #: handshake), and its state there (``server.web.keepalive.Keeper``).
        self._keepalive: KeepAlive | None = None
        self.keepalive_heard = self.keepalive_wrote = True
        self.keepalive_quiet = 0
        self.keepalive_deadline = 0
        self.keepalive_slot = 0

    # --- the raw frame write (used by server.live.outbound) -------------------------------

    def raw_ready(self) -> bool:
        """Whether a raw write goes out now (else queue it and wait)."""
        return self._raw_open and not self._paused

    def inbound_waiting(self) -> bool:
        """Whether messages from the client wait for the app to read them."""
        return not self.queue.empty()

    def raw_write(self, data: bytes) -> None:
        """Write whole, already framed WebSocket frames (call only when ready)."""
        self.keepalive_wrote = True
        self.transport.write(data)

    def raw_writelines(self, parts: Sequence[bytes | memoryview]) -> None:
        """Write one frame as its pieces: the transport keeps the buffers by
        reference (uvloop), so a baseline's shared chunk is never copied per
        connection (call only when ready)."""
        self.keepalive_wrote = True
        self.transport.writelines(parts)

    async def raw_writable(self) -> bool:
        """Wait until raw writes may go out; False once they never will."""
        while self._raw_open and self._paused:
            if self._resumed is None:
                self._resumed = self.loop.create_future()
            await asyncio.shield(self._resumed)
        return self._raw_open

    def raw_fail(self, code: int) -> None:
        """Close now with ``code`` (the outbound queue's 4008 for a client
        that does not read): the close frame goes behind what is written,
        and the app's ``receive`` returns the disconnect at once."""
        if self.close_sent or self.transport.is_closing() or not self.handshake_complete:
            return
        self._fail(code)

    def _raw_close(self) -> None:
        self._raw_open = False
        self._wake_writer()

    def _wake_writer(self) -> None:
        resumed, self._resumed = self._resumed, None
        if resumed is not None and not resumed.done():
            resumed.set_result(None)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._paused = True

    def resume_writing(self) -> None:
        super().resume_writing()
        self._paused = False
        self._wake_writer()

    # --- where the raw write opens and closes ------------------------------------------

    async def send(self, message: Any) -> None:
        self.keepalive_wrote = True
        kind = message["type"]
        if kind == "websocket.close":
            self._raw_close()
        await super().send(message)
        if kind == "websocket.accept" and self.handshake_complete and not self.close_sent:
            self._raw_open = not self.transport.is_closing()
        if self.handshake_complete:
            self._forget_handshake()

    def _forget_handshake(self) -> None:
        """The handshake is answered: uvicorn reads neither its request nor
        its response again, yet keeps both for the connection's life, and
        websockets' parser keeps the request (a local of its generator), so
        its headers are emptied rather than just let go. Once: later sends
        (the close) find nothing to do."""
        request = getattr(self, "request", None)
        if request is None:
            return
        request.headers.clear()
        self.request = self.response = None  # type: ignore[assignment]
        # uvicorn's per-connection keep-alive state: unused here (one timer
        # for all, server.web.keepalive).
        for name in UVICORN_KEEPALIVE_STATE:
            self.__dict__.pop(name, None)
        # Past ~30 attributes CPython gives an instance a dict table sized for
        # growth (1.6 KiB here); a copy is sized for what it holds (0.8 KiB).
        self.__dict__ = dict(self.__dict__)

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        if self.handshake_complete:  # refused by websockets: answered already
            self._forget_handshake()
        scope = getattr(self, "scope", None)
        if scope is not None:
            # The app's task is created but has not run yet.
            scope["extensions"][RAW_FRAMES] = self

    def handle_close(self, event: Any) -> None:
        self._raw_close()
        super().handle_close(event)

    def handle_parser_exception(self) -> None:
        self._raw_close()
        self._stop_message_timer()
        super().handle_parser_exception()

    # --- the keep-alive (server.web.keepalive: one timer for every connection) ----------

    def start_keepalive(self) -> None:
        # uvicorn calls this once the handshake's response is written.
        if self.ping_interval and self._keepalive is None:
            self._keepalive = keepalive_for(self.loop, self.ping_interval, self.ping_timeout)
            self._keepalive.add(self)

    def stop_keepalive(self) -> None:
        keepalive, self._keepalive = self._keepalive, None
        if keepalive is not None:
            keepalive.discard(self)

    def keepalive_listening(self) -> bool:
        return not (self.read_paused or self._holding)

    def keepalive_ping(self) -> bool:
        if self.close_sent or self.transport.is_closing():
            return False
        self.transport.write(PING_FRAME)
        return True

    def handle_pong(self, event: Any) -> None:
        # Any inbound data counts as the answer (``data_received`` noted it);
        # the payload is not compared and no timer is touched.
        pass

    def keepalive_timeout(self) -> None:
        self._raw_close()
        self.stop_keepalive()
        super().keepalive_timeout()

    def shutdown(self) -> None:
        self._raw_close()
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        self._raw_close()
        self._stop_message_timer()
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope["extensions"].pop(RAW_FRAMES, None)  # no cycle left to collect
        super().connection_lost(exc)

    # --- inbound: a time limit per message, quiet invalid UTF-8 ------------------------

    def data_received(self, data: bytes) -> None:
        self.keepalive_heard = True  # a sign of life (server.web.keepalive)
        if self._holding:
            # Still parsing an earlier read: this one waits behind it.
            self._backlog += data
            self.transport.pause_reading()
            return
        if len(data) <= INBOUND_PARSE_SLICE_BYTES or not self.handshake_complete:
            self._parse(data)
            return
        self._backlog += data
        self._holding = True
        self.transport.pause_reading()
        self._parse_backlog()

    def _parse_backlog(self) -> None:
        backlog = self._backlog
        turn_ends = time.perf_counter() + INBOUND_PARSE_TURN_S
        while self._parsed < len(backlog) and not self.transport.is_closing():
            start = self._parsed
            self._parsed = min(start + INBOUND_PARSE_SLICE_BYTES, len(backlog))
            self._parse(bytes(backlog[start : self._parsed]))
            if self._parsed < len(backlog) and time.perf_counter() > turn_ends:
                self.loop.call_soon(self._parse_backlog)
                return
        backlog.clear()
        self._parsed = 0
        self._holding = False
        if not self.read_paused and not self.transport.is_closing():
            self.transport.resume_reading()

    def _parse(self, data: bytes) -> None:
        self._completed = False
        super().data_received(data)
        if self.handshake_complete and not self.close_sent and self.message_timeout_s > 0:
            conn = self.conn
            # Part of a frame waits in the reader, or a fragmented message is open.
            partial = getattr(conn, "current_size", None) is not None or bool(conn.reader.buffer)
            if not partial or self._completed:
                # The clock runs from the first byte of the message now arriving.
                self._stop_message_timer()
            if partial and self._message_timer is None:
                self._message_timer = self.loop.call_later(
                    self.message_timeout_s, self._message_timed_out
                )

    # --- inbound: fragments ---------------------------------------------------------------

    def handle_text(self, event: Any) -> None:
        if not self.close_sent:
            self._fragments = 0
            if event.fin or self._fragment_allowed():
                super().handle_text(event)

    def handle_bytes(self, event: Any) -> None:
        if not self.close_sent:
            self._fragments = 0
            if event.fin or self._fragment_allowed():
                super().handle_bytes(event)

    def handle_cont(self, event: Any) -> None:
        if not self.close_sent and self._fragment_allowed():
            super().handle_cont(event)

    def _fragment_allowed(self) -> bool:
        """Count one fragment; False (and the connection closed with 1009)
        when the message or the second has too many."""
        self._fragments += 1
        if self.max_fragments and self._fragments > self.max_fragments:
            return self._too_many(f"a message in more than {self.max_fragments} fragments")
        rate = self.max_fragments_per_s
        if rate:
            now = self.loop.time()
            tokens = min(rate, self._fragment_tokens + (now - self._fragment_time) * rate)
            self._fragment_time = now
            if tokens < 1:
                return self._too_many(f"fragments faster than {rate:g} per second")
            self._fragment_tokens = tokens - 1
        return True

    def _too_many(self, what: str) -> bool:
        setting = "ws_max_fragments" if what.startswith("a message") else "ws_max_fragments_per_s"
        log.info(
            "closing a connection that sent %s (%s)",
            what,
            setting,
            extra={"peer": _peer(self.client), "code": codes.CLOSE_MESSAGE_TOO_BIG},
        )
        self.frames = []
        self._fail(codes.CLOSE_MESSAGE_TOO_BIG)
        return False

    def _stop_message_timer(self) -> None:
        if self._message_timer is not None:
            self._message_timer.cancel()
            self._message_timer = None

    def _message_timed_out(self) -> None:
        self._message_timer = None
        if self.close_sent or self.transport.is_closing():
            return
        if self.read_paused:
            # The app has not taken the previous message yet: reading is
            # paused by the server, not slowed by the client. Look again later.
            self._message_timer = self.loop.call_later(
                self.message_timeout_s, self._message_timed_out
            )
            return
        log.info(
            "closing a connection whose message did not complete in %gs",
            self.message_timeout_s,
            extra={"peer": _peer(self.client), "code": codes.CLOSE_MESSAGE_TIMEOUT},
        )
        self._fail(codes.CLOSE_MESSAGE_TIMEOUT)

    def _fail(self, code: int) -> None:
        """Close with ``code`` and its reason; the app hears of it as of a
        protocol error (a ``websocket.disconnect`` with the code)."""
        self.conn.fail(code, codes.CLOSES[code].reason)
        self.handle_parser_exception()

    def send_receive_event_to_app(self) -> None:
        # uvicorn's, with two changes: invalid UTF-8 is one log line, and
        # reading pauses only once several messages wait for the app (uvicorn
        # pauses after each one: two epoll_ctl calls per inbound message).
        self._completed = True
        data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
        self.frames = []
        if self.close_sent:
            return
        if self.curr_msg_data_type == "text":
            try:
                text = data.decode()
            except UnicodeDecodeError as exc:
                log.info(
                    "closing a connection that sent invalid UTF-8 (%s at byte %d)",
                    exc.reason,
                    exc.start,
                    extra={"peer": _peer(self.client), "code": codes.CLOSE_INVALID_DATA},
                )
                self._fail(codes.CLOSE_INVALID_DATA)
                return
            self.queue.put_nowait({"type": "websocket.receive", "text": text})
        else:
            self.queue.put_nowait({"type": "websocket.receive", "bytes": data})
        if not self.read_paused and (
            len(data) >= INBOUND_PAUSE_BYTES or self.queue.qsize() >= INBOUND_QUEUED_MESSAGES
        ):
            self.read_paused = True
            self.transport.pause_reading()


class Inbox:
    """What ``asyncio.Queue`` does for uvicorn's ``receive`` (``put_nowait``,
    ``get``, ``empty``, ``qsize``) for its one reader, the app: a list, and a
    future only while the app waits (a Queue holds three deques, ~2 KiB)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> Any:
        while not self._items:
            waiter = self._waiter
            if waiter is None or waiter.done():
                waiter = self._waiter = asyncio.get_running_loop().create_future()
            # One reader: if it is cancelled here, the future goes with it
            # and the next get makes another.
            await waiter
        self._waiter = None
        return self._items.pop(0)

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)


class Writable:
    """What ``asyncio.Event`` does for uvicorn's ``send`` (set while the
    transport takes data): a flag, and a future only while a send waits
    (an Event holds a deque, ~0.7 KiB, for every connection)."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = True
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> None:
        # As asyncio.Event: true once set, even if cleared again before the
        # waiter runs.
        if self._set:
            return
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._waiter)


def protocol_class(
    *, message_timeout_s: float, max_fragments: int = 1024, max_fragments_per_s: float = 4096.0
) -> type[TsyncWebSocketProtocol]:
    """The protocol class for uvicorn's ``ws=``, with this server's settings
    (uvicorn builds one instance per connection from the class alone)."""
    return type(
        "TsyncWebSocketProtocol",
        (TsyncWebSocketProtocol,),
        {
            "message_timeout_s": message_timeout_s,
            "max_fragments": max_fragments,
            "max_fragments_per_s": max_fragments_per_s,
            "__module__": __name__,
        },
    )


def _peer(client: tuple[str, int] | None) -> str | None:
    return f"{client[0]}:{client[1]}" if client else None
