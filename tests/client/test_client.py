"""The client against a real in-process server: mirrors, calls, typed errors."""

from __future__ import annotations

import asyncio

import pytest

import client_py
from client_py import (
    InvalidMessage,
    NotFound,
    RequestTimeout,
    RevisionConflict,
    ServerError,
    endpoints,
)
from protocol.types import MessagesAppended, Segment, SegmentStarted, TranscriptSnapshot
from tests.support.servers import running_server
from tests.support.waiting import parked


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_endpoints_accept_ws_and_http_urls() -> None:
    assert endpoints("ws://h:1/v1/ws") == ("http://h:1", "ws://h:1/v1/ws")
    assert endpoints("wss://h/v1/ws/") == ("https://h", "wss://h/v1/ws")
    assert endpoints("http://h:1") == ("http://h:1", "ws://h:1/v1/ws")
    assert endpoints("https://h/base/") == ("https://h/base", "wss://h/base/v1/ws")
    assert endpoints("ws://h:1") == ("http://h:1", "ws://h:1/v1/ws")
    with pytest.raises(ValueError):
        endpoints("ftp://h")


async def test_mirror_follows_appends_and_segments() -> None:
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        created = await client.create("t1", [user("hello")])
        assert (created.transcript_id, created.revision) == ("t1", 1)
        mirror = await client.subscribe("t1")
        assert mirror is await client.subscribe("t1")
        assert [m.content for m in mirror.messages] == ["hello"]
        assert (mirror.revision, mirror.epoch) == (1, created.epoch)
        stream = mirror.events()

        ack = await client.append("t1", [user("a"), {"role": "assistant", "content": "b"}])
        assert (ack.revision, ack.start, ack.count, ack.duplicate) == (2, 1, 2, False)
        seg = await client.start_segment("t1")
        assert seg.revision == 3
        await mirror.wait_for_revision(3, timeout=5)

        snapshot = await client.get("t1")
        assert_mirror_equals(mirror, snapshot)
        assert mirror.active_start == 3
        assert mirror.segments == (Segment(0, 3), Segment(3, None))

        first = await anext(stream)
        second = await anext(stream)
        assert not isinstance(first, TranscriptSnapshot)
        assert not isinstance(second, TranscriptSnapshot)
        assert isinstance(first.change, MessagesAppended) and first.revision == 2
        assert isinstance(second.change, SegmentStarted) and second.revision == 3
        assert mirror.counters.applied == 2
        assert mirror.counters.baselines == 1
        assert client.counters.seq.gaps == 0


async def test_a_segment_started_inside_the_messages_closes_the_previous_at_the_length() -> None:
    async with running_server() as srv, client_py.connect(srv.ws_url) as client:
        await client.create("t1", [user("a"), user("b"), user("c")])
        mirror = await client.subscribe("t1")
        await client.start_segment("t1", 1)
        await client.start_segment("t1", 2)
        await mirror.wait_for_revision(3, timeout=5)
        snapshot = await client.get("t1")
        assert snapshot.segments == (Segment(0, 3), Segment(1, 3), Segment(2, None))
        assert_mirror_equals(mirror, snapshot)


async def test_two_clients_see_the_same_transcript() -> None:
    async with (
        running_server() as srv,
        client_py.connect(srv.url) as reader,
        client_py.connect(srv.ws_url) as writer,
    ):
        created = await writer.create()
        tid = created.transcript_id
        mirror = await reader.subscribe(tid)
        for i in range(20):
            await writer.append(tid, [user(f"m{i}")])
        await mirror.wait_for_revision(20, timeout=5)
        assert [m.content for m in mirror.messages] == [f"m{i}" for i in range(20)]
        assert_mirror_equals(mirror, await reader.get(tid))


async def test_wait_for_revision_times_out_clearly() -> None:
    async with running_server() as srv, client_py.connect(srv.url) as client:
        await client.create("quiet")
        mirror = await client.subscribe("quiet")
        with pytest.raises(TimeoutError, match="revision 5 not reached"):
            await mirror.wait_for_revision(5, timeout=0.1)
        await mirror.wait_for_revision(0, timeout=0.1)  # already there


