"""The hub and connection queues without sockets: a fake ``send`` collects messages."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import msgspec
import pytest

from protocol import wire
from protocol.types import Message
from protocol.wire import Baseline, ErrorFrame, Increment, accept_transcript_update, split_frames
from server.config import ServerConfig
from server.live.hub import Hub
from server.live.outbound import OutboundQueue
from server.store.memory import MemoryStore
from tests.support.waiting import Changes, parked, within


class Socket:
    """Collects what a connection writes; can be made to block like a full TCP buffer.

    ``changes`` is notified on every message written (and on a send that
    has to wait), for tests to wait on what they need."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.sent = 0  # frames, in all the messages
        self.in_send = 0  # frames of a message waiting for ``open``
        self.open = asyncio.Event()
        self.open.set()
        self.changes = Changes()

    async def send(self, message: dict[str, Any]) -> None:
        frames = len(split_frames(message["text"]))
        if not self.open.is_set():
            self.in_send = frames
            self.changes.notify()
            await self.open.wait()
            self.in_send = 0
        self.messages.append(message["text"])
        self.sent += frames
        self.changes.notify()

    def frames(self) -> list[Any]:
        return [accept_transcript_update(f) for m in self.messages for f in split_frames(m)]

    async def got(self, frames: int) -> None:
        """Wait until the socket got ``frames`` frames in all (a test asserts
        there are no more: frames come in order, so any extra comes first)."""
        await self.changes.until(
            lambda: self.sent >= frames, lambda: f"{frames} frames (the socket got {self.sent})"
        )


@pytest.fixture
async def hub() -> Any:
    store = MemoryStore()
    await store.open()
    config = ServerConfig(
        store="memory", queue_max_frames=50, queue_max_bytes=1 << 20, write_delay_ms=0
    )
    h = Hub(store, config)
    await h.start()
    yield h
    await h.stop()


