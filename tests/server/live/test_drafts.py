"""Drafts against a real server (uvicorn on 127.0.0.1, real WebSocket
clients): streaming, commit atomicity, cancel, expiry, limits, late joiners,
resumes, and a reader that stops reading (``docs/protocol.md``, Drafts)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import msgspec
import pytest
import websockets

from protocol import codes, wire
from protocol.consumer import Consumer, DraftClosed
from protocol.types import MessagesAppended
from protocol.wire import Ack, Baseline, DraftFrame, ErrorFrame, Increment, Pong
from tests.server.web.test_ws_delivery import updates
from tests.support.rawsocket import RawSocket
from tests.support.servers import RunningServer, running_server
from tests.support.waiting import until
from tests.support.wsclient import RawClient


def msg(text: str, role: str = "user") -> dict[str, str]:
    return {"role": role, "content": text}


async def create(srv: RunningServer, tid: str, *messages: dict[str, str]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post("/v1/transcripts", json={"id": tid, "messages": list(messages)})
        assert r.status_code == 201, r.text
        body: dict[str, Any] = r.json()
        return body


async def subscribed(srv: RunningServer, tid: str, **op: Any) -> RawClient:
    client = await RawClient.connect(srv.ws_url)
    await client.send(op="subscribe", transcriptId=tid, **op)
    return client


async def next_draft(client: RawClient, timeout: float = 5.0) -> DraftFrame:
    """The next frame, which must be a draft frame."""
    return await client.expect(DraftFrame, timeout)


async def commit(w: RawClient, draft_id: str, text: str, **op: Any) -> None:
    """Send the ``append`` that commits ``draft_id`` as one assistant message."""
    messages = [msg(text, "assistant")]
    await w.send(op="append", transcriptId="t", messages=messages, draftId=draft_id, **op)


# Tests that count updates run with every delta its own update; coalescing
# has its own test below.
EACH = {"draft_coalesce_s": 0}


async def test_a_draft_streams_to_every_subscriber_and_only_a_ref_is_acked() -> None:
    async with running_server(**EACH) as srv:
        await create(srv, "t", msg("hi"))
        readers = [await subscribed(srv, "t") for _ in range(2)]
        for r in readers:
            await r.expect(Baseline)
        async with await RawClient.connect(srv.ws_url) as writer:
            await writer.send(op="draft", transcriptId="t", draftId="d1", delta="Hel")
            await writer.send(op="draft", transcriptId="t", draftId="d1", delta="lo")
            await writer.send(op="draft", transcriptId="t", draftId="d1", text="Hello!", ref="r")
            ack = await writer.expect(Ack)
            assert (ack.ref, ack.draft_id, ack.n, ack.revision) == ("r", "d1", 3, 1)
            assert await writer.nothing_pending()  # the ops without a ref got no answer
        for r in readers:
            frames = [await next_draft(r) for _ in range(3)]
            assert [(f.n, f.delta, f.text, f.role) for f in frames] == [
                (1, "Hel", None, "assistant"),
                (2, "lo", None, "assistant"),
                (3, None, "Hello!", "assistant"),
            ]
            await r.close()
        registry = srv.hub.metrics.registry
        assert registry.get_sample_value("tsync_drafts_open") == 1
        assert registry.get_sample_value("tsync_draft_updates_total", {"kind": "delta"}) == 2
        assert registry.get_sample_value("tsync_draft_updates_total", {"kind": "text"}) == 1


def _message_texts(consumer: Consumer, tid: str) -> list[str]:
    copy = consumer.subscriptions[tid].copy
    assert copy is not None
    return [str(m.content) for m in copy.messages]


STOCK = {"ws": "websockets-sansio"}  # uvicorn's own protocol: every frame through ASGI


@pytest.mark.parametrize("options", [None, STOCK], ids=["raw", "asgi"])
@pytest.mark.parametrize("subprotocol", [wire.SUBPROTOCOL_JSON, wire.SUBPROTOCOL_MSGPACK])
async def test_a_commit_replaces_the_draft_with_its_message_in_one_step(
    subprotocol: str, options: dict[str, str] | None
) -> None:
    """The increment and the ``final`` leave together (one WebSocket message
    in JSON, the next message in MessagePack): a consumer fed message by
    message never shows both the draft and its message, or neither. Under
    ``tsync serve``'s raw write and under uvicorn's stock protocol."""
    binary = subprotocol == wire.SUBPROTOCOL_MSGPACK
    async with running_server(uvicorn_options=options) as srv:
        await create(srv, "t", msg("question"))
        consumer = Consumer()
        consumer.subscribe("t")
        async with (
            websockets.connect(srv.ws_url, subprotocols=[subprotocol], compression=None) as ws,  # type: ignore[list-item]
            await RawClient.connect(srv.ws_url) as writer,
        ):
            consumer.connection_made()

            async def send_ops() -> None:
                for op in consumer.ops_to_send():
                    encoded = wire.encode(op, binary=binary)
                    await ws.send(encoded if binary else encoded.decode())

            await send_ops()
            answer = "".join(f"tok{i} " for i in range(30))
            for i in range(30):
                await writer.send(op="draft", transcriptId="t", draftId="a1", delta=f"tok{i} ")
            await commit(writer, "a1", answer, ref="commit")
            assert (await writer.expect(Ack)).revision == 2
            shown_draft = False
            messages: list[bytes | str] = []
            while True:
                message = await ws.recv(decode=not binary)
                messages.append(message)
                consumer.receive_data(message)
                if binary and b"increment" in message:  # type: ignore[operator]
                    # One frame per message in MessagePack: the final is the
                    # very next message (checked below), taken in the same step.
                    messages.append(await ws.recv(decode=False))
                    consumer.receive_data(messages[-1])
                await send_ops()
                consumer.updates_received()
                sub = consumer.subscriptions["t"]
                if sub.copy is None:
                    continue
                has_draft = "a1" in sub.drafts
                has_message = answer in _message_texts(consumer, "t")
                shown_draft |= has_draft
                if shown_draft:
                    assert has_draft != has_message, "both or neither shown"
                if has_message:
                    break
            assert shown_draft
            # Where the increment and the final were.
            frames = [
                [wire.accept_transcript_update(f) for f in wire.split_frames(m)] for m in messages
            ]
            (at,) = [i for i, fs in enumerate(frames) if any(isinstance(f, Increment) for f in fs)]
            if binary:
                final = wire.accept_transcript_update(messages[at + 1])  # type: ignore[arg-type]
            else:
                assert isinstance(frames[at][0], Increment)
                final = frames[at][1]
            assert isinstance(final, DraftFrame)
            assert (final.draft_id, final.state, final.revision) == ("a1", "final", 2)
            # The draft is closed: a late token is refused, the connection stays usable.
            await writer.send(op="draft", transcriptId="t", draftId="a1", delta="late", ref=1)
            error = await writer.expect(ErrorFrame)
            assert (error.code, error.ref, error.transcript_id) == (codes.DRAFT_CLOSED, 1, "t")
            await writer.send(op="ping", ref="still")
            assert (await writer.expect(Pong)).ref == "still"


async def test_a_flood_of_made_up_cancels_never_reopens_a_committed_draft() -> None:
    """Issue 23.5: only the last 1,024 closes were remembered, so after 1,100
    cancels of made-up ids a late token on a draft committed before got
    ``ack n=1`` and a ghost draft opened. Every close is now remembered for
    ``draft_ttl_s``; past ``max_closed_drafts`` the flood is refused."""
    async with running_server(max_closed_drafts=1024) as srv:
        await create(srv, "t")
        async with await RawClient.connect(srv.ws_url) as w:
            await w.send(op="draft", transcriptId="t", draftId="real", delta="answer")
            await commit(w, "real", "answer", ref="commit")
            assert (await w.expect(Ack)).ref == "commit"
            for i in range(1100):
                await w.send(op="draft", transcriptId="t", draftId=f"made-up-{i}", cancel=True)
            await w.send(op="draft", transcriptId="t", draftId="real", delta="late", ref="late")
            refusals = []
            while True:
                frame = await w.recv()
                assert isinstance(frame, ErrorFrame), frame
                if frame.ref == "late":
                    break
                refusals.append(frame)
            assert frame.code == codes.DRAFT_CLOSED, frame
            # 1,023 made-up cancels fit beside the commit; the rest were refused.
            assert len(refusals) == 1100 - 1023
            assert {e.code for e in refusals} == {codes.TOO_MANY_DRAFTS}
            assert "max_closed_drafts" in refusals[0].message
        assert "real" not in srv.hub.live["t"].drafts.open


async def test_drafts_count_against_the_writing_connection_and_the_server() -> None:
    """Issue 24.2: a draft nobody subscribes to still counts. Past
    ``max_connection_draft_bytes`` a connection's update is refused (naming
    it) and the draft stays as it was; another connection still writes; what
    closes is released."""
    async with running_server(max_connection_draft_bytes=3000, **EACH) as srv:
        await create(srv, "t")
        async with (
            await RawClient.connect(srv.ws_url) as w,
            await RawClient.connect(srv.ws_url) as other,
        ):
            await w.send(op="draft", transcriptId="t", draftId="a", text="x" * 1000, ref=0)
            assert (await w.expect(Ack)).n == 1
            await w.send(op="draft", transcriptId="t", draftId="b", text="y" * 1000, ref=1)
            error = await w.expect(ErrorFrame)
            assert (error.code, error.ref) == (codes.TOO_MANY_DRAFTS, 1)
            assert "max_connection_draft_bytes" in error.message
            await other.send(op="draft", transcriptId="t", draftId="b", text="y" * 1000, ref=2)
            assert (await other.expect(Ack)).n == 1
            budget = srv.hub.drafts.budget
            assert budget.total == 2 * (1000 + 1024) and len(budget.by_writer) == 2
            await w.send(op="draft", transcriptId="t", draftId="a", cancel=True, ref=3)
            await w.expect(Ack)
            await w.send(op="draft", transcriptId="t", draftId="c", text="z" * 1000, ref=4)
            assert (await w.expect(Ack)).n == 1
        assert srv.hub.live["t"].drafts.open["b"].text == "y" * 1000


async def test_a_transcript_with_an_open_draft_may_leave_memory_and_keeps_it() -> None:
    """Issue 24.2: an open draft pinned its transcript in memory (other users
    got 503). Now it may leave to make room; its drafts wait apart, come back
    with it, and still expire meanwhile."""
    async with running_server(max_live_transcripts=1, draft_ttl_s=1.0, **EACH) as srv:
        await create(srv, "t")
        await create(srv, "u")
        async with await RawClient.connect(srv.ws_url) as w:
            await w.send(op="draft", transcriptId="t", draftId="d", delta="Hel", ref=0)
            await w.expect(Ack)
            async with httpx.AsyncClient(base_url=srv.url) as http:
                assert (await http.get("/v1/transcripts/u")).status_code == 200
            assert "t" not in srv.hub.live and "t" in srv.hub.drafts.parked
            await w.send(op="draft", transcriptId="t", draftId="d", delta="lo", ref=1)
            assert (await w.expect(Ack)).n == 2
            assert "t" in srv.hub.live and "t" not in srv.hub.drafts.parked
        async with await subscribed(srv, "t") as late:
            await late.expect(Baseline)
            frame = await next_draft(late)
            assert (frame.draft_id, frame.n, frame.text) == ("d", 2, "Hello")
        async with httpx.AsyncClient(base_url=srv.url) as http:
            assert (await http.get("/v1/transcripts/u")).status_code == 200
        assert "t" in srv.hub.drafts.parked
        # Expired where they wait, then forgotten (closes too): nothing held.
        await until(lambda: "t" not in srv.hub.drafts.parked, timeout=10)
        assert srv.hub.drafts.budget.total == 0


async def test_a_refused_commit_leaves_the_draft_open() -> None:
    async with running_server() as srv:
        await create(srv, "t")
        async with await subscribed(srv, "t") as reader, await RawClient.connect(srv.ws_url) as w:
            await reader.expect(Baseline)
            await w.send(op="draft", transcriptId="t", draftId="d", delta="x", ref=0)
            await w.expect(Ack)
            await commit(w, "d", "x", ref=1, expectedRevision=7)
            assert (await w.expect(ErrorFrame)).code == codes.REVISION_CONFLICT
            await w.send(op="draft", transcriptId="t", draftId="d", delta="y", ref=2)
            assert (await w.expect(Ack)).n == 2
            assert [(f.n, f.state) for f in [await next_draft(reader) for _ in range(2)]] == [
                (1, "open"),
                (2, "open"),
            ]


async def test_cancel_closes_the_draft_for_everyone() -> None:
    async with running_server() as srv:
        await create(srv, "t")
        async with await subscribed(srv, "t") as reader, await RawClient.connect(srv.ws_url) as w:
            await reader.expect(Baseline)
            await w.send(op="draft", transcriptId="t", draftId="d", delta="x")
            await w.send(op="draft", transcriptId="t", draftId="d", cancel=True, ref="c")
            assert (await w.expect(Ack)).n == 1
            assert (await next_draft(reader)).delta == "x"
            closed = await next_draft(reader)
            assert (closed.state, closed.text, closed.delta, closed.revision) == (
                "cancelled",
                None,
                None,
                None,
            )
            assert not srv.hub.live["t"].drafts.open


async def test_an_idle_draft_expires() -> None:
    async with running_server(draft_ttl_s=0.3) as srv:
        await create(srv, "t")
        async with await subscribed(srv, "t") as reader, await RawClient.connect(srv.ws_url) as w:
            await reader.expect(Baseline)
            await w.send(op="draft", transcriptId="t", draftId="d", delta="x")
            assert (await next_draft(reader)).n == 1
            expired = await next_draft(reader, timeout=5.0)
            assert (expired.draft_id, expired.state) == ("d", "expired")
            await w.send(op="draft", transcriptId="t", draftId="d", delta="late", ref=0)
            assert (await w.expect(ErrorFrame)).code == codes.DRAFT_CLOSED
            # Forgotten after the ttl: the id may be used again.
            await until(lambda: not srv.hub.live["t"].drafts)
            await w.send(op="draft", transcriptId="t", draftId="d", delta="new", ref=1)
            assert (await w.expect(Ack)).n == 1


async def test_each_limit_is_a_clear_error_and_the_connection_stays_usable() -> None:
    async with running_server(max_drafts_per_transcript=2, max_message_bytes=1000) as srv:
        await create(srv, "t")
        async with await RawClient.connect(srv.ws_url) as w:
            for d in ("a", "b"):
                await w.send(op="draft", transcriptId="t", draftId=d, ref=d)
                await w.expect(Ack)
            cases: list[tuple[dict[str, Any], str]] = [
                ({"draftId": "c", "delta": "x"}, codes.TOO_MANY_DRAFTS),
                ({"draftId": "a", "delta": "é" * 501}, codes.DRAFT_TOO_LARGE),  # 1002 bytes
                ({"draftId": "a", "delta": "x", "text": "y"}, codes.INVALID_FRAME),
                ({"draftId": "a", "role": "robot"}, codes.INVALID_FRAME),
                ({"draftId": "bad id!", "delta": "x"}, codes.INVALID_FRAME),
                ({"draftId": "a", "delta": "x", "cancel": True}, codes.INVALID_FRAME),
            ]
            for i, (fields, code) in enumerate(cases):
                await w.send(op="draft", transcriptId="t", ref=i, **fields)
                error = await w.expect(ErrorFrame)
                assert (error.code, error.ref) == (code, i), error
                if code != codes.INVALID_FRAME:
                    assert error.transcript_id == "t"
            await w.send(op="draft", transcriptId="t", draftId="a", delta="é" * 500, ref="ok")
            assert (await w.expect(Ack)).n == 2
            await w.send(op="draft", transcriptId="missing", draftId="a", ref="nf")
            assert (await w.expect(ErrorFrame)).code == codes.NOT_FOUND
        assert srv.hub.live["t"].drafts.open["a"].text == "é" * 500


async def test_a_late_joiner_gets_the_text_of_each_open_draft_with_its_baseline() -> None:
    async with running_server(**EACH) as srv:
        await create(srv, "t")
        async with await RawClient.connect(srv.ws_url) as w:
            for token in ("a", "b", "c"):
                await w.send(op="draft", transcriptId="t", draftId="d1", delta=token)
            await w.send(op="draft", transcriptId="t", draftId="d2", role="tool", text="T", ref=0)
            await w.expect(Ack)
        async with await subscribed(srv, "t") as late:
            await late.expect(Baseline)
            texts = sorted(
                ((f.draft_id, f.n, f.text, f.role) for f in [await next_draft(late) for _ in "xy"]),
            )
            assert texts == [("d1", 3, "abc", "assistant"), ("d2", 1, "T", "tool")]
            assert await late.nothing_pending()


async def test_a_resume_gets_the_open_drafts_and_the_finals_committed_since() -> None:
    """A consumer that was away while a draft was committed and another one
    grew gets, right behind its increments, the ``text`` of the open one and
    the ``final`` of the committed one, so that it closes together with its
    message. A resume from the commit's revision (it had the final with the
    increment) and a baseline get only the text (issue 24.6: no close a
    consumer cannot hold)."""
    async with running_server() as srv:
        created = await create(srv, "t")
        async with await RawClient.connect(srv.ws_url) as w:
            await w.send(op="draft", transcriptId="t", draftId="gone", delta="x")
            await commit(w, "gone", "x", ref=0)
            await w.expect(Ack)
            await w.send(op="draft", transcriptId="t", draftId="open", delta="y", ref=1)
            await w.expect(Ack)
        async with await subscribed(srv, "t", fromRevision=0, epoch=created["epoch"]) as back:
            assert (await back.expect(Increment)).event.revision == 1
            drafts = [await next_draft(back) for _ in range(2)]
            assert [(f.draft_id, f.state, f.text, f.revision) for f in drafts] == [
                ("open", "open", "y", None),
                ("gone", "final", None, 1),
            ]
            assert await back.nothing_pending()
        for since in ({"fromRevision": 1, "epoch": created["epoch"]}, {}):
            async with await subscribed(srv, "t", **since) as back:
                if not since:
                    await back.expect(Baseline)
                draft = await next_draft(back)
                assert (draft.draft_id, draft.state, draft.text) == ("open", "open", "y")
                assert await back.nothing_pending()


async def test_a_resume_answered_with_a_baseline_gets_the_finals_committed_since() -> None:
    """A resume too far behind is answered with a baseline: the consumer may
    still hold the drafts committed since its revision, so their finals
    follow it; a subscribe without ``fromRevision`` gets none."""
    async with running_server(max_resume_events=1) as srv:
        created = await create(srv, "t")
        async with await RawClient.connect(srv.ws_url) as w:
            for i, d in enumerate(("a", "b")):
                await w.send(op="draft", transcriptId="t", draftId=d, delta=d)
                await commit(w, d, d, ref=i)
                await w.expect(Ack)
        async with await subscribed(srv, "t", fromRevision=0, epoch=created["epoch"]) as back:
            assert (await back.expect(Baseline)).snapshot.revision == 2
            finals = [await next_draft(back) for _ in range(2)]
            assert [(f.draft_id, f.state, f.revision) for f in finals] == [
                ("a", "final", 1),
                ("b", "final", 2),
            ]
            assert await back.nothing_pending()
        async with await subscribed(srv, "t") as fresh:
            await fresh.expect(Baseline)
            assert await fresh.nothing_pending()


async def test_a_consumer_that_reconnects_closes_a_draft_committed_while_it_was_away() -> None:
    """The consumer core end to end: drafts it holds that the resume does not
    refresh are gone; a final of one it holds closes it with its message."""
    async with running_server() as srv:
        await create(srv, "t")
        consumer = Consumer()
        consumer.subscribe("t")

        async def session(until_pong: str, *ops: dict[str, Any]) -> list[Any]:
            updates: list[Any] = []
            async with websockets.connect(srv.ws_url, compression=None) as ws:
                consumer.connection_made()
                for op in consumer.ops_to_send():
                    await ws.send(wire.encode(op).decode())
                for op in ops:
                    await ws.send(msgspec.json.encode(op).decode())
                await ws.send(msgspec.json.encode({"op": "ping", "ref": until_pong}).decode())
                while True:
                    message = await ws.recv()
                    consumer.receive_data(message)
                    for op in consumer.ops_to_send():
                        await ws.send(wire.encode(op).decode())
                    updates.extend(consumer.updates_received())
                    if f'"ref":"{until_pong}"' in str(message):
                        break
            consumer.connection_lost()
            return updates

        await session("p1", {"op": "draft", "transcriptId": "t", "draftId": "d", "delta": "hi"})
        assert consumer.subscriptions["t"].drafts["d"].text == "hi"
        async with await RawClient.connect(srv.ws_url) as w:
            await commit(w, "d", "hi", ref=0)
            await w.expect(Ack)
        updates = await session("p2")
        closes = [u for u in updates if isinstance(u, DraftClosed)]
        assert [(c.draft_id, c.state, c.revision) for c in closes] == [("d", "final", 1)]
        assert _message_texts(consumer, "t") == ["hi"]
        assert not consumer.subscriptions["t"].drafts


async def test_a_reader_that_stops_reading_gets_one_text_not_the_backlog() -> None:
    """While its socket takes no data, a reader's draft updates merge into
    one slot per draft: when it reads again it gets one ``text`` frame of
    the draft as it was then, and drafts never lag it (its queue bound is
    far below the number of tokens)."""
    async with running_server(queue_max_frames=50, **EACH) as srv:
        await create(srv, "t")
        stuck = await RawSocket.connect(srv.ws_url, receive_buffer=4096)
        stuck.send_op(op="subscribe", transcriptId="t")
        await until(lambda: srv.hub.stats()["subscriptions"] == 1)
        queue = next(iter(srv.hub.subscriptions.connections.values()))
        async with await RawClient.connect(srv.ws_url) as w:
            # Fill the reader's socket until its transport pauses and frames wait.
            for i in range(40):
                await w.send(op="append", transcriptId="t", messages=[msg("z" * 200_000)], ref=i)
                await w.expect(Ack)
                if queue.queued[0]:
                    break
            assert queue.queued[0], "the reader's transport never paused"
            appended = i + 1
            tokens = 2000
            for k in range(tokens):
                await w.send(op="draft", transcriptId="t", draftId="d", delta=f"{k},")
            await w.send(op="draft", transcriptId="t", draftId="d", ref="last")
            assert (await w.expect(Ack)).n == tokens
            assert queue.queued[0] <= appended + 1  # the increments waiting and one slot
        stuck.send_op(op="ping", ref="end")
        await stuck.read(
            timeout=20, until=lambda frames: bool(frames) and b'"ref":"end"' in frames[-1].data
        )
        frames = updates(stuck)
        errors = [f for f in frames if isinstance(f, ErrorFrame)]
        assert errors == []  # never lagged
        increments = [f for f in frames if isinstance(f, Increment)]
        assert len(increments) == appended
        drafts = [f for f in frames if isinstance(f, DraftFrame)]
        expected = "".join(f"{k}," for k in range(tokens))
        # What went out before the pause (if anything), then the merged slot.
        assert drafts[-1].n == tokens and drafts[-1].text == expected
        assert len(drafts) <= 2
        stuck.abort()


async def test_deltas_written_close_together_go_out_as_one_update() -> None:
    """With ``draft_coalesce_s``, the first delta goes out at once and those
    written within the interval after it wait and go out together: fewer
    frames than tokens, numbered 1, 2, 3, ... as always, their text the
    whole draft. A commit sends what waits first (the draft is whole when
    the message replaces it); so does an op with a ``ref`` (its ack's ``n``
    counts every delta)."""
    async with running_server(draft_coalesce_s=0.2) as srv:
        await create(srv, "t")
        async with await subscribed(srv, "t") as reader, await RawClient.connect(srv.ws_url) as w:
            await reader.expect(Baseline)
            tokens = [f"{k}," for k in range(20)]
            for token in tokens:
                await w.send(op="draft", transcriptId="t", draftId="d", delta=token)
            await w.send(op="draft", transcriptId="t", draftId="d", delta="!", ref="r")
            ack = await w.expect(Ack)
            frames = [await next_draft(reader) for _ in range(ack.n)]
            assert [f.n for f in frames] == list(range(1, ack.n + 1))
            assert "".join(f.delta or "" for f in frames) == "".join(tokens) + "!"
            assert frames[0].delta == "0,"  # the first went out at once
            assert ack.n < len(tokens)  # 20 tokens in well under 0.2 s: a few updates
            # Held deltas then a commit: the deltas leave before the message.
            for token in ("x", "y"):
                await w.send(op="draft", transcriptId="t", draftId="d", delta=token)
            await commit(w, "d", "done")
            committed = await w.expect(Ack)
            held = await next_draft(reader)
            assert (held.n, held.delta) == (ack.n + 1, "xy")
            assert isinstance(await reader.recv(), Increment)
            final = await next_draft(reader)
            assert (final.state, final.revision) == ("final", committed.revision)


async def test_drafts_are_never_history() -> None:
    """A draft changes no revision and appears in no snapshot or event."""
    async with running_server() as srv:
        await create(srv, "t", msg("q"))
        async with await RawClient.connect(srv.ws_url) as w:
            await w.send(op="draft", transcriptId="t", draftId="d", text="secret", ref=0)
            assert (await w.expect(Ack)).revision == 1
        async with httpx.AsyncClient(base_url=srv.url) as http:
            snapshot = (await http.get("/v1/transcripts/t")).json()
            events = (await http.get("/v1/transcripts/t/events", params={"after": 0})).json()
        assert snapshot["revision"] == 1 and "secret" not in str(snapshot)
        assert "secret" not in str(events)
        change = (await srv.hub.reads.events_after("t", 0) or [None])[0]
        assert change is not None and isinstance(change.change, MessagesAppended)


async def test_an_http_append_with_a_draft_id_commits_the_draft() -> None:
    async with running_server() as srv:
        await create(srv, "t")
        async with websockets.connect(srv.ws_url, compression=None) as ws:
            await ws.send('{"op":"subscribe","transcriptId":"t"}')
            await ws.send('{"op":"draft","transcriptId":"t","draftId":"h","delta":"hey"}')
            seen = [wire.accept_transcript_update(f) for f in wire.split_frames(await ws.recv())]
            while len(seen) < 2:
                seen += [
                    wire.accept_transcript_update(f) for f in wire.split_frames(await ws.recv())
                ]
            assert [type(f) for f in seen] == [Baseline, DraftFrame]
            async with httpx.AsyncClient(base_url=srv.url) as http:
                r = await http.post(
                    "/v1/transcripts/t/messages",
                    json={"messages": [msg("hey", "assistant")], "draftId": "h"},
                )
                assert r.status_code == 201, r.text
                bad = await http.post(
                    "/v1/transcripts/t/messages",
                    json={"messages": [msg("x")], "draftId": "not an id"},
                )
                assert bad.status_code == 400
            increment, final = [
                wire.accept_transcript_update(f) for f in wire.split_frames(await ws.recv())
            ]
            assert isinstance(increment, Increment) and isinstance(final, DraftFrame)
            assert (final.state, final.revision) == ("final", 1)


class _Link:
    """A replica link that only collects the hub's draft updates."""

    def __init__(self, publish: Callable[[DraftFrame], None]) -> None:
        self.publish_draft = publish

    def held(self, transcript_id: str) -> None:
        pass

    def released(self, transcript_id: str) -> None:
        pass


