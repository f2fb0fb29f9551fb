"""What one load-test connection reports: deliveries, acks and continuity failures.

``client_py.locust`` (the Locust users) drives one ``ConnectionCheck`` per
WebSocket connection: it hands every received message to ``receive`` and
reports the ``Sample`` list it gets back as Locust requests. Everything that
judges the stream is here, sans I/O and without Locust, so that it can be
fed frames in a test:

- The connection's consumer core (``protocol.consumer.Consumer``, keeping no
  messages, as ``tsync bench``'s subscribers do) splits, validates, checks
  ``seq`` and each transcript's continuity, applies every event to a copy
  and asks for the resubscribes that repair a gap. Its ``SeqTracker`` is a
  ``SeqLedger``: the same tracker, remembering which ``seq`` a gap skipped,
  so that a frame that arrives after a later one is named a reorder rather
  than a repeat.
- What ``tsync bench`` counts as a failure of an on-time subscriber
  (``client_py.bench.report.ON_TIME_ZERO``) is a failure here, as it
  happens: a ``seq`` gap, a revision gap, a repeat (of a ``seq`` or of a
  revision), a reorder, a frame about another transcript, an invalid frame,
  ``lagged``, a baseline after the first (the server could not resume),
  a copy an event did not fit, a stopped subscription, an error frame; and
  of drafts, one closed without its message or whose text is not the
  message that committed it. The one exception: once the core resubscribed
  a transcript to repair it, events it then ignores as repeats are not
  failures (a repair asked for twice, after two ``seq`` gaps, is answered
  twice); the fault that made it resubscribe was one already.

Latency and clocks: append-to-delivery spans two processes. Each message a
writer appends carries its wall-clock send time (``metadata.t``,
``time.time_ns()``) and the id of the clock it was read from
(``metadata.h``: the kernel's boot id, so every process on one machine,
containers too, shares it). A delivery whose writer read the same clock is
reported under the scenario's name; one from another machine under the
name with ``CROSS_CLOCK`` appended: its latency holds the two machines'
clock offset, so it is only as good as their clock sync (NTP: typically
well under a millisecond on one network, but not checked here). Acks are
round trips on one clock (``time.perf_counter_ns``) and always exact.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from client_py.bench.draftcheck import TOKEN_CHARS, token
from client_py.bench.workload import filler
from protocol import wire
from protocol.consumer import (
    Answered,
    Applied,
    Consumer,
    DraftClosed,
    DraftUpdated,
    ErrorReceived,
    InvalidFrameReceived,
    Replaced,
    Resubscribed,
    Stopped,
)
from protocol.continuity import SeqTracker, SeqVerdict
from protocol.types import MessagesAppended

__all__ = [
    "ACK",
    "CONTINUITY",
    "CROSS_CLOCK",
    "DELIVERY",
    "PING",
    "TOKEN",
    "ConnectionCheck",
    "Sample",
    "SeqLedger",
    "append_op",
    "clock_id",
    "commit_op",
    "draft_op",
]

#: Locust request types (its "Type" column).
DELIVERY: Final = "DELIVER"  #: a message appended elsewhere, delivered here
TOKEN: Final = "TOKEN"  #: a draft token delivered here
ACK: Final = "ACK"  #: an append (or a draft's commit) sent from here, acked
PING: Final = "PING"  #: a ping sent from here, answered
CONTINUITY: Final = "CONTINUITY"  #: a failure of the stream's continuity
#: Appended to the name of a latency read across two machines' clocks.
CROSS_CLOCK: Final = " [2 clocks]"

#: How often (at most) the continuities' repeat counters are read when no
#: frame hints at a repeat.
SCAN_INTERVAL_NS: Final = 1_000_000_000
#: The most ``seq`` numbers one gap may leave to be told apart later as reorders.
MAX_REMEMBERED: Final = 4096

#: Each failure's message: the same for every failure of a kind (Locust
#: counts equal messages in one row); the particulars go to ``Sample.detail``.
EXPLAINED: Final[dict[str, str]] = {
    "seq gap": "frames never arrived on the connection (the core resubscribed to repair it)",
    "revision gap": "an event skipped revisions",
    "repeat": "a frame or an event arrived twice",
    "reorder": "a frame arrived after a later one",
    "foreign frame": "a frame about a transcript not asked for",
    "invalid frame": "a frame that does not validate",
    "lagged": "the server dropped a subscription that fell behind",
    "rebaseline": "the server sent a baseline instead of the increments after the copy",
    "mismatch": "an event did not fit the copy",
    "epoch changed": "the transcript was created again",
    "no copy": "an event came before any baseline",
    "disconnect": "the connection was lost",
    "unexpected answer": "an answer to no op of ours",
    "draft dropped": "a draft closed without its message",
    "draft mismatch": "a draft's text is not the message that committed it",
}


def clock_id() -> str:
    """An id of this machine's wall clock: shared by every process that
    reads the same clock (the kernel's boot id), 12 hex digits."""
    try:
        raw = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        raw = socket.gethostname()  # no boot id (not Linux): the host's name
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Sample:
    """One thing to report: ``failure`` ``None`` is a success of
    ``response_time_ms`` and ``length`` bytes, else the failure's message."""

    kind: str
    name: str
    response_time_ms: float
    length: int = 0
    failure: str | None = None
    #: What exactly happened (seq numbers, transcript, revision): for a log
    #: line; ``failure`` stays the same for every failure of its kind, so
    #: that Locust counts them in one row.
    detail: str = ""


class SeqLedger(SeqTracker):
    """The consumer core's ``SeqTracker``, also noting what each verdict
    meant: ``("gap", first, last)`` for the ``seq`` numbers a gap skipped,
    ``("reorder", seq)`` for one of those arriving late, ``("repeat", seq)``
    for a ``seq`` seen before. ``take`` hands them over."""

    def __init__(self) -> None:
        super().__init__()
        self._skipped: set[int] = set()
        self._notes: list[tuple[str, int, int]] = []

    def observe(self, seq: int) -> SeqVerdict:
        last = self.last
        verdict = super().observe(seq)
        if verdict is SeqVerdict.GAP:
            self._notes.append(("gap", last + 1, seq - 1))
            if len(self._skipped) + seq - last - 1 <= MAX_REMEMBERED:
                self._skipped.update(range(last + 1, seq))
        elif verdict is SeqVerdict.REPEAT:
            if seq in self._skipped:
                self._skipped.discard(seq)
                self._notes.append(("reorder", seq, seq))
            else:
                self._notes.append(("repeat", seq, seq))
        return verdict

    def reset(self) -> None:
        super().reset()
        self._skipped.clear()

    def take(self) -> list[tuple[str, int, int]]:
        notes, self._notes = self._notes, []
        return notes


class ConnectionCheck:
    """One connection's consumer core and what it reports.

    ``scenario`` names the samples (``subscriber``, ``chatroom``, ...);
    ``clock`` is this machine's ``clock_id()``. Call ``connection_made``
    on every new connection and send ``ops_to_send()`` after it and after
    each ``receive``; ``sent`` before sending an op of your own whose answer
    is to be timed.
    """

    def __init__(self, scenario: str, *, clock: str) -> None:
        self.scenario = scenario
        self.clock = clock
        self.core = Consumer(keep_messages=False)
        self.seq = self.core.seq = SeqLedger()
        #: Deliveries (messages and tokens) and failures reported so far.
        self.delivered = 0
        self.failures = 0
        self._pending: dict[int, tuple[int, str, str]] = {}  # ref -> (sent at, kind, name)
        self._commits: dict[str, str] = {}  # draft id -> the content that committed it
        self._draft_chars: dict[str, int] = {}  # draft id -> characters seen
        #: transcript id -> events ignored as repeats so far (``Continuity`` counters)
        self._repeats: dict[str, int] = {}
        #: Transcripts the core resubscribed to repair (a gap, lagged, ...):
        #: a repair asked for twice is answered twice, and the second
        #: answer's events are repeats the core ignores, as it must.
        self._repaired: set[str] = set()
        self._scanned_ns = 0

    def subscribe(self, transcript_id: str) -> None:
        self.core.subscribe(transcript_id)

    def connection_made(self) -> None:
        self.core.connection_made()

    def connection_lost(self, reason: str) -> Sample:
        """The connection is gone without being asked to close: a failure."""
        self.core.connection_lost()
        self._pending.clear()
        return self._failure("disconnect", reason)

    def ops_to_send(self) -> list[bytes]:
        """The core's ops (resubscribes, barrier pings), encoded."""
        return [wire.encode_json(op) for op in self.core.ops_to_send()]

    def sent(self, ref: int, at_ns: int, name: str, kind: str = ACK) -> None:
        """An op of the driver's with ``ref`` leaves at ``at_ns``
        (``perf_counter_ns``): its answer is reported as ``kind`` ``name``."""
        self._pending[ref] = (at_ns, kind, name)

    def forget(self, ref: int) -> None:
        """The op with ``ref`` never left, or its answer is no longer awaited."""
        self._pending.pop(ref, None)

    def overdue(self, now_ns: int, timeout_ns: int) -> list[Sample]:
        """A failure for each op of the driver's sent more than ``timeout_ns``
        before ``now_ns`` (``perf_counter_ns``) and still unanswered; they
        are no longer awaited."""
        late = [(ref, sent) for ref, sent in self._pending.items() if now_ns - sent[0] > timeout_ns]
        samples = []
        for ref, (at_ns, kind, name) in late:
            del self._pending[ref]
            failure = f"no answer in {timeout_ns / 1e9:g} s"
            samples.append(Sample(kind, name, (now_ns - at_ns) / 1e6, 0, failure, f"ref {ref}"))
        return samples

    def receive(self, message: str | bytes, wall_ns: int, mono_ns: int) -> list[Sample]:
        """Take one WebSocket message received at ``wall_ns`` (``time_ns``)
        and ``mono_ns`` (``perf_counter_ns``); what to report, in order."""
        core = self.core
        frames = core.frames
        core.receive_data(message)
        frames = core.frames - frames
        samples = [self._seq_failure(*note) for note in self.seq.take()]
        deliveries: list[Sample] = []
        updates = core.updates_received()
        for update in updates:
            if isinstance(update, Applied):
                change = update.event.change
                if isinstance(change, MessagesAppended):
                    for msg in change.messages:
                        deliveries.extend(self._delivered(msg.metadata, msg.content, wall_ns))
            elif isinstance(update, DraftUpdated):
                deliveries.extend(self._tokens(update, wall_ns))
            elif isinstance(update, DraftClosed):
                failure = self._draft_closed(update)
                if failure is not None:
                    samples.append(failure)
            elif isinstance(update, Answered):
                samples.append(self._answered(update.frame, mono_ns))
            elif isinstance(update, Resubscribed):
                failure = self._resubscribed(update)
                if failure is not None:
                    samples.append(failure)
            elif isinstance(update, Replaced):
                if update.previous_revision is not None or update.epoch_changed:
                    samples.append(
                        self._failure(
                            "rebaseline",
                            f"{update.transcript_id}: a baseline at revision "
                            f"{update.snapshot.revision} replaced the copy at "
                            f"{update.previous_revision} instead of increments",
                        )
                    )
            elif isinstance(update, InvalidFrameReceived):
                samples.append(self._failure("invalid frame", update.reason))
            elif isinstance(update, Stopped):
                samples.append(
                    self._failure(
                        f"stopped {update.code}", f"{update.transcript_id}: {update.message}"
                    )
                )
            elif isinstance(update, ErrorReceived):
                frame = update.frame
                samples.append(self._failure(f"error {frame.code}", frame.message))
        if len(updates) < frames or mono_ns - self._scanned_ns >= SCAN_INTERVAL_NS:
            # A frame that changed nothing may be an event ignored as a repeat
            # (the counters are cumulative: a periodic look misses none).
            self._scanned_ns = mono_ns
            samples.extend(self._repeated())
        if deliveries:
            # The message's bytes, shared out over what it delivered.
            size = len(message.encode() if isinstance(message, str) else message)
            share, extra = divmod(size, len(deliveries))
            for i, sample in enumerate(deliveries):
                length = share + (extra if i == 0 else 0)
                samples.append(Sample(sample.kind, sample.name, sample.response_time_ms, length))
            self.delivered += len(deliveries)
        return samples

    # --- internals -----------------------------------------------------------------

    def _repeated(self) -> list[Sample]:
        samples = []
        for tid, subscription in self.core.subscriptions.items():
            repeats = subscription.continuity.counters.repeats_ignored
            before = self._repeats.get(tid, 0)
            if repeats > before:
                self._repeats[tid] = repeats
                if tid not in self._repaired:
                    samples.append(
                        self._failure(
                            "repeat",
                            f"{tid}: {repeats - before} event(s) at or below the copy's revision",
                        )
                    )
        return samples

    def _failure(self, what: str, detail: str) -> Sample:
        self.failures += 1
        failure = f"{what}: {EXPLAINED.get(what, 'see the log')}"
        return Sample(CONTINUITY, f"{self.scenario}: {what}", 0.0, 0, failure, detail)

    def _named(self, clock: object) -> str:
        return self.scenario if clock == self.clock else self.scenario + CROSS_CLOCK

    def _delivered(self, metadata: object, content: object, wall_ns: int) -> list[Sample]:
        if not isinstance(metadata, Mapping):
            return []
        get = metadata.get
        draft_id = get("d")
        if isinstance(draft_id, str) and isinstance(content, str):
            self._commits[draft_id] = content
        sent = get("t")
        if not isinstance(sent, int):
            return []  # not one of ours: nothing to time
        latency_ms = max(0, wall_ns - sent) / 1e6
        return [Sample(DELIVERY, self._named(get("h")), latency_ms)]

    def _tokens(self, update: DraftUpdated, wall_ns: int) -> list[Sample]:
        seen = self._draft_chars.get(update.draft_id, 0)
        if update.delta is not None:
            text, first = update.delta, 0
            self._draft_chars[update.draft_id] = seen + len(update.delta)
        else:
            text = update.text or ""
            first = seen if seen <= len(text) else 0
            self._draft_chars[update.draft_id] = len(text)
        name = self._named(draft_clock(update.draft_id))
        samples = []
        for at in range(first - first % TOKEN_CHARS, len(text) - TOKEN_CHARS + 1, TOKEN_CHARS):
            try:
                sent = int(text[at : at + TOKEN_CHARS - 1], 16)
            except ValueError:
                continue  # not one of our tokens
            samples.append(Sample(TOKEN, name, max(0, wall_ns - sent) / 1e6))
        return samples

    def _draft_closed(self, update: DraftClosed) -> Sample | None:
        self._draft_chars.pop(update.draft_id, None)
        committed = self._commits.pop(update.draft_id, None)
        if update.state != "final":
            return self._failure(
                "draft dropped", f"draft {update.draft_id} closed as {update.state}"
            )
        if committed is not None and update.text != committed:
            return self._failure(
                "draft mismatch",
                f"draft {update.draft_id}: its text is not the message that committed it",
            )
        return None

    def _answered(self, frame: wire.Ack | wire.Pong | wire.ErrorFrame, mono_ns: int) -> Sample:
        ref = frame.ref
        pending = self._pending.pop(ref, None) if isinstance(ref, int) else None
        if pending is None:
            return self._failure("unexpected answer", f"{type(frame).__name__} ref={ref!r}")
        sent, kind, name = pending
        elapsed_ms = (mono_ns - sent) / 1e6
        if isinstance(frame, wire.ErrorFrame):
            return Sample(kind, name, elapsed_ms, 0, frame.code, frame.message)
        return Sample(kind, name, elapsed_ms)

    def _resubscribed(self, update: Resubscribed) -> Sample | None:
        reason = update.reason
        if reason != "connection":
            self._repaired.add(update.transcript_id)
        where = f"{update.transcript_id} at revision {update.from_revision}"
        if reason == "gap":
            return self._failure("revision gap", f"{where}: the next event skipped revisions")
        if reason == wire.LAGGED:
            return self._failure("lagged", f"{where}: the server dropped the subscription")
        if reason == "foreign":
            return self._failure("foreign frame", f"{where}: a frame about another transcript")
        if reason == "mismatch":
            return self._failure("mismatch", f"{update.transcript_id}: an event did not fit")
        if reason == "epoch":
            return self._failure("epoch changed", f"{update.transcript_id} was created again")
        if reason == "no-copy":
            return self._failure("no copy", f"{update.transcript_id}: an event before a baseline")
        return None  # seq-gap (reported with its seq numbers), connection (a disconnect)

    def _seq_failure(self, what: str, first: int, last: int) -> Sample:
        if what == "gap":
            count = last - first + 1
            span = f"seq {first}" if count == 1 else f"seq {first}..{last}"
            return self._failure("seq gap", f"{count} frame(s) never arrived ({span})")
        if what == "reorder":
            return self._failure("reorder", f"seq {first} arrived after a later frame")
        return self._failure("repeat", f"seq {first} arrived twice")


# --- what the users send ---------------------------------------------------------------


def draft_clock(draft_id: str) -> str | None:
    """The clock id a draft id made by ``draft_id_for`` carries."""
    parts = draft_id.split(":")
    return parts[1] if len(parts) == 3 else None


def draft_id_for(clock: str, user: str, number: int) -> str:
    """A draft id that carries the writer's clock id (for its tokens' latency)."""
    return f"d:{clock}:{user}.{number}"


def append_op(
    transcript_id: str, ref: int, size: int, sent_ns: int, clock: str, *, role: str = "user"
) -> bytes:
    """An ``append`` of one message of about ``size`` bytes carrying its send
    time and the clock it was read from."""
    message = {"role": role, "content": filler(size), "metadata": {"t": sent_ns, "h": clock}}
    return wire.encode_json(wire.Append(transcript_id=transcript_id, messages=[message], ref=ref))


def draft_op(transcript_id: str, draft_id: str, due_ns: int) -> bytes:
    """A ``draft`` op adding one token: its due time (``client_py.bench.draftcheck``)."""
    return wire.encode_json(
        wire.Draft(transcript_id=transcript_id, draft_id=draft_id, delta=token(due_ns))
    )


def commit_op(
    transcript_id: str, ref: int, draft_id: str, text: str, sent_ns: int, clock: str
) -> bytes:
    """The ``append`` that commits ``draft_id`` as the message ``text``."""
    message = {
        "role": "assistant",
        "content": text,
        "metadata": {"t": sent_ns, "h": clock, "d": draft_id},
    }
    return wire.encode_json(
        wire.Append(transcript_id=transcript_id, messages=[message], ref=ref, draft_id=draft_id)
    )
