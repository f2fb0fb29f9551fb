"""``client_py.locust``: tsync's scenarios as Locust users, and what they report.

- ``ConnectionCheck`` (``client_py.bench.deliveries``, what every Locust
  user's connection is judged by) fed frames by hand: deliveries timed on
  one clock or named as read across two, acks timed, and every kind of
  broken stream a failure with its own name.
- A plain install: ``import client_py`` loads neither Locust nor gevent,
  and works when they are not installed at all.
- Real runs, as subprocesses (Locust monkey-patches with gevent: never in
  this process): a master and two workers (``--processes 2``, the protocol
  of master and workers on separate hosts) against a real ``tsync serve``
  for 15 seconds, subscribers and writers, exit 0 and deliveries in the
  CSV with no failure; and the same through a proxy that drops frames,
  which exits non-zero naming the gap.
"""

from __future__ import annotations

import asyncio
import csv
import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from client_py.bench.deliveries import (
    ACK,
    CONTINUITY,
    CROSS_CLOCK,
    DELIVERY,
    PING,
    TOKEN,
    ConnectionCheck,
    Sample,
    draft_id_for,
)
from client_py.bench.draftcheck import token
from tests.conftest import REQUIRE_ALL
from tests.support.faultproxy import FaultProxy, Faults
from tests.support.servers import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "client_py" / "locust.py"
HERE = "clock-here"
ELSEWHERE = "clock-there"


# --- frames -------------------------------------------------------------------------------


def baseline(seq: int, tid: str = "t1", revision: int = 0) -> dict[str, Any]:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(revision)]
    return {
        "type": "baseline",
        "seq": seq,
        "snapshot": {
            "transcriptId": tid,
            "epoch": "e1",
            "revision": revision,
            "start": 0,
            "messages": messages,
            "activeStart": 0,
            "segments": [{"start": 0, "end": None}],
        },
    }


def increment(
    seq: int, revision: int, sent_ns: int, clock: str = HERE, tid: str = "t1", **extra: Any
) -> dict[str, Any]:
    message = {"role": "user", "content": "x", "metadata": {"t": sent_ns, "h": clock, **extra}}
    return {
        "type": "increment",
        "seq": seq,
        "event": {
            "transcriptId": tid,
            "epoch": "e1",
            "revision": revision,
            "occurredAt": 0,
            "change": {"kind": "messages-appended", "start": revision - 1, "messages": [message]},
        },
    }


def message(*frames: dict[str, Any]) -> str:
    return "\n".join(json.dumps(frame) for frame in frames)


def following(*tids: str) -> ConnectionCheck:
    """A subscriber's check, connected, its subscribes answered by baselines at 0."""
    check = ConnectionCheck("subscriber", clock=HERE)
    for tid in tids:
        check.subscribe(tid)
    check.connection_made()
    ops = [json.loads(op) for op in check.ops_to_send()]
    assert [op["op"] for op in ops] == ["subscribe"] * len(tids) + ["ping"]
    frames = [baseline(i + 1, tid) for i, tid in enumerate(tids)]
    frames.append({"type": "pong", "seq": len(tids) + 1, "ref": ops[-1]["ref"]})
    assert check.receive(message(*frames), 0, 0) == []
    return check


def failures(samples: list[Sample]) -> list[str]:
    return [s.name for s in samples if s.failure is not None]


# --- the check ----------------------------------------------------------------------------


def test_each_delivery_is_timed_by_the_writers_send_time_and_named_by_its_clock() -> None:
    check = following("t1")
    sent = 1_000_000_000
    data = message(increment(3, 1, sent), increment(4, 2, sent, clock=ELSEWHERE))
    samples = check.receive(data, sent + 7_500_000, 0)
    assert [(s.kind, s.name, s.response_time_ms) for s in samples] == [
        (DELIVERY, "subscriber", 7.5),
        (DELIVERY, "subscriber" + CROSS_CLOCK, 7.5),
    ]
    # The message's bytes are shared out over what it delivered.
    assert sum(s.length for s in samples) == len(data)
    assert check.delivered == 2 and check.failures == 0


