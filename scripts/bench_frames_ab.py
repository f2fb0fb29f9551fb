#!/usr/bin/env python3
"""A/B of ``server.live.frames.EncodedSnapshot`` at a git revision against the
working tree's, in one process (alternating rounds, the best of each):
making a baseline, ``parts`` (what a subscriber's write joins), ``fragment``
(a raw connection's streamed write) and the fields the queue reads per
subscriber. Prints each time and the ratio now / at REV::

    PYTHONPATH=. taskset -c 0 python scripts/bench_frames_ab.py REV
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import server.live.frames as now_frames


def frames_at(rev: str, folder: Path) -> ModuleType:
    """``server/live/frames.py`` as it was at ``rev``, imported as a module of its own."""
    path = folder / "frames_at_rev.py"
    path.write_bytes(subprocess.check_output(["git", "show", f"{rev}:server/live/frames.py"]))
    spec = importlib.util.spec_from_file_location("frames_at_rev", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(frames: ModuleType) -> dict[str, Callable[[], object]]:
    chunks = tuple(b"x" * 2000 for _ in range(64))

    def make() -> object:
        return frames.EncodedSnapshot(
            "t", 7, binary=False, head=b'"head"', chunks=chunks, tail=b"}", separator=b","
        )

    snapshot = make()
    return {
        "make": make,
        "parts": lambda: snapshot.parts(12345),
        "fragment": lambda: snapshot.fragment(3, 12345),
        "read fields": lambda: (
            snapshot.size + snapshot.revision + len(snapshot.chunks) + snapshot.data
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the revision to compare with (the working tree is 'now')")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        sides = {"rev": cases(frames_at(args.rev, Path(folder))), "now": cases(now_frames)}
        best = {side: dict.fromkeys(sides[side], float("inf")) for side in sides}
        for _ in range(args.rounds):
            for side, named in sides.items():
                for name, case in named.items():
                    t = min(timeit.repeat(case, number=args.number, repeat=3)) / args.number
                    best[side][name] = min(best[side][name], t)
    for name in best["rev"]:
        old, new = best["rev"][name], best["now"][name]
        ratio = new / old
        print(f"{name:12s} rev {old * 1e9:7.0f} ns  now {new * 1e9:7.0f} ns  now/rev {ratio:.3f}")


if __name__ == "__main__":
    main()
