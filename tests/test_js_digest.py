"""Issue 29: the Python and the JavaScript digest agree on any history, not
only on the shared vectors: hypothesis makes histories (every kind of
change, any message, metadata with floats, integers past 2**53 and keys of
any character), Node computes their digests with ``client_js/client.js``
from their JSON text, and they must be ``protocol.digest``'s."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.digest import genesis_digest, next_digest
from protocol.types import Change, Message, MessagesAppended, ViewChanged, ViewLeft
from tests.conftest import require_binary
from tests.strategies import changes, messages, transcript_ids

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import { genesisDigest, nextDigest } from "./client_js/client.js";
let input = "";
for await (const chunk of process.stdin) input += chunk;
const out = JSON.parse(input).map(({ transcriptId, changes }) => {
  let digest = genesisDigest(transcriptId);
  return [digest, ...changes.map((c) => (digest = nextDigest(digest, c)))];
});
process.stdout.write(JSON.stringify(out));
"""

_keys = st.text(alphabet=st.sampled_from('az\u00e9\ud7ff\ue000\uffff\U0001f600\x01"'), max_size=3)
_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def _histories(draw: st.DrawFn) -> tuple[str, list[Change]]:
    found: list[Change] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["append", "odd", "other", "view"]))
        if kind == "append":
            batch = draw(st.lists(messages(), min_size=1, max_size=3))
            found.append(MessagesAppended(draw(st.integers(0, 100)), tuple(batch)))
        elif kind == "odd":
            meta = draw(st.dictionaries(_keys, _values, min_size=1, max_size=4))
            message = Message(role="user", content=draw(st.text(max_size=8)), metadata=meta)
            found.append(MessagesAppended(draw(st.integers(0, 2**60)), (message,)))
        elif kind == "view":
            name = draw(st.from_regex(r"[A-Za-z0-9._:-]{1,6}", fullmatch=True))
            end = draw(st.none() | st.integers(0, 50))
            view = ViewChanged if draw(st.booleans()) else ViewLeft
            found.append(view(name=name, start=draw(st.integers(0, 50)), end=end))
        else:
            found.append(draw(changes()))
    return draw(transcript_ids()), found


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_histories(), min_size=20, max_size=20))
def test_python_and_javascript_compute_the_same_digests(
    histories: list[tuple[str, list[Change]]],
) -> None:
    node = require_binary("node")
    plain: list[dict[str, Any]] = [
        {"transcriptId": tid, "changes": msgspec.to_builtins(list(history))}
        for tid, history in histories
    ]
    result = subprocess.run(
        [node, "--input-type=module", "-e", SCRIPT],
        cwd=ROOT,
        input=json.dumps(plain),  # what a JavaScript consumer parses: doubles for numbers
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    from_js = json.loads(result.stdout)
    for (tid, history), digests in zip(histories, from_js, strict=True):
        expected = [genesis_digest(tid)]
        for change in history:
            expected.append(next_digest(expected[-1], change))
        assert digests == expected, (tid, history)
