"""The rule that makes a fast but wrong server fail a run (``report.judge``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from client_py.bench.report import ON_TIME_ZERO, STOPPED_ZERO, judge, markdown, ratios


def group(**changes: int) -> dict[str, Any]:
    counters = dict.fromkeys(ON_TIME_ZERO, 0)
    counters.update(subscribers=10, delivered=1000, expected=1000, baselines=10)
    counters.update(changes)
    return counters


def clean_run() -> dict[str, Any]:
    return {
        "label": "server",
        "url": "ws://127.0.0.1:1/v1/ws",
        "groups": {"on-time": group()},
        "writers": {"appends": 100, "acks": 100, "errors": 0, "invalid": 0, "seq_gaps": 0},
        "delivered_per_s": 5000.0,
        "latency_ms": {"count": 1000, "p50": 1.0, "p99": 4.0},
    }


def test_a_clean_run_passes() -> None:
    assert judge(clean_run(), "fanout") == []


@pytest.mark.parametrize("counter", ON_TIME_ZERO)
def test_any_continuity_problem_of_an_on_time_subscriber_fails(counter: str) -> None:
    run = clean_run()
    run["groups"]["on-time"][counter] = 1
    failures = judge(run, "fanout")
    assert any(counter in f for f in failures), failures


def test_fewer_or_more_events_than_owed_fail() -> None:
    for delivered in (999, 1001):
        run = clean_run()
        run["groups"]["on-time"]["delivered"] = delivered
        assert judge(run, "chatroom"), delivered


def test_subscribers_owed_nothing_although_appends_were_acked_fail() -> None:
    run = clean_run()
    run["groups"]["on-time"].update(delivered=0, expected=0)
    assert judge(run, "fanout")


@pytest.mark.parametrize("change", [{"acks": 99}, {"errors": 1}, {"seq_gaps": 2}])
def test_writers_must_get_one_clean_ack_per_append(change: dict[str, int]) -> None:
    run = clean_run()
    run["writers"].update(change)
    assert judge(run, "fanout")


def test_the_stopped_share_may_lag_rebaseline_and_reconnect_but_not_skip() -> None:
    run = clean_run()
    run["groups"]["stopped"] = group(lagged=3, rebaselines=1, disconnects=1)
    assert judge(run, "slow") == []
    for counter in STOPPED_ZERO:
        broken = copy.deepcopy(run)
        broken["groups"]["stopped"][counter] = 1
        assert judge(broken, "slow"), counter
    # The share that kept reading gets no such leniency.
    run["groups"]["on-time"]["lagged"] = 1
    assert judge(run, "slow")


def test_a_resume_answered_with_a_baseline_fails() -> None:
    run = clean_run()
    run["catchup"] = {"baselines_on_resume": 2}
    assert any("baseline" in f for f in judge(run, "catchup"))


def test_ratio_and_markdown_of_a_compared_run() -> None:
    ours, theirs = clean_run(), clean_run()
    theirs["label"] = "baseline"
    theirs["delivered_per_s"] = 2500.0
    result = {
        "scenario": "fanout",
        "workload": {
            "subscribers": 10, "procs": 1, "writers": 1, "transcripts": 1, "rate": None,
            "duration": 5, "count": None, "behind": 100, "size": 200,
        },
        "runs": [{**ours, "failures": []}, {**theirs, "failures": ["x"]}],
        "ratios": ratios(ours, theirs),
    }  # fmt: skip
    assert result["ratios"]["delivered_per_s"] == 2.0
    text = markdown(result)
    assert "| delivered events/s (/s) | 5,000 | 2,500 | 2.00x |" in text
    assert "FAILED: x" in text


def test_streams_readers_are_judged_on_what_they_missed_or_got_twice() -> None:
    from client_py.bench.report import STREAMS_ZERO

    run = clean_run()
    run["groups"]["on-time"]["disconnects"] = 3  # HTTP readers connect again: no failure
    assert judge(run, "streams") == []
    for counter in STREAMS_ZERO:
        bad = clean_run()
        bad["groups"]["on-time"][counter] = 1
        assert any(counter in f for f in judge(bad, "streams")), counter
    # A value whose ack was late reached the readers: only the missing ack fails.
    late = clean_run()
    late["groups"]["on-time"]["delivered"] = 1010
    late["writers"]["appends"] = 101
    assert judge(late, "streams") == ["writers got 100 acks for 101 appends"]
    assert judge(late, "fanout")[0].startswith("on-time subscribers applied 1010")
