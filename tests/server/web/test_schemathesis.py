"""``schemathesis`` against a real server: every operation of
``/v1/openapi.json``, with requests that fit the document and requests that
do not (schemathesis's coverage and fuzzing phases, positive and negative).

It fails on any 5xx and on any answer that does not match the document: a
status, media type, header or body the document does not give for that
operation, a request the document refuses but the server accepts, a missing
required header not refused, a method not refused with 405. What it does not
check: that every request the document allows is accepted
(``positive_data_acceptance``): the document cannot say what depends on the
transcript's state (a segment start past the length, a View past the end,
events no longer held), so the server rightly answers those with the 4xx the
document lists.

The server is ``tsync serve`` in a subprocess on 127.0.0.1 with the default
store (SQLite, in a temporary folder). Bounded: ``MAX_EXAMPLES`` per operation
and mode; the whole run takes about a minute on a loaded 2-core machine.

Uses schemathesis's 4.x Python API (``schemathesis.openapi.from_dict``,
``schema.parametrize()``, ``case.call_and_validate``; pyproject pins
``schemathesis>=4.3,<5``).
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import strategies as st

from protocol.limits import ID_PATTERN, VIEW_NAME_PATTERN
from server.web.openapi import openapi_document
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.slow

#: Examples per operation in the fuzzing phase (per generation mode); more
#: for a deeper run by hand: TSYNC_SCHEMATHESIS_EXAMPLES=500 ./scripts/test ...
MAX_EXAMPLES = int(os.environ.get("TSYNC_SCHEMATHESIS_EXAMPLES", "25"))

CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {"mode": "all", "max-examples": MAX_EXAMPLES},
        "phases": {
            "examples": {"enabled": True},
            "coverage": {"enabled": True},
            "fuzzing": {"enabled": True},
        },
        # See the module docstring.
        "checks": {"positive_data_acceptance": {"enabled": False}},
        "request-timeout": 30,
    }
)
# The document as the server builds it (the test checks the served one is the same).
schema = schemathesis.openapi.from_dict(json.loads(json.dumps(openapi_document())), config=CONFIG)


#: Set by the ``server`` fixture when the server stores integers no wire
#: format can carry (issue 23 item 1, fixed on the integrity-values branch):
#: cases with such integers are then left out, so that this run finds what
#: is not already known. Remove once that fix is merged.
SKIP_OUT_OF_RANGE_INTEGERS = False
INT_RANGE = range(-(2**63), 2**64)


@schema.hook
def filter_case(context: Any, case: Any) -> bool:
    """An import body sent as text/markdown is any text: schemathesis's
    "not a string" bodies (an object it writes as ``{}``) are text the server
    rightly reads as a narrative, not a request the document refuses."""
    if SKIP_OUT_OF_RANGE_INTEGERS and _has_out_of_range_integer(case.body):
        return False
    return not (
        case.operation.path == "/v1/transcripts/import"
        and case.media_type == "text/markdown"
        and not isinstance(case.body, str | bytes)
    )


def _has_out_of_range_integer(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return value not in INT_RANGE
    if isinstance(value, dict):
        return any(_has_out_of_range_integer(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_out_of_range_integer(v) for v in value)
    return False


#: The transcript the ``server`` fixture makes (messages, segments, Views).
KNOWN = "known"
KNOWN_VIEWS = ("open", "closed")
ID = re.compile(ID_PATTERN + r"(?!\n)")
VIEW_NAME = re.compile(VIEW_NAME_PATTERN + r"(?!\n)")


@schema.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
    """Half the cases name the transcript (and Views) that exist, so that
    operations on a transcript do not all answer 404 to a random id. Only a
    value the document allows is swapped for another it allows: a case made
    to break the document still breaks it the same way. DELETE of the whole
    transcript keeps its random id (deleting the known one would leave the
    rest of the run nothing to find)."""
    if not path_parameters:
        return st.just(path_parameters)
    choices = [path_parameters]
    tid = path_parameters.get("transcript_id")
    deletes_it = context.operation.method.lower() == "delete" and "name" not in path_parameters
    if isinstance(tid, str) and ID.search(tid) and not deletes_it:
        known = {**path_parameters, "transcript_id": KNOWN}
        choices.append(known)
        name = path_parameters.get("name")
        if isinstance(name, str) and VIEW_NAME.search(name):
            choices += [{**known, "name": view} for view in KNOWN_VIEWS]
    return st.sampled_from(choices)


@schemathesis.serializer("application/zip")
def as_bundle(context: Any, value: Any) -> bytes:
    """A string body sent as application/zip becomes a real .lmmlz holding it
    as its narrative (so that the bundle path is exercised); anything else is
    sent as JSON, which is no zip (the server must refuse it)."""
    if not isinstance(value, str):
        return json.dumps(value).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        bundle.writestr("upload.lmml", value)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("schemathesis")
    proc = ServerProcess(
        store=f"sqlite:{folder / 'store.sqlite'}",
        log_path=folder / "server.log",
        args=["--log-level", "error"],
    )
    global SKIP_OUT_OF_RANGE_INTEGERS
    with proc:
        served = httpx.get(proc.url + "/v1/openapi.json", timeout=10).json()
        assert served == json.loads(json.dumps(openapi_document()))
        big = {"messages": [{"role": "user", "content": "x", "metadata": {"n": 2**64}}]}
        probe = httpx.post(proc.url + "/v1/transcripts", json=big, timeout=10)
        SKIP_OUT_OF_RANGE_INTEGERS = probe.status_code >= 500
        _make_known(proc.url)
        yield proc
        log = Path(proc.log_path or "").read_text(errors="replace")
    # Anything the server logged at error level is a failure too (a 5xx the
    # checks saw says so already; this catches one they could not see).
    tracebacks = log.split("Traceback")[1:]
    if SKIP_OUT_OF_RANGE_INTEGERS:  # the probe's, known
        tracebacks = [t for t in tracebacks if "OverflowError" not in t]
    assert not tracebacks, tracebacks[-1][-4000:]


def _make_known(url: str) -> None:
    with httpx.Client(base_url=url, timeout=10) as http:
        messages = [{"role": "user", "content": f"m{i}"} for i in range(6)]
        assert http.post("/v1/transcripts", json={"id": KNOWN, "messages": messages}).is_success
        assert http.post(f"/v1/transcripts/{KNOWN}/segments", json={"start": 3}).is_success
        assert http.put(f"/v1/transcripts/{KNOWN}/views/open", json={"start": 1}).is_success
        views = f"/v1/transcripts/{KNOWN}/views/closed"
        assert http.put(views, json={"start": 0, "end": 2}).is_success


#: (operation, status) of every answer the run got.
ANSWERS: Counter[tuple[str, int]] = Counter()


@schema.parametrize()
def test_the_server_does_what_its_openapi_document_says(case: Any, server: ServerProcess) -> None:
    response = case.call_and_validate(base_url=server.url)
    ANSWERS[(f"{case.method} {case.path}", response.status_code)] += 1


def test_the_run_reached_what_it_tests() -> None:
    """Every operation not on a transcript was answered with success at least
    once, and every one on a transcript (but DELETE of one, whose random id
    rarely exists) found it at least once (an answer but 404 and 405; their
    success needs a request that fits the transcript's state, which a few
    dozen random cases may miss): else the run above tested the server's
    refusals and little else. Runs after it (the file's order)."""
    if not ANSWERS:
        pytest.skip("run with the schemathesis test above")
    paths = schema.raw_schema["paths"]
    operations = {f"{method.upper()} {path}" for path, ops in paths.items() for method in ops}
    on_one = {op for op in operations if "{transcript_id}" in op}
    succeeded = {op for op, status in ANSWERS if 200 <= status < 300}
    reached = {op for op, status in ANSWERS if status not in (404, 405)}
    # Its success is a reply an agent writes (tests/js_package/test_ai_chat.py):
    # a random request can only be answered, not succeed.
    needs_an_agent = {"POST /v1/ai/chat"}
    assert needs_an_agent <= reached, sorted(ANSWERS.items())
    assert operations - on_one - needs_an_agent <= succeeded, sorted(ANSWERS.items())
    assert on_one - {"DELETE /v1/transcripts/{transcript_id}"} <= reached, sorted(ANSWERS.items())
