"""The shared case files of replies with parts (``tests/cases/ui_stream/``):
the Python fold (``protocol.ui_stream``) and the Python consumer's
``DraftCopy`` give what the files say, chunk by chunk and frame by frame.
The JavaScript ports are held to the same files (tests/js/ui_stream.test.mjs)
and the AI SDK itself to the fold's (tests/server/web/test_ui_stream_sdk.py),
so the three agree.

Regenerate with ``TSYNC_UPDATE_CASES=1 ./scripts/test tests/protocol/test_ui_stream_cases.py``
(the drawn streams are drawn anew: check them against the SDK after).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from protocol.drafts import DraftCopy
from protocol.ui_stream import UIMessageState, UIStreamError
from protocol.wire import DraftFrame

CASES = Path(__file__).resolve().parents[1] / "cases" / "ui_stream"
UPDATE = os.environ.get("TSYNC_UPDATE_CASES") == "1"

#: A reply of every kind of part, as ``streamText(...).toUIMessageStream()``
#: writes it (tests/server/live/test_draft_parts.py's REPLY), in batches.
REPLY: list[list[dict[str, Any]]] = [
    [{"type": "start", "messageId": "reply-1", "messageMetadata": {"model": "m"}}],
    [{"type": "start-step"}, {"type": "reasoning-start", "id": "r"}],
    [{"type": "reasoning-delta", "id": "r", "delta": "The user wants "}],
    [{"type": "reasoning-delta", "id": "r", "delta": "the weather."}],
    [{"type": "reasoning-end", "id": "r"}],
    [{"type": "tool-input-start", "toolCallId": "c1", "toolName": "weather"}],
    [{"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"city": "Pa'}],
    [{"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": 'ris", "days": [1, tr'}],
    [{"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "ue]}"}],
    [
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "weather",
            "input": {"city": "Paris", "days": [1, True]},
        }
    ],
    [{"type": "tool-output-available", "toolCallId": "c1", "output": {"celsius": 18}}],
    [{"type": "finish-step"}, {"type": "start-step"}, {"type": "text-start", "id": "t"}],
    [{"type": "text-delta", "id": "t", "delta": "It is 18 "}],
    [{"type": "text-delta", "id": "t", "delta": "°C in Paris."}],
    [{"type": "source-url", "sourceId": "s", "url": "https://example.com/w"}],
    [{"type": "data-weather", "id": "d", "data": {"status": "loading"}}],
    [{"type": "data-weather", "id": "d", "data": {"status": "done"}}],
    [{"type": "text-end", "id": "t"}, {"type": "finish-step"}],
    [{"type": "message-metadata", "messageMetadata": {"usage": {"tokens": 9}}}],
    [{"type": "finish", "finishReason": "stop", "messageMetadata": {"usage": {"ms": 5}}}],
]

#: Streams written by hand: each a chunk kind the fold treats with care.
WRITTEN: dict[str, list[dict[str, Any]]] = {
    "reply": [c for batch in REPLY for c in batch],
    "refused-delta-for-a-part-never-started": [
        {"type": "text-start", "id": "a"},
        {"type": "text-delta", "id": "a", "delta": "ok"},
        {"type": "text-delta", "id": "b", "delta": "no"},
    ],
    "refused-output-of-an-unknown-call": [
        {"type": "start-step"},
        {"type": "tool-output-available", "toolCallId": "nope", "output": 1},
    ],
    "approvals-and-errors": [
        {"type": "start", "messageId": "m"},
        {"type": "start-step"},
        {"type": "tool-input-available", "toolCallId": "a", "toolName": "rm", "input": {"p": "/"}},
        {"type": "tool-approval-request", "toolCallId": "a", "approvalId": "ap"},
        {"type": "tool-approval-response", "approvalId": "ap", "approved": False, "reason": "no"},
        {"type": "tool-output-denied", "toolCallId": "a"},
        {"type": "tool-input-start", "toolCallId": "b", "toolName": "x", "dynamic": True},
        {"type": "tool-input-delta", "toolCallId": "b", "inputTextDelta": "[1, -"},
        {"type": "tool-input-error", "toolCallId": "b", "toolName": "x", "errorText": "bad"},
        {"type": "tool-input-start", "toolCallId": "c", "toolName": "t", "inputEncoding": "text"},
        {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": "raw {"},
        {"type": "tool-output-error", "toolCallId": "c", "errorText": "failed"},
        {"type": "file", "url": "data:image/png;base64,AA==", "mediaType": "image/png"},
        {"type": "source-document", "sourceId": "d", "mediaType": "text/plain", "title": "T"},
        {"type": "data-note", "data": [1], "transient": True},
        {"type": "abort"},
    ],
    "a-step-reset-and-a-new-message": [
        {"type": "start", "messageId": "one"},
        {"type": "start-step"},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "gone"},
        {"type": "reset-step"},
        {"type": "start-step"},
        {"type": "reasoning-start", "id": "r"},
        {"type": "reasoning-delta", "id": "r", "delta": "hm", "providerMetadata": {"p": {"k": 1}}},
        {"type": "start", "messageId": "two", "messageMetadata": {"a": {"b": 1}}},
        {"type": "message-metadata", "messageMetadata": {"a": {"c": 2}}},
        {"type": "text-start", "id": "u"},
        {"type": "text-delta", "id": "u", "delta": "fresh"},
        {"type": "text-end", "id": "u"},
    ],
}


def shown_after_each(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What the fold shows after each chunk (the last state it would write:
    ``null`` before the first) and where it refused one (``errorAt``)."""
    state = UIMessageState()
    shown: dict[str, Any] | None = None
    messages: list[dict[str, Any] | None] = []
    for n, chunk in enumerate(chunks):
        try:
            if state.apply(chunk):
                shown = state.message()
        except UIStreamError:
            return {"messages": messages, "errorAt": n}
        messages.append(shown)
    return {"messages": messages, "errorAt": None}


