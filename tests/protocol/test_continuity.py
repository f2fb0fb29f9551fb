"""protocol.continuity: unit behaviour, and a model check over a faulty channel.

The model check plays a server that holds a true history (appends, segment
starts, and re-creations under a new epoch), sends it through a channel that
drops, duplicates and reorders frames, lags and cuts connections, and answers
every resubscribe as the contract says (increments after R if it still holds
them and the epoch matches, else a baseline). Whatever happens, an applied
event is always the true one, and after a final clean reconnect the consumer's
copy equals the server's transcript and the counters add up.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from protocol.continuity import (
    Apply,
    Continuity,
    Counters,
    Decision,
    Ignore,
    Reject,
    Replace,
    Resubscribe,
    SeqTracker,
    SeqVerdict,
    Stop,
)
from protocol.types import (
    Message,
    MessagesAppended,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
)
from protocol.wire import Baseline, ErrorFrame, Increment, Subscribe, with_seq

T = "t1"


def _event(revision: int, epoch: str = "e1", transcript_id: str = T) -> TranscriptEvent:
    message = Message(role="user", content=str(revision))
    return TranscriptEvent(
        transcript_id, epoch, revision, 0, MessagesAppended(revision - 1, (message,))
    )


def _snapshot(revision: int, epoch: str = "e1", transcript_id: str = T) -> TranscriptSnapshot:
    return TranscriptSnapshot(transcript_id, epoch, revision, 0, (), 0, (Segment(0, None),))


# --- unit behaviour -------------------------------------------------------------


def test_seq_tracker() -> None:
    seq = SeqTracker()
    verdicts = [seq.observe(n) for n in (1, 2, 2, 5, 3, 6)]
    assert verdicts == ["ok", "ok", "repeat", "gap", "repeat", "ok"]
    assert seq.counters.as_dict() == {"ok": 3, "gaps": 1, "repeats": 2, "missing": 2}
    seq.reset()
    assert seq.observe(1) is SeqVerdict.OK
    assert seq.observe(3) is SeqVerdict.GAP
    assert seq.last == 3


def test_the_first_seq_of_a_connection_must_be_1() -> None:
    assert SeqTracker().observe(2) is SeqVerdict.GAP


def test_decisions_and_counters_are_frozen() -> None:
    machine = Continuity(T)
    decision = machine.on_baseline(_snapshot(1))
    assert isinstance(decision, Replace)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.snapshot = _snapshot(2)  # type: ignore[misc]
    counters = machine.counters
    with pytest.raises(dataclasses.FrozenInstanceError):
        counters.applied = 5  # type: ignore[misc]
    machine.on_event(_event(2))
    assert counters.applied == 0  # a snapshot: it does not follow the machine
    assert machine.counters.applied == 1
    assert isinstance(machine.counters, Counters)


def test_resubscribe_op_and_request() -> None:
    machine = Continuity(T)
    assert machine.resubscribe_request() == Subscribe(transcript_id=T)
    machine.on_baseline(_snapshot(4))
    decision = machine.on_event(_event(6))
    assert decision == Resubscribe(T, 4, "e1", "gap")
    assert isinstance(decision, Resubscribe)
    assert decision.op(ref="r1") == Subscribe(
        transcript_id=T, from_revision=4, epoch="e1", ref="r1"
    )
    assert machine.resubscribe_request(ref=7) == decision.op(ref=7)
    fresh = Resubscribe(T, None, None, "epoch")
    assert fresh.op() == Subscribe(transcript_id=T)


def test_on_frame_dispatches() -> None:
    machine = Continuity(T)
    assert isinstance(machine.on_frame(Baseline(seq=1, snapshot=_snapshot(0))), Replace)
    assert isinstance(machine.on_frame(Increment(seq=2, event=_event(1))), Apply)
    stop = machine.on_frame(ErrorFrame(seq=3, code="not-found", message="gone", transcript_id=T))
    assert stop == Stop("not-found", "gone")


def test_an_error_without_transcript_is_ignored_and_one_for_another_is_rejected() -> None:
    machine = Continuity(T)
    machine.on_baseline(_snapshot(1))
    assert isinstance(machine.on_error(ErrorFrame(seq=1, code="lagged", message="")), Resubscribe)
    other = ErrorFrame(seq=2, code="lagged", message="", transcript_id="t2")
    assert isinstance(machine.on_error(other), Reject)
    unknown = ErrorFrame(seq=3, code="some-new-code", message="", transcript_id=T)
    assert machine.on_error(unknown) == Ignore("error some-new-code")


def test_segment_events_continue_the_copy_like_appends() -> None:
    machine = Continuity(T)
    machine.on_baseline(_snapshot(1))
    segment = TranscriptEvent(T, "e1", 2, 0, SegmentStarted(previous_start=0, start=1, end=1))
    assert machine.on_event(segment) == Apply(segment)
    assert machine.revision == 2


def test_an_older_baseline_of_the_same_epoch_is_stale() -> None:
    machine = Continuity(T)
    machine.on_baseline(_snapshot(10))
    assert machine.on_baseline(_snapshot(8)) == Ignore("stale baseline")
    assert machine.revision == 10
    assert machine.counters.stale_baselines == 1
    # The same revision, a newer one, or another epoch still replace the copy.
    assert isinstance(machine.on_baseline(_snapshot(10)), Replace)
    assert isinstance(machine.on_baseline(_snapshot(12)), Replace)
    assert isinstance(machine.on_baseline(_snapshot(3, epoch="e2")), Replace)
    assert (machine.revision, machine.epoch) == (3, "e2")


def test_repr_shows_the_state() -> None:
    machine = Continuity(T)
    machine.on_baseline(_snapshot(3))
    assert repr(machine) == "Continuity('t1', revision=3, epoch='e1', resyncing=False)"


# --- the model ------------------------------------------------------------------------

Frame = Baseline | Increment | ErrorFrame


class Server:
    """The true transcript, re-creatable under a new epoch, holding its last
    ``retention`` events for resumes, and one connection's outbound channel."""

    def __init__(self, retention: int) -> None:
        self.retention = retention
        self.epochs = 0
        self.history: dict[str, list[TranscriptEvent]] = {}
        self._new_epoch()
        self.channel: list[Frame] = []
        self.next_seq = 1
        self.subscribed = False

    def _new_epoch(self) -> None:
        self.epochs += 1
        self.epoch = f"e{self.epochs}"
        self.events: list[TranscriptEvent] = []
        self.history[self.epoch] = self.events
        self.messages: list[Message] = []
        self.active_start = 0
        self.segments: list[Segment] = [Segment(0, None)]

    @property
    def revision(self) -> int:
        return len(self.events)

    def snapshot(self) -> TranscriptSnapshot:
        return TranscriptSnapshot(
            T,
            self.epoch,
            self.revision,
            0,
            tuple(self.messages),
            self.active_start,
            tuple(self.segments),
        )

    def _commit(self, event: TranscriptEvent) -> None:
        apply_to(self, event)
        self.events.append(event)
        if self.subscribed:
            self.send(Increment(seq=1, event=event))

    def append(self, count: int) -> None:
        messages = tuple(
            Message(role="user" if (self.revision + i) % 2 else "assistant", content=f"m{i}")
            for i in range(count)
        )
        change = MessagesAppended(start=len(self.messages), messages=messages)
        self._commit(TranscriptEvent(T, self.epoch, self.revision + 1, 0, change))

    def start_segment(self) -> bool:
        if self.active_start >= len(self.messages):
            return False  # invalid: changes nothing, no event
        change = SegmentStarted(self.active_start, len(self.messages), len(self.messages))
        self._commit(TranscriptEvent(T, self.epoch, self.revision + 1, 0, change))
        return True

    def recreate(self) -> None:
        """The store lost the transcript; it is created again under the same id."""
        self._new_epoch()

    def send(self, frame: Frame) -> None:
        self.channel.append(with_seq(frame, self.next_seq))
        self.next_seq += 1

    def answer(self, op: Subscribe) -> None:
        """The contract's answer to ``subscribe``."""
        self.subscribed = True
        held_from = self.revision - self.retention
        resumable = (
            op.from_revision is not None
            and op.epoch == self.epoch
            and held_from <= op.from_revision <= self.revision
        )
        if not resumable:
            self.send(Baseline(seq=1, snapshot=self.snapshot()))
            return
        assert op.from_revision is not None
        for event in self.events[op.from_revision :]:
            self.send(Increment(seq=1, event=event))

    def lag(self) -> None:
        """The outbound queue overflowed: queued frames were never sent (took no seq)."""
        if not self.channel:
            return
        self.next_seq = self.channel[0].seq
        self.channel.clear()
        self.send(ErrorFrame(seq=1, code="lagged", message="queue full", transcript_id=T))

    def new_connection(self) -> None:
        self.channel.clear()
        self.next_seq = 1
        self.subscribed = False


