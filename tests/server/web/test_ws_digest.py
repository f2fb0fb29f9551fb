"""Issue 29 over ``/v1/ws`` on a real server: baselines and increments carry
the rolling digest on both subprotocols, the same bytes of it in JSON and
MessagePack; a copy that went wrong is found out by the next increment and
repaired with a fresh baseline (the Python client counts it)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import client_py
from protocol import wire
from protocol.digest import genesis_digest, history_digest
from protocol.types import Change, TranscriptEvent
from tests.support.servers import running_server
from tests.support.wsclient import RawClient


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


async def _increments(client: RawClient, count: int) -> list[TranscriptEvent]:
    events: list[TranscriptEvent] = []
    while len(events) < count:
        frame = await client.recv()
        if isinstance(frame, wire.Increment):
            events.append(frame.event)
    return events


async def test_both_subprotocols_carry_the_same_digests() -> None:
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
        await RawClient.connect(srv.ws_url) as as_json,
        await RawClient.connect(srv.ws_url, binary=True) as as_msgpack,
    ):
        assert (await http.post("/v1/transcripts", json={"id": "w"})).status_code == 201
        for client in (as_json, as_msgpack):
            await client.send(op="subscribe", transcriptId="w")
            baseline = await client.expect(wire.Baseline)
            assert baseline.snapshot.digest == genesis_digest("w")
        await http.post("/v1/transcripts/w/messages", json={"messages": [user("a"), user("b")]})
        await http.post("/v1/transcripts/w/segments", json={"start": 1})
        await http.put("/v1/transcripts/w/views/v", json={"start": 0})
        await http.post("/v1/transcripts/w/messages", json={"messages": [user("ü 😀")]})
        await http.delete("/v1/transcripts/w/views/v")
        got_json, got_msgpack = await asyncio.gather(
            _increments(as_json, 5), _increments(as_msgpack, 5)
        )
        changes: list[Change] = []
        for one, other in zip(got_json, got_msgpack, strict=True):
            changes.append(one.change)
            assert one.digest == other.digest == history_digest("w", changes)
        snapshot = (await http.get("/v1/transcripts/w")).json()
        assert snapshot["digest"] == got_json[-1].digest
        # A baseline taken now carries it too, on both.
        for client in (as_json, as_msgpack):
            await client.send(op="subscribe", transcriptId="w", window={"tail": 1})
            baseline = await client.expect(wire.Baseline)
            assert baseline.snapshot.digest == snapshot["digest"]
            assert baseline.snapshot.start == 2  # a window: the digest is the whole history's


async def test_a_broken_copy_is_found_by_the_next_increment_and_repaired() -> None:
    """The repair path end to end: a mirror whose copy went wrong (its
    digest no longer the history's, as a copy that took a changed message
    would be) takes the next increment as a mismatch, drops the copy, takes
    a fresh baseline and is right again; the client counts it."""
    async with (
        running_server() as srv,
        client_py.connect(srv.ws_url, request_timeout=10) as client,
    ):
        await client.create("r", [user("a")])
        mirror = await client.subscribe("r")
        await client.append("r", [user("b")])
        await mirror.wait_for_revision(2)
        assert mirror.digest == (await client.get("r")).digest
        assert mirror.digest_mismatches == 0
        copy = mirror.subscription.copy
        assert copy is not None
        copy.digest = "0" * 32  # the copy is broken now
        await client.append("r", [user("c")])
        await mirror.wait_for_revision(3)
        snapshot = await client.get("r")
        assert mirror.digest_mismatches == 1
        assert mirror.counters.dropped == 1 and mirror.counters.baselines == 2
        assert mirror.digest == snapshot.digest
        assert [m.content for m in mirror.messages] == ["a", "b", "c"]
        await client.append("r", [user("d")])
        await mirror.wait_for_revision(4)
        assert mirror.digest_mismatches == 1


@pytest.mark.parametrize("binary", [False, True])
async def test_a_resume_answered_with_increments_carries_their_digests(binary: bool) -> None:
    async with (
        running_server() as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        await http.post("/v1/transcripts", json={"id": "s", "messages": [user("a")]})
        first = (await http.get("/v1/transcripts/s")).json()
        for text in ("b", "c"):
            await http.post("/v1/transcripts/s/messages", json={"messages": [user(text)]})
        async with await RawClient.connect(srv.ws_url, binary=binary) as client:
            await client.send(
                op="subscribe", transcriptId="s", fromRevision=1, epoch=first["epoch"]
            )
            events = await _increments(client, 2)
        final = (await http.get("/v1/transcripts/s")).json()
        assert [e.revision for e in events] == [2, 3]
        assert events[-1].digest == final["digest"]
