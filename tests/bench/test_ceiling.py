"""``tsync bench --ceiling``: the frame counter (pure) and a tiny run against a
real server process. Shape and counts only, never timing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from client_py.bench import host, report
from client_py.bench.ceiling import (
    STAMP_PLACEHOLDER,
    FrameCounter,
    masked_text_frame,
    stamp,
    stamp_offset,
    writer_frames,
)
from client_py.bench.dsreaders import ReaderStats
from client_py.bench.tsreaders import TranscriptLongPoll
from client_py.bench.workload import Workload
from protocol import wire
from tests.bench.test_smoke import bench, broadcast_baseline
from tests.support.servers import ServerProcess


def frame(seq: int, revision: int) -> bytes:
    return (
        b'{"type":"increment","seq":%d,"event":{"transcriptId":"t","epoch":"e","revision":%d,'
        b'"change":{"kind":"messages-appended","start":0,"messages":[{"content":"x\\n"}]}}}'
        % (seq, revision)
    )


@given(st.lists(st.integers(1, 5), min_size=1, max_size=20), st.integers(1, 50))
def test_the_counter_counts_frames_across_messages_and_fragments(
    sizes: list[int], piece: int
) -> None:
    counter = FrameCounter()
    seq = 0
    for size in sizes:
        text = b"\n".join(frame(seq + k + 1, seq + k + 1) for k in range(size))
        seq += size
        pieces = [text[i : i + piece] for i in range(0, len(text), piece)]
        for i, part in enumerate(pieces):
            counter.feed(part, i == len(pieces) - 1)
    assert counter.frames == seq == counter.last_seq == counter.last_revision
    assert counter.messages == len(sizes) and counter.consistent and counter.errors == 0


def test_a_gap_or_a_repeat_breaks_the_seq_count() -> None:
    gap, repeat = FrameCounter(), FrameCounter()
    gap.feed(frame(1, 1) + b"\n" + frame(3, 3), True)
    repeat.feed(frame(1, 1) + b"\n" + frame(1, 1), True)
    repeat.feed(b'{"type":"error","seq":3,"code":"lagged"}', True)
    assert not gap.consistent and gap.frames == 2
    assert repeat.errors == 1 and repeat.frames == 3 and repeat.last_seq == 3


def test_client_frames_are_masked_with_the_zero_key() -> None:
    for n, header in ((5, 2), (300, 4), (70_000, 10)):
        data = masked_text_frame(b"x" * n)
        assert data[0] == 0x81 and data[1] & 0x80
        assert data[header : header + 4] == b"\0\0\0\0" and len(data) == header + 4 + n


@given(
    st.integers(10**18, 10**19 - 1),
    st.integers(1, 20),
    st.integers(20, 70_000),
    st.integers(0, 3),
)
def test_a_patched_frame_is_the_same_append_with_the_new_send_time(
    sent_ns: int, appends: int, size: int, writer: int
) -> None:
    workload = Workload("fanout", subscribers=1, writers=4, transcripts=2, count=9, size=size)
    frames = writer_frames(workload, writer, appends)
    framed = frames[-1]
    before = bytes(framed)
    offset = stamp_offset(framed)
    stamp(framed, offset, b"%d" % sent_ns)
    assert len(framed) == len(before) and framed[:offset] == before[:offset]
    header = 2 + {126: 2, 127: 8}.get(framed[1] & 0x7F, 0)
    assert framed[header : header + 4] == b"\0\0\0\0"  # the zero mask: plain payload
    op = wire.decode_client_op(bytes(framed[header + 4 :]))
    placeholder = wire.decode_client_op(before[header + 4 :])
    assert isinstance(op, wire.Append) and isinstance(placeholder, wire.Append)
    assert op.transcript_id == workload.writer_transcript(writer) and op.ref == appends - 1
    (message,) = op.messages
    assert message["metadata"] == {"t": sent_ns, "w": writer}
    assert placeholder.messages[0]["metadata"]["t"] == STAMP_PLACEHOLDER
    # The same op but for the time: only the placeholder's digits changed.
    assert op == msgspec.structs.replace(placeholder, messages=op.messages)
    assert {**message, "metadata": {}} == {**placeholder.messages[0], "metadata": {}}


def test_a_send_time_of_another_width_is_refused() -> None:
    framed = writer_frames(Workload("fanout", 1, 1, 1, count=1), 0, 1)[0]
    for digits in (b"1", b"%d" % (10**19)):
        try:
            stamp(framed, stamp_offset(framed), digits)
        except ValueError:
            continue
        raise AssertionError(f"{digits!r} was patched in")


def test_the_verdict() -> None:
    assert report.bound(0.95, 1, 0.99) == "server-bound"
    assert report.bound(0.5, 1, 0.95) == "generator-bound"
    assert report.bound(0.5, 1, 0.3) == "offered-load"
    assert report.bound(1.5, 2, 0.3) == "offered-load"
    assert report.bound(0.6, 1, 0.5, kept_up=True) == "offered-load"
    assert report.bound(0.6, 1, 0.5, kept_up=False) == "contended"
    assert report.bound(0.6, 1, 0.5, kept_up=False, server_cpus_busy=0.97) == "server-cpus-full"


def test_a_ceiling_run_against_a_real_server_counts_every_delivery(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    with (
        ServerProcess(store="memory", log_path=tmp_path / "log") as server,
        broadcast_baseline() as (base_url, base_pid),
    ):
        assert server.proc is not None
        started = time.monotonic()
        done = bench(
            "chatroom", "--ceiling", "--url", server.url, "--subscribers", "12",
            "--transcripts", "3", "--writers", "3", "--count", "90", "--rate", "100",
            "--procs", "2", "--server-pid", str(server.proc.pid), "--json", str(out),
            "--compare", base_url, "--compare-pid", str(base_pid), "--latency-sample", "5",
        )  # fmt: skip
        wall_ms = (time.monotonic() - started) * 1000
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["ok"] is True and result["workload"]["ceiling"] is True
    for run in result["runs"]:
        assert run["mode"] == "ceiling" and run["failures"] == []
        on_time = run["groups"]["on-time"]
        # 4 subscribers on each of 3 transcripts, 30 appends each.
        assert run["writers"]["appends"] == run["writers"]["acks"] == 90
        assert on_time["delivered"] == on_time["expected"] == 12 * 30
        assert on_time["frames"] == on_time["delivered"] + 12  # and a baseline each
        assert on_time["seq_gaps"] == on_time["incomplete"] == on_time["errors"] == 0
        assert run["generator_cpu"]["check"] == "ceiling"
        assert run["bound"] in (
            "server-bound",
            "generator-bound",
            "offered-load",
            "contended",
            "server-cpus-full",
        )
        assert run["server_cpu"]["cpu_s"] > 0 and run["offered_per_s"] == 12 * 100
        assert run["machine_cpu"]["busy_cores"] > 0
        # Every 12 // 5 + 1 = 3rd subscriber of each process's 6 times its
        # deliveries: 2 per process, each of a transcript that gets 30 appends.
        assert run["latency_sample"]["subscribers"] == 4 and run["latency_sample"]["every"] == 3
        latency = run["latency_ms"]
        assert latency["count"] == 4 * 30 and run["groups"]["on-time"]["latency_ms"] == latency
        assert 0 < latency["p50"] <= latency["p99"] <= latency["max"] < wall_ms
        assert run["writers"]["max_behind_ms"] < wall_ms
    assert (
        "bound: **" in done.stdout
        and "latency p99" in done.stdout
        and "Ceiling mode" in done.stdout
    )


def test_ceiling_refuses_what_it_cannot_measure() -> None:
    for args, said in (
        (["catchup", "--ceiling"], "fanout and chatroom"),
        (["fanout", "--ceiling", "--closed-loop", "--duration", "3"], "needs --count"),
        (["fanout", "--ceiling", "--count", "9", "--window", "tail:5"], "no --window"),
    ):
        done = bench(*args, "--url", "http://127.0.0.1:9")
        assert done.returncode == 2 and said in done.stderr, done.stderr


def test_the_generator_reads_its_cgroup_quota(tmp_path: Path) -> None:
    membership = tmp_path / "cgroup"
    v1 = tmp_path / "cpu" / "gen"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    membership.write_text("4:memory:/x\n1:cpu:/gen\n0::/\n")
    assert host.cpu_quota(membership, tmp_path) == 0.5
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert host.cpu_quota(membership, tmp_path) is None
    v2 = tmp_path / "gen2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")
    membership.write_text("0::/gen2\n")
    assert host.cpu_quota(membership, tmp_path) == 1.5
    (v2 / "cpu.max").write_text("max 100000\n")
    assert host.cpu_quota(membership, tmp_path) is None
    assert host.cpu_quota(tmp_path / "absent", tmp_path) is None


def test_a_closed_loop_ceiling_run_sends_each_append_after_the_last_ack(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    with ServerProcess(store="memory", log_path=tmp_path / "log") as server:
        assert server.proc is not None
        done = bench(
            "fanout", "--ceiling", "--closed-loop", "--url", server.url, "--subscribers", "4",
            "--count", "40", "--server-pid", str(server.proc.pid), "--json", str(out),
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads(out.read_text())["runs"][0]
    assert run["failures"] == [] and run["offered_per_s"] is None
    assert run["writers"]["appends"] == run["writers"]["acks"] == 40
    assert run["groups"]["on-time"]["delivered"] == run["groups"]["on-time"]["expected"] == 160
    # 4 subscribers, 64 asked for: every one times its 40 deliveries.
    assert run["latency_ms"]["count"] == 160 and run["latency_ms"]["p50"] > 0


@pytest.mark.parametrize("live", ["ws", "sse", "long-poll"])
def test_a_transcript_read_by_each_face_counts_every_event_once(tmp_path: Path, live: str) -> None:
    """``fanout --ceiling --live``: the same appends on one transcript, read
    over the WebSocket or through ``/v1/stream/transcripts/{id}``; every
    reader gets every revision once, in order, and a few time them."""
    out = tmp_path / "result.json"
    with ServerProcess(store="memory", log_path=tmp_path / "log") as server:
        assert server.proc is not None
        done = bench(
            "fanout", "--ceiling", "--live", live, "--url", server.url, "--subscribers", "6",
            "--count", "60", "--rate", "60", "--procs", "2", "--latency-sample", "2",
            "--server-pid", str(server.proc.pid), "--json", str(out),
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["ok"] is True and result["workload"]["live"] == live
    run = result["runs"][0]
    assert run["failures"] == []
    on_time = run["groups"]["on-time"]
    assert run["writers"]["appends"] == run["writers"]["acks"] == 60
    assert on_time["delivered"] == on_time["expected"] == 6 * 60
    assert on_time["seq_gaps"] == on_time["incomplete"] == on_time["errors"] == 0
    # Two of the six (one in each process) time their deliveries.
    assert run["latency_ms"]["count"] == 2 * 60 and run["latency_ms"]["p50"] > 0
    assert run["server_cpu"]["cpu_us_per_delivered"] is not None
    if live == "ws":
        assert run["generator_cpu"]["check"] == "ceiling" and "streams" not in run
    else:
        assert run["generator_cpu"]["check"] == f"ceiling {live}"
        assert on_time["repeats"] == on_time["gaps"] == on_time["invalid"] == 0
        assert run["streams"]["path"].startswith("/v1/stream/transcripts/bench-")
        assert run["streams"]["values_per_answer"] >= 1


def test_a_reader_counts_revisions_repeats_and_gaps() -> None:
    stats = ReaderStats(subscribers=1)
    reader = TranscriptLongPoll("127.0.0.1", 1, "/v1/stream/transcripts/t", stats, True)
    event = b'{"transcriptId":"t","revision":%d,"change":{"messages":[{"metadata":{"t":%d}}]}}'
    now = 2_000_000_000_000_000_000
    assert reader._values(b"[" + event % (1, now - 2000) + b"," + event % (2, now) + b"]", now) == 2
    assert reader._values(b"[" + event % (2, now) + b"]", now) == 1  # again: a repeat
    reader.set_target(3)
    assert not reader.done.is_set()
    assert reader._values(b"[" + event % (4, now) + b"]", now) == 1  # 3 skipped: a gap
    assert (reader.count, reader.revision, stats.repeats, stats.gaps) == (2, 4, 1, 1)
    assert reader.done.is_set() and reader.out_of_order == 2
    assert sorted(stats.latencies)[:2] == [0, 0] and max(stats.latencies) == 2


def test_http_faces_are_for_one_transcripts_ceiling_only() -> None:
    with pytest.raises(ValueError, match="one transcript"):
        Workload("fanout", subscribers=1, writers=1, transcripts=2, count=1, live="sse",
                 ceiling=True)  # fmt: skip
    with pytest.raises(ValueError, match="--live"):
        Workload("streams", subscribers=1, writers=1, transcripts=1, rate=1, live="ws")
    assert Workload("fanout", subscribers=1, writers=1, transcripts=1).live == "ws"
    assert Workload("streams", subscribers=1, writers=1, transcripts=1, rate=1).live == "sse"