def connect(hub: Hub, name: str) -> tuple[OutboundQueue, Socket]:
    sock = Socket()
    conn = hub.subscriptions.connect(name, sock.send)
    conn.start()
    return conn, sock


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_each_event_is_encoded_once_whatever_the_subscribers(
    hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    original = wire.encode_event_json

    def counting(event: Any) -> bytes:
        nonlocal calls
        calls += 1
        return original(event)

    monkeypatch.setattr("server.live.frames.wire.encode_event_json", counting)
    await hub.writes.create("t", user("a"))
    conns = [connect(hub, f"c{i}") for i in range(10)]
    for conn, _ in conns:
        await hub.subscriptions.subscribe(conn, "t")
    for i in range(5):
        await hub.writes.append("t", user(str(i)))
    for _, sock in conns:
        await sock.got(6)  # everything expected arrived: no more encodes can be pending
    assert calls == 5
    expected = None
    for _, sock in conns:
        frames = sock.frames()
        assert [f.seq for f in frames] == list(range(1, 7))
        assert isinstance(frames[0], Baseline)
        body = [(f.event.revision, f.event.change.messages[0].content) for f in frames[1:]]
        assert body == [(2 + i, str(i)) for i in range(5)]
        expected = expected or body
        assert body == expected


async def test_frames_queued_together_go_out_in_one_message(
    hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    await hub.writes.create("t")
    conn, sock = connect(hub, "c")
    push = OutboundQueue.push_increments

    def pushed(queue: OutboundQueue, *args: Any, **kwargs: Any) -> None:
        push(queue, *args, **kwargs)
        sock.changes.notify()  # the socket is blocked: the pump's pushes are what changes

    monkeypatch.setattr(OutboundQueue, "push_increments", pushed)
    await hub.subscriptions.subscribe(conn, "t")
    await sock.got(1)  # the baseline
    sock.open.clear()  # the socket is busy: frames pile up
    for i in range(10):
        await hub.writes.append("t", user(str(i)))
    await sock.changes.until(
        lambda: sock.in_send + conn.queued[0] == 10, "the 10 increments queued or in a send"
    )
    sock.open.set()
    await sock.got(11)
    assert len(sock.messages) <= 3  # baseline, maybe one stuck increment, the rest coalesced
    assert [f.seq for f in sock.frames()] == list(range(1, 12))


async def test_subscribe_between_capture_and_pump_has_no_gap_or_repeat(hub: Hub) -> None:
    await hub.writes.create("t")
    live = await hub.load("t")
    conn, sock = connect(hub, "c")
    # Appends captured but not yet pumped when the subscribe arrives.
    for i in range(3):
        event = live.transcript.prepare_append(tuple([Message(role="user", content=str(i))]))
        assert event is not None
        await hub.store.append(event)
        live.transcript.apply(event)
    assert len(live.buffer) == 3
    await hub.subscriptions.subscribe(conn, "t")
    await hub.writes.append("t", user("after"))
    await sock.got(2)  # the baseline and an increment; a repeat would come before "after"
    frames = sock.frames()
    assert isinstance(frames[0], Baseline) and frames[0].snapshot.revision == 3
    assert [f.event.revision for f in frames[1:]] == [4]


async def test_a_blocked_socket_lags_only_its_connection(hub: Hub) -> None:
    await hub.writes.create("t")
    slow, slow_sock = connect(hub, "slow")
    fast, fast_sock = connect(hub, "fast")
    await hub.subscriptions.subscribe(slow, "t")
    await hub.subscriptions.subscribe(fast, "t")
    await slow_sock.got(1)
    await fast_sock.got(1)
    slow_sock.open.clear()
    for i in range(120):
        await hub.writes.append("t", user(str(i)))
        await fast_sock.got(i + 2)  # delivered (to the slow queue too: the same push)
    frames, _ = slow.queued
    assert frames <= 51
    assert not slow.follows("t") and fast.follows("t")
    assert [f.event.revision for f in fast_sock.frames()[1:]] == list(range(1, 121))
    slow_sock.open.set()
    await slow_sock.changes.until(
        lambda: slow.queued[0] == 0 and slow_sock.in_send == 0, "the slow queue sent all it had"
    )
    got = slow_sock.frames()
    assert [f.seq for f in got] == list(
        range(1, len(got) + 1)
    )  # no seq gap: dropped ones took none
    errors = [f for f in got if isinstance(f, ErrorFrame)]
    assert [(e.code, e.transcript_id) for e in errors] == [("lagged", "t")]
    increments = [f.event.revision for f in got if isinstance(f, Increment)]
    assert increments == list(range(1, len(increments) + 1))
    # Resume from where it got: only the missing increments follow.
    last = increments[-1] if increments else 0
    epoch = hub.live["t"].transcript.epoch
    mode = await hub.subscriptions.subscribe(slow, "t", from_revision=last, epoch=epoch)
    await within(slow.drain(), "the resume or baseline sent")
    more = [f.event.revision for f in slow_sock.frames() if isinstance(f, Increment)][
        len(increments) :
    ]
    if mode == "resume":
        assert more == list(range(last + 1, 121))
    else:
        assert mode == "baseline"
        assert isinstance(slow_sock.frames()[-1], Baseline)


async def test_queued_appends_commit_together_in_order_with_each_answer_right(
    tmp_path: Any,
) -> None:
    from server.errors import RevisionConflict
    from server.store.sqlite import SQLiteStore

    # Appends queue up behind each commit.
    store = SQLiteStore(tmp_path / "data")
    await store.open()
    h = Hub(store, ServerConfig(store="sqlite"))
    await h.start()
    try:
        await h.writes.create("t")
        first = await h.writes.append("t", user("first"), idempotency_key="k")
        commits = store.commits
        calls = [
            h.writes.append("t", user(f"m{i}"), idempotency_key=f"key-{i}") for i in range(40)
        ] + [
            h.writes.append("t", user("again"), idempotency_key="k"),  # a replay
            h.writes.append("t", user("stale"), expected_revision=1),  # a conflict
            h.writes.append("t", []),  # an empty batch
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        acks, replay, conflict, empty = results[:40], results[40], results[41], results[42]
        assert [a.receipt.revision for a in acks] == list(range(2, 42))  # type: ignore[union-attr]
        assert replay.duplicate and replay.receipt == first.receipt  # type: ignore[union-attr]
        assert isinstance(conflict, RevisionConflict)
        assert empty.receipt.count == 0  # type: ignore[union-attr]
        # Fewer transactions than appends: they were committed in batches.
        assert store.commits - commits < 41
        live = h.live["t"]
        texts = [m.content for m in live.transcript.snapshot().messages]
        assert texts == ["first"] + [f"m{i}" for i in range(40)]
        stored = await store.load("t")
        assert stored is not None and [e.revision for e in stored.events] == list(range(1, 42))
    finally:
        await h.stop()
        await store.close()


async def test_an_append_to_a_transcript_still_loading_holds_the_reader_back() -> None:
    """Appends read while the first one loads the transcript would find it
    loaded and queue ahead of it (the SIGKILL test once saw acks 0, 2..7, 1):
    so the reader waits for that first append before reading on."""
    from server.web.ws import OpHandler

    class GatedStore(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.loading = asyncio.Event()
            self.gate = asyncio.Event()

        async def load_recent(self, transcript_id: str, *, messages: int | None = None) -> Any:
            self.loading.set()
            await self.gate.wait()  # a slow disk, under the test's control
            return await super().load_recent(transcript_id, messages=messages)

    store = GatedStore()
    h = Hub(store, ServerConfig(store="memory"))
    await h.start()
    try:
        await h.writes.create("cold")
        conn, sock = connect(h, "c")
        handler = OpHandler(h, conn)

        def op(i: int) -> str:
            body = {"op": "append", "transcriptId": "cold", "ref": i, "messages": user(str(i))}
            return msgspec.json.encode(body).decode()

        first = asyncio.create_task(handler.handle(op(0)))
        await within(store.loading.wait(), "the first append loading the transcript")
        assert not first.done()  # still loading: nothing more is read
        store.gate.set()
        await first
        for i in range(1, 20):
            await handler.handle(op(i))
        await handler.settle()
        await sock.got(20)
        acks = [f for f in sock.frames() if f.__class__.__name__ == "Ack"]
        assert [a.ref for a in acks] == list(range(20))
        assert [a.revision for a in acks] == list(range(1, 21))
    finally:
        await h.stop()


async def test_the_hub_remembers_as_many_keys_as_its_store() -> None:
    store = MemoryStore(idempotency_retention=2)
    await store.open()
    h = Hub(store, ServerConfig(store="memory"))
    await h.start()
    try:
        await h.writes.create("t")
        for key in ("k1", "k2", "k3"):
            await h.writes.append("t", user(key), idempotency_key=key)
        assert (await h.writes.append("t", user("again"), idempotency_key="k3")).duplicate
        # k1 is forgotten by both: a retry with it is a new append.
        result = await h.writes.append("t", user("k1 again"), idempotency_key="k1")
        assert not result.duplicate and result.receipt.revision == 4
    finally:
        await h.stop()


async def test_an_evicted_transcript_is_freed_without_waiting_for_the_garbage_collector(
    hub: Hub,
) -> None:
    """Issue 24 item 4: the pump's cancelled task kept its traceback, whose
    frame held the transcript, which held the task: every evicted copy (its
    messages) waited for a full collection, and RSS grew with every load
    under the ``max_live_bytes`` cap. Reference counting alone frees it now."""
    await hub.writes.create("gone", [{"role": "user", "content": "x" * 1000}])
    await hub.reads.snapshot("gone", 0, 0)
    live = hub.live["gone"]
    pump = live.pump
    await parked(pump)  # the pump waits for events (its frame is what the bug held)
    freed = weakref.ref(live)
    gc.disable()
    try:
        hub._evict(live)
        del live
        await within(asyncio.wait([pump]), "the evicted transcript's pump to end")
        assert pump.cancelled()
        del pump
        assert freed() is None
    finally:
        gc.enable()
