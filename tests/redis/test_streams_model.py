"""The Redis registry decides exactly as the memory registry: the same random
requests (creates with forks and closure, appends with and without
producers, closes, deletes) sent to either of two replicas on one Redis get
the answers one memory registry gives, and leave the same streams."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.store.open import backend_of
from server.store.redis import RedisStore
from server.streams.open import stream_port
from server.streams.registry import Limits, StreamRegistry
from tests.durable_streams.test_durability import (
    PATHS,
    concrete,
    json_value,
    operation,
    perform,
    state,
)
from tests.support.redis_server import RedisServer


async def replay(url: str, ops: list[Any], where: list[int]) -> None:
    now = [time.time()]

    def clock() -> float:
        return now[0]

    reference = StreamRegistry(Limits(), clock=clock)
    stores = [RedisStore(url), RedisStore(url)]
    for store in stores:
        await store.open()
    replicas = [
        StreamRegistry(Limits(), clock, port=stream_port(backend_of(store))) for store in stores
    ]
    try:
        for index, operation in enumerate(ops):
            now[0] += 1
            request = await concrete(reference, operation)
            expected = await perform(reference, request)
            answered = await perform(replicas[where[index % len(where)]], request)
            assert answered == expected, (request, answered, expected)
        held = state(reference)
        for replica in replicas:
            for path in PATHS:
                await replica.get(path)
            assert state(replica) == held
    finally:
        for store in stores:
            await store.close()


#: Each path made first (plain bytes or JSON), then anything.
made_first = st.permutations(PATHS).flatmap(
    lambda paths: st.tuples(
        *(st.sampled_from(["application/json", "application/octet-stream"]) for _ in paths)
    ).map(
        lambda types: [("create", p, t, None, False, 0) for p, t in zip(paths, types, strict=True)]
    )
)


#: Mostly appends that leave the stream open, so that copies fall behind.
appends = st.tuples(
    st.just("append"),
    st.sampled_from(PATHS),
    json_value.map(lambda v: json.dumps(v).encode()) | st.binary(min_size=1, max_size=8),
    st.sampled_from([None, ("p", 0), ("p", 1), ("q", 0)]),
    st.sampled_from(["next", "next", "next", 0]),
    st.sampled_from([False] * 9 + [True]),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.tuples(
        made_first, st.lists(appends | appends | appends | operation, min_size=10, max_size=40)
    ).map(lambda x: x[0] + x[1]),
    st.lists(st.integers(0, 1), min_size=2, max_size=6).filter(lambda w: len(set(w)) == 2),
)
def test_two_replicas_on_redis_answer_as_one_memory_registry(
    shared_redis: RedisServer, ops: list[Any], where: list[int]
) -> None:
    """``where``: which replica takes each request, in turn (runs on one
    replica write on a copy that is current; a switch finds it stale)."""
    asyncio.run(replay(f"{shared_redis.url}?prefix=m{uuid.uuid4().hex[:8]}:", ops, where))
