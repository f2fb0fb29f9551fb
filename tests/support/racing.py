"""Racing writers on one transcript, and the check of what the store then holds.

``race(urls, ...)``: ``CLIENTS`` WebSocket clients, client ``c`` on
``urls[c % len(urls)]``, each appending batches of 1-3 messages (sizes vary
by client and turn) to one transcript and waiting for its ack before its
next append: the load of a chat room whose writers sit on several replicas.
Half of them give an idempotency key, half do not. Every answer must be an
ack of a first attempt (``duplicate`` false).

``check_stored(stored, acks)``: read from a FRESH reader (a new store
instance or a new server process), the transcript holds exactly the
acknowledged messages, each batch at the indices and revision its ack named,
with no gap and nothing unacknowledged in between, and each client's batches
in the order of its acks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from protocol import wire
from protocol.types import MessagesAppended, TranscriptEvent
from tests.support.wsclient import RawClient

CLIENTS = 8
#: Appends per client: bounded in count (and ``TIMEOUT_S`` in time).
APPENDS = 25
TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Acked:
    client: int
    turn: int
    texts: tuple[str, ...]
    revision: int
    start: int
    count: int


def batch_size(client: int, turn: int) -> int:
    """1-3, varying by client and turn (equal sizes would hide a wrong index)."""
    return 1 + (client * 7 + turn * 5 + turn // 3) % 3


async def _writer(
    client: RawClient, transcript_id: str, c: int, appends: int, start_line: asyncio.Event
) -> list[Acked]:
    acked: list[Acked] = []
    await start_line.wait()
    for turn in range(appends):
        texts = tuple(f"c{c}-t{turn}-m{m}" for m in range(batch_size(c, turn)))
        ref = f"c{c}-{turn}"
        op: dict[str, object] = {
            "op": "append",
            "transcriptId": transcript_id,
            "messages": [{"role": "user", "content": t} for t in texts],
            "ref": ref,
        }
        if c % 2 == 0:
            op["idempotencyKey"] = ref
        await client.send(**op)
        while True:
            frame = await client.recv(timeout=TIMEOUT_S)
            if isinstance(frame, wire.ErrorFrame) and frame.ref == ref:
                raise AssertionError(f"client {c} turn {turn}: {frame.code}: {frame.message}")
            if isinstance(frame, wire.Ack) and frame.ref == ref:
                break
        assert not frame.duplicate, f"client {c} turn {turn}: a first attempt acked duplicate"
        assert frame.start is not None and frame.count is not None
        acked.append(Acked(c, turn, texts, frame.revision, frame.start, frame.count))
    return acked


async def race(
    clients: Sequence[RawClient], transcript_id: str, *, appends: int = APPENDS
) -> list[Acked]:
    """Every client appends ``appends`` batches at once (each waiting for its
    ack); all the acks, client by client, each client's in its order."""
    start_line = asyncio.Event()
    tasks = [
        asyncio.create_task(_writer(client, transcript_id, c, appends, start_line))
        for c, client in enumerate(clients)
    ]
    start_line.set()
    async with asyncio.timeout(TIMEOUT_S):
        results = await asyncio.gather(*tasks)
    return [a for acks in results for a in acks]


async def connect(urls: Sequence[str], count: int = CLIENTS) -> list[RawClient]:
    """``count`` clients, client ``c`` on ``urls[c % len(urls)]``."""
    return [await RawClient.connect(urls[c % len(urls)]) for c in range(count)]


def check_stored(events: Sequence[TranscriptEvent], acks: Sequence[Acked]) -> None:
    """``events``, the whole stored log read by a fresh reader, hold exactly
    the acknowledged batches at their acknowledged places (see the module
    docstring)."""
    by_revision = {a.revision: a for a in acks}
    assert len(by_revision) == len(acks), "two acks named one revision"
    assert [e.revision for e in events] == list(range(1, len(events) + 1)), "a gap in the log"
    length = 0
    for event in events:
        change = event.change
        assert isinstance(change, MessagesAppended), f"unexpected change {change!r}"
        assert change.start == length, (
            f"revision {event.revision} stored at index {change.start} "
            f"while the length was {length}"
        )
        ack = by_revision.get(event.revision)
        texts = tuple(m.content for m in change.messages)
        assert ack is not None, f"revision {event.revision} ({texts}) was never acknowledged"
        assert (ack.start, ack.count, ack.texts) == (change.start, len(change.messages), texts), (
            f"client {ack.client} turn {ack.turn} acked at {ack.start}+{ack.count} "
            f"but revision {event.revision} holds {texts} at {change.start}"
        )
        length = change.end
    assert len(events) == len(acks), "acknowledged appends are missing from the store"
    for c in {a.client for a in acks}:
        mine = [a for a in acks if a.client == c]
        assert [a.turn for a in mine] == list(range(len(mine)))
        assert [a.revision for a in mine] == sorted(a.revision for a in mine), (
            f"client {c}: its appends were stored out of the order of its acks"
        )


def check_messages(messages: Sequence[object], acks: Sequence[Acked]) -> None:
    """The messages a fresh replica serves (``GET /v1/transcripts/{id}``'s
    ``messages``) are the acknowledged ones at their acknowledged indices."""
    texts = [m["content"] for m in messages if isinstance(m, dict)]
    assert len(texts) == sum(a.count for a in acks)
    for a in acks:
        assert tuple(texts[a.start : a.start + a.count]) == a.texts
