"""transcript-sync's load-test scenarios as Locust users: a locustfile.

Run it as it is (Locust is the optional ``locust`` extra)::

    locust -f "$(python -c 'import client_py.locust as m; print(m.__file__)')" \\
        --host http://127.0.0.1:8000

Each user holds one WebSocket connection (``/v1/ws``):

- ``Subscriber`` follows ``--tsync-follow`` of the run's transcripts (all of
  them by default) and reports every message delivered as a request of type
  ``DELIVER`` named ``subscriber``: response time = append-to-delivery
  latency, length = the bytes of the WebSocket message that carried it
  (shared out when it carried several); draft tokens likewise as ``TOKEN``.
  Every second it pings: ``PING`` is that round trip, and the pong's
  ``seq`` reveals a frame lost at the end of the stream.
- ``Writer`` appends one message of ``--tsync-size`` bytes at ``--tsync-rate``
  appends/s to one transcript, open loop (each append leaves when it is due,
  whether or not the last one was acked); ``ACK`` ``writer`` is the time to
  its ack.
- ``DraftStreamer`` streams drafts of ``--tsync-tokens`` tokens at
  ``--tsync-rate`` tokens/s and commits each (``ACK`` ``drafts``); the
  subscribers of its transcript report each token.
- ``ChatRoomUser`` is both on one connection: it follows one room and
  appends to it (``DELIVER`` and ``ACK`` named ``chatroom``).

Pick some with Locust's positional arguments (``Subscriber Writer``) or its
class picker. Transcripts are ``--tsync-prefix``-0 .. -(N-1) for
``--tsync-transcripts`` N; each user creates those it uses (``POST
/v1/transcripts``, a ``409`` means another user did).

Continuity is checked as ``tsync bench`` checks it, on every connection, by
the sans-I/O consumer core (``protocol.consumer``) inside
``client_py.bench.deliveries.ConnectionCheck``: a ``seq`` gap, revision gap,
repeat, reorder, ``lagged``, rebaseline, invalid or foreign frame is a
failure of type ``CONTINUITY`` named after the user and what happened
(``subscriber: seq gap``), and Locust then exits with
``--exit-code-on-error`` (1 by default; 1 too when that is 0). The core does no I/O and needs
nothing from this module but bytes in and ops out: ``_Link`` below is the
whole driver, a blocking ``websockets.sync`` connection that gevent's
patched sockets and threads make cooperative.

Latency across machines: a delivery's latency is the subscriber's wall clock
minus the writer's, read when the append was due and carried in the
message. When both ran on one machine (any process or container on one
kernel) that is one clock; a delivery from a writer on another machine is
reported under the name with ``[2 clocks]`` appended, and its latency is
exact only as far as the two machines' clocks agree (keep them in NTP
sync). ``ACK`` and ``PING`` are round trips on one clock, always exact.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import gevent
import websockets
from gevent.event import Event
from locust import User, events, task
from locust.argument_parser import LocustArgumentParser
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import WorkerRunner
from websockets.sync.client import ClientConnection, connect

from client_py.bench.deliveries import (
    ACK,
    CONTINUITY,
    PING,
    ConnectionCheck,
    Sample,
    append_op,
    clock_id,
    commit_op,
    draft_id_for,
    draft_op,
)
from client_py.bench.draftcheck import token
from protocol import wire

__all__ = ["ChatRoomUser", "ContinuityError", "DraftStreamer", "Subscriber", "Writer"]

log = logging.getLogger("tsync.locust")

#: This machine's clock, as the messages written here carry it.
CLOCK: Final = clock_id()
PING_INTERVAL_S: Final = 1.0
#: Locust request type of opening a connection (its handshake's time).
CONNECT: Final = "CONNECT"
#: An append not answered after this long is a failure (``no answer``).
ANSWER_TIMEOUT_S: Final = 10.0
RECONNECT_DELAY_S: Final = 1.0

_users = itertools.count()  # numbers the users of this process
_created: set[str] = set()  # transcripts this process created (or found)


class ContinuityError(Exception):
    """A delivery broke the stream's continuity (a Locust failure)."""


class RequestFailed(Exception):
    """An op of ours was refused or never answered, or a connection or a
    transcript could not be made (a Locust failure)."""


# --- options (Locust custom arguments: they show in its web UI) -------------------------


