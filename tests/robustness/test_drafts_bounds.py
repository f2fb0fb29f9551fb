"""Issue 24, items 2 and 6, against a real ``tsync serve``: drafts (messages
being streamed, never history) are inside the memory bounds, and the
catch-up behind a subscribe never makes a reading client lagged or closed.

Before: 30 transcripts x 16 drafts x 1 MiB with nobody subscribed grew RSS
from 50 to 1,231 MB in 6.4 s (kept forever by keep-alives), a transcript with
an open draft was never let go (other users got 503), and every subscribe to
a transcript with 1,000 cancelled drafts sent 1,000 close frames that counted
toward 4008."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import httpx
import msgspec
import websockets

from protocol import codes, wire
from protocol.types import MessagesAppended
from tests.robustness.harness import Probe, Target, assert_responsive, probing
from tests.support.wsclient import RawClient

TRANSCRIPTS = 30
DRAFTS = 16
DRAFT_TEXT = "x" * ((1 << 20) - 1024)  # just under max_message_bytes (1 MiB)
MAX_DRAFT_BYTES = 64 << 20  # the default


def _p90(probe: Probe) -> float:
    ordered = sorted(probe.rtts)
    return ordered[int(0.9 * (len(ordered) - 1))] if ordered else 0.0


def _create(target: Target, ids: list[str]) -> None:
    with httpx.Client(base_url=target.url, timeout=30) as http:
        for tid in ids:
            response = http.post("/v1/transcripts", json={"id": tid})
            assert response.status_code == 201, response.text


async def _answers(client: RawClient, refs: set[Any], timeout: float = 60) -> dict[Any, Any]:
    """The ack or error of each op whose ``ref`` is in ``refs``."""
    got: dict[Any, Any] = {}
    while len(got) < len(refs):
        frame = await client.recv(timeout)
        ref = getattr(frame, "ref", None)
        if ref in refs and isinstance(frame, wire.Ack | wire.ErrorFrame):
            got[ref] = frame
    return got


def test_drafts_nobody_reads_are_bounded_and_pin_no_transcript(
    target_factory: Callable[..., Target],
) -> None:
    """The issue's reproduction at full size: 30 transcripts x 16 drafts of
    1 MiB, nobody subscribed. The drafts past ``max_draft_bytes`` are refused
    (``too-many-drafts`` naming it), RSS stays within a few times that
    budget, an unrelated client's pings stay fast, every draft that was
    acknowledged holds its text, a user's append made meanwhile is kept, and
    with ``max_live_transcripts`` = 30 another transcript still loads (the
    drafts do not pin theirs)."""
    target = target_factory(settings={"max_live_transcripts": TRANSCRIPTS})
    ids = [f"t{i}" for i in range(TRANSCRIPTS)]
    _create(target, [*ids, "other", "user"])
    rss_before = target.rss()

    async def attack() -> tuple[dict[tuple[str, str], int], list[wire.ErrorFrame]]:
        acked: dict[tuple[str, str], int] = {}
        refused: list[wire.ErrorFrame] = []

        async def one(tid: str) -> None:
            async with await RawClient.connect(target.ws_url, max_size=None) as writer:
                refs = set()
                for d in range(DRAFTS):
                    ref = f"{tid}/d{d}"
                    refs.add(ref)
                    await writer.send(
                        op="draft", transcriptId=tid, draftId=f"d{d}", text=DRAFT_TEXT, ref=ref
                    )
                for ref, answer in (await _answers(writer, refs)).items():
                    if isinstance(answer, wire.Ack):
                        acked[(tid, ref.split("/")[1])] = answer.n or 0
                    else:
                        refused.append(answer)

        # A user appends meanwhile: every acknowledged message must be kept.
        async def user() -> list[int]:
            revisions = []
            async with await RawClient.connect(target.ws_url) as client:
                for i in range(20):
                    await client.send(
                        op="append",
                        transcriptId="user",
                        messages=[{"role": "user", "content": f"m{i}"}],
                        ref=i,
                    )
                    ack = await client.expect(wire.Ack, timeout=30)
                    revisions.append(ack.revision)
            return revisions

        results = await asyncio.gather(user(), *(one(tid) for tid in ids))
        assert results[0] == list(range(1, 21))
        return acked, refused

    with probing(target.ws_url) as probe:
        acked, refused = asyncio.run(attack())
        probe.wait_pings(len(probe.rtts) + 3)
    grew = target.peak_rss() - rss_before
    print(
        f"\n{len(acked)} drafts of 1 MiB kept, {len(refused)} refused; peak RSS grew "
        f"{grew >> 20} MiB; {probe.summary()}, p90 {_p90(probe) * 1000:.0f} ms"
    )
    # The loop takes in 480 one-MiB messages (~2 ms of CPU each, read,
    # decoded, and the kept ones encoded once): pings wait behind that work
    # (p90 50-170 ms measured here), never for long; nothing is held up for
    # the drafts kept.
    assert_responsive(probe, bound=1.0)
    assert _p90(probe) < max(0.5, 2 * probe.idle_worst), probe.summary()
    assert refused and all(e.code == codes.TOO_MANY_DRAFTS for e in refused)
    assert any("max_draft_bytes" in e.message for e in refused)
    # What was acknowledged fits the budget and is all there.
    assert 0 < len(acked) * len(DRAFT_TEXT) <= MAX_DRAFT_BYTES
    # 480 MiB sent (1,231 MB of RSS before): a draft's text is held about
    # twice (its text and the frame that shares it), and each 1 MiB message
    # is read and decoded before it is refused.
    assert grew < 3 * MAX_DRAFT_BYTES + (60 << 20), f"peak RSS grew {grew >> 20} MiB"

    async def check() -> None:
        # Drafts do not pin their transcripts: another one still loads.
        async with httpx.AsyncClient(base_url=target.url, timeout=30) as http:
            other = await http.get("/v1/transcripts/other")
            assert other.status_code == 200, other.text
            user = (await http.get("/v1/transcripts/user")).json()
            assert [m["content"] for m in user["messages"]] == [f"m{i}" for i in range(20)]
        # A late joiner of each transcript gets the text of every draft acked there.
        for tid in sorted({tid for tid, _ in acked}):
            async with await RawClient.connect(target.ws_url, max_size=None) as late:
                await late.send(op="subscribe", transcriptId=tid)
                await late.expect(wire.Baseline, timeout=30)
                await late.send(op="ping", ref="end")
                texts = {}
                while True:
                    frame = await late.recv(30)
                    if isinstance(frame, wire.Pong):
                        break
                    assert isinstance(frame, wire.DraftFrame)
                    texts[frame.draft_id] = frame.text
                mine = {d for t, d in acked if t == tid}
                assert set(texts) == mine
                assert all(text == DRAFT_TEXT for text in texts.values())

    asyncio.run(check())


CLOSED_TRANSCRIPTS = 20
CANCELLED = 1000
RESUBSCRIBES = 25


def test_catch_up_never_closes_a_reading_client_nor_multiplies_its_output(
    target_factory: Callable[..., Target],
) -> None:
    """The issue's reproduction: 20 transcripts with 1,000 cancelled drafts
    each (half made-up ids, half opened and cancelled), then a client that
    reads as fast as it can subscribes to all of them and resubscribes again
    and again. Before, the first subscribe queued 20,000 close frames at once
    and the client was closed (4008) on every attempt; each resubscribe sent
    1,000 closes per transcript. Now a baseline brings no close and a resume
    only the ``final`` of a draft committed since its revision: the client is
    never closed nor lagged, gets what was committed (nothing acknowledged
    lost), and its output stays the size of the answers."""
    target = target_factory()
    ids = [f"c{i}" for i in range(CLOSED_TRANSCRIPTS)]
    _create(target, ids)
    rss_before = target.rss()

    async def flood() -> dict[str, int]:
        epochs = {}
        async with await RawClient.connect(target.ws_url) as writer:
            for tid in ids:
                for i in range(CANCELLED // 2):
                    await writer.send(op="draft", transcriptId=tid, draftId=f"m{i}", cancel=True)
                    await writer.send(op="draft", transcriptId=tid, draftId=f"o{i}", delta="x")
                    await writer.send(op="draft", transcriptId=tid, draftId=f"o{i}", cancel=True)
                # One real draft, committed: its final is what a resume needs.
                await writer.send(op="draft", transcriptId=tid, draftId="real", delta="answer")
                await writer.send(
                    op="append",
                    transcriptId=tid,
                    draftId="real",
                    messages=[{"role": "assistant", "content": "answer"}],
                    ref=tid,
                )
                while True:
                    frame = await writer.recv(30)
                    assert not isinstance(frame, wire.ErrorFrame), frame
                    if isinstance(frame, wire.Ack) and frame.ref == tid:
                        assert frame.revision == 1
                        break
        async with httpx.AsyncClient(base_url=target.url, timeout=30) as http:
            for tid in ids:
                epochs[tid] = (await http.get(f"/v1/transcripts/{tid}?end=0")).json()["epoch"]
        return epochs

    async def reader() -> tuple[list[Any], int, int]:
        """Subscribe to all, then resume each from 0 and from 1, many times,
        reading everything as it comes; the frames, bytes sent and received."""
        frames: list[Any] = []
        sent = received = 0
        async with websockets.connect(target.ws_url, compression=None, max_size=None) as ws:
            done = threading.Event()

            async def read() -> None:
                nonlocal received
                async for message in ws:
                    received += len(message)
                    for raw in wire.split_frames(message):
                        frame = wire.accept_transcript_update(raw)
                        frames.append(frame)
                        if isinstance(frame, wire.Pong) and frame.ref == "end":
                            done.set()
                            return

            reading = asyncio.create_task(read())

            async def send(**op: Any) -> None:
                nonlocal sent
                data = msgspec.json.encode(op).decode()
                sent += len(data)
                await ws.send(data)

            for tid in ids:
                await send(op="subscribe", transcriptId=tid)
            for _ in range(RESUBSCRIBES):
                for tid in ids:
                    await send(op="subscribe", transcriptId=tid, fromRevision=1, epoch=epochs[tid])
            for tid in ids:
                await send(op="subscribe", transcriptId=tid, fromRevision=0, epoch=epochs[tid])
            await send(op="ping", ref="end")
            await asyncio.wait_for(reading, 60)
            assert done.is_set()
        return frames, sent, received

    with probing(target.ws_url) as probe:
        epochs = asyncio.run(flood())
        frames, sent, received = asyncio.run(reader())
        probe.wait_pings(len(probe.rtts) + 3)
    grew = target.peak_rss() - rss_before
    drafts = [f for f in frames if isinstance(f, wire.DraftFrame)]
    errors = [f for f in frames if isinstance(f, wire.ErrorFrame)]
    print(
        f"\n{len(frames)} frames, {len(drafts)} of drafts; {sent} bytes sent, {received} "
        f"received ({received / sent:.1f}x); peak RSS grew {grew >> 20} MiB; {probe.summary()}"
    )
    assert not errors, errors[:3]
    assert_responsive(probe, bound=0.5)
    # Baselines bring no close; a resume from 1 none either (nothing was
    # committed since); the resume from 0 brings each increment and its final.
    assert [(f.transcript_id, f.draft_id, f.state, f.revision) for f in drafts] == [
        (tid, "real", "final", 1) for tid in ids
    ]
    increments = [f for f in frames if isinstance(f, wire.Increment)]
    assert sorted(f.event.transcript_id for f in increments) == sorted(ids)
    for increment in increments:
        change = increment.event.change
        assert isinstance(change, MessagesAppended)
        assert [m.content for m in change.messages] == ["answer"]
    # Before: ~5,500x (every subscribe answered with 1,000 closes).
    assert received < 20 * sent, f"{received / sent:.0f}x the bytes sent"
    assert grew < 40 << 20, f"peak RSS grew {grew >> 20} MiB"
