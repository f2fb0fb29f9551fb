"""``tsync bench SCENARIO [--url URL] ...``: the command line.

``--url`` takes the server like every other client command: ``$TSYNC_URL``
by default, ``http(s)://host:port`` or ``ws(s)://host:port/v1/ws``.

This module imports only plain data at the top, so that ``tsync`` works
without the ``bench`` extra; the harness and its dependencies (hdrhistogram,
psutil, rich) are imported when the command runs, and their absence is one
line naming the extra to install.

Exit status: 0 when every run behaved, 1 when a server misbehaved (a gap, a
repeat, a missing event, an error, ...) or could not be benchmarked, or the
``bench`` extra is missing, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from client_py.bench.workload import DEFAULTS, SCENARIOS, TRANSCRIPT_LIVE_MODES, Workload
from client_py.http import endpoints

if TYPE_CHECKING:
    from client_py.bench.run import Live

EXIT_FAILED = 1
EXIT_USAGE = 2
DEFAULT_URL = "http://127.0.0.1:8765"
#: The ``bench`` extra's modules: without one of them the command says
#: which extra to install instead of failing on an import.
EXTRA_MODULES = frozenset({"hdrh", "psutil", "rich"})
INSTALL_HINT = "pip install 'transcript-sync[bench]'"


def register(commands: Any) -> None:
    """Add the ``bench`` subcommand to ``tsync``'s subparsers."""
    parser = commands.add_parser(
        "bench",
        help="load-test a server (fanout, chatroom, catchup, idle, slow, stream; streams: "
        "any Durable Streams server; aichat: one reply through /v1/ai/chat beside /v1/ws)",
        description="Load-test a transcript-sync server and check every frame's continuity. "
        "Exits 1 if the server drops, repeats or reorders anything.",
    )
    add_arguments(parser)
    parser.set_defaults(func=main_args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument(
        "--url",
        default=os.environ.get("TSYNC_URL") or DEFAULT_URL,
        help="server URL, http(s)://host:port or ws(s)://host:port/v1/ws "
        "(default $TSYNC_URL, else %(default)s)",
    )
    parser.add_argument(
        "--writer-url",
        help="the writers' server when not --url: another replica of the same store, so that "
        "every delivery crosses it (cross-replica latency); --url's run only",
    )
    parser.add_argument("--subscribers", type=int, help="subscriber connections")
    parser.add_argument("--writers", type=int, help="writer connections")
    parser.add_argument("--transcripts", type=int, help="transcripts written and followed")
    loop = parser.add_mutually_exclusive_group()
    loop.add_argument("--rate", type=float, help="appends/s per writer (open loop)")
    loop.add_argument(
        "--closed-loop", action="store_true", help="each writer appends as soon as its ack is back"
    )
    span = parser.add_mutually_exclusive_group()
    span.add_argument(
        "--duration",
        type=float,
        help="seconds of appending (idle: seconds every connection is held subscribed, "
        "sending nothing, while the server's CPU is measured)",
    )
    span.add_argument("--count", type=int, help="appends in total (over all writers)")
    parser.add_argument("--size", type=int, default=200, help="bytes per message (default 200)")
    parser.add_argument(
        "--tokens",
        type=int,
        default=50,
        help="stream: tokens per draft (default 50); --rate is tokens/s per writer, "
        "--count drafts in total",
    )
    parser.add_argument(
        "--pause-one",
        type=float,
        metavar="S",
        help="stream: one subscriber stops reading for S seconds after its first token, then "
        "reads again; the run reports the frames of its backlog (one text frame per draft "
        "when the server merges what it could not send)",
    )
    parser.add_argument(
        "--live",
        choices=TRANSCRIPT_LIVE_MODES,
        help="streams: how the readers follow the Durable Stream (sse, the default, or "
        "long-poll); --subscribers readers, --rate values/s per writer, --url any Durable "
        "Streams server. fanout --ceiling: how the subscribers follow the transcript: ws (the "
        "default), or sse or long-poll through /v1/stream/transcripts/{id}",
    )
    parser.add_argument("--procs", type=int, default=1, help="processes to spread subscribers over")
    parser.add_argument(
        "--slow-share",
        type=float,
        default=0.1,
        help="share of subscribers that stop reading (slow)",
    )
    parser.add_argument(
        "--behind", type=int, default=100, help="events a resuming subscriber missed (catchup)"
    )
    parser.add_argument(
        "--baseline-messages",
        type=int,
        default=10_000,
        help="messages of the transcript whose baseline is timed (catchup)",
    )
    parser.add_argument(
        "--window",
        metavar="SPEC",
        help="subscribe to part of each transcript: tail:N, from:INDEX, segment:active or "
        "view:NAME (catchup: the resuming subscribers and the timed baselines)",
    )
    parser.add_argument(
        "--drain-timeout", type=float, default=30.0, help="seconds to wait for stragglers"
    )
    parser.add_argument("--json", type=Path, help="write the full result here")
    parser.add_argument("--markdown", type=Path, help="write a Markdown summary here")
    parser.add_argument(
        "--compare", metavar="BASELINE_URL", help="run the same against this server too"
    )
    parser.add_argument("--server-pid", type=int, help="sample this process's CPU and RSS")
    parser.add_argument("--compare-pid", type=int, help="the baseline server's process id")
    parser.add_argument(
        "--keys",
        action="store_true",
        help="every append carries an idempotency key, as the clients' do (default: none)",
    )
    parser.add_argument(
        "--fast",
        action="store_true",
        help="subscribers check seq and revision continuity from each frame's envelope only "
        "(no message decoded) on uvloop when installed: the generator costs far less than the "
        "server, so the run measures the server (default: every frame fully validated)",
    )
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="fanout/chatroom: measure the server's ceiling: writers send precomputed appends "
        "(--rate, or --closed-loop), subscribers over --procs processes count frames and check "
        "the last seq and revision only; reports delivered/s, server and generator CPU and "
        "whether the run was server-bound",
    )
    parser.add_argument(
        "--latency-sample",
        type=int,
        default=64,
        metavar="N",
        help="--ceiling: about N subscribers, spread evenly over the processes, time every "
        "delivery (append -> delivery latency from the message's send time); 0: none "
        "(default 64)",
    )
    parser.add_argument(
        "--server-cpus",
        metavar="CPUS",
        help="pin the servers (--server-pid, --compare-pid, their threads and child "
        "processes) to these CPUs, e.g. 0 or 0-1 (Linux)",
    )
    parser.add_argument(
        "--client-cpus",
        metavar="CPUS",
        help="pin the generator (this process and its subscriber processes) to these CPUs",
    )
    parser.add_argument("--label", default="server", help="name of the --url run in reports")
    parser.add_argument(
        "--compare-label", default="baseline", help="name of the --compare run in reports"
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no live display even on a terminal"
    )


