#!/usr/bin/env python3
"""Measure issue 24 items 1, 5, 7 and 8 at the red team's sizes, with one command:

    .venv/bin/python scripts/measure_compute.py [--only usage,rights,fragments,reads]

Each part starts ``tsync serve`` (SQLite, 127.0.0.1) as the robustness suite
does (``tests/robustness/harness.py``), attacks it, and prints what it cost:

- usage: a 100,000-message transcript with 500 Views (``max_views_per_transcript``
  raised to 500 for it): each query's time, the first after the transcript
  was loaded and the median of five, for ``segments=0`` x 200 (refused), one
  segment, everything (501 ranges), the active segment and one View.
- rights: a token whose read pattern is ``*a*a*a*a*ab`` subscribing to an id
  of 128 ``a`` 20 times, then ``GET /v1/auth?transcriptId=`` 20 times.
- fragments: 4 million one-byte continuation fragments on one connection
  before authenticating: when it was closed, RSS growth, other clients' pings.
- reads: 9 concurrent whole reads (3 each of the snapshot, ``events?after=0``,
  ``chat?segment=all``) of a 100 MB transcript: peak RSS growth and pings.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.robustness import (  # noqa: E402
    test_rights_patterns,
    test_tiny_fragments,
    test_usage_cost,
    test_whole_reads,
)
from tests.robustness.harness import Probe, probing, serving  # noqa: E402
from tests.support.rawsocket import RawSocket  # noqa: E402


def _pings(probe: Probe) -> str:
    rtts = sorted(probe.rtts) or [0.0]
    return (
        f"pings p50 {statistics.median(rtts) * 1000:.1f} ms, worst {rtts[-1] * 1000:.1f} ms "
        f"of {len(rtts)} (idle worst {probe.idle_worst * 1000:.1f} ms)"
    )


def usage(folder: Path) -> None:
    test_usage_cost.VIEWS = 500
    settings = {"max_messages_per_batch": test_usage_cost.BATCH, "max_views_per_transcript": 500}
    with serving(folder, settings=settings) as target:

        async def prepare() -> None:
            async with httpx.AsyncClient(base_url=target.url, timeout=120) as client:
                await test_usage_cost._fill(client, "long")

        asyncio.run(prepare())
        queries = {
            "segments=0 x200": {"segments": ",".join(["0"] * 200)},
            "segments=0": {"segments": "0"},
            "everything (501 ranges)": {},
            "segments=active": {"segments": "active"},
            "views=v1": {"views": "v1"},
        }
        with httpx.Client(base_url=target.url, timeout=120) as client:
            for name, query in queries.items():
                took = []
                for _ in range(5):
                    began = time.perf_counter()
                    answer = client.get("/v1/transcripts/long/usage", params=query)
                    took.append(time.perf_counter() - began)
                print(
                    f"usage {name}: {answer.status_code}, first {took[0] * 1000:.1f} ms, "
                    f"median {statistics.median(took) * 1000:.1f} ms"
                )


def rights(folder: Path) -> None:
    secret, static = test_rights_patterns.SECRET, test_rights_patterns.STATIC
    with serving(folder, settings={"token": static, "jwt_secret": secret}) as target:
        token = test_rights_patterns._token(read=["*a*a*a*a*ab"])
        attack_id = "a" * 128

        async def attack() -> tuple[float, float]:
            from tests.support.wsclient import RawClient

            began = time.perf_counter()
            async with await RawClient.connect(f"{target.ws_url}?token={token}") as client:
                for i in range(20):
                    await client.send(op="subscribe", transcriptId=attack_id, ref=i)
                    await client.recv(60)
            ws = (time.perf_counter() - began) / 20
            began = time.perf_counter()
            headers = {"authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=target.url, headers=headers) as http:
                for _ in range(20):
                    await http.get("/v1/auth", params={"transcriptId": attack_id})
            return ws, (time.perf_counter() - began) / 20

        with probing(f"{target.ws_url}?token={static}") as probe:
            ws, http = asyncio.run(attack())
            probe.wait_pings(5)
        print(f"rights: subscribe {ws * 1000:.2f} ms/op, GET /v1/auth {http * 1000:.2f} ms/op; "
              f"{_pings(probe)}")  # fmt: skip


def fragments(folder: Path) -> None:
    with serving(folder) as target:
        rss = target.rss()
        block = test_tiny_fragments._continuations(test_tiny_fragments.BLOCK, b"a")

        async def attack() -> tuple[int, float]:
            conn = await RawSocket.connect(target.ws_url)
            first = bytes([0x01, 0x81]) + b"\0\0\0\0" + b"a"
            return await test_tiny_fragments._flood(
                conn, first, block, test_tiny_fragments.FRAGMENTS // test_tiny_fragments.BLOCK
            )

        with probing(target.ws_url) as probe:
            sent, took = asyncio.run(attack())
            probe.wait_pings(5)
        print(
            f"fragments: closed after {took:.2f} s, {sent * test_tiny_fragments.BLOCK:,} of "
            f"4,000,000 fragments written by then, RSS +{(target.peak_rss() - rss) >> 20} MB "
            f"(peak); {_pings(probe)}"
        )


def reads(folder: Path) -> None:
    settings = {"max_message_bytes": test_whole_reads.MESSAGE_BYTES + 1000}
    with serving(folder, settings=settings) as target:

        async def prepare() -> None:
            async with httpx.AsyncClient(base_url=target.url, timeout=120) as client:
                await test_whole_reads._fill(client)

        asyncio.run(prepare())
        rss = target.rss()

        async def attack() -> list[tuple[int, int, bytes]]:
            return await asyncio.gather(
                *(
                    test_whole_reads._read(target.port, route, keep=False)
                    for route in test_whole_reads.ROUTES
                    for _ in range(3)
                )
            )

        with probing(target.ws_url) as probe:
            began = time.perf_counter()
            answers = asyncio.run(attack())
            took = time.perf_counter() - began
            probe.wait_pings(5)
        total = sum(size for _, size, _ in answers)
        print(
            f"reads: 9 reads, {total / 1e6:.0f} MB in {took:.1f} s, RSS "
            f"+{(target.peak_rss() - rss) >> 20} MB (peak); {_pings(probe)}"
        )


PARTS = {"usage": usage, "rights": rights, "fragments": fragments, "reads": reads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(PARTS), help="parts, comma-separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            folder = Path(tmp) / name
            folder.mkdir()
            PARTS[name](folder)


if __name__ == "__main__":
    main()