def apply_to(copy: Any, event: TranscriptEvent) -> None:
    """Apply one event to a transcript-like object (the server's or the consumer's copy)."""
    change = event.change
    if isinstance(change, MessagesAppended):
        assert change.start == len(copy.messages), "an append must continue the copy"
        copy.messages.extend(change.messages)
    else:
        assert change.previous_start == copy.active_start
        copy.segments[-1] = Segment(copy.segments[-1].start, change.end)
        copy.segments.append(Segment(change.start, None))
        copy.active_start = change.start


@dataclasses.dataclass
class Copy:
    """The consumer's copy of the transcript, as a client's mirror keeps it."""

    messages: list[Message] = dataclasses.field(default_factory=list)
    active_start: int = 0
    segments: list[Segment] = dataclasses.field(default_factory=list)
    revision: int | None = None
    epoch: str | None = None


class ChannelFaults:
    """The faults ``run`` plays on a harness's ``server.channel``."""

    server: Server

    def drop(self, index: int) -> None:
        if self.server.channel:
            del self.server.channel[index % len(self.server.channel)]

    def duplicate(self, index: int) -> None:
        if self.server.channel:
            i = index % len(self.server.channel)
            self.server.channel.insert(i, self.server.channel[i])

    def swap(self, index: int) -> None:
        channel = self.server.channel
        if len(channel) >= 2:
            i = index % (len(channel) - 1)
            channel[i], channel[i + 1] = channel[i + 1], channel[i]

    def foreign(self) -> None:
        self.server.send(Increment(seq=1, event=_event(1, "x", transcript_id="t2")))


