"""Judging a run and writing it up: failures, ratios, the Markdown summary.

``judge`` is the rule that makes a fast but wrong server fail the run: every
subscriber must have seen each event exactly once, in order, on a gap-free
connection, up to the final revision; writers must get an ack for every
append. The only exception is the stopped share of the ``slow`` scenario,
which is expected to be ``lagged`` (and may be re-baselined or dropped) but
must still catch up without a gap or a repeat. In the ``stream`` scenario
every subscriber (the one that paused too) must also have got every token,
closed every draft with its message, and seen each draft's text equal to the
message that committed it.
"""

from __future__ import annotations

from typing import Any

#: Counters that must stay at zero for subscribers that kept reading.
ON_TIME_ZERO = (
    "gaps",
    "seq_gaps",
    "repeats",
    "foreign",
    "invalid",
    "stops",
    "errors",
    "disconnects",
    "incomplete",
    "lagged",
    "rebaselines",
)
#: ... and for the subscribers that stopped reading (slow scenario).
STOPPED_ZERO = ("gaps", "seq_gaps", "repeats", "foreign", "invalid", "stops", "incomplete")
WRITER_ZERO = ("errors", "invalid", "seq_gaps", "disconnects")
#: Durable Streams readers (streams scenario): a connection lost or a
#: response ended is no failure over HTTP (the reader goes on from its
#: offset, as the protocol means it to); a value lost or repeated is.
STREAMS_ZERO = ("repeats", "missing", "incomplete", "invalid", "errors")
#: Draft counters that must stay at zero for every subscriber (stream).
DRAFT_ZERO = ("draft_mismatches", "drafts_unclosed", "drafts_dropped")


def judge(run: dict[str, Any], scenario: str) -> list[str]:
    """Why this run shows a misbehaving server (empty when it behaved)."""
    failures: list[str] = []
    if scenario == "idle":
        return failures
    groups: dict[str, dict[str, Any]] = run.get("groups", {})
    for name, group in groups.items():
        zero: tuple[str, ...] = STOPPED_ZERO if name == "stopped" else ON_TIME_ZERO
        if scenario == "streams":
            zero = STREAMS_ZERO
        for counter in zero:
            if group.get(counter, 0):
                failures.append(f"{name} subscribers: {counter} = {group[counter]}")
        # Streams: a value whose ack came late may reach the readers all the
        # same; what was owed and missed is ``missing`` (judged above).
        if group.get("delivered", 0) != group.get("expected", 0) and not (
            scenario == "streams" and group.get("delivered", 0) > group.get("expected", 0)
        ):
            failures.append(
                f"{name} subscribers applied {group.get('delivered', 0)} events, "
                f"expected {group.get('expected', 0)}"
            )
    on_time = groups.get("on-time")
    writers = run.get("writers", {})
    if (
        on_time is not None
        and on_time.get("subscribers")
        and writers.get("acks", 0)
        and not on_time.get("expected")
    ):
        failures.append("on-time subscribers were owed no events although appends were acked")
    for counter in WRITER_ZERO:
        if writers.get(counter, 0):
            failures.append(f"writers: {counter} = {writers[counter]}")
    if writers and writers.get("acks") != writers.get("appends"):
        failures.append(
            f"writers got {writers.get('acks')} acks for {writers.get('appends')} appends"
        )
    for sample in writers.get("error_samples", []):
        failures.append(f"writer error: {sample}")
    if scenario == "stream":
        failures += _judge_drafts(run, groups)
    catchup = run.get("catchup")
    if catchup and catchup.get("baselines_on_resume"):
        failures.append(
            f"resume sent {catchup['baselines_on_resume']} baselines instead of increments"
        )
    return failures


def _judge_drafts(run: dict[str, Any], groups: dict[str, dict[str, Any]]) -> list[str]:
    failures: list[str] = []
    drafts = run.get("drafts", {})
    committed = drafts.get("drafts", 0)
    for name, group in groups.items():
        for counter in DRAFT_ZERO:
            if group.get(counter, 0):
                failures.append(f"{name} subscribers: {counter} = {group[counter]}")
        owed = group.get("subscribers", 0) * committed
        if group.get("drafts_final", 0) != owed:
            failures.append(
                f"{name} subscribers closed {group.get('drafts_final', 0)} drafts with their "
                f"message, expected {owed}"
            )
    if drafts.get("tokens_delivered") != drafts.get("tokens_expected"):
        failures.append(
            f"subscribers got {drafts.get('tokens_delivered')} tokens, "
            f"expected {drafts.get('tokens_expected')}"
        )
    return failures


def _get(run: dict[str, Any], path: str) -> float | None:
    value: Any = run
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return float(value) if isinstance(value, int | float) else None