def test_a_dropped_frame_is_a_seq_gap_and_the_core_resubscribes_to_repair_it() -> None:
    check = following("t1")
    check.receive(message(increment(3, 1, 0)), 0, 0)
    samples = check.receive(message(increment(5, 3, 0)), 0, 0)  # seq 4 (revision 2) lost
    assert failures(samples) == ["subscriber: seq gap"]
    gap = samples[0]
    assert gap.kind == CONTINUITY
    assert gap.failure is not None and gap.failure.startswith("seq gap: ")
    assert "seq 4" in gap.detail
    ops = [json.loads(op) for op in check.ops_to_send()]
    assert ops[0] == {"op": "subscribe", "transcriptId": "t1", "fromRevision": 1, "epoch": "e1"}
    # The resumed increments repair it: no further failure.
    repaired = check.receive(message(increment(6, 2, 0), increment(7, 3, 0)), 0, 0)
    assert failures(repaired) == [] and len(repaired) == 2


def test_a_late_frame_is_a_reorder_and_a_second_copy_a_repeat() -> None:
    check = following("t1")
    check.receive(message(increment(3, 1, 0)), 0, 0)
    assert failures(check.receive(message(increment(5, 3, 0)), 0, 0)) == ["subscriber: seq gap"]
    assert failures(check.receive(message(increment(4, 2, 0)), 0, 0)) == ["subscriber: reorder"]
    assert failures(check.receive(message(increment(4, 2, 0)), 0, 0)) == ["subscriber: repeat"]


def test_repeats_that_answer_a_repair_asked_for_twice_are_not_failures() -> None:
    check = following("t1")
    check.receive(message(increment(3, 1, 0)), 0, 0)
    # Two frames lost, one at a time: the core resubscribes from 1 twice.
    assert failures(check.receive(message(increment(5, 3, 0)), 0, 0)) == ["subscriber: seq gap"]
    assert failures(check.receive(message(increment(7, 4, 0)), 0, 0)) == ["subscriber: seq gap"]
    first = [increment(8 + i, revision, 0) for i, revision in enumerate((2, 3, 4))]
    second = [increment(11 + i, revision, 0) for i, revision in enumerate((2, 3, 4))]
    assert failures(check.receive(message(*first), 0, 0)) == []
    assert failures(check.receive(message(*second), 0, 0)) == []
    # Another transcript's stream, never repaired, still fails on a repeat.
    other = following("t2")
    other.receive(message(increment(3, 1, 0, tid="t2")), 0, 0)
    repeat = other.receive(message(increment(4, 1, 0, tid="t2")), 0, 0)
    assert failures(repeat) == ["subscriber: repeat"]


def test_a_revision_gap_on_a_gap_free_connection_is_named_as_such() -> None:
    check = following("t1")
    samples = check.receive(message(increment(3, 2, 0)), 0, 0)  # revision 1 never sent
    assert failures(samples) == ["subscriber: revision gap"]
    assert check.failures == 1


def test_a_repeated_event_under_a_new_seq_is_a_repeat() -> None:
    check = following("t1")
    check.receive(message(increment(3, 1, 0)), 0, 0)
    assert failures(check.receive(message(increment(4, 1, 0)), 0, 0)) == ["subscriber: repeat"]


def test_lagged_and_a_rebaseline_are_failures_as_in_tsync_bench() -> None:
    check = following("t1")
    lagged = {"type": "error", "seq": 3, "code": "lagged", "message": "x", "transcriptId": "t1"}
    assert failures(check.receive(message(lagged), 0, 0)) == ["subscriber: lagged"]
    again = check.receive(message(baseline(4, revision=2)), 0, 0)
    assert failures(again) == ["subscriber: rebaseline"]


def test_an_answer_is_timed_from_its_send_and_an_error_or_none_is_a_failure() -> None:
    check = ConnectionCheck("writer", clock=HERE)
    check.connection_made()
    check.ops_to_send()
    check.sent(1, 1_000_000, "writer")
    check.sent(2, 1_000_000, "writer")
    ack = {"type": "ack", "seq": 1, "transcriptId": "t1", "revision": 1, "ref": 1}
    error = {"type": "error", "seq": 2, "code": "too-large", "message": "no", "ref": 2}
    samples = check.receive(message(ack, error), 0, 4_000_000)
    assert [(s.kind, s.name, s.response_time_ms, s.failure) for s in samples] == [
        (ACK, "writer", 3.0, None),
        (ACK, "writer", 3.0, "too-large"),
    ]
    # An op never answered is a failure once overdue, and only then.
    check.sent(3, 5_000_000, "writer", PING)
    assert check.overdue(5_000_000 + 10**9, 10**9) == []
    [late] = check.overdue(5_000_000 + 10**9 + 1, 10**9)
    assert (late.kind, late.name, late.failure) == (PING, "writer", "no answer in 1 s")
    assert check.overdue(10**12, 10**9) == []  # reported once


