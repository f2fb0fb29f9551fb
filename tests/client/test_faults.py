"""The client through a proxy that drops, repeats and reorders frames and cuts
connections: every mirror still ends equal to the server's transcript, and
every acknowledged append is there exactly once."""

from __future__ import annotations

import asyncio
import os
import random

import pytest

import client_py
from client_py import ServerError
from protocol.continuity import Counters
from tests.client.test_client import assert_mirror_equals
from tests.support.faultproxy import FaultProxy, Faults
from tests.support.servers import running_server

# TSYNC_FAULT_SEEDS=1,2,3 explores other seeds.
SEEDS = [int(s) for s in os.environ.get("TSYNC_FAULT_SEEDS", "20240611").split(",")]
TRANSCRIPTS = ("f0", "f1", "f2")


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


@pytest.mark.parametrize("seed", SEEDS)
async def test_mirrors_converge_through_a_faulty_proxy(seed: int) -> None:
    faults = Faults(drop=0.04, repeat=0.04, reorder=0.04, cut=0.01)
    async with (
        running_server() as srv,
        FaultProxy(srv.ws_url, seed=seed, faults=faults) as proxy,
        client_py.connect(
            proxy.ws_url,
            heartbeat=0.05,
            backoff_min=0.005,
            backoff_max=0.1,
            request_timeout=20,
            seed=seed,
        ) as faulty,
        client_py.connect(srv.ws_url) as direct,
    ):
        for tid in TRANSCRIPTS:
            await direct.create(tid)
        mirrors = [await faulty.subscribe(tid, timeout=10) for tid in TRANSCRIPTS]
        acked: dict[str, list[str]] = {tid: [] for tid in TRANSCRIPTS}

        async def writer(client: client_py.Client, name: str, count: int) -> None:
            rng = random.Random(f"{seed}-{name}")
            for i in range(count):
                tid = rng.choice(TRANSCRIPTS)
                texts = [f"{name}-{i}-{k}" for k in range(rng.randint(1, 2))]
                await client.append(tid, [user(t) for t in texts])
                acked[tid].extend(texts)
                if client is direct and rng.random() < 0.1:
                    try:
                        await client.start_segment(tid)
                    except ServerError as exc:  # nothing new since the last one
                        assert exc.code == "invalid-segment"

        async with asyncio.timeout(20):
            await asyncio.gather(
                writer(faulty, "proxied-a", 60),
                writer(faulty, "proxied-b", 60),
                writer(direct, "direct-a", 80),
                writer(direct, "direct-b", 80),
            )

        # Let it settle: faults off; the heartbeat's pongs reveal any frame
        # lost at the very end, and the mirrors repair themselves.
        proxy.enabled = False
        for mirror in mirrors:
            snapshot = await direct.get(mirror.transcript_id)
            await mirror.wait_for_revision(snapshot.revision, timeout=10)
            assert_mirror_equals(mirror, snapshot)
            texts = [m.content for m in snapshot.messages]
            assert len(texts) == len(set(texts)), "an append landed twice"
            assert sorted(texts) == sorted(acked[mirror.transcript_id])

        totals = sum_counters([m.counters for m in mirrors])
        print(f"\nproxy:  {proxy.counters.as_dict()}")
        print(f"client: {faulty.counters.as_dict()}")
        print(f"mirrors: {totals}")
        # The run must actually have exercised the repairs.
        assert proxy.counters.dropped and proxy.counters.repeated and proxy.counters.reordered
        assert proxy.counters.cuts >= 1
        assert faulty.counters.reconnects >= 1
        assert faulty.counters.seq.gaps >= 1 and faulty.counters.seq.repeats >= 1
        assert totals["resumes"] >= 1
        assert totals["gaps"] >= 1
        assert totals["applied"] >= 1


def sum_counters(counters: list[Counters]) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in counters:
        for name, value in c.as_dict().items():
            total[name] = total.get(name, 0) + value
    return total
