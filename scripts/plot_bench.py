#!/usr/bin/env python3
"""The plots of docs/benchmarks.md from the runs of scripts/run_benchmarks.sh.

    python scripts/plot_bench.py /tmp/bench-results docs

- ``bench-latency.png``: append->delivery latency by percentile (HDR-style
  axis: 90, 99, 99.9 ... equally spaced) for the fanout runs at 1,000
  subscribers, ours against the broadcast baseline.
- ``bench-throughput.png``: delivered events/s against the number of
  subscribers (the ``sweep*`` and ``fanout500`` runs), ours and the baseline.
"""

from __future__ import annotations

import json
import math
import sys
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


def main(folder: str, out: str) -> None:
    src, dst = Path(folder), Path(out)
    plot_latency(src, dst)
    plot_throughput(src, dst)


if __name__ == "__main__":
    main(
        sys.argv[1] if len(sys.argv) > 1 else "/tmp/bench-results",
        sys.argv[2] if len(sys.argv) > 2 else "docs",
    )
