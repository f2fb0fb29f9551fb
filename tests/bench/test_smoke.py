"""CI's smoke run of ``tsync bench``: a few seconds against a real server process.

Not a benchmark: it checks that the harness drives a real ``tsync serve``,
that every subscriber saw every event exactly once, and that a server which
drops or repeats increments makes the run fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.servers import ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]


def bench(
    *args: str, timeout: float = 90, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.run.cli", "bench", *args, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=None if env is None else os.environ | env,
    )


def test_fanout_against_a_real_server_delivers_everything_once(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    with ServerProcess(store=f"sqlite:{tmp_path / 'data'}", log_path=tmp_path / "log") as server:
        assert server.proc is not None
        # The server from TSYNC_URL, given as http:// like every client command.
        done = bench(
            "fanout", "--subscribers", "20", "--writers", "2",
            "--rate", "40", "--duration", "6", "--procs", "2",
            "--server-pid", str(server.proc.pid), "--json", str(out),
            "--markdown", str(tmp_path / "summary.md"),
            env={"TSYNC_URL": server.url},
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["ok"] is True
    run = result["runs"][0]
    assert run["failures"] == []
    on_time = run["groups"]["on-time"]
    for counter in ("gaps", "seq_gaps", "repeats", "lagged", "rebaselines", "invalid", "missing"):
        assert on_time[counter] == 0, counter
    appends = run["writers"]["appends"]
    assert appends == run["writers"]["acks"]
    assert 2 * 40 * 6 * 0.8 <= appends <= 2 * 40 * 6 + 2
    # Every subscriber follows the one transcript from its first baseline on.
    assert on_time["delivered"] == on_time["expected"] == 20 * appends
    assert run["latency_ms"]["count"] == on_time["delivered"]
    assert 0 < run["latency_ms"]["p50"] <= run["latency_ms"]["p99"] <= run["latency_ms"]["max"]
    assert run["server_cpu"]["cpu_s"] > 0
    assert "| delivered events/s" in (tmp_path / "summary.md").read_text()


def test_the_fast_check_pins_both_sides_and_reports_the_generator(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    cpus = sorted(os.sched_getaffinity(0))
    with ServerProcess(store="memory", log_path=tmp_path / "log") as server:
        assert server.proc is not None
        pinning: list[str] = []
        if len(cpus) >= 2:
            pinning = ["--server-cpus", str(cpus[0]), "--client-cpus", str(cpus[1])]
        done = bench(
            "fanout", "--subscribers", "20", "--rate", "50", "--duration", "3",
            "--procs", "2", "--fast", "--server-pid", str(server.proc.pid), *pinning,
            "--json", str(out), env={"TSYNC_URL": server.url},
        )  # fmt: skip
        if pinning:  # every thread of the server, not only its main one
            for task in Path(f"/proc/{server.proc.pid}/task").iterdir():
                assert os.sched_getaffinity(int(task.name)) == {cpus[0]}
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    run = result["runs"][0]
    assert result["ok"] is True and run["failures"] == []
    on_time = run["groups"]["on-time"]
    assert on_time["delivered"] == on_time["expected"] == 20 * run["writers"]["appends"] > 0
    assert run["latency_ms"]["count"] == on_time["delivered"]
    generator = run["generator_cpu"]
    assert generator["check"] == "fast" and generator["loop"] == "uvloop"
    assert generator["cpu_s"] > 0 and generator["share"] > 0
    if pinning:
        assert generator["pinned"] == [cpus[1]] and generator["cpus"] == 1
        assert result["machine"]["server_cpus"] == [cpus[0]]
    assert "generator (fast checks, uvloop)" in done.stdout


def test_pinning_needs_a_server_and_distinct_cpus() -> None:
    for args, said in (
        (["--server-cpus", "0"], "needs --server-pid"),
        (["--server-cpus", "0", "--server-pid", "99999999", "--client-cpus", "0"], "overlap"),
        (["--client-cpus", "9999"], "does not exist"),
        (["--client-cpus", "1-0"], "bad CPU range"),
    ):
        done = bench("fanout", "--url", "http://127.0.0.1:9", *args)
        assert done.returncode == 2 and said in done.stderr, done.stderr
    # Never the init process or the generator's own parents: their children
    # are the whole machine, or the generator itself.
    for pid in (1, os.getpid()):
        done = bench("fanout", "--url", "http://127.0.0.1:9", "--server-pid", str(pid),
                     "--server-cpus", "0")  # fmt: skip
        assert done.returncode == 1 and "not a server to pin" in done.stderr, done.stderr


@contextlib.contextmanager
def broadcast_baseline(*args: str) -> Iterator[tuple[str, int]]:
    """``scripts/broadcast_baseline.py`` on a free port: its WebSocket URL and pid."""
    port = free_port()
    script = ROOT / "scripts" / "broadcast_baseline.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)  # polling a process that is starting up
        yield f"ws://127.0.0.1:{port}/v1/ws", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("fault", ["drop", "repeat"])
@pytest.mark.parametrize("check", ["full", "fast"])
def test_a_fast_but_wrong_server_fails_the_run(tmp_path: Path, fault: str, check: str) -> None:
    with broadcast_baseline("--fault", fault) as (url, _):
        out = tmp_path / "result.json"
        done = bench(
            "fanout", "--url", url, "--subscribers", "5",
            "--count", "120", "--closed-loop", "--json", str(out), "--drain-timeout", "5",
            *(["--fast"] if check == "fast" else []),
        )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    run = json.loads(out.read_text())["runs"][0]
    expected = "gaps" if fault == "drop" else "repeats"
    assert any(expected in failure for failure in run["failures"]), run["failures"]


def test_bench_without_its_extra_says_which_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from server.run.cli import main

    for name in list(sys.modules):
        if name.startswith(("client_py.bench.run", "client_py.bench.report", "client_py.bench.h")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "hdrh", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "hdrh.histogram", None)
    with pytest.raises(SystemExit):
        main(["--help"])  # the rest of tsync works
    assert main(["bench", "fanout", "--url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("pip install 'transcript-sync[bench]'") and len(err) == 1
    assert main(["bench", "fanout", "--url", "ftp://x"]) == 2
    assert "see 'tsync bench --help'" in capsys.readouterr().err


def test_catchup_with_a_window_times_baselines_of_the_window(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    with ServerProcess(store=f"sqlite:{tmp_path / 'data'}", log_path=tmp_path / "log") as server:
        done = bench(
            "catchup", "--url", server.url, "--subscribers", "4", "--count", "20",
            "--behind", "10", "--baseline-messages", "1500", "--window", "tail:20",
            "--json", str(out),
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads(out.read_text())["runs"][0]
    assert run["failures"] == []
    baseline = run["catchup"]["baseline"]
    assert (baseline["window"], baseline["messages"]) == ("tail:20", 1500)
    # 20 messages of about 200 bytes, not 1,500 of them.
    assert baseline["bytes"] < 20 * 400


def test_a_bad_window_is_a_usage_error() -> None:
    done = bench("catchup", "--window", "last:5", timeout=30)
    assert done.returncode == 2
    assert "--window 'last:5'" in done.stderr


def _idle(
    tmp_path: Path, args: list[str], server_args: list[str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``tsync bench idle --fast ARGS`` against a memory server started with
    ``server_args``: the finished command and its run's ``idle`` figures."""
    out = tmp_path / "result.json"
    with ServerProcess(store="memory", args=server_args or [], log_path=tmp_path / "log") as server:
        assert server.proc is not None
        done = bench(
            "idle", *args, "--fast", "--url", server.url,
            "--server-pid", str(server.proc.pid), "--json", str(out),
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done, json.loads(out.read_text())["runs"][0]["idle"]


def test_idle_reports_memory_and_the_time_to_connect_and_subscribe(tmp_path: Path) -> None:
    """The cost curve's figures (issue 42): RSS per connection, the wall time
    to connect and to subscribe them all, the server's CPU per subscribe and
    the generator's meanwhile."""
    done, idle = _idle(tmp_path, ["--subscribers", "60", "--procs", "2"])
    assert idle["connections"] == 60
    assert idle["connect_s"] > 0 and idle["subscribe_s"] > 0
    # (subscribe_s is rounded to the ms: 0.0005 s over 60 connections is 8.3 µs)
    assert idle["subscribe_us_per_connection"] == pytest.approx(
        idle["subscribe_s"] * 1e6 / 60, abs=9
    )
    assert idle["server_cpu_us_per_subscribe"] >= 0
    assert idle["generator_share_subscribing"] >= 0
    assert idle["rss_mb_subscribed"] >= idle["rss_mb_before"] > 0
    assert "time to subscribe every connection" in done.stdout


def test_idle_with_a_duration_holds_the_connections_and_reports_the_servers_cpu(
    tmp_path: Path,
) -> None:
    """``idle --duration S``: every connection held subscribed and idle for S
    seconds, the server's CPU meanwhile (its keep-alive, pinging every 0.2 s)."""
    done, idle = _idle(
        tmp_path, ["--subscribers", "40", "--duration", "1.5"], ["--set", "ping_interval_s=0.2"]
    )
    assert idle["hold_s"] == pytest.approx(1.5, abs=0.5)
    assert idle["server_cores_holding"] >= 0 and idle["generator_share_holding"] >= 0
    # (rounded to 4 places: 0.00005 cores over 40 connections is 1.25 µs)
    assert idle["server_cpu_us_per_connection_s"] == pytest.approx(
        idle["server_cores_holding"] * 1e6 / 40, abs=1.5
    )
    assert "server CPU per connection held" in done.stdout
    assert "held subscribed for 1.5 s" in done.stdout


def test_the_cost_curve_table_takes_ratios_within_each_run(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import plot_bench
    finally:
        sys.path.remove(str(ROOT / "scripts"))

    def write(name: str, run: dict[str, object]) -> None:
        (tmp_path / f"{name}.json").write_text(json.dumps({"runs": [run]}))

    for number, (small, big, p99s) in enumerate(
        [((10.0, 11.0), (10.5, 12.1), (20.0, 30.0)), ((10.0, 12.0), (10.2, 12.0), (10.0, 40.0))],
        start=1,
    ):
        for n, (connected, subscribed) in ((2000, small), (15000, big)):
            write(
                f"idle{n}-memory-{number}",
                {
                    "idle": {
                        "kb_per_connection": connected,
                        "kb_per_subscribed_connection": subscribed,
                        "connect_s": 1.0,
                        "subscribe_s": 2.0,
                        "subscribe_us_per_connection": 2e6 / n,
                        "server_cpu_us_per_subscribe": 50.0,
                        "generator_share_subscribing": 0.1,
                    }
                },
            )
        for name, p99 in zip(("curve1000x50", "curve10000x5"), p99s, strict=True):
            write(
                f"{name}-memory-{number}",
                {
                    "latency_ms": {"p99": p99},
                    "delivered_per_s": 50000.0,
                    "server_cpu": {"cpu_us_per_delivered": 5.0},
                    "generator_cpu": {"share": 0.5},
                    "bound": "offered-load",
                    "latency_curve_ms": [[50.0, 1.0], [99.0, p99], [100.0, p99]],
                },
            )
    table = plot_bench.curve_table(tmp_path)
    # 15,000 against 2,000 in each run: 1.10x and 1.00x, median 1.05x.
    assert "| 15,000 | 10.35 (10.20-10.50) | 12.05 (12.00-12.10) | 1.05 (1.00-1.10)x |" in table
    # p99 ratios 1.50x and 4.00x: their median, not the ratio of the medians.
    assert "| **median of the ratios** | | | **2.75x** |" in table
    plot_bench.plot_curve(tmp_path, tmp_path)
    assert (tmp_path / "bench-cost-curve.png").stat().st_size > 10_000


def test_keys_make_every_append_carry_an_idempotency_key(tmp_path: Path) -> None:
    """``--keys``: the appends carry idempotency keys, as the clients' do, so
    that the store records one per append (what a keyed commit costs)."""
    import sqlite3

    out = tmp_path / "result.json"
    data = tmp_path / "data"
    with ServerProcess(store=f"sqlite:{data}", log_path=tmp_path / "log") as server:
        done = bench(
            "chatroom", "--subscribers", "4", "--transcripts", "2", "--writers", "2",
            "--rate", "20", "--duration", "2", "--keys", "--json", str(out),
            env={"TSYNC_URL": server.url},
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads(out.read_text())["runs"][0]
    appends = run["writers"]["appends"]
    assert appends == run["writers"]["acks"] > 0
    with contextlib.closing(sqlite3.connect(data / "transcripts.sqlite3")) as conn:
        keyed, distinct = conn.execute(
            "SELECT count(*), count(DISTINCT key) FROM events WHERE key IS NOT NULL"
        ).fetchone()
    assert keyed == distinct == appends
