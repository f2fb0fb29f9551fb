"""``tsync bench aichat`` at tiny sizes: a reader counts each chunk once (a
draft frame carries its text twice), tells a repeat and a gap, and checks
``/v1/ai/chat``'s sequence; then a whole run against a real ``tsync serve``:
both legs in one report, every chunk delivered to every reader once, the
ratios ai chat / draft frames."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from client_py.bench import aichat
from tests.bench.test_smoke import bench
from tests.support.servers import ServerProcess


def token(due_ns: int, n: int) -> bytes:
    return aichat.delta_chunk(due_ns, n).encode()


async def test_a_draft_frame_counts_each_chunk_once_and_a_repeat_is_counted() -> None:
    stats = aichat.ReaderStats()
    reader = aichat.Reader("ws://x/v1/ws", "t", ai=False, stats=stats)
    reader.on_message(b'{"type":"baseline","seq":1}')
    assert not reader.ready.is_set()
    now = time.time_ns()
    for n in (0, 1):
        chunk = token(now - 1_000_000, n)
        # The frame's delta and its chunks: the same text twice.
        reader.on_message(b'{"type":"draft","draftId":"reply","delta":' + chunk + b"," + chunk)
    assert reader.ready.is_set()
    assert (stats.delivered, stats.repeats, stats.gaps) == (2, 0, 0)
    reader.on_message(b'{"type":"draft","draftId":"reply","chunks":' + token(now, 1))
    reader.on_message(b'{"type":"draft","draftId":"reply","chunks":' + token(now, 3))
    assert (stats.delivered, stats.repeats, stats.gaps) == (2, 1, 1)
    reader.set_target(4)
    assert reader.done.is_set()


async def test_an_ai_chat_reader_checks_the_sequence() -> None:
    stats = aichat.ReaderStats()
    reader = aichat.Reader("ws://x/v1/ai/chat", "t", ai=True, stats=stats)
    reader.on_message(b'{"type": "start", "requestId": "r1"}')
    assert stats.errors == 0
    frame = b'{"type":"chunk","requestId":"r1","sequence":%d,"chunk":%s}'
    reader.on_message(frame % (0, b'{"type":"start"}'))
    assert reader.ready.is_set()
    reader.on_message(frame % (1, token(time.time_ns(), 0)))
    reader.on_message(frame % (3, token(time.time_ns(), 1)))  # sequence 2 never came
    reader.on_message(b'{"type": "error", "requestId": "r1", "errorText": "x"}')
    assert (stats.delivered, stats.gaps, stats.errors) == (2, 1, 1)


def run_aichat(tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "aichat.json"
    with ServerProcess(store="memory", log_path=tmp_path / "log") as server:
        assert server.proc is not None
        done = bench(
            "aichat", "--url", server.url, "--subscribers", "6", "--rate", "25",
            "--duration", "2", "--procs", "2", "--server-pid", str(server.proc.pid),
            "--json", str(out), *extra,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| server CPU per delivered event" in done.stdout
    assert "| metric | ai chat | draft frames | ratio |" in done.stdout
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.mark.slow
def test_every_reader_of_both_legs_gets_every_chunk_once(tmp_path: Path) -> None:
    result = run_aichat(tmp_path)
    assert result["scenario"] == "aichat" and result["ok"] is True
    assert [run["label"] for run in result["runs"]] == ["ai chat", "draft frames"]
    assert result["runs"][0]["url"].endswith("/v1/ai/chat")
    assert result["runs"][1]["url"].endswith("/v1/ws")
    for run in result["runs"]:
        assert run["failures"] == []
        chunks = run["writers"]["chunks"]
        assert 25 * 2 * 0.8 <= chunks <= 25 * 2 + 1
        readers = run["groups"]["on-time"]
        assert readers["subscribers"] == 6
        assert readers["delivered"] == readers["expected"] == 6 * chunks
        for counter in ("repeats", "gaps", "missing", "incomplete", "errors", "disconnects"):
            assert readers[counter] == 0, counter
        assert run["latency_ms"]["count"] == readers["delivered"]
        assert run["server_cpu"]["cpu_us_per_delivered"] > 0
        assert run["generator_cpu"]["check"] == "chunk numbers"
    assert result["ratios"]["server_cpu.cpu_us_per_delivered"] > 0


def test_bad_usage_exits_2() -> None:
    done = bench("aichat", "--closed-loop")
    assert done.returncode == 2 and "--rate" in done.stderr
    done = bench("aichat", "--compare", "http://127.0.0.1:1")
    assert done.returncode == 2 and "--compare" in done.stderr
