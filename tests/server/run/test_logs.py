"""``server.logs.RepeatLimit``: repeated warnings are rate-limited per kind."""

from __future__ import annotations

import logging

import pytest

from server.logs import RepeatLimit


def _record(msg: str, level: int = logging.WARNING, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("tsync.test", level, __file__, 1, msg, (), None)
    record.__dict__.update(extra)
    return record


def test_a_burst_passes_then_one_per_refill_saying_how_many_were_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("server.logs.time.monotonic", lambda: now[0])
    limit = RepeatLimit(burst=3, per_second=1.0)
    written = [limit.filter(_record("accept() failed")) for _ in range(1000)]
    assert sum(written) == 3
    now[0] += 1.0
    record = _record("accept() failed")
    assert limit.filter(record)
    assert record.suppressed == 997  # type: ignore[attr-defined]
    # Another kind of line has its own budget.
    assert limit.filter(_record("something else"))


def test_info_lines_pass_unless_marked() -> None:
    limit = RepeatLimit(burst=1, per_second=0.0)
    assert all(limit.filter(_record("opened", logging.INFO)) for _ in range(50))
    marked = [limit.filter(_record("refused", logging.INFO, _repeat=True)) for _ in range(50)]
    assert sum(marked) == 1