def test_draft_tokens_are_timed_and_a_draft_that_closes_without_its_message_fails() -> None:
    check = following("t1")
    draft = draft_id_for(ELSEWHERE, "u", 0)
    tokens = [token(1_000_000 * i) for i in (1, 2)]
    frames = [
        {"type": "draft", "seq": 3 + i, "transcriptId": "t1", "draftId": draft}
        | {"role": "assistant", "n": i + 1, "delta": piece}
        for i, piece in enumerate(tokens)
    ]
    samples = check.receive(message(*frames), 5_000_000, 0)
    assert [(s.kind, s.name, s.response_time_ms) for s in samples] == [
        (TOKEN, "subscriber" + CROSS_CLOCK, 4.0),
        (TOKEN, "subscriber" + CROSS_CLOCK, 3.0),
    ]
    # Committed: its message, then its final frame, and its text is the message's.
    committed = increment(5, 1, 0, d=draft)
    committed["event"]["change"]["messages"][0]["content"] = "".join(tokens)
    final = {"type": "draft", "seq": 6, "transcriptId": "t1", "draftId": draft}
    final |= {"role": "assistant", "n": 2, "state": "final", "revision": 1}
    assert failures(check.receive(message(committed, final), 0, 0)) == []
    # Another, cancelled: its subscribers lose it.
    other = draft_id_for(HERE, "u", 1)
    opened = {"type": "draft", "seq": 7, "transcriptId": "t1", "draftId": other}
    opened |= {"role": "assistant", "n": 1, "delta": tokens[0]}
    cancelled = {"type": "draft", "seq": 8, "transcriptId": "t1", "draftId": other}
    cancelled |= {"role": "assistant", "n": 1, "state": "cancelled"}
    assert failures(check.receive(message(opened, cancelled), 0, 0)) == [
        "subscriber: draft dropped"
    ]


def test_a_lost_connection_is_a_failure_and_the_core_resumes_on_the_next() -> None:
    check = following("t1")
    check.receive(message(increment(3, 1, 0)), 0, 0)
    lost = check.connection_lost("reset by peer")
    assert lost.name == "subscriber: disconnect" and lost.detail == "reset by peer"
    check.connection_made()
    ops = [json.loads(op) for op in check.ops_to_send()]
    assert ops[0] == {"op": "subscribe", "transcriptId": "t1", "fromRevision": 1, "epoch": "e1"}


# --- a plain install ------------------------------------------------------------------------


