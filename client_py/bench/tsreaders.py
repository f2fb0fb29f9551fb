"""Readers of a transcript's Durable Stream for ``tsync bench fanout
--ceiling --live sse|long-poll``: the same workload as the WebSocket
subscribers' (the ceiling's precomputed appends on one transcript), read
through ``/v1/stream/transcripts/{id}`` instead, so that the two faces are
measured side by side on one server.

The readers are ``client_py.bench.dsreaders``' (raw asyncio connections,
their own HTTP/1.1 parser, no task per reader); what they look for in the
bytes differs: a transcript's events, each with its ``"revision":N``
(``REVISION``, one ``findall`` per answer or data event, nothing decoded).
A reader counts by revision: each event must be the one after the last
(``gaps`` counts a skip, ``repeats`` one at or below it), every event once,
in order, up to the writers' final revision. About ``--latency-sample``
readers (every ``Workload.latency_every()``-th of a process) also read each
message's ``"t":<ns>`` (``fastpath.SENT``) for the append -> delivery
latency, as the ceiling's sampled WebSocket subscribers do.

``main`` is a worker process's entry point (``run.WorkerPool``'s target);
its ``result`` has the shape of ``ceiling``'s subscribers' own.
"""

from __future__ import annotations

import re
from multiprocessing.connection import Connection
from typing import Any, Final

from client_py.bench import host
from client_py.bench.dsreaders import LongPollReader, ReaderStats, ReadersWorker, SseReader
from client_py.bench.fastpath import SENT
from client_py.bench.workload import Workload

__all__ = ["REVISION", "TranscriptLongPoll", "TranscriptSse", "main", "stream_path"]

#: An event's revision in its raw JSON (it comes before its change).
REVISION: Final = re.compile(rb'"revision":(\d+)')


def stream_path(transcript_id: str) -> str:
    """The Durable Stream of a transcript (a URL path)."""
    return f"/v1/stream/transcripts/{transcript_id}"


class _RevisionCheck:
    """What both live modes check of the events they get (mixed in before
    the ``dsreaders`` reader, whose ``_values`` it replaces)."""

    stats: ReaderStats
    count: int
    target: int
    done: Any

    def setup(self, timed: bool) -> None:
        #: The last revision received in order (a fresh transcript: 0).
        self.revision = 0
        #: Whether this reader times its deliveries.
        self.timed = timed
        #: When the event that reached the target arrived.
        self.done_ns = 0
        self.out_of_order = 0

    def _values(self, data: bytes, now_ns: int) -> int:
        found = REVISION.findall(data)
        if not found:
            return 0
        stats = self.stats
        revision = self.revision
        count = 0
        for text in found:
            number = int(text)
            if number == revision + 1:
                revision = number
                count += 1
            elif number <= revision:
                stats.repeats += 1
                self.out_of_order += 1
            else:  # skipped some: counted, and the count goes on from there
                stats.gaps += 1
                self.out_of_order += 1
                revision = number
        self.revision = revision
        self.count += count
        stats.delivered += count
        stats.last_apply_ns = now_ns
        if self.timed:
            record = stats.latencies.append
            for sent in SENT.findall(data):
                record((now_ns - int(sent)) // 1000)
        if 0 <= self.target <= self.revision and not self.done.is_set():
            self.done_ns = now_ns
            self.done.set()
        return len(found)

    def set_target(self, count: int) -> None:
        self.target = count
        if self.revision >= count and not self.done.is_set():
            self.done_ns = self.stats.last_apply_ns
            self.done.set()


class TranscriptSse(_RevisionCheck, SseReader):
    """``GET /v1/stream/transcripts/{id}?offset=O&live=sse``."""

    def __init__(self, host_: str, port: int, path: str, stats: ReaderStats, timed: bool) -> None:
        SseReader.__init__(self, host_, port, path, stats)
        self.setup(timed)


class TranscriptLongPoll(_RevisionCheck, LongPollReader):
    """``GET /v1/stream/transcripts/{id}?offset=O&live=long-poll``, again and again."""

    def __init__(self, host_: str, port: int, path: str, stats: ReaderStats, timed: bool) -> None:
        LongPollReader.__init__(self, host_, port, path, stats)
        self.setup(timed)


READERS: Final = {"sse": TranscriptSse, "long-poll": TranscriptLongPoll}


class _Worker(ReadersWorker):
    """The readers of one process, owed the revision the ``targets``
    command gives their transcript (one transcript: ``Workload``)."""

    def __init__(
        self, base_url: str, workload: Workload, indices: list[int], conn: Connection
    ) -> None:
        reader = READERS[workload.live]
        every = workload.latency_every()
        transcript_id = workload.transcript_ids()[0]
        self.owed_key = transcript_id
        path = stream_path(transcript_id)

        def readers(host_: str, port: int, stats: ReaderStats) -> list[Any]:
            return [
                reader(host_, port, path, stats, every is not None and j % every == 0)
                for j in range(len(indices))
            ]

        super().__init__(base_url, workload, len(indices), conn, readers)

    def result(self, owed: int) -> dict[str, Any]:
        """What ``ceiling``'s subscribers answer, and this face's own counters."""
        readers: list[Any] = self.readers
        stats = self.stats
        return {
            "subscribers": len(readers),
            "frames": stats.frames,
            "bytes": stats.received_bytes,
            "ws_messages": 0,
            "errors": stats.errors,
            "seq_mismatches": sum(1 for r in readers if r.out_of_order),
            "incomplete": sum(1 for r in readers if not r.done.is_set()),
            "delivered": sum(r.count for r in readers),
            "last_done_ns": max((r.done_ns for r in readers), default=0),
            "timed_subscribers": sum(1 for r in readers if r.timed),
            "latency": stats.histogram().encode(),
            "repeats": stats.repeats,
            "gaps": stats.gaps,
            "invalid": stats.invalid,
            "requests": stats.requests,
            "reconnects": stats.reconnects,
            "disconnects": stats.disconnects,
        }


def main(
    base_url: str,
    workload: Workload,
    indices: list[int],
    conn: Connection,
    cpus: frozenset[int] | None = None,
) -> None:
    """A worker process: ``len(indices)`` readers of the workload's one
    transcript in its ``live`` mode (``base_url``: the server's, any
    scheme; only its host and port are used)."""
    if cpus:
        host.pin_self(cpus)
    host.run(_Worker(base_url, workload, indices, conn).run(), fast=True)
