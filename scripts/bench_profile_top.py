#!/usr/bin/env python3
"""Summarise a ``py-spy record --format raw`` profile: the functions with the
most samples, by self time and by inclusive time (what docs/benchmarks.md
quotes).

    py-spy record --pid PID --duration 12 --rate 200 --format raw -o prof.txt --nonblocking
    python scripts/bench_profile_top.py prof.txt
"""

from __future__ import annotations

import sys
from collections import Counter


def main(path: str, top: int = 15) -> None:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count_text = line.rstrip().rpartition(" ")
            if not stack:
                continue
            count = int(count_text)
            total += count
            frames = [
                frame.split(" (")[0]
                + " ("
                + frame.split(" (")[-1].split(":")[0].split("/")[-1]
                + ")"
                for frame in stack.split(";")
            ]
            own[frames[-1]] += count
            for frame in set(frames):
                inclusive[frame] += count
    print(f"{total} samples\n\nself time:")
    for name, count in own.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {name}")
    print("\ninclusive time:")
    for name, count in inclusive.most_common(top + 10):
        print(f"  {100 * count / total:5.1f}%  {name}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 15)
