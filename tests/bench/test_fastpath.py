"""The fast subscriber check (``tsync bench --fast``) on frames encoded by the
real wire codec: what it counts, when it resubscribes, the latency it reads."""

from __future__ import annotations

import json

from client_py.bench.fastpath import FastCheck, sent_ns
from client_py.bench.stats import GroupStats
from protocol import wire
from protocol.types import (
    Message,
    MessagesAppended,
    Segment,
    SegmentStarted,
    TranscriptEvent,
    TranscriptSnapshot,
)

T0 = 1_700_000_000_000_000_000


def baseline(seq: int, revision: int, length: int, *, epoch: str = "e") -> bytes:
    messages = tuple(Message("user", str(i)) for i in range(length))
    snapshot = TranscriptSnapshot("t", epoch, revision, 0, messages, 0, (Segment(0, None),), length)
    return wire.encode_json(wire.Baseline(seq=seq, snapshot=snapshot))


def increment(seq: int, revision: int, start: int, *, epoch: str = "e", tid: str = "t") -> bytes:
    message = Message("user", "x", metadata={"t": T0 + revision, "w": 0})
    event = TranscriptEvent(tid, epoch, revision, 0, MessagesAppended(start, (message,)))
    return wire.increment_json(seq, wire.encode_event_json(event))


def segment(seq: int, revision: int, start: int, end: int) -> bytes:
    event = TranscriptEvent("t", "e", revision, 0, SegmentStarted(0, start, end))
    return wire.encode_json(wire.Increment(seq=seq, event=event))


def error(seq: int, code: str) -> bytes:
    return wire.encode_json(wire.ErrorFrame(seq=seq, code=code, message="m", transcript_id="t"))


def fresh() -> tuple[FastCheck, GroupStats]:
    stats = GroupStats()
    check = FastCheck("t", stats)
    assert json.loads(check.subscribe_op()) == {"op": "subscribe", "transcriptId": "t"}
    return check, stats


def test_a_clean_stream_is_applied_and_timed() -> None:
    check, stats = fresh()
    # Frames joined by newlines in one message, as the server coalesces them.
    message = b"\n".join([baseline(1, 2, 2), increment(2, 3, 2), increment(3, 4, 3)])
    resubscribe, baselines = check.receive(message, T0 + 1_000_000)
    assert not resubscribe and baselines == [(None, 2)]
    assert (check.revision, check.length, stats.delivered, stats.frames) == (4, 4, 2, 3)
    assert stats.latency.summary_ms()["count"] == 2
    resubscribe, _ = check.receive(segment(4, 5, 4, 4), T0)
    assert not resubscribe and check.revision == 5 and check.length == 4
    counters = (stats.gaps, stats.seq_gaps, stats.repeats, stats.invalid, stats.foreign)
    assert counters == (0, 0, 0, 0, 0)
    op = json.loads(check.subscribe_op())
    assert (op["fromRevision"], op["epoch"]) == (5, "e")


def test_gaps_and_repeats_are_counted_and_a_gap_resubscribes() -> None:
    check, stats = fresh()
    check.receive(baseline(1, 0, 0), T0)
    assert check.receive(increment(2, 1, 0), T0) == (False, [])
    assert check.receive(increment(3, 1, 0), T0) == (False, [])  # a repeat: ignored
    assert stats.repeats == 1 and check.revision == 1
    assert check.receive(increment(4, 3, 2), T0)[0]  # revision 2 missing
    assert stats.gaps == 1 and check.revision == 1
    assert check.receive(increment(6, 2, 1), T0) == (False, [])  # seq 5 missing
    assert stats.seq_gaps == 1
    assert check.receive(increment(7, 3, 5), T0)[0]  # starts past the end
    assert check.receive(increment(8, 3, 2, tid="u"), T0) == (False, [])
    assert stats.foreign == 1
    assert check.receive(increment(9, 3, 2, epoch="other"), T0)[0]
    assert check.receive(b'{"type":"increment","seq":', T0) == (False, [])
    assert stats.invalid == 1


def test_lagged_resubscribes_and_a_new_connection_numbers_again() -> None:
    check, stats = fresh()
    check.receive(baseline(1, 3, 3), T0)
    assert check.receive(error(2, "lagged"), T0) == (True, [])
    assert stats.lagged == 1 and stats.errors == 0
    check.connection_made()
    assert check.receive(baseline(1, 7, 7), T0) == (False, [(3, 7)])
    check.receive(error(2, "not-found"), T0)
    assert stats.errors == 1 and stats.seq_gaps == 0


def test_the_writer_timestamp_is_read_from_raw_bytes() -> None:
    assert sent_ns(b'{"role":"user","content":"x","metadata":{"t":123,"w":0}}') == 123
    assert sent_ns(b'{"role":"user","content":"x"}') is None
