"""Issue 29: the same history has the same digests everywhere. The same
changes, made through a server on each store (memory, SQLite, Redis, and on
Redis through two replicas), give the same digest at every revision: in
HTTP snapshots, in the increments subscribers get (checked by their
consumer core as they come, on both subprotocols) and after a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from protocol import wire
from protocol.digest import genesis_digest
from tests.redis.replicas import Follower, replicas
from tests.support.redis_server import RedisServer
from tests.support.servers import ServerProcess
from tests.support.wsclient import RawClient

pytestmark = pytest.mark.redis

ID = "same:history"


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


#: The history: every kind of change, values JCS has something to say about.
STEPS: list[Callable[[httpx.AsyncClient, str], Awaitable[httpx.Response]]] = [
    lambda h, b: h.post(f"{b}/v1/transcripts/{ID}/messages", json={"messages": [user("a")]}),
    lambda h, b: h.post(
        f"{b}/v1/transcripts/{ID}/messages",
        json={
            "messages": [
                {"role": "assistant", "content": "b", "metadata": {"n": 1.0, "z": [1e21, -0.0]}},
                {"role": "user", "content": [{"type": "text", "text": "é 😀 \u2028"}]},
            ]
        },
    ),
    lambda h, b: h.post(f"{b}/v1/transcripts/{ID}/segments", json={"start": 1}),
    lambda h, b: h.put(f"{b}/v1/transcripts/{ID}/views/v", json={"start": 0, "end": 2}),
    lambda h, b: h.post(f"{b}/v1/transcripts/{ID}/messages", json={"messages": [user("c")]}),
    lambda h, b: h.delete(f"{b}/v1/transcripts/{ID}/views/v"),
]


async def _play(
    http: httpx.AsyncClient,
    writer: str,
    reader: str,
    caught_up: Callable[[int], Awaitable[None]] | None = None,
) -> list[str]:
    """Make the changes through ``writer`` (the transcript exists); the
    digest at each revision as ``reader`` answers ``GET``, once
    ``caught_up(revision)`` says it has the change (another replica learns
    of it a little later)."""
    digests = [(await http.get(f"{reader}/v1/transcripts/{ID}")).json()["digest"]]
    for step in STEPS:
        r = await step(http, writer)
        assert r.status_code in (200, 201), r.text
        if caught_up is not None:
            await caught_up(len(digests))
        snapshot = (await http.get(f"{reader}/v1/transcripts/{ID}")).json()
        assert snapshot["revision"] == len(digests)
        digests.append(snapshot["digest"])
    return digests


async def _create(http: httpx.AsyncClient, base: str) -> None:
    r = await http.post(f"{base}/v1/transcripts", json={"id": ID})
    assert r.status_code == 201, r.text


async def test_the_same_changes_give_the_same_digests_on_every_store_and_replica(
    shared_redis: RedisServer, tmp_path: Path
) -> None:
    url = shared_redis.url + "?prefix=digests:"
    async with httpx.AsyncClient(timeout=10) as http:
        found: dict[str, list[str]] = {}
        for name, store in (("memory", "memory"), ("sqlite", f"sqlite:{tmp_path / 'data'}")):
            server = ServerProcess(store=store, log_path=tmp_path / f"{name}.log")
            await asyncio.to_thread(server.start)
            try:
                await _create(http, server.url)
                found[name] = await _play(http, server.url, server.url)
                if name == "sqlite":
                    # Kept across a restart: the store gives back what it wrote.
                    await asyncio.to_thread(server.restart)
                    again = (await http.get(f"{server.url}/v1/transcripts/{ID}")).json()
                    assert again["digest"] == found[name][-1]
            finally:
                server.kill()
        async with replicas(2, url, tmp_path) as (a, b):
            # Subscribers on B, one per subprotocol, and a checking core.
            await _create(http, a.url)  # in Redis once answered: B finds it
            follower = Follower(ID)
            await follower.attach(b.ws_url)
            raw_json = await RawClient.connect(b.ws_url)
            raw_msgpack = await RawClient.connect(b.ws_url, binary=True)
            try:
                for raw in (raw_json, raw_msgpack):
                    await raw.send(op="subscribe", transcriptId=ID)
                found["redis, written on A, read on B"] = await _play(
                    http, a.url, b.url, follower.wait_revision
                )
                final = len(STEPS)
                await follower.wait_revision(final)
                seen: list[dict[int, str]] = []
                for raw in (raw_json, raw_msgpack):
                    digests: dict[int, str] = {}
                    while final not in digests:
                        frame = await raw.recv()
                        if isinstance(frame, wire.Baseline):
                            assert frame.snapshot.digest is not None
                            digests[frame.snapshot.revision] = frame.snapshot.digest
                        elif isinstance(frame, wire.Increment):
                            assert frame.event.digest is not None
                            digests[frame.event.revision] = frame.event.digest
                    seen.append(digests)
                assert seen[0] == seen[1]
                for revision, digest in seen[0].items():
                    assert found["memory"][revision] == digest
                copy = follower.subscription.copy
                assert copy is not None and copy.digest == found["memory"][-1]
                assert follower.baselines == 1  # no digest ever disagreed
                on_a = (await http.get(f"{a.url}/v1/transcripts/{ID}")).json()
                assert on_a["digest"] == found["memory"][-1]
            finally:
                await follower.detach()
                await raw_json.close()
                await raw_msgpack.close()
    assert found["memory"][0] == genesis_digest(ID)
    assert len(set(found["memory"])) == len(STEPS) + 1
    assert found["sqlite"] == found["memory"]
    assert found["redis, written on A, read on B"] == found["memory"]
