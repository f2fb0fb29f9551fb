"""``tsync bench streams`` (Durable Streams) at tiny sizes: the readers' HTTP
parser on its own (hypothesis: any split of the bytes reads the same), a
repeat counted as one, then whole runs against a real ``tsync serve`` in
both live modes. Not timing: the report's shape, and every value delivered
to every reader exactly once."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from client_py.bench import dsrun
from client_py.bench.dsreaders import LongPollReader, ReaderStats, ResponseParser, SseReader
from tests.bench.test_smoke import bench
from tests.support.servers import ServerProcess, free_port, running_server
from tests.support.waiting import until


class Collected:
    def __init__(self) -> None:
        self.heads: list[tuple[int, dict[str, str]]] = []
        self.bodies: list[bytes] = []
        self._body = b""

    def head(self, status: int, headers: dict[str, str]) -> None:
        self.heads.append((status, headers))

    def body(self, data: bytes) -> None:
        self._body += data

    def end(self) -> None:
        self.bodies.append(self._body)
        self._body = b""


def chunked(pieces: list[bytes]) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n"
    for piece in pieces:
        out += b"%x\r\n%b\r\n" % (len(piece), piece)
    return out + b"0\r\n\r\n"


def sized(body: bytes, status: int = 200) -> bytes:
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%b" % (status, len(body), body)


@given(
    pieces=st.lists(st.binary(min_size=1, max_size=40), max_size=6),
    body=st.binary(max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_any_split_of_the_responses_reads_the_same(
    pieces: list[bytes], body: bytes, cuts: list[int]
) -> None:
    wire = chunked(pieces) + sized(body) + b"HTTP/1.1 204 No Content\r\nA: 1\r\n\r\n"
    got = Collected()
    parser = ResponseParser(got.head, got.body, got.end)
    last = 0
    for cut in [*sorted({min(c, len(wire)) for c in cuts}), len(wire)]:
        parser.feed(wire[last:cut])
        last = cut
    assert [status for status, _ in got.heads] == [200, 200, 204]
    assert got.heads[0][1]["x-a"] == "b"
    assert got.bodies == [b"".join(pieces), body, b""]


def test_a_value_seen_twice_is_a_repeat_and_counts_once() -> None:
    stats = ReaderStats(subscribers=1)
    reader = SseReader("127.0.0.1", 1, "/v1/stream/x", stats)
    value = b'{"t":%d,"w":0,"n":%d,"p":"x"}'
    now = 2_000_000_000_000_000_000
    assert reader._values(b"[" + value % (now - 3_000_000, 0) + b"]", now) == 1
    assert reader._values(b"[" + value % (now - 1_000_000, 0) + b"]", now) == 1
    assert reader._values(b"[" + value % (now - 1_000_000, 5) + b"]", now) == 1
    assert (reader.count, stats.repeats) == (2, 1)
    assert sorted(stats.latencies) == [1000, 3000]
    reader.set_target(2)
    assert reader.done.is_set()


def run_streams(tmp_path: Path, live: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / f"{live}.json"
    with ServerProcess(store="memory", log_path=tmp_path / "log") as server:
        assert server.proc is not None
        done = bench(
            "streams", "--live", live, "--url", server.url,
            "--subscribers", "6", "--rate", "25", "--duration", "2", "--procs", "2",
            "--server-pid", str(server.proc.pid), "--json", str(out), *extra,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| server CPU per delivered event" in done.stdout
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.mark.parametrize("live", ["sse", "long-poll"])
def test_every_reader_gets_every_value_once(tmp_path: Path, live: str) -> None:
    result = run_streams(tmp_path, live)
    assert result["scenario"] == "streams" and result["ok"] is True
    assert result["workload"]["live"] == live
    run = result["runs"][0]
    assert run["failures"] == []
    writers = run["writers"]
    assert writers["appends"] == writers["acks"] and writers["errors"] == 0
    assert 25 * 2 * 0.8 <= writers["appends"] <= 25 * 2 + 1
    readers = run["groups"]["on-time"]
    assert readers["subscribers"] == 6
    assert readers["delivered"] == readers["expected"] == 6 * writers["acks"]
    for counter in ("repeats", "missing", "incomplete", "invalid", "errors"):
        assert readers[counter] == 0, counter
    assert run["latency_ms"]["count"] == readers["delivered"]
    assert 0 < run["latency_ms"]["p50"] <= run["latency_ms"]["p99"]
    assert run["streams"]["live"] == live and run["streams"]["values_per_answer"] >= 1
    assert run["server_cpu"]["cpu_s"] >= 0 and "cpu_us_per_delivered" in run["server_cpu"]
    assert run["generator_cpu"]["check"] == f"streams {live}"


def test_a_server_that_is_not_there_fails_the_run_clearly(tmp_path: Path) -> None:
    done = bench("streams", "--url", f"http://127.0.0.1:{free_port()}", "--duration", "1")
    assert done.returncode == 1
    assert "cannot reach" in done.stderr


def test_bad_usage_exits_2() -> None:
    done = bench("streams", "--live", "websocket")
    assert done.returncode == 2
    done = bench("streams", "--closed-loop")
    assert done.returncode == 2 and "--rate" in done.stderr


@pytest.mark.parametrize("reader_class", [SseReader, LongPollReader])
async def test_a_reader_goes_on_past_ends_and_timeouts_of_the_server(
    reader_class: type[SseReader] | type[LongPollReader],
) -> None:
    """Our server ends an SSE response after ``sse_max_s`` and answers a
    long-poll 204 after ``stream_long_poll_s``: the reader asks again from
    its offset and gets what comes next, nothing twice."""
    async with (
        running_server(stream_long_poll_s=0.3) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=20) as http,
    ):
        srv.app.state.stream_settings.sse_max_s = 0.3
        path = "/v1/stream/bench-again"
        json_type = {"content-type": "application/json"}
        assert (await http.put(path, headers=json_type)).status_code == 201
        stats = ReaderStats(subscribers=1)
        port = int(srv.url.rsplit(":", 1)[1])
        reader = reader_class("127.0.0.1", port, path, stats)

        def answers() -> int:
            return stats.reconnects if reader_class is SseReader else stats.requests

        def answered(at_least: int) -> bool:
            return answers() >= at_least

        def received(count: int) -> bool:
            return reader.count == count

        await reader.open()
        try:
            async with asyncio.timeout(20):
                await reader.ready.wait()
            for n in range(3):
                # Past two ends of the response (SSE) or two 204s (long-poll) each time.
                await until(functools.partial(answered, answers() + 2), timeout=20)
                value = dsrun.value(time.time_ns(), 0, n, "x")
                assert (await http.post(path, content=value, headers=json_type)).status_code < 300
                await until(functools.partial(received, n + 1), timeout=20)
        finally:
            await reader.close()
        assert (stats.repeats, stats.invalid, stats.errors, stats.disconnects) == (0, 0, 0, 0)
