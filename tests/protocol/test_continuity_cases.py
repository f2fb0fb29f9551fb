"""Runs the shared continuity cases in ``tests/cases/continuity/*.json``.

The same files drive the JavaScript client's tests, so they use the wire's
JSON shapes (camelCase). One file is one case::

    {"name": str, "description": str, "transcriptId": str,
     "steps": [step, ...],
     "counters": {camelCase counter: int, ...},      # checked at the end (subset)
     "seqCounters": {"ok", "gaps", "repeats", "missing"}?}

A step is one input and what must follow from it:

- ``{"baseline": snapshot}``             -> ``Continuity.on_baseline``
- ``{"event": event}``                   -> ``Continuity.on_event``
- ``{"error": error frame}``             -> ``Continuity.on_error``
- ``{"connection": "lost" | "new"}``     -> ``on_connection_lost`` / ``on_new_connection``;
  ``"new"`` also resets the connection's ``SeqTracker``
- ``{"seq": n}``                         -> ``SeqTracker.observe(n)``; on ``gap`` also
  ``Continuity.on_seq_gap()``

``"expect"`` holds ``decision`` (``apply``, ``replace``, ``ignore``,
``resubscribe``, ``reject``, ``stop``; absent for a seq step without a
decision), for ``resubscribe`` ``fromRevision`` and ``epoch`` (``null`` = fresh),
and optionally ``reason`` (an ``ignore``'s or ``resubscribe``'s), ``code`` (a
``stop``'s) and ``verdict`` (a seq step's). ``"state"``, when present, is the
machine's ``{revision, epoch, resyncing}`` after the step.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from protocol.continuity import (
    Continuity,
    Decision,
    Ignore,
    Resubscribe,
    SeqTracker,
    SeqVerdict,
    Stop,
)
from protocol.wire import Baseline, ErrorFrame, Increment, accept_transcript_update, encode_json

CASES = Path(__file__).resolve().parents[1] / "cases" / "continuity"
FILES = sorted(CASES.glob("*.json"))
INPUTS = {"baseline", "event", "error", "connection", "seq"}
DECISIONS = {"apply", "replace", "ignore", "resubscribe", "reject", "stop"}


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def _frame(kind: str, body: dict[str, Any]) -> Baseline | Increment | ErrorFrame:
    # Through the real validator, so a case file can't hold a frame the wire would refuse.
    if kind == "baseline":
        data = {"type": "baseline", "seq": 1, "snapshot": body}
    elif kind == "event":
        data = {"type": "increment", "seq": 1, "event": body}
    else:
        data = body
    frame = accept_transcript_update(json.dumps(data))
    assert isinstance(frame, Baseline | Increment | ErrorFrame)
    return frame


def _run_step(
    machine: Continuity, seq: SeqTracker, step: dict[str, Any]
) -> tuple[Decision | None, SeqVerdict | None]:
    (kind,) = INPUTS & step.keys()
    value = step[kind]
    if kind == "seq":
        verdict = seq.observe(value)
        return (machine.on_seq_gap() if verdict is SeqVerdict.GAP else None), verdict
    if kind == "connection":
        assert value in ("lost", "new")
        if value == "lost":
            return machine.on_connection_lost(), None
        seq.reset()
        return machine.on_new_connection(), None
    return machine.on_frame(_frame(kind, value)), None


def _check_decision(decision: Decision | None, expect: dict[str, Any], where: str) -> None:
    kind = expect.get("decision")
    if kind is None:
        assert decision is None, f"{where}: expected no decision, got {decision}"
        return
    assert kind in DECISIONS, f"{where}: unknown decision {kind!r} in the case file"
    assert decision is not None, f"{where}: expected {kind}, got no decision"
    assert decision.kind == kind, f"{where}: expected {kind}, got {decision}"
    if isinstance(decision, Resubscribe):
        assert "fromRevision" in expect, f"{where}: a resubscribe case must say fromRevision"
        assert decision.from_revision == expect["fromRevision"], f"{where}: {decision}"
        assert decision.epoch == expect["epoch"], f"{where}: {decision}"
        op = json.loads(encode_json(decision.op()))
        assert op.get("fromRevision") == expect["fromRevision"], f"{where}: {op}"
    if "reason" in expect:
        assert isinstance(decision, Ignore | Resubscribe)
        assert decision.reason == expect["reason"], f"{where}: {decision}"
    if "code" in expect:
        assert isinstance(decision, Stop)
        assert decision.code == expect["code"], f"{where}: {decision}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_case(path: Path) -> None:
    case = json.loads(path.read_text(encoding="utf-8"))
    assert case["name"] == path.stem
    machine = Continuity(case["transcriptId"])
    seq = SeqTracker()
    for number, step in enumerate(case["steps"]):
        where = f"{path.name} step {number}"
        decision, verdict = _run_step(machine, seq, step)
        expect = step["expect"]
        if "verdict" in expect:
            assert verdict == expect["verdict"], f"{where}: seq verdict {verdict}"
        _check_decision(decision, expect, where)
        if "state" in step:
            state = {
                "revision": machine.revision,
                "epoch": machine.epoch,
                "resyncing": machine.resyncing,
            }
            assert state == step["state"], where
        # The op the machine would send now always matches its state.
        request = machine.resubscribe_request()
        assert request.from_revision == machine.revision
        assert request.epoch == machine.epoch
    counters = {_camel(k): v for k, v in machine.counters.as_dict().items()}
    unknown = case["counters"].keys() - counters.keys()
    assert not unknown, f"{path.name}: unknown counters {unknown}"
    assert {k: counters[k] for k in case["counters"]} == case["counters"]
    if "seqCounters" in case:
        assert seq.counters.as_dict() == case["seqCounters"]


def test_the_cases_cover_what_the_contract_asks_for() -> None:
    names = {p.stem for p in FILES}
    assert {
        "baseline-then-increments",
        "repeat",
        "gap",
        "gap-while-resyncing",
        "epoch-change-via-increment",
        "epoch-change-via-baseline",
        "foreign-id",
        "lagged",
        "connection-lost-and-new",
        "seq-gap-and-repeat",
        "not-found",
    } <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_step_has_one_input_and_an_expectation(path: Path) -> None:
    case = json.loads(path.read_text(encoding="utf-8"))
    assert set(case) <= {"name", "description", "transcriptId", "steps", "counters", "seqCounters"}
    for step in case["steps"]:
        assert len(INPUTS & step.keys()) == 1, step
        assert set(step) - INPUTS <= {"expect", "state"}, step
        assert "expect" in step, step
