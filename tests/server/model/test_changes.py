"""server.model.changes: the ports' presets, record_of, the errors and ChangeBuffer."""

from __future__ import annotations

import asyncio

import pytest

from protocol.types import (
    Message,
    MessagesAppended,
    SegmentStarted,
    TranscriptEvent,
    TranscriptRecord,
)
from server.model.changes import (
    ChangeBuffer,
    ChangeCapture,
    Observation,
    RecordingObservation,
    record_of,
)
from server.model.transcript import ChangeCaptureError, ObservationError, Transcript
from tests.support.waiting import parked

TIMEOUT = 2.0


def _event(revision: int, *, transcript_id: str = "t") -> TranscriptEvent:
    return TranscriptEvent(
        transcript_id=transcript_id,
        epoch="e",
        revision=revision,
        occurred_at=1000 + revision,
        change=MessagesAppended(start=revision - 1, messages=(Message("user", "hi"),)),
    )


# --- record_of and the recording observation --------------------------------------


def test_record_of_an_append_is_the_appended_range_without_bodies() -> None:
    messages = (Message("user", "a"), Message("assistant", "b"), Message("user", "c"))
    event = TranscriptEvent(
        transcript_id="t",
        epoch="e",
        revision=4,
        occurred_at=123,
        change=MessagesAppended(start=7, messages=messages),
    )
    assert record_of(event) == TranscriptRecord(
        transcript_id="t", revision=4, kind="messages-appended", start=7, end=10, occurred_at=123
    )


def test_record_of_a_segment_start_is_the_new_segment() -> None:
    event = TranscriptEvent(
        transcript_id="t",
        epoch="e",
        revision=9,
        occurred_at=5,
        change=SegmentStarted(previous_start=2, start=6, end=8),
    )
    assert record_of(event) == TranscriptRecord(
        transcript_id="t", revision=9, kind="segment-started", start=6, end=8, occurred_at=5
    )


def test_recording_observation_keeps_records_in_order() -> None:
    observation = RecordingObservation()
    assert isinstance(observation, Observation)
    records = [record_of(_event(r)) for r in (1, 2, 3)]
    for record in records:
        observation.observe(record)
    assert observation.records == records


# --- errors ------------------------------------------------------------------------


def test_change_capture_error_carries_events_and_cause() -> None:
    cause = OSError("disk full")
    events = (_event(3), _event(4))
    error = ChangeCaptureError(events, cause)
    assert error.events == events
    assert error.cause is cause
    assert error.__cause__ is cause
    assert "3, 4" in str(error)
    assert "disk full" in str(error)


def test_observation_error_carries_records_and_cause() -> None:
    cause = RuntimeError("metrics down")
    records = (record_of(_event(1)),)
    error = ObservationError(records, cause)
    assert error.records == records
    assert error.cause is cause
    assert error.__cause__ is cause
    assert "metrics down" in str(error)


# --- ChangeBuffer ------------------------------------------------------------------


def test_change_buffer_is_a_change_capture() -> None:
    assert isinstance(ChangeBuffer(), ChangeCapture)


def test_take_returns_an_immutable_batch_in_capture_order_and_empties() -> None:
    # No event loop is running here: capture must not need one.
    buffer = ChangeBuffer()
    assert buffer.take() == ()
    events = [_event(1), _event(2), _event(3)]
    for event in events:
        buffer.capture(event)
    assert len(buffer) == 3
    batch = buffer.take()
    assert isinstance(batch, tuple)
    assert batch == tuple(events)
    assert all(taken is made for taken, made in zip(batch, events, strict=True))
    assert len(buffer) == 0
    assert buffer.take() == ()
    # Later captures do not reach a batch already taken.
    buffer.capture(_event(4))
    assert batch == tuple(events)
    assert buffer.take() == (_event(4),)


def test_one_buffer_shared_by_two_transcripts_keeps_capture_order() -> None:
    buffer = ChangeBuffer()
    a = Transcript(id="a", changes=buffer)
    b = Transcript(id="b", changes=buffer)
    a.append([{"role": "user", "content": "a1"}])
    b.append([{"role": "user", "content": "b1"}])
    a.append([{"role": "assistant", "content": "a2"}])
    b.start_segment()
    batch = buffer.take()
    assert [(e.transcript_id, e.revision) for e in batch] == [
        ("a", 1),
        ("b", 1),
        ("a", 2),
        ("b", 2),
    ]
    assert len(buffer) == 0
    # Each transcript's own events replay to that transcript.
    for source in (a, b):
        own = [e for e in batch if e.transcript_id == source.id]
        assert Transcript.restore(own).snapshot() == source.snapshot()


async def test_wait_returns_at_once_when_something_is_pending() -> None:
    buffer = ChangeBuffer()
    buffer.capture(_event(1))
    await asyncio.wait_for(buffer.wait(), TIMEOUT)
    assert len(buffer) == 1  # wait takes nothing


async def test_wait_blocks_until_a_capture() -> None:
    buffer = ChangeBuffer()
    waiter = asyncio.create_task(buffer.wait())
    await parked(waiter)  # no capture: it waits
    buffer.capture(_event(1))
    await asyncio.wait_for(waiter, TIMEOUT)
    assert buffer.take() == (_event(1),)


async def test_capture_never_runs_the_consumer_inside_capture() -> None:
    buffer = ChangeBuffer()
    consumed: list[TranscriptEvent] = []
    consumer_started = asyncio.Event()

    async def consumer() -> None:
        consumer_started.set()
        await buffer.wait()
        consumed.extend(buffer.take())

    task = asyncio.create_task(consumer())
    await asyncio.wait_for(consumer_started.wait(), TIMEOUT)
    transcript = Transcript(id="t", changes=buffer)
    transcript.append([{"role": "user", "content": "hi"}])
    # capture has returned and the change is done, but the consumer has not run yet.
    assert consumed == []
    assert len(buffer) == 1
    await asyncio.wait_for(task, TIMEOUT)
    assert [e.revision for e in consumed] == [1]
    assert len(buffer) == 0


async def test_a_waiter_whose_batch_was_taken_waits_again() -> None:
    buffer = ChangeBuffer()
    waiter = asyncio.create_task(buffer.wait())
    await parked(waiter)
    buffer.capture(_event(1))
    assert buffer.take() == (_event(1),)  # someone else took it before the waiter ran
    # What is tested is that the woken waiter goes back to waiting: nothing
    # happens to wait for, so the test lets exactly the two steps run that
    # wake it (the capture's call_soon) and then run it.
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not waiter.done()
    buffer.capture(_event(2))
    await asyncio.wait_for(waiter, TIMEOUT)
    assert len(buffer) == 1


def test_capture_error_of_a_transcript_is_a_change_capture_error() -> None:
    class Refusing:
        def capture(self, event: TranscriptEvent) -> None:
            raise RuntimeError("full")

    transcript = Transcript(id="t", changes=Refusing())
    with pytest.raises(ChangeCaptureError) as caught:
        transcript.append([{"role": "user", "content": "hi"}])
    assert [e.revision for e in caught.value.events] == [1]
    assert isinstance(caught.value.cause, RuntimeError)