class Harness(ChannelFaults):
    """A consumer (Continuity + SeqTracker + Copy) connected to a ``Server``."""

    def __init__(self, retention: int) -> None:
        self.server = Server(retention)
        self.machine = Continuity(T)
        self.seq = SeqTracker()
        self.copy = Copy()
        self.decisions: Counter[tuple[str, str]] = Counter()
        self.expected_resumes = 0
        self.epoch_changes_by_baseline = 0
        self.lagged = 0
        self.last_request_was_current = False
        self.connect()

    # -- the consumer ---------------------------------------------------------

    def connect(self) -> None:
        self.server.new_connection()
        self.seq.reset()
        if self.machine.revision is not None:
            self.expected_resumes += 1
        self.act(self.machine.on_connection_lost())
        self.server.new_connection()  # the first request went nowhere: the line was down
        self.act(self.machine.on_new_connection())

    def deliver(self, index: int = 0) -> None:
        frame = self.server.channel.pop(index)
        verdict = self.seq.observe(frame.seq)
        if verdict is SeqVerdict.REPEAT:
            return
        if verdict is SeqVerdict.GAP:
            self.act(self.machine.on_seq_gap())
        if isinstance(frame, ErrorFrame) and frame.code == "lagged":
            self.lagged += 1
        if (
            isinstance(frame, Baseline)
            and frame.snapshot.transcript_id == T
            and self.machine.epoch not in (None, frame.snapshot.epoch)
        ):
            self.epoch_changes_by_baseline += 1
        self.act(self.machine.on_frame(frame))

    def act(self, decision: Decision) -> None:
        reason = decision.reason if isinstance(decision, Ignore | Resubscribe) else ""
        self.decisions[decision.kind, reason] += 1
        if isinstance(decision, Apply):
            event = decision.event
            # Safety: an applied event is the true one, right after the copy's revision.
            assert event == self.server.history[event.epoch][event.revision - 1]
            assert self.copy.epoch == event.epoch
            assert self.copy.revision == event.revision - 1
            apply_to(self.copy, event)
            self.copy.revision = event.revision
        elif isinstance(decision, Replace):
            snapshot = decision.snapshot
            self.copy = Copy(
                list(snapshot.messages),
                snapshot.active_start,
                list(snapshot.segments),
                snapshot.revision,
                snapshot.epoch,
            )
        elif isinstance(decision, Resubscribe):
            if decision.from_revision is None:
                # "Drop its copy": the consumer holds nothing it could resume from.
                assert self.machine.revision is None or decision.reason != "epoch"
            self.last_request_was_current = decision.from_revision == self.server.revision
            self.server.answer(decision.op())
        elif isinstance(decision, Stop):
            raise AssertionError(f"the model server never stops a subscription: {decision}")
        if self.machine.revision is not None:
            assert (self.machine.revision, self.machine.epoch) == (
                self.copy.revision,
                self.copy.epoch,
            )

    # -- the end ------------------------------------------------------------------

    def heal(self) -> None:
        """A clean reconnect, then deliver everything over a perfect channel."""
        self.connect()
        for _ in range(10_000):
            if not self.server.channel:
                break
            self.deliver()
        assert not self.server.channel

    def check_converged(self) -> None:
        server, copy = self.server, self.copy
        assert (copy.revision, copy.epoch) == (server.revision, server.epoch)
        assert copy.messages == server.messages
        assert copy.active_start == server.active_start
        assert copy.segments == server.segments
        # A resume from the current revision is answered with nothing (docs/protocol.md,
        # Client ops), so the machine cannot tell it was answered: it stays resyncing, harmlessly.
        assert not self.machine.resyncing or self.last_request_was_current

    def check_counters(self) -> None:
        c, d = self.machine.counters, self.decisions
        assert c.applied == d["apply", ""]
        assert c.baselines == d["replace", ""]
        assert c.rebaselines == max(0, c.baselines - 1)
        assert c.repeats_ignored == d["ignore", "repeat"]
        assert c.skipped == d["ignore", "resyncing"] + d["ignore", "no copy yet"]
        assert c.gaps == d["resubscribe", "gap"] + d["resubscribe", "seq-gap"]
        assert c.lagged == self.lagged == d["resubscribe", "lagged"]
        assert c.foreign == d["resubscribe", "foreign"]
        assert c.epoch_changes == d["resubscribe", "epoch"] + self.epoch_changes_by_baseline
        assert c.resumes == self.expected_resumes
        assert c.resubscribes == sum(n for (kind, _), n in d.items() if kind == "resubscribe")
        assert self.seq.counters.gaps == d["resubscribe", "seq-gap"]


