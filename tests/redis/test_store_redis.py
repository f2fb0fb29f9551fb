"""``RedisStore`` against the store contract, and what only Redis does:
a trimmed stream, retried scripts, an unreachable server, URL options."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings

from protocol.types import ViewChanged
from server.model.transcript import Transcript
from server.store import (
    AppendResult,
    NewTranscript,
    Notice,
    Receipt,
    StoreUnavailable,
    TranscriptExists,
    open_store,
)
from server.store.options import RedisOptions
from server.store.redis import INTERNAL_KEY_RETENTION, RedisStore
from tests.server.store.shared_store_contract import SharedBackend, SharedStoreContract
from tests.server.store.store_contract import (
    CREATED_AT,
    EPOCH,
    StoreBackend,
    StoreContract,
    appended,
    segment_started,
    view_event,
)
from tests.server.store.test_store_runs import Step, play, steps
from tests.support.redis_server import RedisServer
from tests.support.servers import free_port

pytestmark = pytest.mark.redis

_prefixes = itertools.count()


class RedisBackend:
    persistent = True

    def __init__(self, url: str) -> None:
        # A fresh key prefix per test: one Redis serves the whole module.
        self.url = url
        self.prefix = f"t{next(_prefixes)}:"

    def make(self, **options: Any) -> RedisStore:
        return RedisStore(self.url, RedisOptions(prefix=self.prefix), **options)


class TestRedisStore(StoreContract, SharedStoreContract):
    @pytest.fixture
    def store_backend(self, shared_redis: RedisServer) -> StoreBackend:
        return RedisBackend(shared_redis.url)

    @pytest.fixture
    def shared_backend(self, shared_redis: RedisServer) -> SharedBackend:
        return RedisBackend(shared_redis.url)


# --- what only Redis does -----------------------------------------------------------


@pytest.fixture
async def redis_store(shared_redis: RedisServer) -> AsyncIterator[RedisStore]:
    store = RedisStore(shared_redis.url, RedisOptions(prefix=f"t{next(_prefixes)}:"))
    await store.open()
    yield store
    await store.close()


async def test_a_trimmed_stream_still_loads_whole(shared_redis: RedisServer) -> None:
    store = RedisStore(
        shared_redis.url, RedisOptions(prefix=f"t{next(_prefixes)}:", stream_maxlen=10)
    )
    await store.open()
    try:
        events = [appended(r, r - 1) for r in range(1, 251)]
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT, events[0]))
        for event in events[1:]:
            await store.append(event)
        # MAXLEN ~ trims whole stream nodes: the start is gone, the end is there.
        assert await store.events_after("t1", 0) is None
        assert await store.events_after("t1", 240) == events[240:]
        assert await store.events_after("t1", 250) == []
        loaded = await store.load("t1")
        assert loaded is not None
        assert loaded.events == tuple(events)
    finally:
        await store.close()


async def test_no_stream_means_every_catch_up_reloads(shared_redis: RedisServer) -> None:
    store = RedisStore(
        shared_redis.url, RedisOptions(prefix=f"t{next(_prefixes)}:", stream_maxlen=0)
    )
    await store.open()
    try:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0)))
        assert await store.events_after("t1", 0) is None
        assert await store.events_after("t1", 1) == []
        loaded = await store.load("t1")
        assert loaded is not None
        assert loaded.revision == 1
    finally:
        await store.close()


async def test_a_repeated_script_without_caller_key_appends_once(
    redis_store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What redis-py does after a timeout: send the same script again. The
    # generated key is the same for both sends of one call.
    await redis_store.create(NewTranscript("t1", EPOCH, CREATED_AT))
    fixed = uuid.UUID(int=7)
    monkeypatch.setattr("server.store.redis.store.uuid.uuid4", lambda: fixed)
    first = await redis_store.append(appended(1, 0, 2))
    again = await redis_store.append(appended(1, 0, 2))
    assert first == again == AppendResult(Receipt(1, 0, 2), duplicate=False)
    assert await redis_store.events_after("t1", 0) == [appended(1, 0, 2)]
    loaded = await redis_store.load("t1")
    assert loaded is not None
    assert loaded.idempotency == {}  # generated keys are not the callers'


async def test_generated_keys_are_bounded(redis_store: RedisStore) -> None:
    await redis_store.create(NewTranscript("t1", EPOCH, CREATED_AT))
    for r in range(1, INTERNAL_KEY_RETENTION + 11):
        await redis_store.append(appended(r, r - 1))
    client = redis_store._client()
    assert await client.zcard(redis_store._keys("t1")[6]) == INTERNAL_KEY_RETENTION
    assert await client.hlen(redis_store._keys("t1")[5]) == INTERNAL_KEY_RETENTION


async def test_every_key_of_a_transcript_carries_its_hash_tag(redis_store: RedisStore) -> None:
    await redis_store.create(
        NewTranscript("t1", EPOCH, CREATED_AT, appended(1, 0), idempotency_key="k")
    )
    await redis_store.append(appended(2, 1))
    await redis_store.append(segment_started(3, 0, 1, 2))
    await redis_store.append(view_event(4, ViewChanged("v", 0, None)))
    client = redis_store._client()
    found = await client.keys(redis_store.prefix + "*")
    keys = sorted(k.decode() if isinstance(k, bytes) else k for k in found)
    tagged = [k for k in keys if k != redis_store.prefix + "ids"]
    assert len(tagged) == len(redis_store._keys("t1")) == 10
    assert all(k.startswith(redis_store.prefix + "{t1}:") for k in tagged)


async def test_a_retried_create_is_not_refused(redis_store: RedisStore) -> None:
    # Two sends of one create() carry one token: the second answers ok.
    keys = redis_store._keys("t1")
    args = redis_store._event_args(None, "", internal=False)
    args[10], args[11] = "t1", EPOCH
    for _ in range(2):
        answer = await redis_store._create(
            redis_store._client(), keys, [EPOCH, CREATED_AT, "tok", *args]
        )
        assert answer == [b"ok"]
    with pytest.raises(TranscriptExists):
        await redis_store.create(NewTranscript("t1", EPOCH, CREATED_AT))


async def test_unreachable_redis_is_unavailable_with_a_clear_message() -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=0.2&retries=0")
    await store.open()  # not an error: the replica starts and waits for Redis
    try:
        calls = [
            store.load("t1"),
            store.append(appended(1, 0)),
            store.create(NewTranscript("t1", EPOCH, CREATED_AT)),
            store.events_after("t1", 0),
            store.list(),
            store.delete("t1"),
        ]
        for call in calls:
            with pytest.raises(StoreUnavailable, match="unreachable"):
                await call
    finally:
        await store.close()


async def test_a_paused_redis_times_out_and_a_resent_append_lands_once(
    redis_server: RedisServer,
) -> None:
    store = RedisStore(redis_server.url, RedisOptions(socket_timeout=0.2, retries=2))
    await store.open()
    try:
        await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
        client = store._client()
        redis_server.pause()
        try:
            with pytest.raises(StoreUnavailable, match="did not answer"):
                await store.append(appended(1, 0))
        finally:
            redis_server.resume()
        # The three sends (first try and two retries) were queued in the
        # paused server; wait until it has read them all (their connections,
        # closed by the client, are gone), then count what they did.
        # Redis offers no event for that: poll its client list, bounded.
        for _ in range(250):
            if len(await client.client_list()) == 1:
                break
            await asyncio.sleep(0.02)
        assert len(await client.client_list()) == 1
        loaded = await store.load("t1")
        assert loaded is not None
        assert loaded.revision <= 1
        if loaded.revision == 1:
            assert loaded.events == (appended(1, 0),)
    finally:
        await store.close()


async def test_notices_after_every_subscription_and_change(redis_server: RedisServer) -> None:
    # retries=1: after the restart, the first command on each pooled
    # connection finds it closed and is sent again on a new one.
    store = RedisStore(redis_server.url, RedisOptions(socket_timeout=0.5, retries=1))
    await store.open()
    notices = store.notices(reconnect_delay=0.02)
    try:
        async with asyncio.timeout(10):
            assert await anext(notices) is None  # subscribed
            await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
            assert await anext(notices) == Notice("t1", EPOCH, 0)
            await store.append(appended(1, 0))
            assert await anext(notices) == Notice("t1", EPOCH, 1)
            await store.delete("t1")
            assert await anext(notices) == Notice("t1", "", 0)
            # Redis restarts: the subscription comes back by itself, announced.
            redis_server.restart()
            assert await anext(notices) is None
            await store.create(NewTranscript("t1", "e2", CREATED_AT))
            assert await anext(notices) == Notice("t1", "e2", 0)
    finally:
        await notices.aclose()
        await store.close()


def test_url_options() -> None:
    store = RedisStore(
        "redis://:pw@h:7000/3?prefix=x:&stream_maxlen=5&socket_timeout=0.5"
        "&max_connections=3&retries=4&health_check_interval=10",
        idempotency_retention=7,
    )
    options = store.options
    assert (options.prefix, options.stream_maxlen, options.socket_timeout) == ("x:", 5, 0.5)
    assert (options.max_connections, options.retries, options.health_check_interval) == (3, 4, 10)
    assert options.pool_wait_s == 0.5 and store.idempotency_retention == 7
    assert store.where == "redis at h:7000"
    assert (store.address.username, store.address.password, store.address.db) == (None, "pw", 3)
    assert store.channel == "x:changes"
    assert "prefix" not in store.url and store.url.startswith("redis://:pw@h:7000/3")
    assert isinstance(open_store("rediss://h:7000/0"), RedisStore)
    for bad in (
        "redis://h/0?stream_maxlen=x",
        "redis://h/0?retries=-1",
        "redis://h/0?decode_responses=1",  # unknown options are refused, not passed on
        "redis://h/zero",  # the database is a number
        "http://h/0",
    ):
        with pytest.raises(ValueError):
            RedisStore(bad)
    with pytest.raises(ValueError, match="or as RedisOptions"):
        RedisStore("redis://h/0?prefix=a:", RedisOptions(prefix="b:"))


async def test_a_transcript_stored_before_the_index_is_indexed_on_first_read(
    redis_store: RedisStore,
) -> None:
    """Data written by a version without ``ends``/``segs``/``ix`` (and without
    the list's title and preview) is indexed once, atomically, by the first
    ranged read; appends made in between are kept."""
    events = [appended(1, 0, 3), appended(2, 3, 2), segment_started(3, 0, 4, 5), appended(4, 5, 4)]
    await redis_store.create(NewTranscript("t1", EPOCH, CREATED_AT))
    for event in events:
        await redis_store.append(event)
    client = redis_store._client()
    meta, *_, ends, segs, views = redis_store._keys("t1")
    await client.delete(ends, segs, views)
    await client.hdel(meta, "ix", "vchanges", "title", "preview")
    [info] = await redis_store.list()
    assert (info.title, info.preview) == (None, None)
    await redis_store.append(appended(5, 9, 1))  # before anyone reads it so

    whole = Transcript.restore([*events, appended(5, 9, 1)])
    state = await redis_store.load_recent("t1", messages=4)
    assert state is not None and state.snapshot == whole.snapshot(start=6)
    assert (await redis_store.read_messages("t1", 1, 7)).messages == whole.messages(1, 7)
    assert await client.hget(meta, "ix") == b"1"
    [info] = await redis_store.list()
    assert (info.title, info.preview) == ("message 0", "message 9")


class CuttingRelay:
    """A TCP relay to Redis on 127.0.0.1 that, once armed, cuts the
    connection that carries the next reply instead of passing it on: the
    command ran in Redis and the client never hears its answer, so redis-py
    reconnects and sends it again."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.armed = False
        self.cuts = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> CuttingRelay:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, replies: bool) -> None:
            try:
                while data := await src.read(65536):
                    if replies and self.armed:
                        self.armed = False
                        self.cuts += 1
                        break
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                writer.close()
                up_writer.close()

        await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True))


