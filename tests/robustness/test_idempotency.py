"""Item 9: an idempotency key is remembered for ``idempotency_ttl_s`` (24 h),
by the store, across a SIGKILL, however many other keyed appends came after.

Before: only the last 1,000 keys per transcript were kept, so a retry after
1,000 other keyed appends was applied twice, and so were 3 late retries after
a SIGKILL."""

from __future__ import annotations

import asyncio

import httpx

from protocol import wire
from tests.robustness.harness import Target
from tests.support.wsclient import RawClient

OTHERS = 1_050  # more than the 1,000 keys the server used to keep


def _message(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"m{i}"}]


async def _append_many(ws_url: str, tid: str) -> list[wire.Ack]:
    """``OTHERS`` keyed appends, pipelined; their acks in order."""
    async with await RawClient.connect(ws_url) as client:
        for i in range(OTHERS):
            await client.send(
                op="append",
                transcriptId=tid,
                messages=_message(i),
                idempotencyKey=f"k{i}",
                expectedRevision=i,
                ref=i,
            )
        return [await client.expect(wire.Ack, timeout=30) for _ in range(OTHERS)]


def _retry(target: Target, tid: str, i: int, *, expected: bool) -> httpx.Response:
    body: dict[str, object] = {"messages": _message(i), "idempotencyKey": f"k{i}"}
    if expected:
        body["expectedRevision"] = i  # what the first attempt expected: long gone
    return httpx.post(f"{target.url}/v1/transcripts/{tid}/messages", json=body, timeout=10)


def test_a_retry_after_many_keys_and_after_a_sigkill_is_not_applied_twice(
    target: Target,
) -> None:
    assert httpx.post(target.url + "/v1/transcripts", json={"id": "keys"}).status_code == 201
    acks = asyncio.run(_append_many(target.ws_url, "keys"))
    assert [a.revision for a in acks] == list(range(1, OTHERS + 1))

    def check_retries() -> None:
        for i, expected in ((0, False), (1, True), (2, False)):
            answer = _retry(target, "keys", i, expected=expected)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["duplicate"] is True, body
            assert body["revision"] == i + 1
        snapshot = httpx.get(f"{target.url}/v1/transcripts/keys", timeout=10).json()
        assert snapshot["revision"] == OTHERS
        assert len(snapshot["messages"]) == OTHERS

    check_retries()
    target.process.kill()  # SIGKILL: nothing is flushed on the way out
    target.process.start()
    check_retries()