def workload_from(args: argparse.Namespace) -> Workload:
    defaults = DEFAULTS[args.scenario]

    def pick(name: str) -> Any:
        value = getattr(args, name, None)
        return defaults[name] if value is None else value

    rate = None if args.closed_loop else pick("rate")
    duration = args.duration
    if duration is None and args.count is None:
        duration = defaults["duration"]
    return Workload(
        scenario=args.scenario,
        subscribers=int(pick("subscribers")),
        writers=int(pick("writers")),
        transcripts=int(pick("transcripts")),
        rate=rate,
        duration=duration,
        count=args.count,
        size=args.size,
        procs=args.procs,
        slow_share=args.slow_share,
        behind=args.behind,
        baseline_messages=args.baseline_messages,
        window=args.window,
        drain_timeout=args.drain_timeout,
        fast=args.fast,
        tokens=args.tokens,
        pause_one=args.pause_one,
        live=args.live or "",
        ceiling=args.ceiling,
        latency_sample=args.latency_sample,
        keys=args.keys,
    )


def pinning(args: argparse.Namespace) -> None:
    """``--server-cpus``/``--client-cpus`` parsed in place; ``ValueError``
    for a bad list, or server pinning without a process to pin."""
    from client_py.bench.host import parse_cpus

    for name in ("server_cpus", "client_cpus"):
        value = getattr(args, name)
        if value is not None:
            setattr(args, name, parse_cpus(value))
    if args.server_cpus is not None:
        if args.server_pid is None:
            raise ValueError("--server-cpus needs --server-pid (the server to pin)")
        if args.compare and args.compare_pid is None:
            raise ValueError("--server-cpus with --compare needs --compare-pid too")
    if args.server_cpus and args.client_cpus and args.server_cpus & args.client_cpus:
        raise ValueError("--server-cpus and --client-cpus overlap")


