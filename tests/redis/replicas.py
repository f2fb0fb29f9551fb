"""Helpers of the replica tests: replicas as processes, subscribers that keep a
checked copy (``Follower``), writers over HTTP, and the authoritative copy
read straight from Redis."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

from protocol import wire
from protocol.consumer import (
    Applied,
    Consumer,
    ErrorReceived,
    InvalidFrameReceived,
    Replaced,
    Resubscribed,
    Stopped,
    Update,
)
from protocol.continuity import Continuity
from protocol.types import Message, MessagesAppended, TranscriptEvent
from server.store.base import StoredTranscript
from server.store.redis import RedisStore
from tests.support.servers import ServerProcess


@contextlib.asynccontextmanager
async def replicas(
    count: int, store_url: str, tmp_path: Path, *settings: str
) -> AsyncIterator[list[ServerProcess]]:
    """``count`` ``tsync serve`` processes on one store, started in parallel."""
    args = ["--set", "backplane_resync_s=0.5"]
    for setting in settings:
        args += ["--set", setting]
    procs = [
        ServerProcess(store=store_url, args=args, log_path=tmp_path / f"replica{i}.log")
        for i in range(count)
    ]
    try:
        await asyncio.gather(*(asyncio.to_thread(p.start) for p in procs))
        yield procs
    finally:
        for proc in procs:
            proc.kill()


class Follower:
    """A subscriber on one replica at a time, over the raw protocol, driving
    the consumer core (``protocol.consumer``) as the Python client does.

    The copy (``messages``) changes only as the core decides. ``events`` are
    the events applied since the last baseline, in the order they came;
    ``baselines`` counts baselines, ``base_revision`` is the last one's.
    """

    def __init__(self, transcript_id: str) -> None:
        self.transcript_id = transcript_id
        self.core = Consumer()
        self.subscription = self.core.subscribe(transcript_id)
        self.events: list[TranscriptEvent] = []
        self.baselines = 0
        self.base_revision = 0
        self.ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    @property
    def continuity(self) -> Continuity:
        return self.subscription.continuity

    @property
    def revision(self) -> int:
        return self.continuity.revision or 0

    @property
    def messages(self) -> list[Message]:
        copy = self.subscription.copy
        assert copy is not None and copy.messages is not None and copy.start == 0
        return list(copy.messages)

    async def attach(self, ws_url: str) -> None:
        """Connect to ``ws_url`` and (re)subscribe from the copy's revision;
        returns once the copy has its first baseline."""
        if self.ws is not None:
            await self.detach()
        self.ws = await websockets.connect(ws_url, compression=None)
        self.core.connection_made()
        await self._send_ops(self.ws)
        self._reader = asyncio.create_task(self._read(self.ws))
        await self.wait_revision(self.revision)

    async def _send_ops(self, ws: ClientConnection) -> None:
        for op in self.core.ops_to_send():
            await ws.send(wire.encode_json(op).decode())

    async def _read(self, ws: ClientConnection) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in ws:
                self.core.receive_data(message)
                await self._send_ops(ws)
                for update in self.core.updates_received():
                    self._on(update)
                self._changed.set()

    def _on(self, update: Update) -> None:
        match update:
            case Applied(event=event):
                self.events.append(event)
            case Replaced(snapshot=snapshot):
                assert snapshot.whole
                self.events = []
                self.baselines += 1
                self.base_revision = snapshot.revision
            case Stopped() | InvalidFrameReceived() | ErrorReceived():
                raise AssertionError(f"the subscription failed: {update}")
            case Resubscribed(reason="mismatch"):
                raise AssertionError(f"an event did not fit the copy: {update}")
            case Resubscribed(reason="digest"):
                raise AssertionError(f"an event's digest is not the copy's: {update}")

    async def wait_revision(self, revision: int, timeout: float = 10.0) -> None:
        """Return once the copy is at ``revision`` or later."""
        async with asyncio.timeout(timeout):
            while self.continuity.revision is None or self.continuity.revision < revision:
                self._changed.clear()
                await self._changed.wait()

    async def detach(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
            self.core.connection_lost()
        self.ws = None
        self._reader = None


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def create(http: httpx.AsyncClient, base: str, transcript_id: str) -> str:
    """Create an empty transcript; returns its epoch."""
    reply = await http.post(f"{base}/v1/transcripts", json={"id": transcript_id})
    assert reply.status_code == 201, reply.text
    epoch: str = reply.json()["epoch"]
    return epoch


async def append(
    http: httpx.AsyncClient,
    base: str,
    transcript_id: str,
    texts: Sequence[str],
    *,
    key: str | None = None,
    expected: int | None = None,
) -> httpx.Response:
    body: dict[str, Any] = {"messages": [user(t) for t in texts]}
    if key is not None:
        body["idempotencyKey"] = key
    if expected is not None:
        body["expectedRevision"] = expected
    return await http.post(f"{base}/v1/transcripts/{transcript_id}/messages", json=body)


async def authoritative(store_url: str, transcript_id: str) -> StoredTranscript:
    """The transcript as Redis holds it, read by a store of this process."""
    store = RedisStore(store_url)
    await store.open()
    try:
        stored = await store.load(transcript_id)
    finally:
        await store.close()
    assert stored is not None
    return stored


def messages_of(events: Sequence[TranscriptEvent]) -> list[Message]:
    out: list[Message] = []
    for event in events:
        if isinstance(event.change, MessagesAppended):
            out.extend(event.change.messages)
    return out


def texts_of(messages: Sequence[Message]) -> list[str]:
    return [m.content for m in messages if isinstance(m.content, str)]


async def check_converged(
    followers: Sequence[Follower], stored: StoredTranscript, timeout: float = 10.0
) -> None:
    """Every follower reaches the stored revision, its copy equals the stored
    messages, and the events it applied are the stored ones, in order."""
    await asyncio.gather(*(f.wait_revision(stored.revision, timeout) for f in followers))
    expected = messages_of(stored.events)
    for follower in followers:
        assert follower.revision == stored.revision
        assert follower.messages == expected
        assert follower.events == list(stored.events[follower.base_revision :])