#: (label, path in a run, unit, higher is better)
METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("delivered events/s", "delivered_per_s", "/s", True),
    ("offered events/s", "offered_per_s", "/s", True),
    ("acks/s", "writers.acks_per_s", "/s", True),
    ("latency p50", "latency_ms.p50", "ms", False),
    ("latency p90", "latency_ms.p90", "ms", False),
    ("latency p99", "latency_ms.p99", "ms", False),
    ("latency p99.9", "latency_ms.p99_9", "ms", False),
    ("latency max", "latency_ms.max", "ms", False),
    ("stopped share p99", "groups.stopped.latency_ms.p99", "ms", False),
    ("ack latency p99", "writers.ack_latency_ms.p99", "ms", False),
    ("server CPU per delivered event", "server_cpu.cpu_us_per_delivered", "µs", False),
    ("values per answer (long-poll) or event (SSE)", "streams.values_per_answer", "", True),
    ("server CPU share", "server_cpu.cpu_share", "cores", False),
    ("server's CPUs busy (any process)", "server_cpu.its_cpus_busy", "cores", False),
    ("server RSS peak", "server_cpu.rss_mb_peak", "MB", False),
    ("generator CPU", "generator_cpu.cores", "cores", False),
    ("delivered tokens/s", "drafts.tokens_per_s", "/s", True),
    ("token latency p50", "drafts.token_latency_ms.p50", "ms", False),
    ("token latency p99", "drafts.token_latency_ms.p99", "ms", False),
    ("commit (increment) latency p99", "drafts.commit_latency_ms.p99", "ms", False),
    ("token p99 / commit p99", "drafts.token_p99_over_commit_p99", "", False),
    ("server CPU per delivered token", "drafts.cpu_us_per_token", "µs", False),
    ("paused: frames of the backlog", "drafts.paused.backlog_frames", "", False),
    ("paused: text frames of them", "drafts.paused.backlog_text_frames", "", False),
    ("resume (catch up) p50", "catchup.resume_ms.p50", "ms", False),
    ("frames per resume", "catchup.frames_per_resume", "", False),
    ("bytes per resume", "catchup.bytes_per_resume", "B", False),
    ("baseline of N messages", "catchup.baseline.median_ms", "ms", False),
    ("RSS per idle connection", "idle.kb_per_connection", "KB", False),
    ("RSS per idle subscribed connection", "idle.kb_per_subscribed_connection", "KB", False),
    ("time to connect every connection", "idle.connect_s", "s", False),
    ("time to subscribe every connection", "idle.subscribe_s", "s", False),
    ("server CPU per subscribe", "idle.server_cpu_us_per_subscribe", "µs", False),
    ("generator CPU while subscribing", "idle.generator_cores_subscribing", "cores", False),
    ("server CPU while holding (idle --duration)", "idle.server_cores_holding", "cores", False),
    ("server CPU per connection held", "idle.server_cpu_us_per_connection_s", "µs/s", False),
)


def ratios(target: dict[str, Any], baseline: dict[str, Any]) -> dict[str, float]:
    """target / baseline for every metric both runs have."""
    out: dict[str, float] = {}
    for _label, path, _unit, _higher in METRICS:
        a, b = _get(target, path), _get(baseline, path)
        if a is not None and b:
            out[path] = round(a / b, 3)
    return out


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:,.3g}" if value < 1 else f"{value:,.2f}"


