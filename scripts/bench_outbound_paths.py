#!/usr/bin/env python3
"""CPU time of ``OutboundQueue``'s hot paths, without sockets or a hub.

- the raw path: ``push_increments`` of one event to 10 connections whose raw
  frame write is always ready and keeps nothing (framed and written in the
  pusher's step);
- the queued path: an ASGI connection (every frame waits) taking an
  increment and a draft update (50 open drafts, so updates merge into their
  slots), its writer task sending them (to nowhere) every 500 pairs.

Run it in two checkouts, alternately, for an A/B (``time.process_time``:
this process's CPU, less sensitive than the wall clock to a busy machine)::

    for i in 1 2 3 4 5; do for d in . /tmp/old; do
      (cd $d && PYTHONPATH=$d taskset -c 0 python scripts/bench_outbound_paths.py); done; done
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Any

from protocol import wire
from protocol.types import Message, MessagesAppended, TranscriptEvent
from server.live.frames import EncodedDraft, EncodedEvent
from server.live.outbound import OutboundQueue


class NullRaw:
    """A raw frame write that is always ready and keeps nothing."""

    def raw_ready(self) -> bool:
        return True

    def raw_write(self, data: bytes) -> None:
        pass

    def raw_writelines(self, parts: Sequence[bytes | memoryview]) -> None:
        pass

    async def raw_writable(self) -> bool:
        return True

    def raw_fail(self, code: int) -> None:
        pass


async def _send(message: dict[str, Any]) -> None:
    pass


def _event(revision: int) -> EncodedEvent:
    change = MessagesAppended(revision - 1, (Message("user", "x" * 160),))
    return EncodedEvent(TranscriptEvent("t", "e", revision, 0, change))


def _queue(name: str, raw: NullRaw | None) -> OutboundQueue:
    queue = OutboundQueue(
        name,
        _send,
        queue_max_frames=10**9,
        queue_max_bytes=10**12,
        write_batch_bytes=65536,
        raw=raw,
    )
    queue.push_resume("t", 0, ())  # follows "t" from revision 0
    return queue


async def run(n: int) -> None:
    events = [_event(r) for r in range(1, n + 1)]
    queues = [_queue(f"c{i}", NullRaw()) for i in range(10)]
    started = time.process_time()
    for event in events:
        one = (event,)
        for queue in queues:
            queue.push_increments(one)
    raw_ns = (time.process_time() - started) / (n * len(queues)) * 1e9
    queue = _queue("asgi", None)
    queue.start()
    drafts = [
        EncodedDraft(
            wire.DraftFrame(
                seq=0,
                transcript_id="t",
                draft_id=f"d{i % 50}",
                role="assistant",
                n=i + 1,
                delta="x",
            )
        )
        for i in range(n)
    ]
    started = time.process_time()
    for i, (event, draft) in enumerate(zip(events, drafts, strict=True)):
        queue.push_increments((event,))
        queue.push_draft(draft)
        if i % 500 == 499:
            await queue.drain()
    await queue.drain()
    queued_ns = (time.process_time() - started) / n * 1e9
    await queue.stop()
    print(
        f"raw push_increments {raw_ns:.0f} ns/call; queued increment+draft {queued_ns:.0f} ns/pair"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    asyncio.run(run(parser.parse_args().events))


if __name__ == "__main__":
    main()