def _arguments(parser: LocustArgumentParser) -> None:
    parser.add_argument(
        "--tsync-transcripts", type=int, default=1, help="transcripts in the run (default 1)"
    )
    parser.add_argument(
        "--tsync-rate",
        type=float,
        default=2.0,
        help="appends/s per writer and chat-room user; tokens/s per draft streamer (default 2)",
    )
    parser.add_argument(
        "--tsync-size", type=int, default=200, help="bytes per appended message (default 200)"
    )
    parser.add_argument(
        "--tsync-token",
        default="",
        is_secret=True,
        help="bearer token for the server (TSYNC_TOKEN or a JWT); none by default",
    )
    parser.add_argument(
        "--tsync-follow",
        type=int,
        default=0,
        help="transcripts each subscriber follows (default 0: all of them)",
    )
    parser.add_argument("--tsync-tokens", type=int, default=20, help="tokens per draft")
    parser.add_argument(
        "--tsync-prefix", default="locust", help="transcript ids are PREFIX-0, PREFIX-1, ..."
    )
    parser.add_argument(
        "--tsync-ws-url",
        default="",
        help="the WebSocket URL when it is not HOST/v1/ws (a proxy in front of the server)",
    )


events.init_command_line_parser.add_listener(_arguments)  # type: ignore[no-untyped-call]


class Options:
    """The ``--tsync-*`` options of a run (as the master sent them to a worker)."""

    def __init__(self, environment: Environment, host: str | None) -> None:
        parsed: Any = environment.parsed_options
        self.transcripts = max(1, int(getattr(parsed, "tsync_transcripts", 1)))
        self.rate = float(getattr(parsed, "tsync_rate", 2.0))
        self.size = max(1, int(getattr(parsed, "tsync_size", 200)))
        self.token = str(getattr(parsed, "tsync_token", "") or "")
        self.follow = int(getattr(parsed, "tsync_follow", 0))
        self.tokens = max(1, int(getattr(parsed, "tsync_tokens", 20)))
        self.prefix = str(getattr(parsed, "tsync_prefix", "locust"))
        if self.rate <= 0:
            raise ValueError("--tsync-rate must be positive")
        if not host:
            raise ValueError("no server: give --host http://HOST:PORT")
        self.http_url, self.ws_url = _urls(host)
        ws_url = str(getattr(parsed, "tsync_ws_url", "") or "")
        if ws_url:
            self.ws_url = ws_url

    def transcript(self, index: int) -> str:
        return f"{self.prefix}-{index % self.transcripts}"

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"} if self.token else {}


def _urls(host: str) -> tuple[str, str]:
    """``--host`` (``http(s)://`` or ``ws(s)://``) -> (HTTP base, WebSocket URL)."""
    parts = urlsplit(host.rstrip("/"))
    http = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    ws = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if http not in ("http", "https"):
        raise ValueError(f"--host {host!r}: expected http://HOST:PORT")
    return (
        urlunsplit((http, parts.netloc, "", "", "")),
        urlunsplit((ws, parts.netloc, "/v1/ws", "", "")),
    )


# --- the driver: one connection on gevent ----------------------------------------------


class _Link:
    """One WebSocket connection moving bytes between the server and a
    ``ConnectionCheck`` (the consumer core inside it): a reader greenlet
    hands every message in, sends the ops the core asks for, reports the
    samples; the user's greenlet sends its own ops with ``send``. A lost
    connection is a failure, and the link connects again (the core then
    resumes every subscription from its copy's revision)."""

    def __init__(self, user: TsyncUser, check: ConnectionCheck) -> None:
        self.user = user
        self.check = check
        self.ws: ClientConnection | None = None
        self.up = Event()
        self._stack = ExitStack()
        self._stop = Event()
        self._reader: gevent.Greenlet[Any, Any] | None = None

    def open(self) -> None:
        """Connect (``StopUser`` when the server cannot be reached) and start reading."""
        if not self._connect():
            raise StopUser()
        self._reader = gevent.spawn(self._run)

    def _connect(self) -> bool:
        """Open a connection, reported as ``CONNECT``: the handshake's time, or why not."""
        options = self.user.options
        started = time.perf_counter()
        failure = None
        try:
            self.ws = self._stack.enter_context(
                connect(
                    options.ws_url,
                    subprotocols=[wire.SUBPROTOCOL_JSON],  # type: ignore[list-item]
                    additional_headers=options.headers,
                    compression=None,
                    max_size=None,
                    open_timeout=30,
                    close_timeout=2,
                )
            )
        except (OSError, websockets.InvalidHandshake, TimeoutError) as exc:
            failure = f"{type(exc).__name__}: {exc}"
        elapsed_ms = (time.perf_counter() - started) * 1000
        self.user.report([Sample(CONNECT, self.user.scenario, elapsed_ms, 0, failure)])
        if failure is not None:
            return False
        self.check.connection_made()
        self._send_ops()
        self.up.set()
        return True

    def send(self, op: bytes) -> bool:
        """Send one op; False when the connection is down (it is being repaired)."""
        ws = self.ws
        if ws is None or not self.up.is_set():
            return False
        try:
            ws.send(op, text=True)
        except websockets.ConnectionClosed:
            return False
        return True

    def close(self) -> None:
        self._stop.set()
        self._stack.close()
        if self._reader is not None:
            self._reader.kill(block=True, timeout=5)

    def _send_ops(self) -> None:
        ws = self.ws
        assert ws is not None
        try:
            for op in self.check.ops_to_send():
                ws.send(op, text=True)
        except websockets.ConnectionClosed:
            pass  # the reader sees the loss; the next connection resends what is needed

    def _run(self) -> None:
        while not self._stop.is_set():
            ws = self.ws
            assert ws is not None
            reason = "closed by the server"
            try:
                for message in ws:
                    samples = self.check.receive(message, time.time_ns(), time.perf_counter_ns())
                    self._send_ops()
                    self.user.report(samples)
            except websockets.ConnectionClosed as exc:
                reason = str(exc)
            except OSError as exc:
                reason = f"{type(exc).__name__}: {exc}"
            if self._stop.is_set():
                return
            self.up.clear()
            self.user.report([self.check.connection_lost(reason)])
            self._stack.close()
            while not self._stop.is_set():
                gevent.sleep(RECONNECT_DELAY_S)
                if self._connect():
                    break


