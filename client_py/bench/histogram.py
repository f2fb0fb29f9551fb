"""Latency histograms: HDR-style (log-linear buckets), mergeable across processes.

A thin wrapper around the maintained ``hdrhistogram`` package: values are
recorded in microseconds with 3 significant digits from 1 µs to 10 minutes,
so any recorded value is reported within 0.1 %. Worker processes send their
histogram as ``encode()`` bytes and the harness merges them with
``merge_encoded``.
"""

from __future__ import annotations

from typing import Final

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

LOWEST_US: Final = 1
HIGHEST_US: Final = 600_000_000  # 10 minutes
SIGNIFICANT_DIGITS: Final = 3

#: The percentiles every summary reports, and the names they are reported under.
PERCENTILES: Final = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99_9", 99.9))


class LatencyHistogram:
    """Counts of latencies in microseconds; values outside the range are clamped."""

    __slots__ = ("_h", "clamped")

    def __init__(self) -> None:
        self._h = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
        #: Values below 1 µs (clock steps) or above the range, recorded at the edge.
        self.clamped = 0

    def record_us(self, value: int, count: int = 1) -> None:
        """Record ``count`` occurrences of ``value`` microseconds."""
        if value < LOWEST_US:
            self.clamped += count
            value = LOWEST_US
        elif value > HIGHEST_US:
            self.clamped += count
            value = HIGHEST_US
        self._h.record_value(value, count)

    def record_ns(self, value: int, count: int = 1) -> None:
        self.record_us(value // 1000, count)

    @property
    def count(self) -> int:
        total: int = self._h.get_total_count()
        return total

    def merge(self, other: LatencyHistogram) -> None:
        """Add every count of ``other`` to this histogram."""
        if other.count:
            self._h.add(other._h)
        self.clamped += other.clamped

    def encode(self) -> bytes:
        """A compact, picklable form for ``merge_encoded`` in another process."""
        data: bytes = self._h.encode()
        return data

    def merge_encoded(self, data: bytes) -> None:
        if data:
            self._h.decode_and_add(data)

    @classmethod
    def decode(cls, data: bytes) -> LatencyHistogram:
        histogram = cls()
        histogram.merge_encoded(data)
        return histogram

    def percentile_us(self, percentile: float) -> int:
        """The value at ``percentile`` (0..100); 0 for an empty histogram."""
        if not self.count:
            return 0
        value: int = self._h.get_value_at_percentile(percentile)
        return value

    def summary_ms(self) -> dict[str, float | int]:
        """``count``, ``min``, ``mean``, ``p50``, ``p90``, ``p99``, ``p99_9``, ``max`` (ms)."""
        h = self._h
        if not self.count:
            return {"count": 0}
        out: dict[str, float | int] = {
            "count": self.count,
            "min": _ms(h.get_min_value()),
            "mean": round(h.get_mean_value() / 1000, 3),
        }
        for name, percentile in PERCENTILES:
            out[name] = _ms(h.get_value_at_percentile(percentile))
        out["max"] = _ms(h.get_max_value())
        return out

    def distribution_ms(self, percentiles: list[float]) -> list[tuple[float, float]]:
        """``(percentile, value in ms)`` pairs, for plotting a percentile curve."""
        return [(p, _ms(self.percentile_us(p))) for p in percentiles]


def _ms(us: int) -> float:
    return round(us / 1000, 3)
