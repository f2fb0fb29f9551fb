"""The data-driven cases of ``tests/lmml/cases``: narrative in, turns and messages out.

Each ``NAME.lmml`` has a ``NAME.expected.json`` with a ``description`` of the
rule it shows and either ``turns``, ``messages`` and ``warnings``, or an
``error`` (a piece of the message). Optional keys: ``assets`` (name -> text,
or ``{"base64": ...}`` for bytes; the case is then also imported as a
``.lmmlz``), ``max_embed_bytes``, and ``newline: "crlf"`` (the file's line
endings become CRLF before parsing, so the case does not depend on how git
checks files out).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from protocol.lmml import (
    LmmlError,
    import_messages,
    parse,
    render_turns,
    segment,
    write_bundle,
)

CASES = Path(__file__).parent / "cases"
NAMES = sorted(p.stem for p in CASES.glob("*.lmml"))


def _load(name: str) -> tuple[str, dict[str, Any]]:
    expected = json.loads((CASES / f"{name}.expected.json").read_text(encoding="utf-8"))
    text = (CASES / f"{name}.lmml").read_bytes().decode("utf-8")
    if expected.get("newline") == "crlf":
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return text, expected


def _assets(expected: dict[str, Any]) -> dict[str, bytes]:
    return {
        name: base64.b64decode(value["base64"]) if isinstance(value, dict) else value.encode()
        for name, value in expected.get("assets", {}).items()
    }


def _plain(value: object) -> Any:
    return msgspec.json.decode(msgspec.json.encode(value))


def test_every_case_has_expectations() -> None:
    assert len(NAMES) >= 15
    for name in NAMES:
        assert (CASES / f"{name}.expected.json").exists(), name


@pytest.mark.parametrize("name", NAMES)
def test_case(name: str) -> None:
    text, expected = _load(name)
    assets = _assets(expected)
    limit = expected.get("max_embed_bytes")
    if assets:
        data, filename = write_bundle(text, assets, name=name), f"{name}.lmmlz"
    else:
        data, filename = text.encode(), f"{name}.lmml"
    if "error" in expected:
        with pytest.raises(LmmlError, match=re.escape(expected["error"])):
            import_messages(data, filename=filename)
        return
    turns = segment(parse(text))
    got = [{"role": t.role, "text": t.text, "embeds": [e.name for e in t.embeds]} for t in turns]
    assert got == expected["turns"]
    assert "".join(t.delimiter + t.text for t in turns) == text
    messages = render_turns(turns, assets, max_embed_bytes=limit)
    assert _plain(messages) == expected["messages"]
    result = import_messages(data, filename=filename, max_embed_bytes=limit)
    assert result.messages == tuple(messages)
    assert list(result.warnings) == expected["warnings"]