def test_client_py_imports_without_locust_and_loads_none_of_it() -> None:
    # A fresh interpreter in which Locust and gevent cannot be imported, as
    # after `pip install transcript-sync` without the locust extra.
    code = (
        "import importlib.abc, json, sys\n"
        "class NoLocust(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('locust', 'gevent'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoLocust())\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "import client_py, client_py.bench.deliveries\n"
        "try:\n"
        "    import client_py.locust\n"
        "except ModuleNotFoundError as exc:\n"
        "    missing = exc.name\n"
        "print(json.dumps([missing, sorted(sys.modules)]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    missing, loaded = json.loads(result.stdout)
    assert missing in ("locust", "gevent")  # only the locustfile itself needs them
    assert not [m for m in loaded if m.split(".")[0] in ("locust", "gevent")]


def test_the_locust_extra_is_optional_and_in_dev() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not [d for d in project["dependencies"] if d.startswith(("locust", "gevent"))]
    extras = project["optional-dependencies"]
    assert [d for d in extras["locust"] if d.startswith("locust")]
    dev = re.fullmatch(r"transcript-sync\[(.*)\]", extras["dev"][0])
    assert dev is not None and "locust" in dev.group(1).split(",")


# --- real runs ------------------------------------------------------------------------------


def locust_command(host: str, csv_prefix: Path, seconds: int, *args: str) -> list[str]:
    # Found, never imported here: importing locust monkey-patches this process with gevent.
    if importlib.util.find_spec("locust") is None:
        message = "locust is not installed (pip install '.[locust]')"
        if REQUIRE_ALL:
            pytest.fail(message + " (TSYNC_REQUIRE_ALL=1: the dev extra has it)")
        pytest.skip(message)
    return [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "--host", host, "--csv", str(csv_prefix), "--run-time", f"{seconds}s",
        "--only-summary", "--stop-timeout", "0", *args,
    ]  # fmt: skip


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def stat(stats: list[dict[str, str]], kind: str, name: str) -> dict[str, str]:
    found = [row for row in stats if row["Type"] == kind and row["Name"] == name]
    assert found, f"no {kind} {name} row in {[(r['Type'], r['Name']) for r in stats]}"
    return found[0]


def test_a_master_and_two_workers_load_a_real_server_without_a_failure(tmp_path: Path) -> None:
    with ServerProcess(store="memory", log_path=tmp_path / "server.log") as server:
        command = locust_command(
            server.url,
            tmp_path / "run",
            15,
            "--processes", "2", "--users", "4", "--spawn-rate", "4",
            "--tsync-transcripts", "2", "--tsync-rate", "5",
            "Subscriber", "Writer",
        )  # fmt: skip
        started = time.monotonic()
        with open(tmp_path / "locust.log", "wb") as out:
            result = subprocess.run(
                command, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, timeout=150
            )
        output = (tmp_path / "locust.log").read_text(errors="replace")
        print(f"locust took {time.monotonic() - started:.1f} s")
    assert result.returncode == 0, output[-3000:]
    assert re.search(r"\b2 workers connected", output), output[-3000:]
    stats = rows(tmp_path / "run_stats.csv")
    print("\n".join(f"{r['Type']} {r['Name']}: {r['Request Count']}" for r in stats))
    delivered = stat(stats, "DELIVER", "subscriber")
    acked = stat(stats, "ACK", "writer")
    # Two writers at 5/s for 15 s, each delivered to both subscribers (each
    # follows both transcripts): a margin for a loaded machine's start.
    assert int(acked["Request Count"]) >= 50
    assert int(delivered["Request Count"]) >= 100
    assert int(delivered["Failure Count"]) == 0
    assert stat(stats, "", "Aggregated")["Failure Count"] == "0"
    assert rows(tmp_path / "run_failures.csv") == []


async def test_a_server_that_drops_frames_fails_the_run_naming_the_gap(tmp_path: Path) -> None:
    server = ServerProcess(store="memory", log_path=tmp_path / "server.log")
    await asyncio.to_thread(server.start)
    try:
        # Transcripts are created over HTTP (straight to the server); every
        # WebSocket goes through the proxy, which drops 5 % of the frames.
        async with FaultProxy(server.ws_url, seed=31, faults=Faults(drop=0.05)) as proxy:
            command = locust_command(
                server.url,
                tmp_path / "run",
                8,
                "--users", "4", "--spawn-rate", "4",
                "--tsync-rate", "10", "--tsync-ws-url", proxy.ws_url,
                # Load errors may be waived; a broken stream fails the run all the same.
                "--exit-code-on-error", "0",
                "Subscriber", "Writer",
            )  # fmt: skip
            locust = await asyncio.create_subprocess_exec(
                *command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            try:
                out, _ = await asyncio.wait_for(locust.communicate(), timeout=120)
            finally:
                if locust.returncode is None:
                    locust.kill()
                    await locust.wait()
            code = locust.returncode
            dropped = proxy.counters.dropped
    finally:
        await asyncio.to_thread(server.kill)
    output = out.decode(errors="replace")
    assert dropped > 0
    assert code == 1, output[-3000:]
    failed = rows(tmp_path / "run_failures.csv")
    print("\n".join(f"{r['Name']}: {r['Error']} x{r['Occurrences']}" for r in failed))
    gaps = [r for r in failed if r["Name"].endswith(": seq gap")]
    assert gaps, failed
    assert all("seq gap: frames never arrived" in r["Error"] for r in gaps)
    assert "seq gap" in output
    assert re.search(r"tsync: \d+ continuity failure\(s\): exit code 1", output), output[-3000:]