# Mostly appends and deliveries, so that histories grow and get applied; faults
# rarer, so that each run mixes several kinds of repair.
_WEIGHTED = (
    ["append"] * 6
    + ["deliver"] * 10
    + ["segment", "drop", "duplicate", "swap", "lag", "reconnect", "skip", "resend"]
    + ["recreate", "foreign"] * 1
)
ACTIONS = st.tuples(st.sampled_from(_WEIGHTED), st.integers(0, 10))


def run(harness: Harness, action: str, arg: int) -> None:
    server = harness.server
    if action == "append":
        server.append(1 + arg % 3)
    elif action == "skip":
        # A server-side loss the seq cannot show: an event never handed to this connection.
        subscribed, server.subscribed = server.subscribed, False
        server.append(1)
        server.subscribed = subscribed
    elif action == "resend":
        # A server-side repeat under a fresh seq: an old event sent again.
        if server.events and server.subscribed:
            server.send(Increment(seq=1, event=server.events[arg % len(server.events)]))
    elif action == "segment":
        server.start_segment()
    elif action == "deliver":
        if server.channel:
            # Mostly in order; sometimes a later frame overtakes (reordering).
            harness.deliver(min(arg - 8, len(server.channel) - 1) if arg > 8 else 0)
    elif action == "drop":
        harness.drop(arg)
    elif action == "duplicate":
        harness.duplicate(arg)
    elif action == "swap":
        harness.swap(arg)
    elif action == "lag":
        server.lag()
    elif action == "reconnect":
        harness.connect()
    elif action == "recreate":
        server.recreate()
    elif action == "foreign":
        harness.foreign()


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 4), st.lists(ACTIONS, min_size=20, max_size=80))
def test_the_copy_converges_through_a_faulty_channel(
    retention: int, actions: list[tuple[str, int]]
) -> None:
    harness = Harness(retention)
    for action, arg in actions:
        run(harness, action, arg)
    harness.heal()
    harness.check_converged()
    harness.check_counters()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 4), st.lists(st.sampled_from(["append", "deliver", "deliver"]), max_size=40))
