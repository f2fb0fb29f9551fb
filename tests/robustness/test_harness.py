"""The harness measures what it says: a quiet server answers pings fast."""

from __future__ import annotations

from tests.robustness.harness import Target, assert_responsive, probing


def test_probe_measures_a_quiet_server(target: Target) -> None:
    with probing(target.ws_url, idle_s=0.2) as probe:
        probe.wait_pings(20)
    assert_responsive(probe)
    assert target.rss() > 10 << 20
    assert target.peak_rss() >= target.rss()
    assert target.open_fds() > 3
    assert target.healthy()