async def test_a_run_resent_after_a_cut_connection_lands_once_and_is_no_duplicate(
    shared_redis: RedisServer,
) -> None:
    """redis-py sends a command again after a connection error: the run's
    script had run, and the second send finds its own call's token in every
    key's ack. It answers as the first would have: stored, not duplicate,
    and nothing is stored twice (with or without a caller's key)."""
    async with CuttingRelay(shared_redis.port) as relay:
        store = RedisStore(relay.url, RedisOptions(prefix=f"t{next(_prefixes)}:", retries=2))
        await store.open()
        try:
            await store.create(NewTranscript("t1", EPOCH, CREATED_AT))
            run = [(appended(1, 0, 2), "k1"), (appended(2, 2), None), (appended(3, 3), "k3")]
            relay.armed = True
            outcomes = await store.append_many(run)
            assert relay.cuts == 1
            assert outcomes == [
                AppendResult(Receipt(1, 0, 2)),
                AppendResult(Receipt(2, 2, 1)),
                AppendResult(Receipt(3, 3, 1)),
            ]
            relay.armed = True
            assert await store.append(appended(4, 4), idempotency_key="k4") == AppendResult(
                Receipt(4, 4, 1)
            )
            assert relay.cuts == 2
            assert await store.events_after("t1", 0) == [event for event, _ in run] + [
                appended(4, 4)
            ]
            # A client's own retry (another call) is still a duplicate.
            again = await store.append(appended(5, 5), idempotency_key="k3")
            assert again == AppendResult(Receipt(3, 3, 1), duplicate=True)
            assert await store.recorded("t1", "k1") == Receipt(1, 0, 2)
        finally:
            await store.close()


