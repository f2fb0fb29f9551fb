"""How long a draft's delta takes to reach its Durable Stream's SSE readers.

One writer (client_py) writes DELTAS one-byte deltas 10 ms apart to a draft
of a real server in this process (``draft_coalesce_s=0``); READERS SSE
readers (httpx, in the same process) follow
``/v1/stream/transcripts/t1/drafts/d1``. For each data event a reader gets,
the time since its newest byte was written. Then the draft is committed and
every reader must see the stream close.

    PYTHONPATH=. .venv/bin/python scripts/measure_draft_stream.py [READERS]
"""

from __future__ import annotations

import asyncio
import sys
import time

import httpx

import client_py
from tests.support.servers import running_server

DELTAS = 200
PATH = "/v1/stream/transcripts/t1/drafts/d1"


async def follow(
    http: httpx.AsyncClient, written: dict[int, float], latencies: list[float], ready: asyncio.Event
) -> None:
    got = 0  # bytes read
    async with http.stream("GET", PATH, params={"offset": "-1", "live": "sse"}) as response:
        ready.set()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                got += len(line) - 6
                if got in written:
                    latencies.append(time.perf_counter() - written[got])
            if '"streamClosed":true' in line:
                return


async def main(readers: int) -> None:
    limits = httpx.Limits(max_connections=readers + 5)
    async with (
        running_server(draft_coalesce_s=0.0) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60, limits=limits) as http,
        client_py.connect(srv.url) as client,
    ):
        await client.create("t1")
        async with client.draft("t1", draft_id="d1") as d:
            await d.write("x")
            await d.sync()
            written: dict[int, float] = {}
            latencies: list[float] = []
            events = [asyncio.Event() for _ in range(readers)]
            tasks = [asyncio.create_task(follow(http, written, latencies, e)) for e in events]
            for event in events:
                await asyncio.wait_for(event.wait(), 30)
            await asyncio.sleep(0.2)  # their first read (the "x") is done
            latencies.clear()
            for size in range(2, DELTAS + 2):
                written[size] = time.perf_counter()
                await d.write("y")
                await asyncio.sleep(0.01)
            await d.sync()
            await d.commit()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
    latencies.sort()
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    print(
        f"readers={readers} deltas={DELTAS} events={len(latencies)} "
        f"p50={p50 * 1000:.2f}ms p99={p99 * 1000:.2f}ms max={latencies[-1] * 1000:.2f}ms"
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
