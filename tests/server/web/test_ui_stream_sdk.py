"""protocol.ui_stream against the AI SDK itself: the same chunks, folded by
our port and by ``ai``'s ``readUIMessageStream`` (Node, tests/ai_sdk), give
the same message after every chunk, and a chunk the SDK refuses is refused.

The sequences are drawn by hypothesis as an agent's stream would run (parts
started before their deltas, tool calls before their outputs), with every
chunk type of ``ai`` 7 a reply can carry and, now and then, one out of place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.ui_stream import UIMessageState, UIStreamError, fix_json, parse_partial_json
from tests.support.ai_sdk import run_ai_sdk

CASES = Path(__file__).resolve().parents[2] / "cases"

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
_META = st.dictionaries(st.sampled_from(["a", "b", "model"]), _JSON, max_size=2)


@st.composite
def chunk_streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    texts: list[str] = []
    reasonings: list[str] = []
    tools: dict[str, str] = {}  # toolCallId -> the input text left to stream
    calls: list[str] = []
    approvals: list[str] = []
    if draw(st.booleans()):
        start: dict[str, Any] = {"type": "start", "messageId": draw(st.sampled_from(["m1", "m2"]))}
        if draw(st.booleans()):
            start["messageMetadata"] = draw(_META)
        chunks.append(start)
    for counter in range(1, draw(st.integers(1, 18)) + 1):
        kind = draw(
            st.sampled_from(
                [
                    "text-start", "text-delta", "text-end", "reasoning-start", "reasoning-delta",
                    "reasoning-end", "tool-input-start", "tool-input-delta", "tool-input-available",
                    "tool-input-error", "tool-output-available", "tool-output-error",
                    "tool-output-denied", "tool-approval-request", "tool-approval-response",
                    "file", "source-url", "source-document", "data", "start-step", "finish-step",
                    "reset-step", "message-metadata", "finish", "start", "abort", "wrong",
                ]
            )
        )  # fmt: skip
        if kind == "text-start":
            texts.append(f"t{counter}")
            chunks.append({"type": "text-start", "id": texts[-1]})
        elif kind == "text-delta" and texts:
            chunks.append(
                {"type": "text-delta", "id": draw(st.sampled_from(texts)), "delta": draw(_TEXT)}
            )
        elif kind == "text-end" and texts:
            end: dict[str, Any] = {
                "type": "text-end",
                "id": texts.pop(draw(st.integers(0, len(texts) - 1))),
            }
            if draw(st.booleans()):
                end["providerMetadata"] = {"p": {"x": 1}}
            chunks.append(end)
        elif kind == "reasoning-start":
            reasonings.append(f"r{counter}")
            chunks.append({"type": "reasoning-start", "id": reasonings[-1]})
        elif kind == "reasoning-delta" and reasonings:
            chunks.append(
                {
                    "type": "reasoning-delta",
                    "id": draw(st.sampled_from(reasonings)),
                    "delta": draw(_TEXT),
                }
            )
        elif kind == "reasoning-end" and reasonings:
            chunks.append({"type": "reasoning-end", "id": reasonings.pop()})
        elif kind == "tool-input-start":
            call = f"c{counter}"
            tools[call] = json.dumps(draw(_JSON))
            calls.append(call)
            start_tool: dict[str, Any] = {
                "type": "tool-input-start",
                "toolCallId": call,
                "toolName": draw(st.sampled_from(["weather", "search", "x-y"])),
            }
            if draw(st.integers(0, 3)) == 0:
                start_tool["dynamic"] = True
            if draw(st.integers(0, 4)) == 0:
                start_tool["inputEncoding"] = "text"
            if draw(st.booleans()):
                start_tool["title"] = "Title"
            chunks.append(start_tool)
        elif kind == "tool-input-delta" and tools:
            call = draw(st.sampled_from(sorted(tools)))
            rest = tools[call]
            cut = draw(st.integers(0, len(rest)))
            tools[call] = rest[cut:]
            chunks.append(
                {"type": "tool-input-delta", "toolCallId": call, "inputTextDelta": rest[:cut]}
            )
        elif kind in ("tool-input-available", "tool-input-error") and calls:
            call = draw(st.sampled_from(calls))
            tools.pop(call, None)
            chunk: dict[str, Any] = {
                "type": kind,
                "toolCallId": call,
                "toolName": draw(st.sampled_from(["weather", "search"])),
                "input": draw(_JSON),
            }
            if kind == "tool-input-error":
                chunk["errorText"] = "bad input"
            if draw(st.integers(0, 3)) == 0:
                chunk["dynamic"] = True
            if draw(st.booleans()):
                chunk["providerMetadata"] = {"p": {"n": 2}}
            chunks.append(chunk)
        elif kind == "tool-output-available" and calls:
            out: dict[str, Any] = {
                "type": kind,
                "toolCallId": draw(st.sampled_from(calls)),
                "output": draw(_JSON),
            }
            if draw(st.integers(0, 3)) == 0:
                out["preliminary"] = True
            chunks.append(out)
        elif kind == "tool-output-error" and calls:
            chunks.append(
                {"type": kind, "toolCallId": draw(st.sampled_from(calls)), "errorText": "boom"}
            )
        elif kind == "tool-output-denied" and calls:
            chunks.append({"type": kind, "toolCallId": draw(st.sampled_from(calls))})
        elif kind == "tool-approval-request" and calls:
            approvals.append(f"a{counter}")
            request: dict[str, Any] = {
                "type": kind,
                "approvalId": approvals[-1],
                "toolCallId": draw(st.sampled_from(calls)),
            }
            if draw(st.booleans()):
                request["reason"] = "needs a human"
            chunks.append(request)
        elif kind == "tool-approval-response" and approvals:
            chunks.append(
                {
                    "type": kind,
                    "approvalId": draw(st.sampled_from(approvals)),
                    "approved": draw(st.booleans()),
                }
            )
        elif kind == "file":
            chunks.append(
                {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AA=="}
            )
        elif kind == "source-url":
            chunks.append({"type": kind, "sourceId": f"s{counter}", "url": "https://example.com/"})
        elif kind == "source-document":
            chunks.append(
                {
                    "type": kind,
                    "sourceId": f"s{counter}",
                    "mediaType": "application/pdf",
                    "title": "T",
                }
            )
        elif kind == "data":
            data: dict[str, Any] = {
                "type": draw(st.sampled_from(["data-a", "data-b"])),
                "data": draw(_JSON),
            }
            if draw(st.booleans()):
                data["id"] = draw(st.sampled_from(["d1", "d2"]))
            if draw(st.integers(0, 4)) == 0:
                data["transient"] = True
            chunks.append(data)
        elif kind in ("start-step", "finish-step", "abort"):
            chunks.append({"type": kind})
        elif kind == "reset-step":
            chunks.append({"type": kind})
            texts.clear()
            reasonings.clear()
            tools.clear()
        elif kind == "message-metadata":
            chunks.append({"type": kind, "messageMetadata": draw(_META)})
        elif kind == "finish":
            finish: dict[str, Any] = {"type": "finish", "finishReason": "stop"}
            if draw(st.booleans()):
                finish["messageMetadata"] = draw(_META)
            chunks.append(finish)
        elif kind == "start":
            chunks.append({"type": "start", "messageId": draw(st.sampled_from(["m1", "m2"]))})
            texts.clear()
            reasonings.clear()
            tools.clear()
            calls.clear()
            approvals.clear()
        elif kind == "wrong":
            chunks.append(
                draw(
                    st.sampled_from(
                        [
                            {"type": "text-delta", "id": "never-started", "delta": "x"},
                            {"type": "reasoning-end", "id": "never-started"},
                            {
                                "type": "tool-input-delta",
                                "toolCallId": "nope",
                                "inputTextDelta": "1",
                            },
                            {"type": "tool-output-available", "toolCallId": "nope", "output": 1},
                            {
                                "type": "tool-approval-response",
                                "approvalId": "nope",
                                "approved": True,
                            },
                        ]
                    )
                )
            )
    return chunks


def sdk_reads(streams: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """What ``readUIMessageStream`` makes of each stream, after each chunk."""
    answers: list[dict[str, Any]] = run_ai_sdk("read_stream.mjs", streams)
    return answers


def ours(chunks: list[dict[str, Any]]) -> tuple[list[dict[str, Any] | None], int | None]:
    """What our port shows after each chunk (the last state it would write),
    and where it refused one."""
    state = UIMessageState()
    shown: dict[str, Any] | None = None
    prefixes: list[dict[str, Any] | None] = []
    for n, chunk in enumerate(chunks):
        try:
            if state.apply(chunk):
                shown = state.message()
        except UIStreamError:
            return prefixes, n
        prefixes.append(shown)
    return prefixes, None


def test_every_chunk_folds_as_the_sdk_folds_it() -> None:
    streams: list[list[dict[str, Any]]] = []

    @settings(max_examples=150, suppress_health_check=list(HealthCheck), deadline=None)
    @given(chunk_streams())
    def collect(chunks: list[dict[str, Any]]) -> None:
        streams.append(chunks)

    collect()
    answers = sdk_reads(streams)
    refused = 0
    for chunks, answer in zip(streams, answers, strict=True):
        prefixes, error_at = ours(chunks)
        assert error_at == answer["errorAt"], (chunks, answer)
        for n, (mine, theirs) in enumerate(zip(prefixes, answer["prefixes"], strict=True)):
            assert mine == theirs, _difference(chunks[: n + 1], mine, theirs)
        refused += error_at is not None
    assert 0 < refused < len(streams)  # both kinds of stream were drawn


def _difference(chunks: list[dict[str, Any]], mine: Any, theirs: Any) -> str:
    lines = [f"after {json.dumps(chunks)}"]
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in sorted(set(mine) | set(theirs)):
            if key != "parts" and mine.get(key) != theirs.get(key):
                lines.append(f"{key}: ours {mine.get(key)!r}, the SDK's {theirs.get(key)!r}")
        for i, (a, b) in enumerate(zip(mine["parts"], theirs["parts"], strict=False)):
            if a != b:
                lines.append(f"part {i}: ours {json.dumps(a)}\n  the SDK's {json.dumps(b)}")
        if len(mine["parts"]) != len(theirs["parts"]):
            lines.append(f"{len(mine['parts'])} parts, the SDK {len(theirs['parts'])}")
    else:
        lines.append(f"ours {mine!r}, the SDK's {theirs!r}")
    return "\n".join(lines)


@given(st.text(max_size=30))
def test_partial_json_never_raises(text: str) -> None:
    parse_partial_json(text)
    fix_json(text)


def test_partial_json_as_the_sdk_repairs_it() -> None:
    assert parse_partial_json('{"a": [1, tr') == {"a": [1, True]}
    assert parse_partial_json('{"city": "Par') == {"city": "Par"}
    assert parse_partial_json('{"n": -') == {}
    assert parse_partial_json("NaN") is not None  # undefined, not a number
    assert parse_partial_json('"\\u00') == ""


def test_the_compacted_chunks_rebuild_the_message_and_take_the_live_ones() -> None:
    """A late joiner gets ``state.chunks()`` instead of every token: the SDK
    makes the same message of them, and of them followed by the rest of the
    stream (the writer's next chunks name the parts still open)."""
    cases: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []

    @settings(max_examples=120, suppress_health_check=list(HealthCheck), deadline=None)
    @given(chunk_streams(), st.data())
    def collect(chunks: list[dict[str, Any]], data: st.DataObject) -> None:
        _, error_at = ours(chunks)
        valid = chunks if error_at is None else chunks[:error_at]
        cut = data.draw(st.integers(0, len(valid)))
        cases.append((valid[:cut], valid[cut:]))

    collect()
    # The SDK shows a state when a chunk changes it visibly; an empty metadata
    # update at the end makes it show the last one (the same on both sides).
    show = [{"type": "message-metadata", "messageMetadata": {}}]
    streams: list[list[dict[str, Any]]] = []
    for before, after in cases:
        state = UIMessageState()
        state.apply_all(before)
        streams += [before + after + show, state.chunks() + after + show]
    answers = sdk_reads(streams)
    for n in range(len(cases)):
        whole, compacted = answers[2 * n], answers[2 * n + 1]
        assert compacted["errorAt"] is None, json.dumps(
            {"compacted": streams[2 * n + 1], "at": compacted["errorAt"]}
        )
        theirs, mine = whole["prefixes"][-1], compacted["prefixes"][-1]
        assert mine == theirs, _difference(streams[2 * n + 1], mine, theirs)
    assert UIMessageState().chunks() == []


def test_a_long_stream_compacts_to_a_chunk_per_part() -> None:
    state = UIMessageState()
    state.apply({"type": "start", "messageId": "m"})
    state.apply({"type": "text-start", "id": "t"})
    state.apply({"type": "tool-input-start", "toolCallId": "c", "toolName": "w"})
    for n in range(1000):
        state.apply({"type": "text-delta", "id": "t", "delta": "ab"})
        state.apply(
            {
                "type": "tool-input-delta",
                "toolCallId": "c",
                "inputTextDelta": "[1" if n == 0 else ",1",
            }
        )
        state.apply({"type": "data-x", "id": "progress", "data": {"n": n}})
    state.apply({"type": "finish-step"})
    assert state.chunks() == [
        {"type": "start", "messageId": "m"},
        {"type": "text-start", "id": "t"},
        {"type": "tool-input-start", "toolCallId": "c", "toolName": "w"},
        {"type": "text-delta", "id": "t", "delta": "ab" * 1000},
        {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": "[1" + ",1" * 999},
        {"type": "data-x", "id": "progress", "data": {"n": 999}},
    ]
    assert state.message()["parts"][1]["input"] == [1] * 1000


def test_the_shared_case_files_fold_as_the_sdk_folds_them() -> None:
    """tests/cases/ui_stream/fold.json (written by the Python fold, read by
    the JavaScript port's tests too) is what ``ai`` makes of its chunks."""
    cases = json.loads((CASES / "ui_stream" / "fold.json").read_text("utf-8"))["cases"]
    answers = sdk_reads([case["chunks"] for case in cases])
    for case, answer in zip(cases, answers, strict=True):
        assert answer["errorAt"] == case["errorAt"], case["name"]
        assert answer["prefixes"] == case["messages"], case["name"]
