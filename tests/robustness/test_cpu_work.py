"""Items 1 and 7: LMML imports (zips included) and exports run in worker
processes with a bounded queue and a time budget; the loop stays free.

Before: a 48 KB import froze every client for 15.9 s, an export of a long
transcript for seconds, and a 65 KB zip holding 32 MiB stalled the loop 4 s
before its 422. Each test here would have stalled the unrelated client for
longer than its bound."""

from __future__ import annotations

import asyncio
import io
import time
import zipfile
from collections.abc import Callable

import httpx

from tests.robustness.harness import Target, assert_responsive, probing


def narrative(turns: int, lines_per_turn: int) -> bytes:
    """An LMML narrative of ``turns`` user turns of short lines each: about a
    microsecond per line to read, whatever the parser."""
    body = "x\n" * lines_per_turn
    return "".join(f"<!-- user -->\n{body}" for _ in range(turns)).encode()


def lmmlz(text: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("t.lmml", text)
    return buffer.getvalue()


def post_import(target: Target, body: bytes, name: str, timeout: float = 60) -> httpx.Response:
    return httpx.post(
        target.url + "/v1/transcripts/import",
        content=body,
        params={"filename": name},
        timeout=timeout,
    )


def test_large_import_and_export_leave_the_loop_free(target: Target) -> None:
    # 500,000 lines: about half a second of parsing, five times the bound.
    body = narrative(turns=500, lines_per_turn=1000)
    with probing(target.ws_url) as probe:
        created = post_import(target, body, "big.lmml")
        assert created.status_code == 201, created.text
        tid = created.json()["transcriptId"]
        exported = httpx.get(f"{target.url}/v1/transcripts/{tid}/export.lmml", timeout=60)
        assert exported.status_code == 200
        probe.wait_pings(5)
    assert_responsive(probe)
    assert created.json()["count"] == 500
    assert exported.content.count(b"<!-- user") == 500


def test_zip_inflation_runs_in_a_worker(target: Target) -> None:
    # 24 MiB of one byte: compresses to ~24 KB, over the narrative limit once inflated.
    bomb = lmmlz(b"<!-- user -->\n" + b"a" * (24 << 20))
    assert len(bomb) < 100 << 10
    with probing(target.ws_url) as probe:
        refused = post_import(target, bomb, "bomb.lmmlz")
        probe.wait_pings(5)
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "invalid-lmml"
    assert_responsive(probe)


def test_a_job_over_its_budget_is_stopped(target_factory: Callable[..., Target]) -> None:
    target = target_factory(settings={"offload_budget_s": 0.3, "offload_processes": 1})
    body = narrative(turns=500, lines_per_turn=6000)  # seconds of work
    began = time.monotonic()
    refused = post_import(target, body, "slow.lmml")
    took = time.monotonic() - began
    assert refused.status_code == 422, refused.text
    assert refused.json()["code"] == "too-costly"
    assert took < 5, f"the budget was 0.3 s, the answer took {took:.1f} s"
    # The worker was replaced: the next (small, but zipped) import works.
    again = post_import(target, lmmlz(narrative(2, 2)), "ok.lmmlz")
    assert again.status_code == 201, again.text


def test_a_full_queue_refuses_at_once(target_factory: Callable[..., Target]) -> None:
    target = target_factory(
        settings={"offload_budget_s": 2, "offload_processes": 1, "offload_queue": 0}
    )
    body = narrative(turns=500, lines_per_turn=6000)

    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        target.url + "/v1/transcripts/import",
                        content=body,
                        params={"filename": "q.lmml"},
                    )
                    for _ in range(3)
                )
            )

    answers = asyncio.run(both())
    statuses = sorted(r.status_code for r in answers)
    busy = [r for r in answers if r.status_code == 503]
    assert busy, statuses
    assert busy[0].json()["code"] == "unavailable"
    assert busy[0].headers["retry-after"] == "1"