def markdown(result: dict[str, Any]) -> str:
    """A Markdown summary of a result (one or two runs, failures, ratios)."""
    runs: list[dict[str, Any]] = result["runs"]
    w = result["workload"]
    mode = "closed loop" if w["rate"] is None else f"{w['rate']:g} appends/s per writer"
    span = (
        f"{w['duration']:g} s" if w.get("duration") else f"{w.get('count') or w['behind']} appends"
    )
    shape = (
        f"{w['subscribers']} subscribers over {w['procs']} process(es), {w['writers']} writer(s), "
        f"{w['transcripts']} transcript(s), {mode}, {span}, {w['size']} B messages."
    )
    if result["scenario"] == "idle":
        shape = f"{w['subscribers']} idle connections over {w['procs']} process(es)."
        if w.get("duration"):
            shape = shape[:-1] + f", held subscribed for {w['duration']:g} s."
    elif result["scenario"] == "stream":
        span = f"{w['duration']:g} s" if w.get("duration") else f"{w.get('count')} drafts"
        shape = (
            f"{w['subscribers']} subscribers over {w['procs']} process(es), {w['writers']} "
            f"writer(s) streaming drafts of {w['tokens']} tokens at {w['rate']:g} tokens/s "
            f"each, {w['transcripts']} transcript(s), {span}"
            + (
                f"; one subscriber stops reading for {w['pause_one']:g} s."
                if w.get("pause_one")
                else "."
            )
        )
    elif result["scenario"] == "streams":
        span = f"{w['duration']:g} s" if w.get("duration") else f"{w.get('count')} values"
        shape = (
            f"{w['subscribers']} {w['live']} readers of one Durable Stream (JSON mode) over "
            f"{w['procs']} process(es), {w['writers']} writer(s) appending {w['rate']:g} "
            f"values/s each, {span}, {w['size']} B values."
        )
    elif result["scenario"] == "aichat":
        span = f"{w['duration']:g} s" if w.get("duration") else f"{w.get('count')} chunks"
        shape = (
            f"One reply written at {w['rate']:g} chunks/s for {span}, read by {w['subscribers']} "
            f"readers over {w['procs']} process(es): `ai chat` through /v1/ai/chat (the "
            "WebSocketChatTransport protocol, each reader resumes the chat), `draft frames` as "
            "/v1/ws subscribers (draft frames with chunks); the same run, one leg after the other."
        )
    elif result["scenario"] == "catchup":
        shape = (
            f"{w['subscribers']} subscribers resume {w['behind']} events behind; fresh baselines "
            f"of a {w['baseline_messages']}-message transcript; {w['size']} B messages."
        )
    if w.get("ceiling"):
        reads = (
            "subscribers count frames only"
            if w.get("live", "ws") == "ws"
            else f"{w['live']} readers of /v1/stream/transcripts/{{id}} count revisions"
        )
        shape += f" Ceiling mode: precomputed appends, {reads}" + (
            f"; about {w['latency_sample']} of them time every delivery."
            if w.get("latency_sample")
            else "."
        )
    lines = [f"## tsync bench {result['scenario']}", "", shape, ""]
    header = "| metric | " + " | ".join(r["label"] for r in runs)
    if len(runs) == 2:
        header += " | ratio"
    lines += [header + " |", "|---" * (len(runs) + 1 + (len(runs) == 2)) + "|"]
    for label, path, unit, _higher in METRICS:
        values = [_get(r, path) for r in runs]
        if all(v is None for v in values):
            continue
        row = f"| {label}{f' ({unit})' if unit else ''} | " + " | ".join(_fmt(v) for v in values)
        if len(runs) == 2:
            ratio = result.get("ratios", {}).get(path)
            row += f" | {ratio:.2f}x" if ratio is not None else " | -"
        lines.append(row + " |")
    lines.append("")
    for run in runs:
        problems = run.get("failures", [])
        verdict = "OK" if not problems else "FAILED: " + "; ".join(problems)
        lines.append(f"- {run['label']} ({run['url']}): {verdict}")
        generator = run.get("generator_cpu")
        if generator:
            lines.append(f"  - {generator_note(generator)}")
        if run.get("bound"):
            others = run.get("machine_cpu", {}).get("other_cores")
            lines.append(
                f"  - bound: **{run['bound']}**"
                + (f" (other processes: {others:.2f} cores)" if others is not None else "")
            )
    return "\n".join(lines) + "\n"


#: A generator busier than this share of its CPUs may have limited the run.
SATURATED_SHARE = 0.8
#: A server at this share of its cores (or more) is what limited the run.
SERVER_BOUND_SHARE = 0.9


def bound(
    server_cores_used: float,
    server_cores: float,
    generator_share: float,
    kept_up: bool | None = None,
    server_cpus_busy: float | None = None,
) -> str:
    """Which side limited a run: ``server-bound`` when the server used at
    least 90% of its cores, else ``generator-bound`` when the generator used
    at least 80% of its CPUs, else ``offered-load`` when the deliveries kept
    up with the rate asked for (or the run was closed loop, ``kept_up``
    None: the round trip set the pace), else ``contended``: the run fell
    behind with neither side full, so other processes held the CPUs.
    ``server-cpus-full``: the server's own CPUs (``server_cpus_busy``, the
    busy share of the CPUs it is pinned to) were full but other processes
    had part of them: the server was the bottleneck on what it was left."""
    if server_cores_used >= SERVER_BOUND_SHARE * server_cores:
        return "server-bound"
    if generator_share >= SATURATED_SHARE:
        return "generator-bound"
    if server_cpus_busy is not None and server_cpus_busy >= SERVER_BOUND_SHARE:
        return "server-cpus-full"
    if kept_up is False:
        return "contended"
    return "offered-load"


def generator_note(generator: dict[str, Any]) -> str:
    """One line on the generator's own CPU: saturated or not."""
    pinned = generator.get("pinned")
    where = f"CPUs {','.join(map(str, pinned))}" if pinned else f"{generator['cpus']} CPUs"
    text = (
        f"generator ({generator['check']} checks, {generator['loop']}): "
        f"{generator['cores']:.2f} cores of {where} ({generator['share']:.0%})"
    )
    if generator["share"] >= SATURATED_SHARE:
        text += ": SATURATED, the run measured the generator as much as the server"
    return text
