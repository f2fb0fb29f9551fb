"""``tsync bench stream`` at tiny sizes: the draft checks on their own
(deltas, gaps a text repairs, commits, the paused reader's backlog, and a
hypothesis run of frames merged and dropped), then whole runs against a real
server (full and fast checks, a paused subscriber) and against the
broadcast baseline."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from client_py.bench.draftcheck import TOKEN_CHARS, DraftCheck, token
from client_py.bench.stats import GroupStats
from tests.bench.test_smoke import bench, broadcast_baseline
from tests.support.servers import ServerProcess

NOW = 2_000_000_000_000_000_000


def tokens(*due: int) -> list[str]:
    return [token(t) for t in due]


def test_deltas_then_the_commit_match() -> None:
    stats = GroupStats()
    check = DraftCheck(stats)
    parts = tokens(NOW - 3_000_000, NOW - 2_000_000)
    for n, piece in enumerate(parts, 1):
        check.frame("d", n, piece, None, "open", NOW)
    check.committed("d", "".join(parts))
    check.frame("d", 0, None, None, "final", NOW)
    check.finish()
    assert (stats.tokens, stats.draft_frames, stats.draft_texts) == (2, 3, 0)
    assert (stats.drafts_final, stats.draft_mismatches, stats.drafts_unclosed) == (1, 0, 0)
    assert stats.token_latency.count == 2
    assert stats.token_latency.percentile_us(100) in range(2999, 3002)


def test_a_gap_waits_for_a_text_and_an_unrepaired_one_is_a_mismatch() -> None:
    stats = GroupStats()
    check = DraftCheck(stats)
    parts = tokens(*(NOW - i for i in range(4, 0, -1)))
    check.frame("a", 1, parts[0], None, "open", NOW)
    check.frame("a", 3, parts[2], None, "open", NOW)  # update 2 was missed
    check.frame("a", 4, parts[3], None, "open", NOW)  # ignored: waiting for a text
    assert stats.draft_gaps == 1 and stats.tokens == 1
    check.frame("a", 4, None, "".join(parts), "open", NOW)
    assert stats.draft_repairs == 1 and stats.tokens == 4  # the text brought three
    check.committed("a", "".join(parts))
    check.frame("a", 0, None, None, "final", NOW)

    check.frame("b", 1, parts[0], None, "open", NOW)
    check.frame("b", 3, parts[2], None, "open", NOW)
    check.committed("b", "".join(parts[:3]))
    check.frame("b", 0, None, None, "final", NOW)  # no text came: its copy is short
    check.frame("c", 1, parts[0], None, "open", NOW)
    check.frame("c", 0, None, None, "cancelled", NOW)
    check.frame("e", 1, parts[0], None, "open", NOW)
    check.finish()
    assert (stats.drafts_final, stats.draft_mismatches) == (2, 1)
    assert (stats.drafts_dropped, stats.drafts_unclosed) == (1, 1)


def test_the_backlog_after_a_pause_is_counted() -> None:
    stats = GroupStats()
    check = DraftCheck(stats)
    check.resumed_ns = NOW
    old = tokens(NOW - 3, NOW - 2, NOW - 1)
    check.frame("d", 1, old[0], None, "open", NOW)
    check.frame("d", 3, None, "".join(old), "open", NOW)  # merged while paused
    check.frame("d", 4, token(NOW + 1), None, "open", NOW + 2)  # sent after the resume
    assert (stats.backlog_frames, stats.backlog_texts, stats.tokens) == (2, 1, 4)


@given(
    st.integers(min_value=1, max_value=30),
    st.lists(st.sampled_from(["deliver", "drop", "merge"]), min_size=30, max_size=30),
)
def test_any_mix_of_dropped_and_merged_updates_ends_with_the_committed_text(
    count: int, fates: list[str]
) -> None:
    """The server's updates 1..count, each delivered as a delta, dropped, or
    merged into a text (as a server does for a slow reader); a text always
    ends the draft's updates (the server sends one after dropping any)."""
    stats = GroupStats()
    check = DraftCheck(stats)
    parts = tokens(*(NOW - 1000 + i for i in range(count)))
    for n in range(1, count + 1):
        fate = fates[n - 1]
        if fate == "deliver":
            check.frame("d", n, parts[n - 1], None, "open", NOW)
        elif fate == "merge":
            check.frame("d", n, None, "".join(parts[:n]), "open", NOW)
    check.frame("d", count, None, "".join(parts), "open", NOW)
    check.committed("d", "".join(parts))
    check.frame("d", 0, None, None, "final", NOW)
    assert stats.draft_mismatches == 0 and stats.drafts_final == 1
    assert stats.tokens == count == len("".join(parts)) // TOKEN_CHARS


def run_stream(tmp_path: Path, url: str, *args: str) -> dict[str, object]:
    out = tmp_path / "result.json"
    done = bench(
        "stream", "--url", url, "--subscribers", "3", "--tokens", "20", "--rate", "200",
        "--count", "2", "--drain-timeout", "10", "--json", str(out), *args,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "drafts of 20 tokens at 200 tokens/s" in done.stdout
    assert "| token latency p99 (ms) |" in done.stdout
    assert "| server CPU per delivered token (µs) |" in done.stdout
    result: dict[str, object] = json.loads(out.read_text())
    return result


def test_stream_against_a_real_server(tmp_path: Path) -> None:
    with ServerProcess(store="memory", log_path=tmp_path / "log") as server:
        assert server.proc is not None
        pid = ("--server-pid", str(server.proc.pid))
        full = run_stream(tmp_path, server.url, *pid)
        fast = run_stream(tmp_path, server.url, *pid, "--fast", "--pause-one", "0.3")
    for result in (full, fast):
        assert result["ok"] is True
        run = result["runs"][0]  # type: ignore[index]
        assert run["failures"] == []
        drafts = run["drafts"]
        assert drafts["tokens_sent"] == 40 and drafts["drafts"] == 2
        assert drafts["tokens_delivered"] == drafts["tokens_expected"] == 3 * 40
        on_time = run["groups"]["on-time"]["subscribers"]  # the paused one has its own
        assert drafts["token_latency_ms"]["count"] == on_time * 40
        assert drafts["commit_latency_ms"]["count"] == on_time * 2
        assert drafts["cpu_us_per_token"] >= 0  # measured (a tiny run may take no clock tick)
        assert drafts["token_p99_over_commit_p99"] > 0
    paused = fast["runs"][0]["groups"]["paused"]  # type: ignore[index]
    assert paused["subscribers"] == 1 and paused["drafts_final"] == 2
    assert fast["runs"][0]["drafts"]["paused"]["seconds"] == 0.3  # type: ignore[index]


def test_stream_against_the_per_token_baseline(tmp_path: Path) -> None:
    with broadcast_baseline() as (url, pid):
        result = run_stream(tmp_path, url, "--server-pid", str(pid))
    run = result["runs"][0]  # type: ignore[index]
    assert run["failures"] == []
    # Every token to every subscriber as its own frame, plus the finals.
    assert run["groups"]["on-time"]["draft_frames"] == 3 * (40 + 2)
    assert run["groups"]["on-time"]["draft_texts"] == 0