async def test_typed_errors() -> None:
    async with running_server() as srv, client_py.connect(srv.url) as client:
        await client.create("t", [user("x")])
        with pytest.raises(RevisionConflict) as conflict:
            await client.append("t", [user("y")], expected_revision=0)
        assert conflict.value.current == 1
        with pytest.raises(NotFound):
            await client.append("missing", [user("y")])
        with pytest.raises(NotFound):
            await client.subscribe("missing")
        assert "missing" not in client.mirrors
        with pytest.raises(InvalidMessage):
            await client.append("t", [{"role": "robot", "content": "y"}])
        with pytest.raises(ServerError) as invalid_segment:
            await client.start_segment("t", start=7)
        assert invalid_segment.value.code == "invalid-segment"
        with pytest.raises(NotFound):
            await client.get("missing")
        with pytest.raises(client_py.Conflict):
            await client.create("t")
        # The connection stayed usable throughout.
        assert (await client.append("t", [user("z")])).revision == 2


async def test_an_idempotency_key_lands_once() -> None:
    async with running_server() as srv, client_py.connect(srv.url) as client:
        await client.create("t")
        first = await client.append("t", [user("once")], idempotency_key="k-1")
        again = await client.append("t", [user("once")], idempotency_key="k-1")
        assert (first.revision, first.duplicate) == (1, False)
        assert (again.revision, again.start, again.duplicate) == (1, 0, True)
        assert len((await client.get("t")).messages) == 1


async def test_an_append_in_flight_over_a_dropped_connection_lands_once() -> None:
    async with (
        running_server() as srv,
        client_py.connect(srv.url, backoff_min=0.01, backoff_max=0.05) as client,
    ):
        await client.create("t")
        mirror = await client.subscribe("t")
        ws = client._ws
        assert ws is not None
        # Send the append, then cut the socket before its ack can be read.
        task = asyncio.create_task(client.append("t", [user("across")]))
        # One step sends it (a small frame is written at once) and leaves the
        # call waiting for its ack; nothing marks "written", so no event.
        await parked(task)
        ws.transport.abort()
        ack = await asyncio.wait_for(task, 5)
        assert ack.revision == 1
        await mirror.wait_for_revision(1, timeout=5)
        snapshot = await client.get("t")
        assert [m.content for m in snapshot.messages] == ["across"]
        assert client.counters.reconnects >= 1
        assert mirror.counters.resumes >= 1


async def test_a_call_without_a_server_times_out() -> None:
    async with running_server() as srv:
        client = client_py.Client(srv.url, request_timeout=0.2, backoff_min=0.01)
        await client.start()
    # The server is gone: the call waits for a connection that never comes.
    try:
        with pytest.raises(RequestTimeout, match="not connected"):
            await client.append("t", [user("x")])
    finally:
        await client.aclose()


async def test_an_unreachable_server_is_reported() -> None:
    async with running_server() as srv:
        url = srv.url
    with pytest.raises(client_py.Unreachable):
        async with client_py.connect(url, connect_timeout=0.3, backoff_min=0.01):
            pass


async def test_closing_fails_waiters_cleanly() -> None:
    async with running_server() as srv:
        client = client_py.Client(srv.url)
        await client.start()
        await client.create("t")
        mirror = await client.subscribe("t")
        waiter = asyncio.create_task(mirror.wait_for_revision(9, timeout=5))
        stream = mirror.events()
        await parked(waiter)  # closed while it waits
        await client.aclose()
        with pytest.raises(client_py.ClientClosed):
            await waiter
        assert [u async for u in stream] == []
        with pytest.raises(client_py.ClientClosed):
            await client.append("t", [user("late")])


def assert_mirror_equals(mirror: client_py.Mirror, snapshot: TranscriptSnapshot) -> None:
    assert mirror.start == snapshot.start == 0
    assert mirror.messages == snapshot.messages
    assert mirror.revision == snapshot.revision
    assert mirror.epoch == snapshot.epoch
    assert mirror.active_start == snapshot.active_start
    assert mirror.segments == snapshot.segments


async def test_a_token_is_required_and_sent() -> None:
    async with running_server(token="s3cret") as srv:
        with pytest.raises(client_py.Unauthorized):
            async with client_py.connect(srv.url, connect_timeout=5):
                pass
        async with client_py.HttpApi(srv.url) as anonymous:
            with pytest.raises(client_py.Unauthorized):
                await anonymous.create("t")
        async with client_py.connect(srv.url, token="s3cret") as client:
            await client.create("t")
            mirror = await client.subscribe("t")
            await client.append("t", [user("authorized")])
            await mirror.wait_for_revision(1, timeout=5)
