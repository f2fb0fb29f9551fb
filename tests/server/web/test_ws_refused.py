"""Refused ops get the same answer on both subprotocols (issue 23, item 3).

``tests/cases/ops/refused.json`` lists ops the server cannot read and the
error frame each gets; every case is sent through a real server as JSON on
``tsync.v1.json``, as MessagePack on ``tsync.v1.msgpack``, and as JSON text on
``tsync.v1.msgpack`` (a frame is read by its form, whatever the subprotocol),
and must get the same code, message and ``ref``; the connection stays usable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from protocol.wire import ErrorFrame, Pong
from tests.support.servers import running_server
from tests.support.wsclient import RawClient

CASE_FILE = Path(__file__).resolve().parents[2] / "cases" / "ops" / "refused.json"
CASES: dict[str, Any] = json.loads(CASE_FILE.read_text())
#: (subprotocol, how the op is written)
WAYS = {
    "json": (False, "json"),
    "msgpack": (True, "msgpack"),
    "json-text-on-msgpack": (True, "json"),
}


def _frame(op: Any, form: str) -> str | bytes:
    return msgspec.json.encode(op).decode() if form == "json" else msgspec.msgpack.encode(op)


async def _answer(binary: bool, frame: str | bytes) -> ErrorFrame:
    async with (
        running_server() as srv,
        await RawClient.connect(srv.ws_url, binary=binary) as client,
    ):
        await client.ws.send(frame)
        error = await client.expect(ErrorFrame)
        await client.send(op="ping", ref="still-there")
        assert (await client.expect(Pong)).ref == "still-there"
        return error


@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("case", CASES["cases"], ids=[c["name"] for c in CASES["cases"]])
async def test_a_refused_op_gets_the_same_answer_on_both_subprotocols(
    case: dict[str, Any], way: str
) -> None:
    binary, form = WAYS[way]
    if form not in case.get("formats", ["json", "msgpack"]):
        pytest.skip(f"{form} cannot write this op")
    error = await _answer(binary, _frame(case["op"], form))
    assert (error.code, error.message, error.ref) == (case["code"], case["message"], case["ref"])
    assert error.transcript_id == case.get("transcriptId")


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
@pytest.mark.parametrize("case", CASES["malformed"], ids=[c["name"] for c in CASES["malformed"]])
async def test_a_malformed_frame_is_named_by_its_own_form(
    case: dict[str, Any], binary: bool
) -> None:
    frame = case["json"] if "json" in case else bytes.fromhex(case["msgpack_hex"])
    error = await _answer(binary, frame)
    assert error.code == case["code"]
    assert error.message.startswith(case["message_starts"]), error.message
    assert error.ref is None