def main_args(args: argparse.Namespace) -> int:
    hint = "(see 'tsync bench --help')"
    try:
        workload = workload_from(args)
        # Durable Streams speak HTTP (http://host:port); the rest WebSockets.
        which = 0 if workload.scenario == "streams" else 1
        if workload.scenario == "streams" and args.writer_url:
            raise ValueError("--writer-url is not for the streams scenario")
        if workload.scenario == "aichat" and (args.writer_url or args.compare):
            raise ValueError(
                "the aichat scenario compares its two legs in one run: no --writer-url or --compare"
            )
        args.url = endpoints(args.url)[which]
        if args.writer_url:
            args.writer_url = endpoints(args.writer_url)[1]
        if args.compare:
            args.compare = endpoints(args.compare)[which]
        pinning(args)
    except ValueError as exc:
        print(f"tsync bench: {exc} {hint}", file=sys.stderr)
        return EXIT_USAGE
    try:
        from client_py.bench import report
        from client_py.bench.run import BenchError
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in EXTRA_MODULES:
            raise
        print(
            f"tsync bench: needs the bench extra (no module {exc.name!r}): {INSTALL_HINT}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    show = not args.no_progress and sys.stderr.isatty()
    from client_py.bench import host

    try:
        if args.server_cpus is not None:
            for pid in filter(None, (args.server_pid, args.compare_pid)):
                host.pin_process(pid, args.server_cpus)
        if args.client_cpus is not None:
            host.pin_self(args.client_cpus)
        result = host.run(bench(workload, args, show=show), fast=workload.fast or workload.ceiling)
    except OSError as exc:
        print(f"tsync bench: cannot pin CPUs: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except BenchError as exc:
        print(f"tsync bench: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    text = report.markdown(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(text)
    print(text)
    return 0 if result["ok"] else EXIT_FAILED


async def bench(workload: Workload, args: argparse.Namespace, *, show: bool) -> dict[str, Any]:
    """Run the workload against ``--url`` (and ``--compare``); the JSON result."""
    from client_py.bench import report
    from client_py.bench.aichat import run_aichat
    from client_py.bench.ceiling import run_ceiling
    from client_py.bench.dsrun import run_streams
    from client_py.bench.run import Live, run_workload

    load_at_start = [round(x, 2) for x in os.getloadavg()]
    targets = [(args.label, args.url, args.server_pid)]
    if args.compare:
        targets.append((args.compare_label, args.compare, args.compare_pid))
    runs: list[dict[str, Any]] = []
    if workload.scenario == "aichat":
        live = Live(label=args.label)
        async with _display(live, show):
            runs = await run_aichat(
                args.url,
                workload,
                server_pid=args.server_pid,
                live=live,
                client_cpus=args.client_cpus,
            )
        for run in runs:
            run["failures"] = report.judge(run, workload.scenario)
        targets = []  # both legs ran: the ai chat leg against the draft frames'
        runs.reverse()
    for i, (label, url, pid) in enumerate(targets):
        live = Live(label=label)
        async with _display(live, show):
            if workload.ceiling:
                run = await run_ceiling(
                    url,
                    workload.with_run_id(f"{workload.run_id}{i}"),
                    server_pid=pid,
                    live=live,
                    client_cpus=args.client_cpus,
                    server_cpus=args.server_cpus,
                )
            elif workload.scenario == "streams":
                run = await run_streams(
                    url,
                    workload.with_run_id(f"{workload.run_id}{i}"),
                    server_pid=pid,
                    live=live,
                    client_cpus=args.client_cpus,
                )
            else:
                run = await run_workload(
                    url,
                    workload.with_run_id(f"{workload.run_id}{i}"),
                    server_pid=pid,
                    live=live,
                    client_cpus=args.client_cpus,
                    writer_url=args.writer_url if i == 0 else None,
                )
        run["label"] = label
        run["failures"] = report.judge(run, workload.scenario)
        runs.append(run)
    result: dict[str, Any] = {
        "version": 1,
        "scenario": workload.scenario,
        "workload": {
            k: getattr(workload, k) for k in Workload.__dataclass_fields__ if k != "run_id"
        },
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # The generator shares the machine with the server: say how busy it was.
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_at_start": load_at_start,
            "server_cpus": sorted(args.server_cpus) if args.server_cpus else None,
            "client_cpus": sorted(args.client_cpus) if args.client_cpus else None,
        },
        "runs": runs,
        "ok": not any(run["failures"] for run in runs),
    }
    if len(runs) == 2:
        result["ratios"] = report.ratios(runs[0], runs[1])
    return result


@contextlib.asynccontextmanager
async def _display(live: Live, show: bool) -> AsyncIterator[None]:
    if not show:
        yield
        return
    from rich.console import Console
    from rich.live import Live as RichLive
    from rich.table import Table

    last = {"t": time.monotonic(), "delivered": 0}
    rate = {"value": 0.0}

    def render() -> Table:
        delivered = sum(live.delivered.values())
        now = time.monotonic()
        if now - last["t"] >= 0.5:
            rate["value"] = (delivered - last["delivered"]) / (now - last["t"])
            last["t"], last["delivered"] = now, delivered
        table = Table(title=f"tsync bench: {live.label}", show_header=True)
        for column in (
            "phase",
            "elapsed",
            "appends",
            "acks",
            "delivered",
            "delivered/s",
            "problems",
            "lagged",
        ):
            table.add_column(column, justify="right" if column != "phase" else "left")
        table.add_row(
            live.phase,
            f"{now - live.started:.1f}s",
            f"{live.appends:,}",
            f"{live.acks:,}",
            f"{delivered:,}",
            f"{rate['value']:,.0f}",
            str(sum(live.problems.values())),
            str(sum(live.lagged.values())),
        )
        return table

    with RichLive(
        render(), console=Console(stderr=True), refresh_per_second=4, transient=True
    ) as display:

        async def refresh() -> None:
            while True:
                display.update(render())
                await asyncio.sleep(0.25)

        task = asyncio.create_task(refresh())
        try:
            yield
        finally:
            task.cancel()
