"""A worker process: a share of the subscribers, driven by the harness over a pipe.

The harness sends commands and the worker answers each one:

==================  ==================================================================
``subscribe``       (idle) subscribe every connection -> ``subscribed``
``targets``         final revision per transcript: read until every copy gets there
                    (or the drain timeout) -> ``result``
``disconnect``      (catchup) close every connection -> ``disconnected``
``resume``          (catchup) reconnect, resume from the copy's revision, read up to the
                    targets given -> ``result``
``stop``            close everything and exit
==================  ==================================================================

Before any command the worker connects its subscribers and says ``ready``
(with ``failed`` instead if it cannot); while it runs it sends ``progress``
twice a second. The subscriber that pauses (``stream --pause-one S``, group
``paused``) stops reading after its first token, for S seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from client_py.bench import host
from client_py.bench.channel import Channel
from client_py.bench.histogram import LatencyHistogram
from client_py.bench.stats import GroupStats
from client_py.bench.subscriber import Subscriber
from client_py.bench.workload import Workload, window_of

CONNECT_CONCURRENCY = 64
PROGRESS_INTERVAL_S = 0.5


def main(
    url: str,
    workload: Workload,
    indices: list[int],
    conn: Connection,
    cpus: frozenset[int] | None = None,
) -> None:
    """The process entry point (``multiprocessing`` target); pinned to
    ``cpus`` when given (it inherits the parent's pinning anyway)."""
    if cpus:
        host.pin_self(cpus)
    host.run(Worker(url, workload, indices, conn).run(), fast=workload.fast)


#: One subscriber in this many checks every event's digest (the others take it
#: as it comes): the full check of hundreds of copies in one process would
#: cost it more than the server spends on their deliveries.
DIGEST_SAMPLE = 50


class Worker:
    def __init__(self, url: str, workload: Workload, indices: list[int], conn: Connection) -> None:
        self.url = url
        self.workload = workload
        self.channel = Channel(conn)
        self.groups = {"on-time": GroupStats(), "stopped": GroupStats(), "paused": GroupStats()}
        self.subscribers: list[Subscriber] = []
        self._pauses: list[asyncio.Task[None]] = []
        for index in indices:
            group = "stopped" if workload.is_stopped(index) else "on-time"
            if workload.is_paused(index):
                group = "paused"
            self.groups[group].subscribers += 1
            sub = Subscriber(
                url,
                workload.subscriber_transcript(index),
                self.groups[group],
                window_of(workload.window),
                fast=workload.fast,
                check_digests=index % DIGEST_SAMPLE == 0,
            )
            # Only a stopped subscriber may lose its connection and go on; one that
            # pauses has small buffers too, so that the server sees it stall.
            sub.auto_reconnect = group == "stopped"
            sub.small_buffers = group in ("stopped", "paused")
            self.subscribers.append(sub)
        self.resume_latency = LatencyHistogram()

    async def run(self) -> None:
        self.channel.start()
        progress = asyncio.create_task(self._progress())
        try:
            subscribe = self.workload.scenario != "idle"
            await self._open_all(subscribe=subscribe)
            if subscribe:
                await self._wait_ready()
            for sub in self.subscribers:
                if sub.stats is self.groups["stopped"]:
                    sub.reading.clear()
                elif sub.stats is self.groups["paused"] and self.workload.pause_one:
                    self._pauses.append(asyncio.create_task(self._pause(sub)))
            self.channel.send("ready", {"connections": len(self.subscribers)})
            while True:
                kind, payload = await self.channel.recv()
                if kind in ("stop", "eof"):
                    break
                await self._command(kind, payload)
        except Exception as exc:
            self.channel.send("failed", f"{exc!r}\n{traceback.format_exc(limit=4)}")
        finally:
            progress.cancel()
            for task in self._pauses:
                task.cancel()
            for sub in self.subscribers:
                sub.closing = True
            await asyncio.gather(*(self._quiet_close(s) for s in self.subscribers))
            self.channel.close()

    async def _command(self, kind: str, payload: Any) -> None:
        if kind == "subscribe":
            await asyncio.gather(*(sub.subscribe() for sub in self.subscribers))
            await self._wait_ready()
            self.channel.send("subscribed", None)
        elif kind == "disconnect":
            await asyncio.gather(*(sub.close() for sub in self.subscribers))
            self.channel.send("disconnected", None)
        elif kind == "resume":
            await self._open_all(subscribe=True)
            await self._drain(payload)
            for sub in self.subscribers:
                if sub.done.is_set():
                    self.resume_latency.record_us(int((sub.done_at - sub.connected_at) * 1e6))
            self.channel.send("result", self._result())
        elif kind == "targets":
            for task in self._pauses:
                task.cancel()
            await asyncio.gather(*self._pauses, return_exceptions=True)
            for sub in self.subscribers:
                sub.reading.set()
            await self._drain(payload)
            self.channel.send("result", self._result())
        else:
            raise ValueError(f"unknown command {kind!r}")

    async def _pause(self, sub: Subscriber) -> None:
        """Stop reading after the first token, for ``pause_one`` seconds."""
        assert self.workload.pause_one is not None
        await sub.first_token.wait()
        sub.reading.clear()
        try:
            await asyncio.sleep(self.workload.pause_one)
        finally:  # over, or the run is (it reads to the end then)
            sub.drafts.resumed_ns = time.time_ns()
            sub.reading.set()

    async def _open_all(self, *, subscribe: bool) -> None:
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

        async def one(sub: Subscriber) -> None:
            async with gate:
                await sub.open(subscribe=subscribe)

        await asyncio.gather(*(one(sub) for sub in self.subscribers))

    async def _wait_ready(self) -> None:
        async with asyncio.timeout(self.workload.drain_timeout):
            await asyncio.gather(*(sub.ready.wait() for sub in self.subscribers))

    async def _drain(self, targets: dict[str, int]) -> None:
        for sub in self.subscribers:
            sub.done.clear()
            sub.set_target(targets.get(sub.transcript_id, 0))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.workload.drain_timeout):
                await asyncio.gather(*(sub.done.wait() for sub in self.subscribers))
        for sub in self.subscribers:
            sub.finish()

    def _result(self) -> dict[str, Any]:
        return {
            "groups": {
                name: {
                    "counters": g.counters(),
                    "latency": g.latency.encode(),
                    "token_latency": g.token_latency.encode(),
                }
                for name, g in self.groups.items()
            },
            "resume": {
                "latency": self.resume_latency.encode(),
                "frames": sum(s.since_connect_frames for s in self.subscribers),
                "bytes": sum(s.since_connect_bytes for s in self.subscribers),
                "baselines": sum(s.since_connect_baselines for s in self.subscribers),
            },
        }

    async def _progress(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            with contextlib.suppress(OSError):
                self.channel.send(
                    "progress",
                    {
                        name: {
                            "delivered": g.delivered,
                            "frames": g.frames,
                            "bytes": g.received_bytes,
                            "problems": g.gaps + g.repeats + g.invalid + g.foreign + g.stops,
                            "lagged": g.lagged,
                            "time": time.time(),
                        }
                        for name, g in self.groups.items()
                    },
                )

    @staticmethod
    async def _quiet_close(sub: Subscriber) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2):
                if sub.ws is not None:
                    await sub.ws.close()
                if sub.fast_ws is not None:
                    await sub.fast_ws.close()
