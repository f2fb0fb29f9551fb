#!/usr/bin/env python3
"""How fast the server encodes a 10,000-message baseline, against msgspec
encoding the same messages (the issue's target: >= 0.8x msgspec's speed).

Measured in-process on the server's own path: ``Transcript.snapshot()`` then
``server.live.frames.EncodedSnapshot.of`` (which encodes the snapshot once per
revision and splices ``seq`` per subscriber), and the splice itself
(``render``). msgspec is timed encoding the very same ``Message``
structs as a JSON array, and encoding them as plain dicts.

    python scripts/bench_encode.py [--messages 10000] [--size 200] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import msgspec

from protocol.types import Message, to_builtins
from server.live.frames import EncodedSnapshot
from server.model.transcript import Transcript


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    """Median seconds of ``repeat`` calls (after one warm-up)."""
    fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    content = "x" * max(1, args.size - 30)
    messages = [
        Message(role="user" if i % 2 == 0 else "assistant", content=content, metadata={"i": i})
        for i in range(args.messages)
    ]
    transcript = Transcript(id="bench-encode")
    for start in range(0, len(messages), 1000):
        transcript.append(messages[start : start + 1000])
    structs = tuple(transcript.snapshot().messages)
    dicts = [to_builtins(m) for m in structs]
    encoder = msgspec.json.Encoder()

    ours = best_of(args.repeat, lambda: EncodedSnapshot.of(transcript.snapshot()))
    snapshot = EncodedSnapshot.of(transcript.snapshot())
    splice = best_of(args.repeat, lambda: snapshot.render(7, False))
    msgspec_structs = best_of(args.repeat, lambda: encoder.encode(structs))
    msgspec_dicts = best_of(args.repeat, lambda: encoder.encode(dicts))
    out = {
        "messages": args.messages,
        "baseline_bytes": len(snapshot.render(7, False)),
        "server_snapshot_and_encode_ms": round(ours * 1000, 3),
        "server_seq_splice_ms": round(splice * 1000, 3),
        "msgspec_structs_ms": round(msgspec_structs * 1000, 3),
        "msgspec_dicts_ms": round(msgspec_dicts * 1000, 3),
        # Speed relative to msgspec (>= 0.8 is the target): msgspec's time / ours.
        "speed_vs_msgspec_structs": round(msgspec_structs / ours, 3),
        "speed_vs_msgspec_dicts": round(msgspec_dicts / ours, 3),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