async def test_a_repeated_run_script_answers_what_the_first_did(
    redis_store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same two sends, on one connection: the second finds the run stored
    # by the first (one token, the same generated keys).
    await redis_store.create(NewTranscript("t1", EPOCH, CREATED_AT))
    numbers = itertools.count()
    monkeypatch.setattr("server.store.redis.store.uuid.uuid4", lambda: uuid.UUID(int=next(numbers)))
    run = [(appended(1, 0), None), (appended(2, 1), "k"), (appended(3, 2, 2), None)]
    first = await redis_store.append_many(run)
    numbers = itertools.count()  # the second send carries what the first did
    assert await redis_store.append_many(run) == first
    assert not any(isinstance(o, Exception) or o.duplicate for o in first)
    assert await redis_store.events_after("t1", 0) == [event for event, _ in run]


@settings(max_examples=40, deadline=None)
@given(steps)
def test_runs_from_stale_copies_never_corrupt_the_redis_store(
    shared_redis: RedisServer, plan: list[Step]
) -> None:
    """``tests/server/store/test_store_runs.py`` on Redis, where replicas race for real."""
    prefix = f"runs{next(_prefixes)}:"
    asyncio.run(play(RedisStore(shared_redis.url, RedisOptions(prefix=prefix)), plan))


async def test_a_resent_run_longer_than_the_generated_keys_kept_lands_once(
    redis_store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run's own later appends pruned its first generated keys: the
    # second send still recognises those appends, stored as these very events.
    await redis_store.create(NewTranscript("t1", EPOCH, CREATED_AT))
    numbers = itertools.count()
    monkeypatch.setattr("server.store.redis.store.uuid.uuid4", lambda: uuid.UUID(int=next(numbers)))
    run = [(appended(r, r - 1), None) for r in range(1, INTERNAL_KEY_RETENTION + 11)]
    first = await redis_store.append_many(run)
    numbers = itertools.count()
    assert await redis_store.append_many(run) == first
    assert all(isinstance(o, AppendResult) and not o.duplicate for o in first)
    assert await redis_store.events_after("t1", 0) == [event for event, _ in run]
