"""protocol.consumer: the consumer core, fed bytes with no socket.

Unit behaviour first (the frame-sequence cases shared with the JavaScript
port are in ``test_consumer_cases.py``), then the model check of
``test_continuity.py`` played against the whole core: a server holding the
true history answers the core's ops (subscribes and barrier pings) through a
channel that drops, duplicates and reorders frames, lags and cuts the
connection. Whatever happens, every event the core applies is the true one,
its copy only ever changes through the entity's own checks, and after a
final clean reconnect the copy equals the server's transcript and no resync
is left outstanding (the barrier answers even a resume that got nothing).
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.consumer import (
    Answered,
    Applied,
    Consumer,
    InvalidFrameReceived,
    Replaced,
    Resubscribed,
    Stopped,
    Subscription,
    Synced,
    Update,
)
from protocol.state import TranscriptState
from protocol.types import (
    Message,
    MessagesAppended,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
)
from protocol.wire import (
    Baseline,
    ErrorFrame,
    Increment,
    Ping,
    Pong,
    Subscribe,
    encode_json,
    encode_msgpack,
)
from tests.protocol.test_continuity import ACTIONS, ChannelFaults, Server, T, run

E = "e1"


def _message(i: int) -> Message:
    return Message(role="user", content=f"m{i}")


def _snapshot(revision: int, length: int, start: int = 0) -> TranscriptSnapshot:
    return TranscriptSnapshot(
        T,
        E,
        revision,
        start,
        tuple(_message(i) for i in range(start, length)),
        0,
        (Segment(0, None),),
        length,
    )


def _append(revision: int, start: int, count: int = 1) -> TranscriptEvent:
    messages = tuple(_message(start + i) for i in range(count))
    return TranscriptEvent(T, E, revision, 0, MessagesAppended(start, messages))


def _live(consumer: Consumer, revision: int = 2, length: int = 2) -> None:
    consumer.subscribe(T)
    consumer.connection_made()
    consumer.receive_frame(Baseline(seq=1, snapshot=_snapshot(revision, length)))
    consumer.receive_frame(Pong(seq=2, ref="sync:1"))
    consumer.ops_to_send()
    consumer.updates_received()


# --- unit behaviour ------------------------------------------------------------------


def test_text_bytes_and_msgpack_are_all_taken() -> None:
    consumer = Consumer()
    _live(consumer)
    consumer.receive_data(encode_json(Increment(seq=3, event=_append(3, 2))).decode())
    consumer.receive_data(encode_json(Increment(seq=4, event=_append(4, 3))))
    consumer.receive_data(encode_msgpack(Increment(seq=5, event=_append(5, 4))))
    updates = consumer.updates_received()
    assert [type(u) for u in updates] == [Applied, Applied, Applied]
    copy = consumer.subscriptions[T].copy
    assert copy is not None and copy.revision == 5 and copy.length == 5


def test_a_copy_is_the_entity_state_type_and_hands_out_the_same_messages() -> None:
    consumer = Consumer()
    _live(consumer)
    event = _append(3, 2, 2)
    consumer.receive_frame(Increment(seq=3, event=event))
    copy = consumer.subscriptions[T].copy
    assert isinstance(copy, TranscriptState)
    assert copy.get(3) is event.change.messages[1]  # type: ignore[union-attr]
    assert copy.snapshot() == _snapshot(3, 4)


def test_the_updates_and_ops_lists_are_taken_once() -> None:
    consumer = Consumer()
    consumer.subscribe(T)
    consumer.connection_made()
    assert consumer.ops_to_send() == [Subscribe(transcript_id=T), Ping(ref="sync:1")]
    assert consumer.ops_to_send() == []
    assert [u.kind for u in consumer.updates_received()] == ["resubscribed"]
    assert consumer.updates_received() == []


def test_updates_are_frozen_and_hashable() -> None:
    consumer = Consumer()
    _live(consumer)
    consumer.receive_frame(Increment(seq=3, event=_append(3, 2)))
    (update,) = consumer.updates_received()
    with pytest.raises(AttributeError):
        update.transcript_id = "x"  # type: ignore[misc]
    assert hash(update) == hash(Applied(T, _append(3, 2)))


def test_an_error_for_a_barrier_ping_is_not_the_drivers() -> None:
    consumer = Consumer()
    _live(consumer)
    consumer.receive_frame(ErrorFrame(seq=3, code="rate-limited", message="", ref="sync:1"))
    consumer.receive_frame(ErrorFrame(seq=4, code="rate-limited", message="", ref="mine"))
    kinds = [u.kind for u in consumer.updates_received()]
    assert kinds == ["error", "answered"]


def test_a_pong_whose_ref_only_looks_like_a_barrier_is_the_drivers() -> None:
    consumer = Consumer()
    _live(consumer)
    consumer.receive_frame(Pong(seq=3, ref="sync:x"))
    consumer.receive_frame(Pong(seq=4, ref=7))
    updates = consumer.updates_received()
    assert all(isinstance(u, Answered) for u in updates) and len(updates) == 2


def test_an_old_barrier_answers_the_resyncs_before_it_but_says_nothing() -> None:
    consumer = Consumer()
    _live(consumer)
    consumer.receive_frame(ErrorFrame(seq=3, code="lagged", message="", transcript_id=T))
    consumer.subscribe("t2")
    assert [op.ref for op in consumer.ops_to_send() if isinstance(op, Ping)] == ["sync:2", "sync:3"]
    consumer.receive_frame(Pong(seq=4, ref="sync:2"))
    assert not consumer.subscriptions[T].continuity.resyncing
    assert consumer.subscriptions["t2"].continuity.resyncing  # its baseline is still owed
    assert not any(isinstance(u, Synced) for u in consumer.updates_received())
    consumer.receive_frame(Pong(seq=5, ref="sync:3"))
    assert consumer.updates_received() == [Synced(3)]


def test_a_snapshot_built_in_python_without_the_invariants_drops_the_copy() -> None:
    consumer = Consumer()
    _live(consumer)
    broken = msgspec.structs.replace(_snapshot(3, 3), segments=())
    consumer.receive_frame(Baseline(seq=3, snapshot=broken))  # not validated: built here
    (update,) = consumer.updates_received()
    assert update == Resubscribed(T, "mismatch", None, None)
    assert consumer.subscriptions[T].copy is None


def test_following_a_state_applies_what_continues_it_and_nothing_else() -> None:
    state = TranscriptState(T, E)
    state.apply(_append(1, 0, 3))
    follower = Subscription.following(state)
    assert follower.on_event(_append(1, 0, 3)) is None  # a repeat
    assert follower.on_event(_append(2, 3)) == Applied(T, _append(2, 3))
    assert state.revision == 1  # the follower's copy is its own
    wrong = TranscriptEvent(T, E, 3, 0, SegmentStarted(previous_start=1, start=2, end=4))
    assert follower.on_event(wrong) == Resubscribed(T, "mismatch", None, None)
    gap = Subscription.following(state).on_event(_append(5, 4))
    assert gap == Resubscribed(T, "gap", 1, E)
    epoch = Subscription.following(state).on_event(
        msgspec.structs.replace(_append(2, 3), epoch="e2")
    )
    assert epoch == Resubscribed(T, "epoch", None, None)


def test_a_following_copy_keeps_no_messages() -> None:
    state = TranscriptState(T, E)
    state.apply(_append(1, 0, 3))
    copy = Subscription.following(state).copy
    assert copy is not None and copy.messages is None and copy.start == copy.length == 3
    with pytest.raises(IndexError, match="keeps no messages"):
        copy.get(0)


def test_a_stopped_subscription_can_be_made_again() -> None:
    consumer = Consumer()
    _live(consumer)
    consumer.receive_frame(ErrorFrame(seq=3, code="not-found", message="", transcript_id=T))
    assert consumer.updates_received() == [Stopped(T, "not-found", "")]
    again = consumer.subscribe(T)
    assert consumer.ops_to_send() == [Subscribe(transcript_id=T), Ping(ref="sync:2")]
    assert again.copy is None


# --- the model ---------------------------------------------------------------------------


class ConsumerHarness(ChannelFaults):
    """A ``Consumer`` connected to the model ``Server`` of ``test_continuity``."""

    def __init__(self, retention: int, *, keep_messages: bool = True) -> None:
        self.server = Server(retention)
        self.consumer = Consumer(keep_messages=keep_messages)
        self.subscription = self.consumer.subscribe(T)
        self.applied: list[TranscriptEvent] = []
        self.connect()

    def connect(self) -> None:
        self.consumer.connection_lost()
        self.server.new_connection()
        self.consumer.connection_made()
        self._serve()

    def _serve(self) -> None:
        """The server handles the ops in order (a subscribe, then its barrier)."""
        for op in self.consumer.ops_to_send():
            if isinstance(op, Subscribe):
                self.server.answer(op)
            else:
                assert isinstance(op, Ping)
                self.server.send(Pong(seq=1, ref=op.ref))

    def deliver(self, index: int = 0, count: int = 1) -> None:
        channel = self.server.channel
        frames = channel[index : index + count]
        del channel[index : index + count]
        self.consumer.receive_data(b"\n".join(encode_json(f) for f in frames))
        self._serve()
        for update in self.consumer.updates_received():
            self._check(update)

    def _check(self, update: Update) -> None:
        if isinstance(update, Applied):
            event = update.event
            # Safety: an applied event is the true one.
            assert event == self.server.history[event.epoch][event.revision - 1]
            self.applied.append(event)
        elif isinstance(update, Replaced):
            snapshot = update.snapshot
            assert snapshot.messages == tuple(
                m for e in self.server.history[snapshot.epoch][: snapshot.revision]
                if isinstance(e.change, MessagesAppended) for m in e.change.messages
            )  # fmt: skip
        assert not isinstance(update, Stopped | InvalidFrameReceived), update
        assert not (isinstance(update, Resubscribed) and update.reason == "mismatch"), update

    def heal(self) -> None:
        """A clean reconnect, then everything delivered, several frames per message."""
        self.connect()
        for _ in range(10_000):
            if not self.server.channel:
                break
            self.deliver(0, 3)
        assert not self.server.channel

    def check_converged(self) -> None:
        server, subscription = self.server, self.subscription
        copy = subscription.copy
        assert copy is not None
        assert (copy.revision, copy.epoch) == (server.revision, server.epoch)
        assert copy.length == len(server.messages)
        assert copy.active_start == server.active_start
        assert list(copy.segments()) == server.segments
        if copy.messages is not None:
            assert copy.messages == server.messages
        # The barrier answers even a resume that got no frame: nothing is outstanding.
        assert not subscription.continuity.resyncing


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 4), st.booleans(), st.lists(ACTIONS, min_size=20, max_size=80))
def test_the_core_converges_through_a_faulty_channel(
    retention: int, keep_messages: bool, actions: list[tuple[str, int]]
) -> None:
    harness = ConsumerHarness(retention, keep_messages=keep_messages)
    for action, arg in actions:
        run(harness, action, arg)  # type: ignore[arg-type]
    harness.heal()
    harness.check_converged()
    counters = harness.subscription.continuity.counters
    assert counters.dropped == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 4), st.lists(st.sampled_from(["append", "deliver", "deliver"]), max_size=40))
def test_over_a_perfect_channel_the_core_repairs_nothing(
    retention: int, actions: list[str]
) -> None:
    harness = ConsumerHarness(retention)
    for action in actions:
        run(harness, action, 1)  # type: ignore[arg-type]
    harness.heal()
    harness.check_converged()
    c = harness.subscription.continuity.counters
    assert (c.gaps, c.repeats_ignored, c.skipped, c.lagged, c.epoch_changes, c.dropped) == (
        0,
        0,
        0,
        0,
        0,
        0,
    )
    assert harness.consumer.seq.counters.gaps == 0