async def test_the_backplane_hooks_publish_local_updates_and_fan_out_remote_ones() -> None:
    """A linked replica's ``publish_draft`` gets every local update and close
    (never a remote one); ``DraftFanOut.apply_remote`` fans another replica's updates out
    to local subscribers and says when one does not follow."""
    async with running_server(draft_ttl_s=0.3) as srv:
        await create(srv, "t")
        hub = srv.hub
        published: list[DraftFrame] = []
        detach = hub.attach(_Link(published.append))
        async with await subscribed(srv, "t") as reader, await RawClient.connect(srv.ws_url) as w:
            await reader.expect(Baseline)
            await w.send(op="draft", transcriptId="t", draftId="a", delta="x")
            await w.send(op="draft", transcriptId="t", draftId="a", ref=0)  # keep-alive: nothing
            await w.expect(Ack)
            await commit(w, "a", "x", ref=1)
            await w.expect(Ack)
            await w.send(op="draft", transcriptId="t", draftId="b", text="y", ref=2)
            await w.expect(Ack)
            frame = hub.drafts.text("t", "b")
            assert frame is not None and (frame.text, frame.n, frame.seq) == ("y", 1, 0)
            assert hub.drafts.text("t", "a") is None and hub.drafts.text("nope", "b") is None
            await w.send(op="draft", transcriptId="t", draftId="b", cancel=True)
            await w.send(op="draft", transcriptId="t", draftId="c", delta="z", ref=3)
            await w.expect(Ack)
            remote = [
                DraftFrame(
                    seq=0, transcript_id="t", draft_id="r", role="assistant", n=1, delta="R"
                ),
                DraftFrame(
                    seq=0, transcript_id="t", draft_id="r", role="assistant", n=2, delta="S"
                ),
            ]
            for frame in remote:
                assert hub.drafts.apply_remote(frame)
            gap = DraftFrame(
                seq=0, transcript_id="t", draft_id="r", role="assistant", n=5, delta="!"
            )
            assert not hub.drafts.apply_remote(gap)
            assert hub.drafts.apply_remote(
                DraftFrame(
                    seq=0, transcript_id="held-elsewhere", draft_id="r", role="user", n=1, text=""
                )
            )
            seen: list[tuple[str, int, str]] = []
            while ("c", "expired") not in {(d, s) for d, _, s in seen}:
                f = await reader.recv(timeout=5)
                if isinstance(f, DraftFrame):
                    seen.append((f.draft_id, f.n, f.state))
        assert seen[:7] == [
            ("a", 1, "open"),
            ("a", 1, "final"),
            ("b", 1, "open"),
            ("b", 1, "cancelled"),
            ("c", 1, "open"),
            ("r", 1, "open"),
            ("r", 2, "open"),
        ]
        assert [(f.draft_id, f.n, f.state) for f in published] == [
            ("a", 1, "open"),
            ("a", 1, "final"),
            ("b", 1, "open"),
            ("b", 1, "cancelled"),
            ("c", 1, "open"),
            ("c", 1, "expired"),
        ]
        assert all(f.seq == 0 for f in published)
        detach()


async def test_the_retry_of_a_commit_that_landed_closes_a_draft_opened_again_in_between() -> None:
    """An idempotent retry answered ``duplicate`` still closes the draft it
    names when that is open (here: reopened after the ttl forgot the first
    commit), with the revision of the first attempt."""
    async with running_server(draft_ttl_s=0.2) as srv:
        await create(srv, "t")
        async with await subscribed(srv, "t") as reader, await RawClient.connect(srv.ws_url) as w:
            await reader.expect(Baseline)
            commit = {
                "op": "append",
                "transcriptId": "t",
                "messages": [msg("x", "assistant")],
                "draftId": "a",
                "idempotencyKey": "k1",
            }
            await w.send(**commit, ref=0)
            assert (await w.expect(Ack)).revision == 1
            assert isinstance(await reader.recv(), Increment)
            await until(lambda: not srv.hub.live["t"].drafts)  # the commit is forgotten
            await w.send(op="draft", transcriptId="t", draftId="a", delta="again")
            await w.send(**commit, ref=1)
            ack = await w.expect(Ack)
            assert (ack.revision, ack.duplicate) == (1, True)
            assert (await next_draft(reader)).delta == "again"
            final = await next_draft(reader)
            assert (final.state, final.revision) == ("final", 1)
