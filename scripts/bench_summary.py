#!/usr/bin/env python3
"""Medians and ranges of the runs that scripts/run_benchmarks.sh wrote, as Markdown.

    python scripts/bench_summary.py /tmp/bench-results [--brief]

Files are named ``NAME-STORE-RUN.json``; each holds our server's run and the
broadcast baseline's run of the same workload (``tsync bench --compare``).
A cell reads ``median (min-max)`` over the runs; the ratio column is the
median of the per-run ratios (ours / baseline).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from client_py.bench.report import METRICS, _get


def cell(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    text = _num(med)
    if len(values) > 1:
        text += f" ({_num(min(values))}-{_num(max(values))})"
    return text


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


#: The metrics ``--brief`` keeps.
BRIEF = {
    "delivered_per_s",
    "writers.acks_per_s",
    "latency_ms.p50",
    "latency_ms.p99",
    "latency_ms.max",
    "groups.stopped.latency_ms.p99",
    "server_cpu.cpu_us_per_delivered",
    "streams.values_per_answer",
    "server_cpu.rss_mb_peak",
    "catchup.resume_ms.p50",
    "catchup.frames_per_resume",
    "catchup.bytes_per_resume",
    "catchup.baseline.median_ms",
    "idle.kb_per_connection",
    "idle.kb_per_subscribed_connection",
}


def main(folder: str, brief: bool = False) -> None:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(Path(folder).glob("*.json")):
        name, store, _run = path.stem.rsplit("-", 2)
        groups[(name, store)].append(json.loads(path.read_text()))
    for (name, store), results in sorted(groups.items()):
        runs = len(results)
        ok = sum(1 for r in results if r["ok"])
        loads = [r.get("machine", {}).get("loadavg_at_start", [None])[0] for r in results]
        print(f"\n### {name} ({store}): {runs} run(s), {ok} passed; load at start {loads}\n")
        print("| metric | tsync | baseline | ratio |\n|---|---|---|---|")
        for label, path, unit, _higher in METRICS:
            if brief and path not in BRIEF:
                continue
            ours = [v for r in results if (v := _get(r["runs"][0], path)) is not None]
            theirs = [
                v
                for r in results
                if len(r["runs"]) > 1 and (v := _get(r["runs"][1], path)) is not None
            ]
            ratio = [v for r in results if (v := r.get("ratios", {}).get(path)) is not None]
            if not ours and not theirs:
                continue
            unit_text = f" ({unit})" if unit else ""
            print(f"| {label}{unit_text} | {cell(ours)} | {cell(theirs)} | {cell(ratio)}x |")
        for r in results:
            for run in r["runs"]:
                if run.get("failures"):
                    print(f"\n- {run['label']} FAILED: {'; '.join(run['failures'][:3])}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--brief"]
    main(args[0] if args else "/tmp/bench-results", brief="--brief" in sys.argv)
