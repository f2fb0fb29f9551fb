"""The latency histogram: percentiles within its precision, merging across processes."""

from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from client_py.bench.histogram import HIGHEST_US, LatencyHistogram


def test_empty_histogram_reports_only_its_count() -> None:
    histogram = LatencyHistogram()
    assert histogram.count == 0
    assert histogram.summary_ms() == {"count": 0}
    assert histogram.percentile_us(99) == 0


def test_percentiles_of_a_known_distribution() -> None:
    histogram = LatencyHistogram()
    for us in range(1, 10_001):  # 1 µs .. 10 ms, uniform
        histogram.record_us(us)
    summary = histogram.summary_ms()
    assert summary["count"] == 10_000
    assert abs(summary["p50"] - 5.0) <= 0.01
    assert abs(summary["p90"] - 9.0) <= 0.01
    assert abs(summary["p99"] - 9.9) <= 0.01
    assert abs(summary["p99_9"] - 9.99) <= 0.01
    assert abs(summary["max"] - 10.0) <= 0.01
    assert summary["min"] == 0.001


@settings(deadline=None, max_examples=40)
@given(st.lists(st.integers(min_value=1, max_value=60_000_000), min_size=1, max_size=300))
def test_every_percentile_is_within_a_thousandth(values: list[int]) -> None:
    histogram = LatencyHistogram()
    for value in values:
        histogram.record_us(value)
    ordered = sorted(values)
    for percentile in (50.0, 90.0, 99.0, 100.0):
        # HdrHistogram's rank: the nearest one, rounding half up, at least the first.
        rank = max(1, int(len(ordered) * percentile / 100 + 0.5))
        exact = ordered[rank - 1]
        assert abs(histogram.percentile_us(percentile) - exact) <= exact / 1000 + 1


def test_merging_encoded_histograms_equals_recording_everything_in_one() -> None:
    parts = [LatencyHistogram() for _ in range(3)]
    whole = LatencyHistogram()
    for i in range(3000):
        value = (i * 7919) % 50_000 + 1
        parts[i % 3].record_us(value)
        whole.record_us(value)
    merged = LatencyHistogram()
    for part in parts:
        # What a worker process sends through its pipe.
        merged.merge_encoded(pickle.loads(pickle.dumps(part.encode())))
    assert merged.summary_ms() == whole.summary_ms()
    direct = LatencyHistogram()
    for part in parts:
        direct.merge(part)
    assert direct.summary_ms() == whole.summary_ms()


def test_out_of_range_values_are_clamped_and_counted() -> None:
    histogram = LatencyHistogram()
    histogram.record_ns(-5_000)  # a clock step backwards
    histogram.record_us(HIGHEST_US * 2)
    histogram.record_us(100)
    assert histogram.count == 3
    assert histogram.clamped == 2
    assert histogram.percentile_us(0) == 1
