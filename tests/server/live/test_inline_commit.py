"""Appends committed inline, in the caller's task (``AppendCommitter.append``):
an append to an idle transcript on the SQLite and memory stores makes no
committer task, and a caller cancelled while its inline write is under way
leaves the write whole: stored, applied to the live copy, and answered to a
retry with the same key as a duplicate with the first ack."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from protocol import wire
from protocol.types import TranscriptEvent
from server.live.appends import AppendCommitter, PendingAppend
from server.live.live_transcript import LiveTranscript
from server.store import SharedMemoryStore, SQLiteStore, Store
from server.store.base import AppendResult
from tests.support.servers import running_server
from tests.support.wsclient import RawClient


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return SharedMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path)


async def test_an_append_to_an_idle_transcript_makes_no_committer_task(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    queued: list[PendingAppend] = []
    submit = AppendCommitter.submit

    def counting(self: AppendCommitter, live: LiveTranscript, pending: PendingAppend) -> None:
        queued.append(pending)
        submit(self, live, pending)

    monkeypatch.setattr(AppendCommitter, "submit", counting)
    async with running_server(store=store) as server:
        hub = server.hub
        await hub.writes.create("t")
        for i in range(3):
            result = await hub.writes.append("t", [{"role": "user", "content": f"m{i}"}])
            assert result.receipt.revision == i + 1
        assert queued == []  # each one inline
        # A key seen before goes through the queue (and is a duplicate).
        first = await hub.writes.append(
            "t", [{"role": "user", "content": "k"}], idempotency_key="k"
        )
        again = await hub.writes.append(
            "t", [{"role": "user", "content": "k"}], idempotency_key="k"
        )
        assert len(queued) == 1
        assert again.duplicate and again.receipt == first.receipt
        snapshot = await hub.reads.snapshot("t")
        assert snapshot.revision == 4
        assert [m.content for m in snapshot.messages or ()] == ["m0", "m1", "m2", "k"]


async def test_a_caller_cancelled_during_its_inline_commit_leaves_the_write_whole(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path)
    submitted = asyncio.Event()
    answer = asyncio.Event()  # the store's answer reaches the caller once set
    answer.set()
    submit_appends = store.submit_appends
    relays: list[asyncio.Task[None]] = []

    def spying(
        items: Sequence[tuple[TranscriptEvent, str | None]],
    ) -> asyncio.Future[list[AppendResult | Exception]]:
        written = submit_appends(items)  # the write is queued in the store now
        held: asyncio.Future[list[AppendResult | Exception]] = (
            asyncio.get_running_loop().create_future()
        )

        async def relay() -> None:
            outcomes = await written
            await answer.wait()
            if not held.done():
                held.set_result(outcomes)

        relays.append(asyncio.create_task(relay()))
        submitted.set()
        return held

    store.submit_appends = spying  # type: ignore[method-assign]
    async with running_server(store=store) as server:
        hub = server.hub
        await hub.writes.create("t")
        await hub.writes.append("t", [{"role": "user", "content": "before"}])  # now live
        submitted.clear()
        answer.clear()
        caller = asyncio.create_task(
            hub.writes.append("t", [{"role": "user", "content": "cut?"}], idempotency_key="k")
        )
        await asyncio.wait_for(submitted.wait(), 10)
        assert not caller.done()  # its write is under way
        caller.cancel()
        answer.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(caller, 10)
        # The write landed whole: stored, applied to the live copy, its key remembered.
        stored = await store.load("t")
        assert stored is not None and stored.revision == 2
        snapshot = await hub.reads.snapshot("t")
        assert snapshot.revision == 2
        assert [m.content for m in snapshot.messages or ()] == ["before", "cut?"]
        retry = await hub.writes.append(
            "t", [{"role": "user", "content": "cut?"}], idempotency_key="k"
        )
        assert retry.duplicate
        assert (retry.receipt.revision, retry.receipt.start, retry.receipt.count) == (2, 1, 1)
        # And the transcript goes on from there.
        after = await hub.writes.append("t", [{"role": "user", "content": "after"}])
        assert after.receipt.revision == 3


async def test_appends_made_in_one_step_leave_together_on_the_memory_store() -> None:
    """A burst pipelined from one connection (here: one WebSocket message of
    20 append ops) is 20 inline appends in one step of the loop on the
    memory store, which answers at once; they leave as fewer messages than
    appends (the first inline caller delivers what the others applied), and
    each ack still comes after its increment. Delivering each append as it
    was applied made 20 messages per subscriber: the burst's ceiling fell
    from ~420,000 to ~80,000 deliveries/s."""
    async with running_server(store=SharedMemoryStore()) as server:
        await server.hub.writes.create("t")
        async with (
            await RawClient.connect(server.ws_url) as reader,
            await RawClient.connect(server.ws_url) as writer,
        ):
            await reader.send(op="subscribe", transcriptId="t")
            await reader.expect(wire.Baseline)
            ops = [
                msgspec.json.encode(
                    {
                        "op": "append",
                        "transcriptId": "t",
                        "ref": i,
                        "messages": [{"role": "user", "content": f"m{i}"}],
                    }
                )
                for i in range(20)
            ]
            await writer.ws.send(b"\n".join(ops).decode())
            revisions: list[int] = []
            messages = 0
            async with asyncio.timeout(10):
                while len(revisions) < 20:
                    data = await reader.ws.recv()
                    messages += 1
                    for frame in wire.split_frames(data):
                        revisions.append(msgspec.json.decode(frame)["event"]["revision"])
            assert revisions == list(range(1, 21))
            assert messages < 20, messages
            acks = [await writer.expect(wire.Ack) for _ in range(20)]
            assert [a.revision for a in acks] == list(range(1, 21))
