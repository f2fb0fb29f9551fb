"""What one idle WebSocket connection holds (``server.web.ws_protocol``,
``server.live.outbound``, ``server.web.ws``), and the small parts that replace
uvicorn's ``asyncio.Queue`` and ``asyncio.Event`` behaving as those did.

The figures are in docs/benchmarks.md ("Idle memory per connection"); these
tests hold the things that made them, against a real server."""

from __future__ import annotations

import asyncio

import httpx

from protocol.wire import Baseline, Pong
from server.web.ws_protocol import Inbox, TsyncWebSocketProtocol, Writable
from tests.support.servers import running_server
from tests.support.waiting import parked
from tests.support.wsclient import RawClient


async def test_an_idle_subscribed_connection_holds_no_handshake_and_no_writer() -> None:
    async with running_server() as srv:
        async with httpx.AsyncClient(base_url=srv.url) as http:
            r = await http.post(
                "/v1/transcripts",
                json={"id": "t", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert r.status_code == 201, r.text
        headers = {"X-Big": "x" * 500}
        async with await RawClient.connect(srv.ws_url, additional_headers=headers) as c:
            await c.send(op="subscribe", transcriptId="t", ref=1)
            await c.expect(Baseline)
            await c.send(op="ping", ref=2)
            await c.expect(Pong)
            (protocol,) = srv.server.server_state.connections
            assert isinstance(protocol, TsyncWebSocketProtocol)
            # The handshake is answered: nothing of it is kept.
            assert protocol.request is None and protocol.response is None
            assert protocol.scope["headers"] == []
            # uvicorn's attributes only (ours are slots), in a compact dict.
            assert "_raw_open" not in vars(protocol)
            assert isinstance(protocol.queue, Inbox)
            assert isinstance(protocol.writable, Writable)
            # Everything went out as it was pushed: no writer task was needed.
            (queue,) = srv.hub.subscriptions.connections.values()
            assert queue.follows("t")
            assert queue._writer is None


async def test_the_inbox_hands_over_in_order_and_survives_a_cancelled_get() -> None:
    inbox = Inbox()
    inbox.put_nowait(1)
    inbox.put_nowait(2)
    assert (inbox.qsize(), inbox.empty()) == (2, False)
    assert [await inbox.get(), await inbox.get()] == [1, 2]
    assert inbox.empty()
    waiting = asyncio.create_task(inbox.get())
    await parked(waiting)  # cancelled while it waits
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert waiting.cancelled()
    getter = asyncio.create_task(inbox.get())
    await parked(getter)  # empty: it waits
    inbox.put_nowait(3)
    assert await asyncio.wait_for(getter, 1) == 3
    assert inbox.empty()


async def test_writable_holds_senders_while_cleared_and_one_cancelled_leaves_the_others() -> None:
    writable = Writable()
    assert writable.is_set()
    await asyncio.wait_for(writable.wait(), 1)  # set: no wait
    writable.clear()
    first = asyncio.create_task(writable.wait())
    second = asyncio.create_task(writable.wait())
    await parked(first, second)  # cleared: both wait
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    # That the cancel wakes no one is what is tested: nothing to wait for,
    # one turn lets a wrongly woken ``second`` finish.
    await asyncio.sleep(0)
    assert not second.done()
    writable.set()
    await asyncio.wait_for(second, 1)
    # Set then cleared again before a waiter runs: it still goes (as Event).
    writable.clear()
    third = asyncio.create_task(writable.wait())
    await parked(third)
    writable.set()
    writable.clear()
    await asyncio.wait_for(third, 1)
