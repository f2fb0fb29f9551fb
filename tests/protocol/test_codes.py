"""The error table (``protocol.codes``): complete, consistent, and written out
as ``tests/cases/errors.json`` for the clients that cannot import Python."""

from __future__ import annotations

import json
import os
from pathlib import Path

from protocol import codes, wire
from protocol.errors import InvalidFrame, InvalidId, InvalidMessage, InvalidSegment

CASE_FILE = Path(__file__).resolve().parents[1] / "cases" / "errors.json"


def _rendered() -> str:
    return json.dumps(codes.table(), indent=2) + "\n"


def test_the_case_file_is_the_table() -> None:
    """Regenerate with ``TSYNC_UPDATE_CASES=1 ./scripts/test tests/protocol/test_codes.py``."""
    if os.environ.get("TSYNC_UPDATE_CASES") == "1":
        CASE_FILE.write_text(_rendered(), encoding="utf-8")
    assert CASE_FILE.read_text(encoding="utf-8") == _rendered(), (
        "tests/cases/errors.json is out of date: regenerate it with "
        "TSYNC_UPDATE_CASES=1 ./scripts/test tests/protocol/test_codes.py"
    )


def test_every_code_constant_has_one_row() -> None:
    constants = {
        value
        for name, value in vars(codes).items()
        if name.isupper() and not name.startswith("CLOSE_") and isinstance(value, str)
    }
    assert constants == set(codes.ERRORS)
    closes = {v for n, v in vars(codes).items() if n.startswith("CLOSE_") and isinstance(v, int)}
    assert closes == set(codes.CLOSES)


def test_the_codes_the_contract_names_are_in_the_table() -> None:
    for code in (
        "invalid-frame",
        "invalid-message",
        "not-found",
        "revision-conflict",
        "too-large",
        "lagged",
        "unauthorized",
        "forbidden",
        "rate-limited",
        "internal",
    ):
        assert code in codes.ERRORS
    # wire keeps its names for the code that knows them there.
    assert wire.LAGGED == codes.LAGGED and wire.INVALID_SEGMENT == codes.INVALID_SEGMENT


def test_each_close_code_has_one_meaning_and_errors_point_at_real_ones() -> None:
    reasons = [row.reason for row in codes.CLOSES.values()]
    assert len(reasons) == len(set(reasons))
    for row in codes.ERRORS.values():
        assert 400 <= row.http_status < 600
        if row.close_code is not None:
            assert row.close_code in codes.CLOSES
    # "Unauthorized" and "queue overflow" no longer share 1008: it means a policy refusal only.
    assert codes.close(codes.CLOSE_UNAUTHORIZED).reconnect == "new-token"  # type: ignore[union-attr]
    assert codes.close(codes.CLOSE_OVERFLOW).reconnect == "resume"  # type: ignore[union-attr]
    assert codes.close(1008).reconnect == "no"  # type: ignore[union-attr]
    assert codes.error(codes.FORBIDDEN).close_code == 1008


def test_unknown_codes_read_as_internal() -> None:
    assert codes.error("no-such-code") is codes.ERRORS[codes.INTERNAL]
    assert codes.error(codes.GONE).http_status == 410


def test_protocol_errors_carry_their_code() -> None:
    assert InvalidFrame("x").code == codes.INVALID_FRAME
    assert InvalidMessage("messages[0]", "bad").code == codes.INVALID_MESSAGE
    assert InvalidId("x").code == codes.INVALID_FRAME
    assert InvalidSegment("x").code == codes.INVALID_SEGMENT
    assert isinstance(InvalidSegment("x"), ValueError)


def test_protocol_md_shows_exactly_the_table() -> None:
    """Regenerate with ``TSYNC_UPDATE_DOCS=1 ./scripts/test tests/protocol/test_codes.py``."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
    text = doc.read_text(encoding="utf-8")
    begin = text.index("<!-- error-codes:begin")
    begin = text.index("\n", begin) + 1
    end = text.index("<!-- error-codes:end -->")
    if os.environ.get("TSYNC_UPDATE_DOCS") == "1":
        text = text[:begin] + codes.render_markdown() + text[end:]
        doc.write_text(text, encoding="utf-8")
        end = begin + len(codes.render_markdown())
    assert text[begin:end] == codes.render_markdown(), (
        "docs/protocol.md is out of date: regenerate it with "
        "TSYNC_UPDATE_DOCS=1 ./scripts/test tests/protocol/test_codes.py"
    )


def test_a_status_without_a_code_reads_as_the_first_code_with_it() -> None:
    assert codes.code_for_status(404) == codes.NOT_FOUND
    assert codes.code_for_status(409) == codes.CONFLICT
    assert codes.code_for_status(503) == codes.UNAVAILABLE
    assert codes.code_for_status(418) == codes.INTERNAL
