"""Runs the shared frame-sequence cases in ``tests/cases/consumer/*.json``
against ``protocol.consumer.Consumer``; ``tests/js/consumer.test.mjs`` runs
the same files against the port in ``client_js/consumer.js``, so the two
cannot drift apart. One file is one case::

    {"name": str, "description": str,
     "keepMessages": bool?,                      # Consumer(keep_messages=...), default true
     "steps": [step, ...],
     "counters": {"seq": {...}?, "<transcriptId>": {camelCase counter: int}?}?}

A step is one input, then exactly the ops and updates it must cause:

- ``{"subscribe": id}`` (with ``"window": {...}`` beside it: a windowed
  subscription; with ``"presence": true``: following presence),
  ``{"unsubscribe": id}``, ``{"statePresence": op}`` (``state_presence``: a
  ``presence`` op without ``op``)
- ``{"connection": "made" | "lost"}``
- ``{"receive": [frame, ...]}``: one WebSocket text message; objects are
  JSON-encoded, strings go in verbatim (to send what is not JSON); frames
  are joined with ``\\n``

``"ops"``: the ops ``ops_to_send()`` gives after the step (JSON objects).
``"updates"``: what ``updates_received()`` gives, each as::

    {"kind": "applied", "transcriptId", "revision"}
    {"kind": "replaced", "transcriptId", "revision", "previousRevision", "epochChanged"}
    {"kind": "resubscribed", "transcriptId", "reason", "fromRevision"}
    {"kind": "stopped", "transcriptId", "code"}
    {"kind": "answered", "type", "ref"}
    {"kind": "error", "code"}
    {"kind": "invalid"}
    {"kind": "frames-lost", "missing"}
    {"kind": "synced", "barrier"}
    {"kind": "draft", "transcriptId", "draftId", "n", "delta", "text"}
    {"kind": "draft-closed", "transcriptId", "draftId", "state", "revision", "text"}
    {"kind": "presence", "transcriptId", "members": [{id, who, kind, state}] | null, "counts"}

Optional checks after the step: ``"copies"`` maps transcript ids to their
copy, ``null`` for none, else ``{revision, epoch, start, length,
activeStart, segments, messages (null when not kept), resyncing}`` and, when
the copy has Views or View changes, ``views`` (by name) and ``viewChanges``,
and, when the expectation names it, the copy's ``digest``;
``"followed"`` is the sorted list of transcript ids followed; ``"drafts"``
maps transcript ids to their open drafts by id, each ``{role, n, text,
waiting, stale, finalRevision}`` (``null`` when not followed).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from protocol.consumer import (
    Answered,
    Applied,
    Consumer,
    DraftClosed,
    DraftUpdated,
    ErrorReceived,
    FramesLost,
    InvalidFrameReceived,
    PresenceChanged,
    Replaced,
    Resubscribed,
    Stopped,
    Synced,
    Update,
)
from protocol.views import Window
from protocol.wire import Presence, encode_json

CASES = Path(__file__).resolve().parents[1] / "cases" / "consumer"
FILES = sorted(CASES.glob("*.json"))
INPUTS = {"subscribe", "unsubscribe", "connection", "receive", "statePresence"}


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def project(update: Update) -> dict[str, Any]:
    """An update in the case files' words (the same projection as the JS runner's)."""
    match update:
        case Applied():
            return {
                "kind": "applied",
                "transcriptId": update.transcript_id,
                "revision": update.event.revision,
            }
        case Replaced():
            return {
                "kind": "replaced",
                "transcriptId": update.transcript_id,
                "revision": update.snapshot.revision,
                "previousRevision": update.previous_revision,
                "epochChanged": update.epoch_changed,
            }
        case Resubscribed():
            return {
                "kind": "resubscribed",
                "transcriptId": update.transcript_id,
                "reason": update.reason,
                "fromRevision": update.from_revision,
            }
        case Stopped():
            return {"kind": "stopped", "transcriptId": update.transcript_id, "code": update.code}
        case Answered():
            return {
                "kind": "answered",
                "type": type(update.frame).__name__,
                "ref": update.frame.ref,
            }
        case ErrorReceived():
            return {"kind": "error", "code": update.frame.code}
        case InvalidFrameReceived():
            return {"kind": "invalid"}
        case FramesLost():
            return {"kind": "frames-lost", "missing": update.missing}
        case Synced():
            return {"kind": "synced", "barrier": update.barrier}
        case DraftUpdated():
            return {
                "kind": "draft",
                "transcriptId": update.transcript_id,
                "draftId": update.draft_id,
                "n": update.n,
                "delta": update.delta,
                "text": update.text,
            }
        case DraftClosed():
            return {
                "kind": "draft-closed",
                "transcriptId": update.transcript_id,
                "draftId": update.draft_id,
                "state": update.state,
                "revision": update.revision,
                "text": update.text,
            }
        case PresenceChanged():
            listed = update.presence.listed()
            return {
                "kind": "presence",
                "transcriptId": update.transcript_id,
                "members": None
                if update.presence.members is None
                else [{"id": m.id, "who": m.who, "kind": m.kind, "state": m.state} for m in listed],
                "counts": msgspec.to_builtins(update.presence.counts),
            }
    raise AssertionError(f"unknown update {update!r}")


_TYPES = {"Ack": "ack", "Pong": "pong", "ErrorFrame": "error"}


def _copy(
    consumer: Consumer, transcript_id: str, expected: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    subscription = consumer.subscriptions.get(transcript_id)
    if subscription is None or subscription.copy is None:
        return None
    copy = subscription.copy
    found = {
        "revision": copy.revision,
        "epoch": copy.epoch,
        "start": copy.start,
        "length": copy.length,
        "activeStart": copy.active_start,
        "segments": msgspec.to_builtins(list(copy.segments())),
        "messages": None if copy.messages is None else msgspec.to_builtins(list(copy.messages)),
        "resyncing": subscription.continuity.resyncing,
    }
    if copy.views or copy.view_changes:
        views = [{"name": v.name, "start": v.start, "end": v.end} for v in copy.sorted_views()]
        found.update(views=views, viewChanges=copy.view_changes)
    if expected is not None and "digest" in expected:
        found["digest"] = copy.digest
    return found


def _drafts(consumer: Consumer, transcript_id: str) -> dict[str, Any] | None:
    subscription = consumer.subscriptions.get(transcript_id)
    if subscription is None:
        return None
    return {
        draft_id: {
            "role": d.role,
            "n": d.n,
            "text": d.text,
            "waiting": d.waiting,
            "stale": d.stale,
            "finalRevision": d.final_revision,
        }
        for draft_id, d in subscription.drafts.items()
    }


def _run(consumer: Consumer, step: dict[str, Any]) -> None:
    (kind,) = INPUTS & step.keys()
    value = step[kind]
    if kind == "subscribe":
        window = step.get("window")
        consumer.subscribe(
            value,
            window=None if window is None else msgspec.convert(window, Window),
            presence=step.get("presence", False),
        )
    elif kind == "statePresence":
        consumer.state_presence(msgspec.convert({**value, "op": "presence"}, Presence))
    elif kind == "unsubscribe":
        consumer.unsubscribe(value)
    elif kind == "connection":
        assert value in ("made", "lost"), value
        if value == "made":
            consumer.connection_made()
        else:
            consumer.connection_lost()
    else:
        frames = [f if isinstance(f, str) else json.dumps(f) for f in value]
        consumer.receive_data("\n".join(frames))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_case(path: Path) -> None:
    case = json.loads(path.read_text(encoding="utf-8"))
    assert case["name"] == path.stem
    consumer = Consumer(keep_messages=case.get("keepMessages", True))
    for number, step in enumerate(case["steps"]):
        where = f"{path.name} step {number}"
        _run(consumer, step)
        ops = [json.loads(encode_json(op)) for op in consumer.ops_to_send()]
        assert ops == step["ops"], where
        updates = [project(u) for u in consumer.updates_received()]
        for update in updates:
            if update["kind"] == "answered":
                update["type"] = _TYPES[update["type"]]
        assert updates == step["updates"], where
        for transcript_id, expected in step.get("copies", {}).items():
            assert _copy(consumer, transcript_id, expected) == expected, (
                f"{where}: copy of {transcript_id}"
            )
        for transcript_id, expected in step.get("drafts", {}).items():
            assert _drafts(consumer, transcript_id) == expected, (
                f"{where}: drafts of {transcript_id}"
            )
        if "followed" in step:
            assert sorted(consumer.subscriptions) == step["followed"], where
    counters = case.get("counters", {})
    if "seq" in counters:
        assert consumer.seq.counters.as_dict() == counters["seq"], path.name
    for transcript_id, expected in counters.items():
        if transcript_id == "seq":
            continue
        subscription = consumer.subscriptions[transcript_id]
        got = {_camel(k): v for k, v in subscription.continuity.counters.as_dict().items()}
        assert not expected.keys() - got.keys(), f"{path.name}: unknown counters"
        assert {k: got[k] for k in expected} == expected, f"{path.name}: {transcript_id}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_step_has_one_input_and_its_outputs(path: Path) -> None:
    case = json.loads(path.read_text(encoding="utf-8"))
    assert set(case) <= {"name", "description", "keepMessages", "steps", "counters"}
    for step in case["steps"]:
        assert len(INPUTS & step.keys()) == 1, step
        assert {"ops", "updates"} <= step.keys(), step
        assert set(step) - INPUTS <= {
            "ops",
            "updates",
            "copies",
            "followed",
            "window",
            "drafts",
            "presence",
        }, step
        assert "presence" not in step or "subscribe" in step, step
        assert "window" not in step or "subscribe" in step, step


def test_the_cases_cover_the_consumer_rules() -> None:
    names = {p.stem for p in FILES}
    assert {
        "subscribe-and-follow",
        "repeat-and-gap",
        "resume-answered-with-nothing",
        "seq-gap",
        "lagged",
        "epoch-change-via-increment",
        "epoch-change-via-baseline",
        "stale-baseline",
        "event-that-does-not-fit",
        "stopped",
        "answers",
        "invalid-frames",
        "window-baseline",
        "keep-no-messages",
        "unsubscribe",
        "disconnected",
        "window-tail-and-resume",
        "window-baseline-of-another-epoch",
        "view-events",
        "invalid-view-stops",
        "draft-stream",
        "draft-gap-waits-for-text",
        "draft-commit",
        "draft-commit-before-its-message",
        "draft-cancel-and-expire",
        "draft-resubscribe",
        "draft-invalid-frames",
        "digest-mismatch",
        "digest-window",
    } <= names