def test_over_a_perfect_channel_nothing_is_repaired(retention: int, actions: list[str]) -> None:
    harness = Harness(retention)
    for action in actions:
        run(harness, action, 1)
    harness.heal()
    harness.check_converged()
    c = harness.machine.counters
    assert (c.gaps, c.repeats_ignored, c.skipped, c.lagged, c.foreign, c.epoch_changes) == (
        0,
        0,
        0,
        0,
        0,
        0,
    )


class ContinuityMachine(RuleBasedStateMachine):
    """The same model as rules; invariants checked after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.harness = Harness(retention=2)

    @rule(count=st.integers(1, 3))
    def append(self, count: int) -> None:
        self.harness.server.append(count)

    @rule()
    def start_segment(self) -> None:
        self.harness.server.start_segment()

    @rule(ahead=st.integers(0, 2))
    def deliver(self, ahead: int) -> None:
        if self.harness.server.channel:
            self.harness.deliver(min(ahead, len(self.harness.server.channel) - 1))

    @rule(index=st.integers(0, 10))
    def drop(self, index: int) -> None:
        self.harness.drop(index)

    @rule(index=st.integers(0, 10))
    def duplicate(self, index: int) -> None:
        self.harness.duplicate(index)

    @rule()
    def lag(self) -> None:
        self.harness.server.lag()

    @rule()
    def reconnect(self) -> None:
        self.harness.connect()

    @rule()
    def recreate(self) -> None:
        self.harness.server.recreate()

    @invariant()
    def the_machine_and_the_copy_agree(self) -> None:
        machine, copy = self.harness.machine, self.harness.copy
        if machine.revision is not None:
            assert (machine.revision, machine.epoch) == (copy.revision, copy.epoch)
            assert copy.epoch is not None
            assert machine.revision <= len(self.harness.server.history[copy.epoch])

    def teardown(self) -> None:
        self.harness.heal()
        self.harness.check_converged()
        self.harness.check_counters()


TestContinuityMachine = ContinuityMachine.TestCase
TestContinuityMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


def test_a_resubscribe_answered_with_nothing_ends_the_resync() -> None:
    """A resume from the current revision is answered with nothing; the pong of
    the ping sent behind it says so, and a later gap is asked about again."""
    from protocol.continuity import Continuity, Ignore, Resubscribe
    from protocol.types import Message, MessagesAppended, TranscriptEvent, TranscriptSnapshot

    def event(revision: int) -> TranscriptEvent:
        return TranscriptEvent(
            "t", "e", revision, 0, MessagesAppended(revision - 1, (Message("user", "x"),))
        )

    c = Continuity("t")
    c.on_baseline(TranscriptSnapshot("t", "e", 1, 0, (Message("user", "x"),), 0, ()))
    assert isinstance(c.on_connection_lost(), Resubscribe) and c.resyncing
    # Without the answer, a gap while resyncing is not asked about:
    assert isinstance(c.on_event(event(3)), Ignore)
    c.on_resubscribe_answered()
    assert not c.resyncing
    decision = c.on_event(event(4))
    assert isinstance(decision, Resubscribe) and decision.from_revision == 1