def _drawn(count: int) -> list[list[dict[str, Any]]]:
    from hypothesis import HealthCheck, given, settings

    from tests.server.web.test_ui_stream_sdk import chunk_streams

    streams: list[list[dict[str, Any]]] = []

    @settings(max_examples=count, suppress_health_check=list(HealthCheck), deadline=None)
    @given(chunk_streams())
    def collect(chunks: list[dict[str, Any]]) -> None:
        streams.append(chunks)

    collect()
    return [s for s in streams if s][:count]


def _fold_cases() -> list[dict[str, Any]]:
    cases = [{"name": name, "chunks": chunks} for name, chunks in WRITTEN.items()]
    cases += [{"name": f"drawn-{i}", "chunks": s} for i, s in enumerate(_drawn(40))]
    return [{**case, **shown_after_each(case["chunks"])} for case in cases]


# --- DraftCopy frame sequences -----------------------------------------------------------


def _text(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def _frames(batches: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The frames the server sends for a reply written in these batches
    (one update per batch), each with its delta, the full text and the
    compacted replay as of it."""
    state = UIMessageState("d1")
    frames = []
    for n, batch in enumerate(batches, start=1):
        before = _text(state.message())
        state.apply_all(batch)
        text = _text(state.message())
        frames.append(
            {
                "n": n,
                "chunks": batch,
                "delta": text[len(before) :],
                "text": text,
                "replay": state.chunks(),
            }
        )
    return frames


def _live(frame: dict[str, Any]) -> dict[str, Any]:
    return {"n": frame["n"], "delta": frame["delta"], "chunks": frame["chunks"]}


def _whole(frame: dict[str, Any], *, replay: bool) -> dict[str, Any]:
    out = {"n": frame["n"], "text": frame["text"]}
    if replay:
        out["replay"] = frame["replay"]
    return out


def _draft_sequences() -> dict[str, list[dict[str, Any]]]:
    f = _frames(REPLY)
    bad = {"n": 4, "delta": "", "chunks": [{"type": "text-delta", "id": "nope", "delta": "x"}]}
    return {
        "live-chunks": [_live(x) for x in f],
        "late-joiner-replay-then-chunks": [_whole(f[6], replay=True)] + [_live(x) for x in f[7:12]],
        "older-and-repeated-frames-are-ignored": [
            _live(f[0]),
            _live(f[1]),
            _live(f[1]),
            _whole(f[0], replay=True),
            _live(f[2]),
        ],
        "a-gap-waits-for-text-and-a-text-with-only-its-chunks-leaves-it-behind": [
            _live(f[0]),
            _live(f[1]),
            _live(f[3]),  # update 3 missed: waiting
            {**_whole(f[4], replay=False), "chunks": f[4]["chunks"]},  # update 4's parts: behind
            _live(f[5]),  # still behind: its chunks fold into nothing
            _whole(f[6], replay=True),  # mended
            _live(f[7]),
        ],
        "parts-that-began-in-a-missed-update": [
            {"n": 3, "text": ""},  # a text-only baseline of a parts reply
            _live(f[3]),
            _whole(f[4], replay=True),
        ],
        "chunks-that-do-not-fold-wait-for-a-replay": [
            _live(f[0]),
            _live(f[1]),
            _live(f[2]),
            bad,
            _live(f[4]),
            _whole(f[5], replay=True),
        ],
        "a-draft-of-text-alone": [
            {"n": 1, "delta": "Hel"},
            {"n": 2, "delta": "lo"},
            {"n": 3, "text": "Hello!"},
        ],
    }


def _as_frame(frame: dict[str, Any]) -> DraftFrame:
    full = {"type": "draft", "seq": 1, "transcriptId": "t", "draftId": "d1", "role": "assistant"}
    return msgspec.convert({**full, **frame}, DraftFrame)


def _take_each(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    copy = DraftCopy("d1", "assistant")
    after = []
    for frame in frames:
        changed = copy.take(_as_frame(frame))
        after.append(
            {
                "changed": changed,
                "n": copy.n,
                "text": copy.text,
                "waiting": copy.waiting,
                "uiBehind": copy.ui_behind,
                "message": copy.message,
            }
        )
    return after


def _draft_cases() -> list[dict[str, Any]]:
    return [
        {"name": name, "frames": frames, "after": _take_each(frames)}
        for name, frames in _draft_sequences().items()
    ]


# --- the files -------------------------------------------------------------------------------

FOLD_FILE = CASES / "fold.json"
DRAFTS_FILE = CASES / "drafts.json"


def _write(path: Path, cases: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cases": cases}, indent=1, ensure_ascii=False) + "\n", "utf-8")


def _read(path: Path) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(path.read_text("utf-8"))["cases"]
    return cases


@pytest.fixture(scope="module", autouse=True)
def _regenerate() -> None:
    if UPDATE:
        _write(FOLD_FILE, _fold_cases())
        _write(DRAFTS_FILE, _draft_cases())


def test_the_fold_gives_what_the_case_files_say() -> None:
    cases = _read(FOLD_FILE)
    assert {c["name"] for c in cases} >= set(WRITTEN)
    assert any(c["errorAt"] is not None for c in cases)
    for case in cases:
        assert shown_after_each(case["chunks"]) == {
            "messages": case["messages"],
            "errorAt": case["errorAt"],
        }, case["name"]


def test_the_written_streams_are_in_the_case_file() -> None:
    """The hand-written streams in the file are the ones above (regenerate
    after changing them)."""
    chunks = {c["name"]: c["chunks"] for c in _read(FOLD_FILE)}
    for name, stream in WRITTEN.items():
        assert chunks[name] == stream, name


def test_draft_copy_follows_the_frames_as_the_case_file_says() -> None:
    cases = _read(DRAFTS_FILE)
    assert {c["name"] for c in cases} == set(_draft_sequences())
    for case in cases:
        assert _take_each(case["frames"]) == case["after"], case["name"]
    behind = [a["uiBehind"] for c in cases for a in c["after"]]
    assert any(behind) and not all(behind)
