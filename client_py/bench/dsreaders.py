"""Durable Streams readers for ``tsync bench streams``: many readers of one
stream on raw asyncio connections, SSE or long-poll, cheap enough that a
thousand of them fit on one core.

Each reader is an ``asyncio.Protocol`` speaking HTTP/1.1 itself
(``ResponseParser``: a status line, headers, a body of ``Content-Length``
bytes or chunked): no client library, no task per reader, no future per
message. A reader finds the values it is owed in the raw bytes
(``VALUE_RE``: the writer's ``{"t":NS,"w":W,"n":N`` prefix, see
``client_py.bench.dsrun``) and counts each ``n`` once: a value seen twice is
a repeat, one never seen is missing. Latency is the time from the writer's
timestamp to the ``data_received`` that brought the value.

- ``SseReader``: one ``GET ?offset=...&live=sse`` per connection, read as it
  streams; the ``control`` events say where the reader is. When the server
  ends the response (ours after ``sse_max_s``) or the connection, the reader
  connects again from the last control offset (counted as a reconnect).
- ``LongPollReader``: ``GET ?offset=...&live=long-poll&cursor=...`` on a
  keep-alive connection, the next request sent as soon as an answer is in;
  the first request is a catch-up read (no ``live``).

``main`` is a worker process's entry point: its share of the readers,
driven by the harness over a ``Channel`` like ``client_py.bench.worker``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Final
from urllib.parse import quote, urlsplit

from client_py.bench import host
from client_py.bench.channel import Channel
from client_py.bench.histogram import LatencyHistogram
from client_py.bench.reader_worker import serve_readers
from client_py.bench.workload import LIVE_MODES, Workload

__all__ = [
    "LIVE_MODES",
    "LongPollReader",
    "ReaderStats",
    "ReadersWorker",
    "ResponseParser",
    "SseReader",
    "main",
]

#: The start of every value the bench's writer appends (``dsrun.value``).
VALUE_RE: Final = re.compile(rb'\{"t":(\d+),"w":\d+,"n":(\d+)')
NEXT_OFFSET_RE: Final = re.compile(rb'"streamNextOffset":"([^"]*)"')
CURSOR_RE: Final = re.compile(rb'"streamCursor":"([^"]*)"')
PROGRESS_INTERVAL_S: Final = 0.5
RECONNECT_PAUSE_S: Final = 0.05


class ProtocolError(Exception):
    """The server answered something that is not HTTP/1.1 as expected."""


class ResponseParser:
    """An incremental HTTP/1.1 response parser (client side, no pipelining).

    ``feed`` takes bytes as they come; ``on_head(status, headers)`` (header
    names lower-case), ``on_body(bytes)`` for each piece of the body and
    ``on_end()`` once the response is complete are called from it."""

    __slots__ = ("_buf", "_chunked", "_remaining", "_state", "on_body", "on_end", "on_head")

    def __init__(self, on_head: Any, on_body: Any, on_end: Any) -> None:
        self.on_head = on_head
        self.on_body = on_body
        self.on_end = on_end
        self._buf = b""
        self._state = 0  # 0 head, 1 body of a length, 2 chunk size line, 3 chunk data, 4 trailer
        self._remaining = 0
        self._chunked = False

    def feed(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        while buf:
            state = self._state
            if state == 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head, buf = buf[:end], buf[end + 4 :]
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ", 2)
                if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
                    raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
                status = int(parts[1])
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    headers[name.strip().lower().decode("latin-1")] = value.strip().decode(
                        "latin-1"
                    )
                self.on_head(status, headers)
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    self._state = 2
                elif status in (204, 304) or 100 <= status < 200:
                    self._state = 0
                    self.on_end()
                else:
                    length = int(headers.get("content-length", "0"))
                    if length:
                        self._remaining = length
                        self._state = 1
                    else:
                        self.on_end()
            elif state == 1:
                take = min(len(buf), self._remaining)
                piece, buf = buf[:take], buf[take:]
                self._remaining -= take
                self.on_body(piece)
                if not self._remaining:
                    self._state = 0
                    self.on_end()
            elif state == 2:
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                size = int(buf[:end].split(b";", 1)[0], 16)
                buf = buf[end + 2 :]
                if size:
                    self._remaining = size
                    self._state = 3
                else:
                    self._state = 4
            elif state == 3:
                take = min(len(buf), self._remaining)
                piece, buf = buf[:take], buf[take:]
                self._remaining -= take
                self.on_body(piece)
                if not self._remaining:
                    self._state = 5
            elif state == 5:  # the CRLF after a chunk's data
                if len(buf) < 2:
                    break
                buf = buf[2:]
                self._state = 2
            else:  # trailer: lines up to an empty one
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                line, buf = buf[:end], buf[end + 2 :]
                if not line:
                    self._state = 0
                    self.on_end()
        self._buf = buf


@dataclass(slots=True)
class ReaderStats:
    """What the readers of one process saw (``counters`` go to the report)."""

    subscribers: int = 0
    delivered: int = 0  #: values received the first time
    expected: int = 0  #: values owed, summed over readers
    repeats: int = 0  #: values received again
    gaps: int = 0  #: transcript events that skipped one (``tsreaders``)
    missing: int = 0  #: values owed and never received
    incomplete: int = 0  #: readers that did not get every value in time
    invalid: int = 0  #: answers that were not what the protocol says
    errors: int = 0  #: HTTP errors answered
    disconnects: int = 0  #: connections lost (the reader connected again)
    reconnects: int = 0  #: SSE responses ended by the server (the reader went on)
    requests: int = 0  #: HTTP requests sent (long-poll) or events received (SSE)
    frames: int = 0  #: long-poll answers with values, or SSE data events
    received_bytes: int = 0
    last_apply_ns: int = 0
    latencies: array[int] = field(default_factory=lambda: array("q"))  # µs

    def counters(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__ if name != "latencies"}

    def histogram(self) -> LatencyHistogram:
        histogram = LatencyHistogram()
        for value, count in Counter(self.latencies).items():
            histogram.record_us(value, count)
        return histogram


class _Reader(asyncio.Protocol):
    """What both modes share: the connection, the values seen, the offset."""

    live: str = ""

    def __init__(self, host_: str, port: int, path: str, stats: ReaderStats) -> None:
        self.host = host_
        self.port = port
        self.path = quote(path, safe="/")
        self.stats = stats
        self.offset = "-1"
        self.cursor = ""
        self.seen = bytearray()
        self.count = 0
        self.target = -1
        self.ready = asyncio.Event()
        self.done = asyncio.Event()
        self.closing = False
        self.transport: asyncio.Transport | None = None
        self.parser = ResponseParser(self._head, self._body, self._end)
        self._host_header = f"{host_}:{port}"
        self._lost: asyncio.Future[None] | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        self.parser = ResponseParser(self._head, self._body, self._end)
        self._lost = loop.create_future()
        await loop.create_connection(lambda: self, self.host, self.port)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.request()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        if not self.closing:
            self.stats.disconnects += 1
            asyncio.get_running_loop().create_task(self._again())

    async def _again(self) -> None:
        await asyncio.sleep(RECONNECT_PAUSE_S)
        if not self.closing:
            try:
                await self.open()
            except OSError:
                self.stats.errors += 1
                if not self.closing:
                    asyncio.get_running_loop().create_task(self._again())

    def data_received(self, data: bytes) -> None:
        self.stats.received_bytes += len(data)
        try:
            self.parser.feed(data)
        except (ProtocolError, ValueError):
            self.stats.invalid += 1
            self.abort()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    async def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()
            if self._lost is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(2):
                        await self._lost

    def request(self) -> None:
        raise NotImplementedError

    def _head(self, status: int, headers: dict[str, str]) -> None:
        raise NotImplementedError

    def _body(self, data: bytes) -> None:
        raise NotImplementedError

    def _end(self) -> None:
        raise NotImplementedError

    def _values(self, data: bytes, now_ns: int) -> int:
        """Count and time the values in ``data``; how many there were."""
        found = VALUE_RE.findall(data)
        if not found:
            return 0
        stats = self.stats
        seen = self.seen
        record = stats.latencies.append
        for sent, number in found:
            n = int(number)
            if n >= len(seen):
                seen.extend(bytes(n + 1024 - len(seen)))
            if seen[n]:
                stats.repeats += 1
                continue
            seen[n] = 1
            self.count += 1
            record((now_ns - int(sent)) // 1000)
        stats.delivered += len(found)
        stats.last_apply_ns = now_ns
        if 0 <= self.target <= self.count:
            self.done.set()
        return len(found)

    def set_target(self, count: int) -> None:
        self.target = count
        if self.count >= count:
            self.done.set()


class SseReader(_Reader):
    """``GET ?offset=O&live=sse``: the events as they stream."""

    live = "sse"

    def __init__(self, host_: str, port: int, path: str, stats: ReaderStats) -> None:
        super().__init__(host_, port, path, stats)
        self._events = b""
        self._status = 0

    def request(self) -> None:
        assert self.transport is not None
        self._events = b""
        cursor = f"&cursor={self.cursor}" if self.cursor else ""
        self.transport.write(
            f"GET {self.path}?offset={self.offset}&live=sse{cursor} HTTP/1.1\r\n"
            f"Host: {self._host_header}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self._status = status
        if status != 200:
            self.stats.errors += 1
        elif not headers.get("content-type", "").startswith("text/event-stream"):
            self.stats.invalid += 1

    def _body(self, data: bytes) -> None:
        if self._status != 200:
            return
        events = self._events + data if self._events else data
        end = events.rfind(b"\n\n")
        if end < 0:
            self._events = events
            return
        self._events = events[end + 2 :]
        now_ns = time.time_ns()
        stats = self.stats
        for event in events[:end].split(b"\n\n"):
            stats.requests += 1
            if event.startswith(b"event: data") or event.startswith(b"event:data"):
                stats.frames += 1
                self._values(event, now_ns)
            elif event.startswith(b"event: control") or event.startswith(b"event:control"):
                offset = NEXT_OFFSET_RE.search(event)
                if offset is None:
                    stats.invalid += 1
                    continue
                self.offset = offset.group(1).decode()
                cursor = CURSOR_RE.search(event)
                if cursor is not None:
                    self.cursor = cursor.group(1).decode()
                if not self.ready.is_set():
                    self.ready.set()

    def _end(self) -> None:
        # The server ended the response (ours does after sse_max_s): go on
        # from the last control event's offset, on the same connection.
        if self.closing:
            return
        if self._status != 200:
            self.abort()  # connection_lost connects again after a pause
            return
        self.stats.reconnects += 1
        if self.transport is not None:
            self.request()


class LongPollReader(_Reader):
    """``GET ?offset=O&live=long-poll``, again and again on one connection."""

    live = "long-poll"

    def __init__(self, host_: str, port: int, path: str, stats: ReaderStats) -> None:
        super().__init__(host_, port, path, stats)
        self._status = 0
        self._next: str | None = None
        self._pieces: list[bytes] = []

    def request(self) -> None:
        assert self.transport is not None
        self.stats.requests += 1
        self._pieces = []
        if self.offset == "-1":  # a catch-up read first: where the stream is
            query = "offset=-1"
        else:
            query = f"offset={self.offset}&live=long-poll"
            if self.cursor:
                query += f"&cursor={self.cursor}"
        self.transport.write(
            f"GET {self.path}?{query} HTTP/1.1\r\nHost: {self._host_header}\r\n\r\n".encode()
        )

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self._status = status
        self._next = headers.get("stream-next-offset")
        cursor = headers.get("stream-cursor")
        if cursor:
            self.cursor = cursor
        if status not in (200, 204):
            self.stats.errors += 1
        elif self._next is None:
            self.stats.invalid += 1

    def _body(self, data: bytes) -> None:
        self._pieces.append(data)

    def _end(self) -> None:
        if self._status in (200, 204) and self._next is not None:
            body = b"".join(self._pieces)
            if body and body != b"[]":
                self.stats.frames += 1
                self._values(body, time.time_ns())
            self.offset = self._next
            if not self.ready.is_set():
                self.ready.set()
        if self.closing or self.transport is None:
            return
        if self._status not in (200, 204):
            self.abort()  # connect again after a pause
            return
        self.request()


READERS: Final = {"sse": SseReader, "long-poll": LongPollReader}


def main(
    base_url: str,
    workload: Workload,
    indices: list[int],
    conn: Connection,
    cpus: frozenset[int] | None = None,
) -> None:
    """A worker process (``run.WorkerPool``'s target): ``len(indices)``
    readers of the workload's stream in its ``live`` mode.

    Says ``ready`` once every reader has its first answer; ``targets``
    (values owed) -> reads until each reader has them or the drain timeout
    -> ``result``; ``stop`` closes everything."""
    if cpus:
        host.pin_self(cpus)
    host.run(ReadersWorker(base_url, workload, len(indices), conn).run(), fast=True)


class ReadersWorker:
    """A worker's readers, ``READERS[workload.live]`` of the workload's
    stream unless ``readers`` says otherwise (``tsreaders``); what each is
    owed is the ``owed_key`` of the ``targets`` command."""

    owed_key = "values"

    def __init__(
        self,
        base_url: str,
        workload: Workload,
        count: int,
        conn: Connection,
        readers: Callable[[str, int, ReaderStats], list[_Reader]] | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        self.channel = Channel(conn)
        self.stats = ReaderStats(subscribers=count)
        self.drain_timeout = workload.drain_timeout
        host_, port = parts.hostname or "127.0.0.1", parts.port or 80
        if readers is not None:
            self.readers = readers(host_, port, self.stats)
        else:
            reader = READERS[workload.live]
            path = workload.stream_path()
            self.readers = [reader(host_, port, path, self.stats) for _ in range(count)]

    async def run(self) -> None:
        await serve_readers(
            self.channel,
            self.readers,
            owed_key=self.owed_key,
            timeout_s=self.drain_timeout + 30,
            progress=self._progress(),
            drain=self.drain,
            result=self.result,
        )

    async def drain(self, owed: int) -> None:
        for reader in self.readers:
            reader.set_target(owed)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.drain_timeout):
                await asyncio.gather(*(r.done.wait() for r in self.readers))
        stats = self.stats
        stats.expected = owed * len(self.readers)
        for reader in self.readers:
            if reader.count < owed:
                stats.incomplete += 1
                stats.missing += owed - reader.count

    def result(self, owed: int) -> dict[str, Any]:
        counters = self.stats.counters()
        # ``delivered`` counts first arrivals only: repeats are their own counter.
        counters["delivered"] = sum(r.count for r in self.readers)
        return {"counters": counters, "latency": self.stats.histogram().encode()}

    async def _progress(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            stats = self.stats
            with contextlib.suppress(OSError):
                self.channel.send(
                    "progress",
                    {
                        "on-time": {
                            "delivered": stats.delivered,
                            "problems": stats.repeats + stats.invalid + stats.errors,
                            "lagged": 0,
                        }
                    },
                )
