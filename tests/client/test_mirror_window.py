"""``Mirror.load_earlier`` against a reader under the test's control: the
copy replaced by a baseline of another epoch while a read is under way is
never joined to messages of the old history (issue 18)."""

from __future__ import annotations

import asyncio

import pytest

from client_py import EpochChanged
from client_py.mirror import Mirror
from protocol.api import MessageRange
from protocol.consumer import Replaced, Subscription
from protocol.types import Message, Segment, TranscriptSnapshot


def message(i: int, epoch: str = "e1") -> Message:
    return Message(role="user", content=f"{epoch}:{i}")


def window(epoch: str, start: int, length: int, revision: int = 1) -> TranscriptSnapshot:
    return TranscriptSnapshot(
        transcript_id="t",
        epoch=epoch,
        revision=revision,
        start=start,
        messages=tuple(message(i, epoch) for i in range(start, length)),
        active_start=0,
        segments=(Segment(0, None),),
        length=length,
    )


class Reader:
    def __init__(self) -> None:
        self.asked: list[tuple[int, int, str]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.called = asyncio.Event()

    async def __call__(self, start: int, end: int, epoch: str) -> MessageRange:
        self.asked.append((start, end, epoch))
        self.called.set()
        await self.release.wait()
        return MessageRange(
            "t", epoch, 1, start, end, 20, [message(i, epoch) for i in range(start, end)]
        )


def mirrored(reader: Reader) -> Mirror:
    subscription = Subscription("t")
    mirror = Mirror(subscription, reader)
    update = subscription.on_baseline(window("e1", 15, 20))
    assert isinstance(update, Replaced)
    mirror._replaced(update.snapshot)
    return mirror


async def test_load_earlier_reads_in_chunks_and_prepends_in_order() -> None:
    reader = Reader()
    mirror = mirrored(reader)
    assert await mirror.load_earlier(12) == 12
    assert reader.asked == [(3, 15, "e1")]
    assert (mirror.start, [m.content for m in mirror.messages]) == (
        3,
        [f"e1:{i}" for i in range(3, 20)],
    )


async def test_a_new_epoch_during_the_read_is_refused() -> None:
    reader = Reader()
    reader.release.clear()
    mirror = mirrored(reader)
    loading = asyncio.create_task(mirror.load_earlier(5))
    await asyncio.wait_for(reader.called.wait(), 5)
    # The transcript was deleted and created again: a baseline of epoch e2.
    update = mirror.subscription.on_baseline(window("e2", 3, 5))
    assert isinstance(update, Replaced)
    mirror._replaced(update.snapshot)
    reader.release.set()
    with pytest.raises(EpochChanged):
        await loading
    assert (mirror.epoch, mirror.start, [m.content for m in mirror.messages]) == (
        "e2",
        3,
        ["e2:3", "e2:4"],
    )