# --- users -------------------------------------------------------------------------------


class TsyncUser(User):
    """What every transcript-sync user has: its options, one connection and
    its check, and the way samples become Locust requests."""

    abstract = True
    #: The name of its samples (``subscriber: seq gap``, ``DELIVER subscriber``).
    scenario = "tsync"

    def on_start(self) -> None:
        runner = self.environment.runner
        self.number = next(_users) + int(getattr(runner, "worker_index", 0))
        try:
            self.options = Options(self.environment, self.host)
        except ValueError as exc:
            log.error("%s", exc)
            raise StopUser() from exc
        self.check = ConnectionCheck(self.scenario, clock=CLOCK)
        self.link = _Link(self, self.check)
        self._refs = itertools.count(1)

    def on_stop(self) -> None:
        link = getattr(self, "link", None)
        if link is not None:
            link.close()

    def report(self, samples: list[Sample]) -> None:
        fire = self.environment.events.request.fire
        for sample in samples:
            exception: Exception | None = None
            if sample.failure is not None:
                cls = ContinuityError if sample.kind == CONTINUITY else RequestFailed
                exception = cls(sample.failure)
                if sample.detail:
                    log.warning("%s: %s", sample.name, sample.detail)
            fire(
                request_type=sample.kind,
                name=sample.name,
                response_time=sample.response_time_ms,
                response_length=sample.length,
                exception=exception,
                context={},
            )

    def ensure(self, transcript_id: str) -> None:
        """Create ``transcript_id`` unless this process did already (409: someone did)."""
        if transcript_id in _created:
            return
        options = self.options
        body = json.dumps({"id": transcript_id}).encode()
        request = urllib.request.Request(
            options.http_url + "/v1/transcripts",
            data=body,
            method="POST",
            headers={"content-type": "application/json", **options.headers},
        )
        started = time.perf_counter()
        failure: Exception | None = None
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            if exc.code != 409:
                failure = RequestFailed(f"HTTP {exc.code}: {exc.read()[:200]!r}")
        except OSError as exc:
            failure = RequestFailed(f"{type(exc).__name__}: {exc}")
        self.environment.events.request.fire(
            request_type="POST",
            name="/v1/transcripts",
            response_time=(time.perf_counter() - started) * 1000,
            response_length=len(body),
            exception=failure,
            context={},
        )
        if failure is not None:
            raise StopUser()
        _created.add(transcript_id)

    def append(self, op_for_ref: Callable[[int], bytes], kind: str = ACK) -> None:
        """Send an op made by ``op_for_ref(ref)``; its answer is reported as
        ``kind`` (``ACK``, ``PING``) under the user's ``scenario``."""
        ref = next(self._refs)
        self.check.sent(ref, time.perf_counter_ns(), self.scenario, kind)
        if not self.link.send(op_for_ref(ref)):
            self.check.forget(ref)

    def check_answers(self) -> None:
        """Report the ops unanswered for ``ANSWER_TIMEOUT_S`` as failures."""
        self.report(self.check.overdue(time.perf_counter_ns(), int(ANSWER_TIMEOUT_S * 1e9)))


