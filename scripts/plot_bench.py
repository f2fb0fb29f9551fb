#!/usr/bin/env python3
"""The plots of docs/benchmarks.md from the runs of scripts/run_benchmarks.sh.

    python scripts/plot_bench.py /tmp/bench-results docs

- ``bench-latency.png``: append->delivery latency by percentile (HDR-style
  axis: 90, 99, 99.9 ... equally spaced) for the fanout runs at 1,000
  subscribers, ours against the broadcast baseline.
- ``bench-throughput.png``: delivered events/s against the number of
  subscribers (the ``sweep*`` and ``fanout500`` runs), ours and the baseline.

    python scripts/plot_bench.py --curve /tmp/bench-curve docs

draws ``bench-cost-curve.png`` from the runs of scripts/bench_cost_curve.sh
(issue 42, target 3: RSS per connection and time to subscribe at 2,000 to
15,000 connections, p99 at 10,000 x 5/s beside 1,000 x 50/s) and prints
their table as Markdown: medians (range) over the runs, and the ratios the
target is about, each taken within a run.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def load(folder: Path, pattern: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob(pattern))]


def nines(percentile: float) -> float:
    """The HDR x coordinate: 0 at p0, 1 at p90, 2 at p99, 3 at p99.9, ..."""
    return -math.log10(max(1e-6, 1 - percentile / 100))


def plot_latency(folder: Path, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    styles = {"fanout1000x50": "-", "fanout1000x100": "--"}
    for name, style in styles.items():
        results = load(folder, f"{name}-sqlite-1.json")
        if not results:
            continue
        for run, color in zip(results[0]["runs"], ("tab:blue", "tab:orange"), strict=False):
            curve = run.get("latency_curve_ms")
            if not curve:
                continue
            xs = [nines(p) for p, _ in curve]
            ys = [max(v, 0.01) for _, v in curve]
            rate = name.removeprefix("fanout1000x")
            ax.plot(xs, ys, style, color=color, marker="o", ms=3, label=f"{run['label']}, {rate}/s")
    ticks = [0, 50, 90, 99, 99.9, 99.99]
    ax.set_xticks([*(nines(p) for p in ticks), nines(100)], [*(f"p{p:g}" for p in ticks), "max"])
    ax.set_yscale("log")
    ax.set_ylabel("append -> delivery (ms, log)")
    ax.set_title("Latency by percentile, 1,000 subscribers, 200 B appends (embedded store)")
    ax.axhline(10, color="grey", lw=0.8, ls=":")
    ax.axhline(25, color="grey", lw=0.8, ls=":")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "bench-latency.png", dpi=110)
    plt.close(fig)


def plot_throughput(folder: Path, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colors = {"baseline": "tab:orange"}
    for pattern, style, what in (
        ("sweep*-sqlite-1.json", "o-", "500 appends"),
        ("fanout500-sqlite-*.json", "x", "2,000 appends (3 runs)"),
    ):
        points: dict[str, list[tuple[int, float]]] = {}
        for path in sorted(folder.glob(pattern)):
            result = json.loads(path.read_text())
            for run in result["runs"]:
                label = "baseline" if run["label"] == "baseline" else "tsync (sqlite)"
                n = result["workload"]["subscribers"]
                points.setdefault(label, []).append((n, run.get("delivered_per_s", 0.0)))
        for label, values in points.items():
            values.sort()
            ax.plot(
                [n for n, _ in values],
                [v for _, v in values],
                style,
                color=colors.get(label, "tab:blue"),
                ms=8 if style == "x" else 5,
                label=f"{label}, {what}",
            )
    ax.set_ylim(bottom=0)
    ax.set_xlabel("subscribers (one transcript)")
    ax.set_ylabel("delivered events/s")
    ax.set_title("Fan-out throughput vs subscribers, 200 B appends offered at 1,000/s")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "bench-throughput.png", dpi=110)
    plt.close(fig)


def _ours(result: dict[str, Any]) -> dict[str, Any]:
    run: dict[str, Any] = result["runs"][0]
    return run


def _cell(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def curve_runs(folder: Path) -> tuple[dict[int, dict[str, list[float]]], dict[str, Any]]:
    """Per connection count, the idle figures of every run; and the
    latency runs keyed by run number."""
    idle: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    latency: dict[str, Any] = defaultdict(dict)
    for path in sorted(folder.glob("*.json")):
        match = re.fullmatch(r"(idle(\d+)|curve\d+x\d+)-(\w+)-(\d+)", path.stem)
        if not match:
            continue
        result = json.loads(path.read_text())
        run = _ours(result)
        if match.group(2):
            figures = run.get("idle", {})
            for key in (
                "kb_per_connection",
                "kb_per_subscribed_connection",
                "connect_s",
                "subscribe_s",
                "subscribe_us_per_connection",
                "server_cpu_us_per_subscribe",
                "generator_share_subscribing",
            ):
                if key in figures:
                    idle[int(match.group(2))][key].append(float(figures[key]))
        else:
            latency[match.group(4)][match.group(1)] = run
    return idle, latency


def curve_table(folder: Path) -> str:
    idle, latency = curve_runs(folder)
    lines = [
        "| connections | KiB per connection (connected) | KiB per connection (subscribed) | "
        "subscribed / 2,000's | time to connect all (s) | time to subscribe all (s) | "
        "µs per subscribe (wall) | server CPU per subscribe (µs) | generator share while "
        "subscribing |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    sizes = sorted(idle)
    base = idle[sizes[0]]["kb_per_subscribed_connection"] if sizes else []
    for n in sizes:
        f = idle[n]
        per_run = [a / b for a, b in zip(f["kb_per_subscribed_connection"], base, strict=False)]
        lines.append(
            f"| {n:,} | {_cell(f['kb_per_connection'])} | "
            f"{_cell(f['kb_per_subscribed_connection'])} | {_cell(per_run)}x | "
            f"{_cell(f['connect_s'])} | {_cell(f['subscribe_s'])} | "
            f"{_cell(f['subscribe_us_per_connection'], 1)} | "
            f"{_cell(f['server_cpu_us_per_subscribe'], 1)} | "
            f"{_cell(f['generator_share_subscribing'])} |"
        )
    lines += [
        "",
        "| run | p99 1,000 x 50/s (ms) | p99 10,000 x 5/s (ms) | ratio | delivered/s (1,000 / "
        "10,000) | server µs per delivery | generator share (1,000 / 10,000) | bound |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for number in sorted(latency, key=int):
        pair = latency[number]
        a, b = pair.get("curve1000x50"), pair.get("curve10000x5")
        if not a or not b:
            continue
        pa, pb = a["latency_ms"]["p99"], b["latency_ms"]["p99"]
        ratios.append(pb / pa)

        def cpu(r: dict[str, Any]) -> str:
            return str(r.get("server_cpu", {}).get("cpu_us_per_delivered"))

        lines.append(
            f"| {number} | {pa:.1f} | {pb:.1f} | {pb / pa:.2f}x | "
            f"{a.get('delivered_per_s', 0):,.0f} / {b.get('delivered_per_s', 0):,.0f} | "
            f"{cpu(a)} / {cpu(b)} | {a['generator_cpu']['share']} / "
            f"{b['generator_cpu']['share']} | {a.get('bound')} / {b.get('bound')} |"
        )
    if ratios:
        median = statistics.median(ratios)
        lines.append(f"| **median of the ratios** | | | **{median:.2f}x** | | | | |")
    return "\n".join(lines)


def plot_curve(folder: Path, out: Path) -> None:
    idle, latency = curve_runs(folder)
    sizes = sorted(idle)
    fig, (mem, sub, lat) = plt.subplots(1, 3, figsize=(13, 4.2))

    def band(ax: Any, key: str, label: str, color: str) -> None:
        xs = [n for n in sizes if idle[n][key]]
        meds = [statistics.median(idle[n][key]) for n in xs]
        low = [m - min(idle[n][key]) for m, n in zip(meds, xs, strict=True)]
        high = [max(idle[n][key]) - m for m, n in zip(meds, xs, strict=True)]
        ax.errorbar(xs, meds, yerr=[low, high], fmt="o-", color=color, ms=4, capsize=3, label=label)

    band(mem, "kb_per_connection", "connected", "tab:blue")
    band(mem, "kb_per_subscribed_connection", "subscribed", "tab:orange")
    mem.set_ylim(bottom=0)
    mem.set_xlabel("WebSocket connections (one process)")
    mem.set_ylabel("server RSS per connection (KiB)")
    mem.set_title("Idle memory per connection")
    band(sub, "subscribe_s", "all subscribed (wall)", "tab:green")
    band(sub, "connect_s", "all connected (wall)", "tab:purple")
    sub.set_ylim(bottom=0)
    sub.set_xlabel("WebSocket connections (one process)")
    sub.set_ylabel("seconds")
    sub.set_title("Time to connect / subscribe them all")
    for name, color, label in (
        ("curve1000x50", "tab:blue", "1,000 subs x 50/s"),
        ("curve10000x5", "tab:red", "10,000 subs x 5/s"),
    ):
        first = True
        for number in sorted(latency, key=int):
            run = latency[number].get(name)
            if not run or not run.get("latency_curve_ms"):
                continue
            curve = run["latency_curve_ms"]
            lat.plot(
                [nines(p) for p, _ in curve],
                [max(v, 0.01) for _, v in curve],
                "-",
                color=color,
                alpha=0.8,
                label=label if first else None,
            )
            first = False
    ticks = [0, 90, 99, 99.9]
    lat.set_xticks([*(nines(p) for p in ticks), nines(100)], [*(f"p{p:g}" for p in ticks), "max"])
    lat.set_yscale("log")
    lat.set_ylabel("append -> delivery (ms, log)")
    lat.set_title("50,000 deliveries/s, each run a line")
    for ax in (mem, sub, lat):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "bench-cost-curve.png", dpi=110)
    plt.close(fig)


def main(folder: str, out: str) -> None:
    src, dst = Path(folder), Path(out)
    plot_latency(src, dst)
    plot_throughput(src, dst)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--curve":
        curve_folder = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/bench-curve")
        plot_curve(curve_folder, Path(sys.argv[3] if len(sys.argv) > 3 else "docs"))
        print(curve_table(curve_folder))
        sys.exit(0)
    main(
        sys.argv[1] if len(sys.argv) > 1 else "/tmp/bench-results",
        sys.argv[2] if len(sys.argv) > 2 else "docs",
    )
