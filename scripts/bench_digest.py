#!/usr/bin/env python3
"""What the rolling digest (issue 29) costs the server per change, measured
in-process, against what the same change costs without it.

The server's work for one accepted append that the digest adds: computing
the digest when the entity builds the event (``Transcript.prepare_append``)
and once more when the entity applies it (``TranscriptState.apply`` checks
the event's digest against its own), plus encoding the event (once for all
subscribers) with one more field. This script times, for the load test's
append (``client_py.bench.workload``: one user message of about ``--size``
bytes with ``metadata: {t: <ns>, w: <writer>}``) and for a plain message of
the same size:

- ``next_digest`` alone, and ``rfc8785`` alone writing the same bytes;
- prepare + apply of one append on an entity, with digests (this code) and
  with them switched off (the state's digest set to ``None``, which skips
  both computations: exactly the code path of a transcript without one);
- the event's JSON and MessagePack encodings and their sizes, with and
  without the ``digest`` field.

Then it relates the extra per change to the per-delivery figures of the
burst and of 1,000 x 50/s (``--burst-us``, ``--x50-us``: server CPU per
delivered event measured by ``tsync bench``; each change is delivered to 500
and 1,000 subscribers there).

    python scripts/bench_digest.py [--size 200] [--repeat 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import msgspec

from client_py.bench.workload import filler
from protocol.digest import canonical_reference, genesis_digest, next_digest
from protocol.types import Message, MessagesAppended
from server.model.transcript import Transcript


def per_call(fn: Callable[[], object], repeat: int, rounds: int) -> float:
    """Median over ``rounds`` of the mean CPU seconds per call of ``repeat``
    calls: this thread's CPU time, so that time the machine gave to other
    processes (a shared, loaded machine) does not count."""
    fn()
    samples = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(repeat):
            fn()
        samples.append((time.thread_time() - start) / repeat)
    return statistics.median(samples)


def append_cost(message: Message, *, digest: bool, repeat: int, rounds: int) -> float:
    """Seconds per prepare + apply of one append of ``message``."""
    transcript = Transcript(id="bench", epoch="e", clock=lambda: 1_700_000_000_000)
    transcript.append([message])
    if not digest:
        transcript.state.digest = None
    batch = [message]

    def one() -> None:
        event = transcript.prepare_append(batch)
        assert event is not None
        transcript.apply(event)
        transcript.forget_before(transcript.length)  # keep memory flat, as the hub's window

    return per_call(one, repeat, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=200, help="bytes per message (default 200)")
    parser.add_argument("--repeat", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--burst-us", type=float, default=2.0, help="server CPU per delivery")
    parser.add_argument("--x50-us", type=float, default=10.8, help="server CPU per delivery")
    args = parser.parse_args()
    repeat, rounds = args.repeat, args.rounds
    stamp = time.time_ns()
    shapes = {
        "load test's append": Message(
            role="user",
            content=filler(args.size),
            metadata={"t": stamp, "w": 0},
        ),
        "plain message": Message(role="user", content="x" * args.size),
    }
    genesis = genesis_digest("bench")
    print(
        f"# digest cost per change ({args.size} B messages; thread CPU time, "
        f"median of {rounds} x {repeat})\n"
    )
    print("| message | next_digest | rfc8785 alone | prepare+apply with | without | extra |")
    print("|---|---|---|---|---|---|")
    extras: dict[str, float] = {}
    for name, message in shapes.items():
        change = MessagesAppended(start=1, messages=(message,))
        digest_s = per_call(lambda c=change: next_digest(genesis, c), repeat, rounds)
        reference_s = per_call(lambda c=change: canonical_reference(c), repeat, rounds)
        with_s = append_cost(message, digest=True, repeat=repeat, rounds=rounds)
        without_s = append_cost(message, digest=False, repeat=repeat, rounds=rounds)
        extras[name] = with_s - without_s
        print(
            f"| {name} | {digest_s * 1e6:.2f} us | {reference_s * 1e6:.2f} us | "
            f"{with_s * 1e6:.2f} us | {without_s * 1e6:.2f} us | "
            f"{(with_s - without_s) * 1e6:.2f} us |"
        )
    transcript = Transcript(id="bench", epoch="e" * 32, clock=lambda: 1_700_000_000_000)
    event = transcript.prepare_append([shapes["load test's append"]])
    assert event is not None and event.digest is not None
    bare = msgspec.structs.replace(event, digest=None)
    print("\n| encoding of the event | with digest | without | extra |")
    print("|---|---|---|---|")
    for name, encode in (("JSON", msgspec.json.encode), ("MessagePack", msgspec.msgpack.encode)):
        with_b, without_b = len(encode(event)), len(encode(bare))
        with_t = per_call(lambda e=encode: e(event), repeat, rounds)
        without_t = per_call(lambda e=encode: e(bare), repeat, rounds)
        print(
            f"| {name} | {with_b} B, {with_t * 1e6:.2f} us | {without_b} B, "
            f"{without_t * 1e6:.2f} us | {with_b - without_b} B, "
            f"{(with_t - without_t) * 1e6:.2f} us |"
        )
    extra = extras["load test's append"]
    print("\n| workload | deliveries per change | CPU per delivery | digest per delivery | share |")
    print("|---|---|---|---|---|")
    for name, subscribers, per_delivery_us in (
        ("burst, 500 x 2,000", 500, args.burst_us),
        ("1,000 x 50/s", 1000, args.x50_us),
    ):
        share = extra * 1e6 / subscribers
        print(
            f"| {name} | {subscribers} | {per_delivery_us:.2f} us | {share * 1000:.1f} ns | "
            f"{share / per_delivery_us:.2%} |"
        )


if __name__ == "__main__":
    main()
