"""The contract every backend of the Durable Streams keeps, in Python.

What the HTTP face (``server.streams.http``) asks of the streams' registry,
held on each backend: the memory store's, the SQLite store's (its
``streams.sqlite3``), and the Redis store's on one Redis and on a Redis
Cluster. The conformance suite (``tests/durable_streams/test_conformance.py``)
stays the outside check; this one names the rule a backend broke.

A backend's test module subclasses ``StreamBackendContract`` and supplies the
``stream_backend`` fixture: ``StreamBackend.open()`` gives a registry over
the SAME place every time it is called within one test (so a durable one can
be opened again, and a shared one twice at once); ``close_all()`` closes
what it opened.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol

import pytest

from server.streams.model import Stream, StreamError
from server.streams.registry import StreamRegistry
from tests.support.waiting import until

BYTES = "application/octet-stream"


class StreamBackend(Protocol):
    #: The streams outlive the registry (opened again, they are there).
    durable: bool
    #: Several registries share the streams at once (replicas).
    shared: bool

    async def open(self) -> StreamRegistry: ...

    async def close_all(self) -> None: ...


async def create(
    registry: StreamRegistry,
    path: str,
    body: bytes = b"",
    *,
    content_type: str | None = BYTES,
    closed: bool = False,
    ttl_s: int | None = None,
    forked_from: str | None = None,
    fork_offset: str | None = None,
) -> tuple[Stream, bool]:
    return await registry.create(
        path, content_type=content_type, ttl_s=ttl_s, expires_at=None, expires_at_ts=None,
        body=body, closed=closed, forked_from=forked_from, fork_offset=fork_offset,
        fork_sub_offset=0,
    )  # fmt: skip


async def append(
    registry: StreamRegistry,
    path: str,
    body: bytes,
    *,
    producer: tuple[str, int, int] | None = None,
    close: bool = False,
    stream_seq: str | None = None,
) -> Any:
    return await registry.append(
        path, body, content_type=BYTES, stream_seq=stream_seq, producer=producer, close=close
    )


def text(registry: StreamRegistry, stream: Stream, offset: str | None = None) -> bytes:
    return b"".join(m.data for m in registry.read(stream, offset))


class StreamBackendContract:
    """Every test runs on ``stream_backend`` (a fixture of the subclass)."""

    @pytest.fixture
    async def backend(self, stream_backend: StreamBackend) -> AsyncIterator[StreamBackend]:
        try:
            yield stream_backend
        finally:
            await stream_backend.close_all()

    @pytest.fixture
    async def streams(self, backend: StreamBackend) -> StreamRegistry:
        return await backend.open()

    # --- create ------------------------------------------------------------------

    async def test_a_stream_is_created_once_and_read_whole(self, streams: StreamRegistry) -> None:
        stream, made = await create(streams, "/a", b"hello")
        assert made
        assert text(streams, stream) == b"hello"
        again, made = await create(streams, "/a", b"hello")
        assert not made and again.tail == stream.tail
        with pytest.raises(StreamError) as refused:
            await create(streams, "/a", content_type="text/plain")
        assert refused.value.status == 409

    async def test_an_unknown_stream_is_404(self, streams: StreamRegistry) -> None:
        assert await streams.get("/nothing") is None
        with pytest.raises(StreamError) as refused:
            await streams.live("/nothing")
        assert refused.value.status == 404

    # --- append and read ---------------------------------------------------------

    async def test_appends_read_back_in_order_from_any_offset(
        self, streams: StreamRegistry
    ) -> None:
        await create(streams, "/a")
        offsets = []
        for part in (b"one ", b"two ", b"three"):
            result = await append(streams, "/a", part)
            assert result.message is not None
            offsets.append(result.message.offset)
        assert offsets == sorted(offsets)
        stream = await streams.live("/a")
        assert text(streams, stream) == b"one two three"
        assert text(streams, stream, offsets[0]) == b"two three"
        assert text(streams, stream, offsets[-1]) == b""
        assert stream.tail == offsets[-1]

    async def test_a_producer_is_accepted_once_per_sequence(self, streams: StreamRegistry) -> None:
        await create(streams, "/p")
        first = await append(streams, "/p", b"a", producer=("w", 0, 0))
        assert first.producer.status == "accepted" and first.message is not None
        repeat = await append(streams, "/p", b"a", producer=("w", 0, 0))
        assert repeat.producer.status == "duplicate" and repeat.message is None
        gap = await append(streams, "/p", b"c", producer=("w", 0, 5))
        assert gap.producer.status == "gap"
        fenced = await append(streams, "/p", b"b", producer=("w", 1, 0))
        assert fenced.producer.status == "accepted"
        stale = await append(streams, "/p", b"x", producer=("w", 0, 1))
        assert stale.producer.status == "stale_epoch"
        assert text(streams, await streams.live("/p")) == b"ab"

    async def test_a_stream_seq_must_grow(self, streams: StreamRegistry) -> None:
        await create(streams, "/s")
        await append(streams, "/s", b"a", stream_seq="0001")
        with pytest.raises(StreamError) as refused:
            await append(streams, "/s", b"b", stream_seq="0001")
        assert refused.value.status == 409

    # --- close -----------------------------------------------------------------------

    async def test_a_closed_stream_refuses_appends(self, streams: StreamRegistry) -> None:
        await create(streams, "/c", b"x")
        closed = await streams.close("/c", None)
        assert closed.closed_now and closed.stream.closed
        refused = await append(streams, "/c", b"y")
        assert refused.refused_closed and refused.message is None
        assert text(streams, await streams.live("/c")) == b"x"

    # --- forks and delete --------------------------------------------------------------

    async def test_a_fork_reads_through_its_source_and_outlives_its_deletion(
        self, streams: StreamRegistry
    ) -> None:
        source, _ = await create(streams, "/src", b"base ")
        await create(streams, "/fork", forked_from="/src", fork_offset=source.tail)
        await append(streams, "/fork", b"fork")
        await append(streams, "/src", b"later")
        assert text(streams, await streams.live("/fork")) == b"base fork"
        await streams.delete("/src")
        with pytest.raises(StreamError) as gone:
            await streams.live("/src")
        assert gone.value.status == 410
        assert text(streams, await streams.live("/fork")) == b"base fork"
        await streams.delete("/fork")
        assert await streams.get("/fork") is None
        assert await streams.get("/src") is None
        stream, made = await create(streams, "/src", b"new")
        assert made and text(streams, stream) == b"new"

    async def test_a_delete_with_detached_forks_frees_the_path_at_once(
        self, streams: StreamRegistry
    ) -> None:
        source, _ = await create(streams, "/src", b"base ")
        await create(streams, "/fork", forked_from="/src", fork_offset=source.tail)
        await append(streams, "/fork", b"fork")
        await streams.delete("/src", detach_forks=True)
        assert await streams.get("/src") is None
        fork = await streams.live("/fork")
        assert fork.forked_from is None
        assert text(streams, fork) == b"base fork"

    # --- waiting -------------------------------------------------------------------------

    async def test_a_waiting_reader_is_woken_by_an_append(self, streams: StreamRegistry) -> None:
        stream, _ = await create(streams, "/w")
        waiting = asyncio.create_task(streams.wait(stream, stream.tail, timeout=10))
        # The registry offers no event for "a reader waits": its waiters.
        await until(lambda: "/w" in streams._waiters)
        await append(streams, "/w", b"news")
        woken = await asyncio.wait_for(waiting, 10)
        assert [m.data for m in woken.messages] == [b"news"]
        assert not woken.timed_out

    # --- what survives -------------------------------------------------------------------

    async def test_a_durable_backend_holds_every_change_when_opened_again(
        self, backend: StreamBackend, streams: StreamRegistry
    ) -> None:
        if not backend.durable:
            pytest.skip("the streams live as long as the process")
        source, _ = await create(streams, "/d", b"a")
        first = source.tail
        await append(streams, "/d", b"b", producer=("w", 2, 0))
        await create(streams, "/f", forked_from="/d", fork_offset=first)
        await create(streams, "/gone", b"x")
        await streams.delete("/gone")
        await streams.close("/d", None)
        again = await backend.open()
        stream = await again.live("/d")
        assert text(again, stream) == b"ab" and stream.closed
        assert stream.producers["w"].epoch == 2
        assert text(again, await again.live("/f")) == b"a"
        assert await again.get("/gone") is None
        # What was read back keeps its rules: the producer's next sequence.
        repeat = await append(again, "/f", b"c", producer=("w", 0, 0))
        assert repeat.producer.status == "accepted"

    async def test_a_shared_backend_shows_each_replica_the_others_changes(
        self, backend: StreamBackend, streams: StreamRegistry
    ) -> None:
        if not backend.shared:
            pytest.skip("one process holds the streams")
        other = await backend.open()
        await create(streams, "/r", b"one ")
        await append(other, "/r", b"two", producer=("w", 0, 0))
        assert text(streams, await streams.live("/r")) == b"one two"
        repeat = await append(streams, "/r", b"two", producer=("w", 0, 0))
        assert repeat.producer.status == "duplicate"
        await streams.delete("/r")
        assert await other.get("/r") is None