class _Paced(TsyncUser):
    """A user whose task runs at ``--tsync-rate`` on a fixed schedule (open
    loop: the next one is due at start + n / rate, however long the last one
    took to be answered)."""

    abstract = True

    def on_start(self) -> None:
        super().on_start()
        self._due = time.monotonic()
        self._due_wall_ns = time.time_ns()
        self._interval = 1.0 / self.options.rate

    def wait_time(self) -> float:
        return max(0.0, self._due - time.monotonic())

    def next_due(self) -> int:
        """The wall-clock time (ns) the op being sent was due; moves the schedule on."""
        due_ns = self._due_wall_ns
        self._due += self._interval
        self._due_wall_ns += int(self._interval * 1e9)
        return due_ns


class Subscriber(TsyncUser):
    """Follows transcripts; reports deliveries, tokens and continuity failures."""

    scenario = "subscriber"

    def on_start(self) -> None:
        super().on_start()
        options = self.options
        count = options.follow if 0 < options.follow < options.transcripts else options.transcripts
        for k in range(count):
            transcript_id = options.transcript(self.number + k)
            self.ensure(transcript_id)
            self.check.subscribe(transcript_id)
        self.link.open()

    def wait_time(self) -> float:
        return PING_INTERVAL_S

    @task
    def ping(self) -> None:
        self.append(lambda ref: wire.encode_json(wire.Ping(ref=ref)), PING)
        self.check_answers()


class Writer(_Paced):
    """Appends to one transcript at ``--tsync-rate``; ``ACK writer`` per append."""

    scenario = "writer"
    #: Whether it follows the transcript it writes to, on the same connection.
    follows = False

    def on_start(self) -> None:
        super().on_start()
        self.transcript_id = self.options.transcript(self.number)
        self.ensure(self.transcript_id)
        if self.follows:
            self.check.subscribe(self.transcript_id)
        self.link.open()

    @task
    def write(self) -> None:
        sent_ns = self.next_due()
        tid, size = self.transcript_id, self.options.size
        self.append(lambda ref: append_op(tid, ref, size, sent_ns, CLOCK))
        self.check_answers()


class ChatRoomUser(Writer):
    """Follows one room and talks in it: ``DELIVER chatroom`` for every
    message in the room (its own too), ``ACK chatroom`` for its appends."""

    scenario = "chatroom"
    follows = True


class DraftStreamer(_Paced):
    """Streams drafts token by token at ``--tsync-rate`` tokens/s and commits
    each after ``--tsync-tokens`` tokens (``ACK drafts``)."""

    scenario = "drafts"

    def on_start(self) -> None:
        super().on_start()
        self.transcript_id = self.options.transcript(self.number)
        self.ensure(self.transcript_id)
        self.link.open()
        self._drafts = itertools.count()
        self._draft = ""
        self._parts: list[str] = []

    @task
    def stream(self) -> None:
        due_ns = self.next_due()
        if not self._draft:
            self._draft = draft_id_for(CLOCK, f"{self.number}", next(self._drafts))
            self._parts = []
        if self.link.send(draft_op(self.transcript_id, self._draft, due_ns)):
            self._parts.append(token(due_ns))
        if len(self._parts) >= self.options.tokens:
            self._commit()
        self.check_answers()

    def _commit(self) -> None:
        tid, draft_id, text = self.transcript_id, self._draft, "".join(self._parts)
        sent_ns = time.time_ns()
        self.append(lambda ref: commit_op(tid, ref, draft_id, text, sent_ns, CLOCK))
        self._draft = ""

    def on_stop(self) -> None:
        if getattr(self, "_parts", None) and self._draft:
            self._commit()  # a draft left open would expire: its subscribers' failure
        super().on_stop()


def _clock_note(environment: Environment, **_: Any) -> None:
    log.info(
        "tsync: latencies of deliveries from writers on this machine use one clock (id %s); "
        "those named '... [2 clocks]' assume the machines' clocks are in sync",
        CLOCK,
    )


events.test_start.add_listener(_clock_note)  # type: ignore[no-untyped-call]


def _continuity_fails_the_run(environment: Environment, **_: Any) -> None:
    """A broken stream fails the run even under ``--exit-code-on-error 0``
    (which is for load errors: a continuity failure is the server being
    wrong, not slow). On the master, whose stats hold every worker's."""
    if isinstance(environment.runner, WorkerRunner):
        return
    broken = sum(e.occurrences for e in environment.stats.errors.values() if e.method == CONTINUITY)
    if broken and not environment.process_exit_code:
        code = int(getattr(environment.parsed_options, "exit_code_on_error", 1)) or 1
        environment.process_exit_code = code
        log.error("tsync: %d continuity failure(s): exit code %d", broken, code)


events.quitting.add_listener(_continuity_fails_the_run)  # type: ignore[no-untyped-call]
