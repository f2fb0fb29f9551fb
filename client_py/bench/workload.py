"""What one benchmark run does: the scenario, its sizes, and the messages it sends.

Everything here is plain data (picklable: worker processes get a copy) and
pure functions of it, so the choice of which subscriber follows which
transcript, and which of them stop reading, is the same in every process.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from typing import Final

import msgspec

from protocol.views import Window

SCENARIOS: Final = (
    "fanout",
    "chatroom",
    "catchup",
    "idle",
    "slow",
    "stream",
    "streams",
    "aichat",
)
#: How the readers of ``streams`` (Durable Streams) follow the stream.
LIVE_MODES: Final = ("sse", "long-poll")
#: How the subscribers of ``fanout --ceiling`` follow their transcript: over
#: the WebSocket (``ws``), or as readers of its Durable Stream
#: ``/v1/stream/transcripts/{id}`` (``client_py.bench.tsreaders``).
TRANSCRIPT_LIVE_MODES: Final = ("ws", *LIVE_MODES)

#: Sizes of each scenario when the command line does not say.
DEFAULTS: Final[dict[str, dict[str, float | int | None]]] = {
    "fanout": {"subscribers": 100, "writers": 1, "transcripts": 1, "rate": None, "duration": 10},
    "chatroom": {"subscribers": 200, "writers": 50, "transcripts": 50, "rate": 5, "duration": 10},
    "catchup": {"subscribers": 100, "writers": 1, "transcripts": 1, "rate": None, "duration": None},
    "idle": {"subscribers": 1000, "writers": 0, "transcripts": 1, "rate": None, "duration": None},
    "slow": {"subscribers": 100, "writers": 1, "transcripts": 1, "rate": 200, "duration": 10},
    # Drafts: ``rate`` is tokens/s per writer, each draft ``tokens`` long.
    "stream": {"subscribers": 500, "writers": 1, "transcripts": 1, "rate": 50, "duration": 10},
    # Durable Streams: readers of one stream, ``rate`` values/s per writer.
    "streams": {"subscribers": 100, "writers": 1, "transcripts": 1, "rate": 50, "duration": 10},
    # One reply read through /v1/ai/chat beside /v1/ws: ``rate`` is chunks/s.
    "aichat": {"subscribers": 1000, "writers": 1, "transcripts": 1, "rate": 50, "duration": 10},
}

# The message template: the writer's send time (ns) goes into ``metadata.t``.
_MESSAGE_OVERHEAD: Final = len(
    b'{"role":"user","content":"","metadata":{"t":1700000000000000000,"w":0}}'
)


@dataclass(frozen=True, slots=True)
class Workload:
    """One run's shape. ``rate`` is appends/s per writer (open loop); ``None``
    means closed loop (each writer sends the next append when the last ack
    came back). A run stops after ``duration`` seconds or ``count`` appends
    in total, whichever the caller set."""

    scenario: str
    subscribers: int
    writers: int
    transcripts: int
    rate: float | None = None
    duration: float | None = None
    count: int | None = None
    size: int = 200
    procs: int = 1
    slow_share: float = 0.1
    behind: int = 100
    baseline_messages: int = 10_000
    #: Every subscribe asks for this window (``tail:N``, ``from:I``,
    #: ``segment:active``, ``view:NAME``; see ``window_of``); ``None``: whole.
    window: str | None = None
    drain_timeout: float = 30.0
    #: Subscribers check envelopes only (``fastpath``) and loops run on uvloop.
    fast: bool = False
    #: Tokens per draft (stream scenario; ``rate`` is tokens/s per writer and
    #: ``count`` drafts in total).
    tokens: int = 50
    #: Seconds one subscriber stops reading, after its first token (stream).
    pause_one: float | None = None
    #: How the readers of ``streams`` follow their stream: ``sse`` or
    #: ``long-poll``; the subscribers of ``fanout --ceiling`` also ``ws``.
    #: Empty: the scenario's own (``sse`` for ``streams``, else ``ws``).
    live: str = ""
    #: The server's ceiling (``client_py.bench.ceiling``): precomputed appends,
    #: subscribers that count frames and read the last ``seq`` only.
    ceiling: bool = False
    #: Ceiling mode: about this many subscribers (every ``latency_every()``-th
    #: of each process's) time each delivery from ``metadata.t``; 0: none.
    latency_sample: int = 64
    #: Every append carries an idempotency key, as the clients' do (a keyed
    #: append makes the store record the key too).
    keys: bool = False
    run_id: str = dataclasses.field(default_factory=lambda: secrets.token_hex(4))

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {self.scenario!r} (one of {', '.join(SCENARIOS)})")
        if self.subscribers < 0 or self.writers < 0 or self.transcripts < 1 or self.procs < 1:
            raise ValueError("subscribers and writers must be >= 0, transcripts and procs >= 1")
        if self.rate is not None and self.rate <= 0:
            raise ValueError("--rate must be positive")
        if not 0 <= self.slow_share < 1:
            raise ValueError("--slow-share must be in [0, 1)")
        if self.size < 1:
            raise ValueError("--size must be at least 1 byte")
        window_of(self.window)  # refuse a bad one before anything runs
        if self.tokens < 1:
            raise ValueError("--tokens must be at least 1")
        if self.pause_one is not None and (self.pause_one <= 0 or self.scenario != "stream"):
            raise ValueError("--pause-one takes seconds > 0, in the stream scenario only")
        if self.scenario == "stream" and self.rate is None:
            raise ValueError("the stream scenario needs --rate (tokens/s per writer)")
        if not self.live:
            object.__setattr__(self, "live", "sse" if self.scenario == "streams" else "ws")
        modes = LIVE_MODES if self.scenario == "streams" else TRANSCRIPT_LIVE_MODES
        if self.live not in modes:
            raise ValueError(f"--live is one of {', '.join(modes)}, not {self.live!r}")
        if self.reads_transcript_streams and not (
            self.scenario == "fanout" and self.ceiling and self.transcripts == 1
        ):
            raise ValueError(
                "--live sse|long-poll reads a transcript's Durable Stream: "
                "fanout --ceiling with one transcript only"
            )
        if self.scenario == "aichat" and (self.rate is None or self.writers != 1):
            raise ValueError("the aichat scenario needs --rate (chunks/s) and one writer")
        if self.scenario == "streams" and (self.rate is None or self.writers < 1):
            raise ValueError("the streams scenario needs --rate and at least one writer")

        if self.ceiling:
            if self.scenario not in ("fanout", "chatroom"):
                raise ValueError("--ceiling is for the fanout and chatroom scenarios")
            if self.window is not None:
                raise ValueError("--ceiling subscribes to whole transcripts (no --window)")
            if self.count is None and (self.rate is None or self.duration is None):
                raise ValueError("--ceiling needs --count, or --rate with --duration")
        if self.latency_sample < 0:
            raise ValueError("--latency-sample must be >= 0")

    def with_run_id(self, run_id: str) -> Workload:
        return dataclasses.replace(self, run_id=run_id)

    @property
    def reads_transcript_streams(self) -> bool:
        """Whether the subscribers read ``/v1/stream/transcripts/{id}``
        (``--live sse|long-poll`` outside the ``streams`` scenario)."""
        return self.scenario != "streams" and self.live != "ws"

    @property
    def closed_loop(self) -> bool:
        return self.rate is None

    def transcript_ids(self) -> list[str]:
        return [f"bench-{self.run_id}-{i}" for i in range(self.transcripts)]

    def subscriber_transcript(self, index: int) -> str:
        return f"bench-{self.run_id}-{index % self.transcripts}"

    def writer_transcript(self, index: int) -> str:
        return f"bench-{self.run_id}-{index % self.transcripts}"

    def stream_path(self) -> str:
        """The Durable Stream of the ``streams`` scenario (a URL path)."""
        return f"/v1/stream/bench-{self.run_id}"

    def big_transcript(self) -> str:
        """The transcript of ``baseline_messages`` messages (catchup scenario)."""
        return f"bench-{self.run_id}-big"

    def is_stopped(self, index: int) -> bool:
        """Whether subscriber ``index`` stops reading (slow scenario): spread
        evenly so that every process and transcript gets its share."""
        if self.scenario != "slow" or self.slow_share <= 0:
            return False
        return int((index + 1) * self.slow_share) > int(index * self.slow_share)

    def is_paused(self, index: int) -> bool:
        """Whether subscriber ``index`` is the one that pauses (``pause_one``)."""
        return self.pause_one is not None and index == 0

    def appends_for_writer(self, index: int) -> int | None:
        """This writer's share of ``count`` (``None`` when the run is timed)."""
        if self.count is None or self.writers == 0:
            return None
        share, extra = divmod(self.count, self.writers)
        return share + (1 if index < extra else 0)

    def latency_every(self) -> int | None:
        """Ceiling mode: every how many subscribers of a process (in the
        order of its ``chunks()`` share) one times its deliveries; ``None``:
        none does."""
        if self.latency_sample == 0:
            return None
        return max(1, -(-self.subscribers // self.latency_sample))

    def chunks(self) -> list[list[int]]:
        """Subscriber indices for each of ``procs`` worker processes."""
        procs = max(1, min(self.procs, self.subscribers or 1))
        return [list(range(p, self.subscribers, procs)) for p in range(procs)]


def window_of(spec: str | None) -> Window | None:
    """The ``Window`` a ``--window`` spec names: ``tail:50``, ``from:1000``,
    ``segment:active``, ``view:NAME``. ``ValueError`` for anything else."""
    if spec is None:
        return None
    kind, _, value = spec.partition(":")
    try:
        if kind in ("tail", "from"):
            return msgspec.convert({kind: int(value)}, Window)
        if kind in ("segment", "view"):
            return msgspec.convert({kind: value}, Window)
    except (ValueError, msgspec.ValidationError) as exc:
        raise ValueError(f"--window {spec!r}: {exc}") from None
    raise ValueError(f"--window {spec!r}: expected tail:N, from:INDEX, segment:active or view:NAME")


def filler(size: int) -> str:
    """Message content such that the whole message is about ``size`` bytes of JSON."""
    return "x" * max(1, size - _MESSAGE_OVERHEAD)


def draft_op(transcript_id: str, draft_id: str, delta: str) -> bytes:
    """A ``draft`` op appending ``delta`` (no ref: tokens are not acked)."""
    return (
        f'{{"op":"draft","transcriptId":"{transcript_id}","draftId":"{draft_id}",'
        f'"delta":"{delta}"}}'
    ).encode()


def commit_op(
    transcript_id: str, ref: int, draft_id: str, content: str, sent_ns: int, writer: int
) -> bytes:
    """The ``append`` that commits ``draft_id`` as one assistant message
    (``metadata.d`` names the draft, ``metadata.t`` is the send time)."""
    return (
        f'{{"op":"append","transcriptId":"{transcript_id}","ref":{ref},"draftId":"{draft_id}",'
        f'"messages":[{{"role":"assistant","content":"{content}",'
        f'"metadata":{{"t":{sent_ns},"w":{writer},"d":"{draft_id}"}}}}]}}'
    ).encode()


def append_op(
    transcript_id: str, ref: int, content: str, sent_ns: int, writer: int, key: str = ""
) -> bytes:
    """The ``append`` op of one message carrying its send time (built by hand:
    the generator must not spend its time in an encoder); with ``key`` (a
    JSON-safe string), its idempotency key."""
    keyed = f'"idempotencyKey":"{key}",' if key else ""
    return (
        f'{{"op":"append","transcriptId":"{transcript_id}","ref":{ref},{keyed}"messages":'
        f'[{{"role":"user","content":"{content}","metadata":{{"t":{sent_ns},"w":{writer}}}}}]}}'
    ).encode()
