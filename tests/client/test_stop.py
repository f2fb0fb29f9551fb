"""Stop (issue 39, section 4): a reader with the write right stops a reply
that ``client.stream`` is writing from a model's stream. The writer learns it
at once, reads no more of the model's chunks and returns the server's commit
of what was said, marked stopped; the partial reply is committed once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import client_py
from protocol.wire import Ack, ErrorFrame
from tests.support.servers import running_server
from tests.support.waiting import until
from tests.support.wsclient import RawClient

TIMEOUT = 10


async def test_a_stop_ends_client_stream_and_keeps_what_was_said() -> None:
    async with (
        running_server(draft_coalesce_s=0) as srv,
        client_py.connect(srv.ws_url) as writer,
    ):
        await writer.create("t", [{"role": "user", "content": "Count to a million"}])
        sent = asyncio.Event()
        read = 0

        async def model() -> AsyncIterator[dict[str, Any]]:
            """A model that never ends on its own (OpenAI-style chunks)."""
            nonlocal read
            for n in range(1_000_000):
                read += 1
                yield {"choices": [{"delta": {"content": f"{n} "}}]}
                if n == 2:
                    sent.set()
                await asyncio.sleep(0.01)  # a model's pace, not synchronisation

        streaming = asyncio.create_task(writer.stream("t", model(), draft_id="d1"))
        await asyncio.wait_for(sent.wait(), TIMEOUT)
        async with await RawClient.connect(srv.ws_url) as stopper:
            await stopper.send(op="draft", transcriptId="t", draftId="d1", stop=True, ref="s")
            ack = await stopper.expect(Ack)
            receipt = await asyncio.wait_for(streaming, TIMEOUT)
            assert receipt.stopped and receipt.revision == ack.revision == 2
            # It stopped reading the model: a chunk or two in flight at most.
            assert read < 20
            await stopper.send(op="draft", transcriptId="t", draftId="d1", stop=True, ref="2")
            assert (await stopper.expect(ErrorFrame)).code == "draft-closed"
        snapshot = await writer.get("t")
        assert snapshot.revision == 2 and len(snapshot.messages) == 2
        said = snapshot.messages[1]
        assert said.metadata == {"stopped": True}
        assert isinstance(said.content, str) and said.content.startswith("0 1 2 ")


@pytest.mark.parametrize("notice_first", [True, False], ids=["notice-first", "racing"])
async def test_a_commit_after_a_stop_returns_the_stops_commit(notice_first: bool) -> None:
    """The commit stores nothing more and returns the stop's receipt,
    whether the writer heard of the stop before it committed (``notice-first``)
    or the two race (the commit may cross the stop's notice)."""
    async with (
        running_server(draft_coalesce_s=0) as srv,
        client_py.connect(srv.ws_url) as writer,
    ):
        await writer.create("t")
        async with writer.draft("t", draft_id="d1") as draft:
            await draft.write("partial")
            await draft.sync()
            async with await RawClient.connect(srv.ws_url) as stopper:
                await stopper.send(op="draft", transcriptId="t", draftId="d1", stop=True, ref="s")
                ack = await stopper.expect(Ack)
            if notice_first:
                await until(lambda: draft.stopped_at is not None)
            receipt = await draft.commit({"content": "partial and the rest"})
        assert receipt.stopped and receipt.revision == ack.revision
        snapshot = await writer.get("t")
        assert [m.content for m in snapshot.messages] == ["partial"]
