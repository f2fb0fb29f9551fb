"""Items 8, 10 and 11 (HTTP and WebSocket requests): a delete that races a
load, a looser ``max_message_bytes``, deeply nested JSON and wrong-typed
fields. Each is answered, and nothing crashes.

Before: in 13 of 20 trials a GET racing a DELETE left the deleted transcript
readable after the 204; a message over the entity's hard-coded 1 MiB killed
the committer of a server configured for more ("Task exception was never
retrieved", and the appends batched with it failed); deeply nested JSON over
HTTP was a 500 with two tracebacks; ``messages`` of the wrong type on create
was taken as empty."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from protocol import wire
from tests.robustness.harness import Target
from tests.support.wsclient import RawClient

TRIALS = 20


def test_a_delete_racing_loads_never_leaves_the_transcript_readable(target: Target) -> None:
    content = "x" * 200_000  # a load that takes a moment

    async def trial(client: httpx.AsyncClient, i: int) -> list[int]:
        tid = f"race{i}"
        body = {"id": tid, "messages": [{"role": "user", "content": content}] * 5}
        assert (await client.post("/v1/transcripts", json=body)).status_code == 201
        gets = [asyncio.ensure_future(client.get(f"/v1/transcripts/{tid}")) for _ in range(3)]
        deleted = await client.delete(f"/v1/transcripts/{tid}")
        assert deleted.status_code == 204
        await asyncio.gather(*gets)
        # After the 204: gone for every reader, now and later.
        after = await asyncio.gather(
            client.get(f"/v1/transcripts/{tid}"), client.get(f"/v1/transcripts/{tid}/events")
        )
        return [a.status_code for a in after]

    async def trials() -> list[list[int]]:
        async with httpx.AsyncClient(base_url=target.url, timeout=30) as client:
            return [await trial(client, i) for i in range(TRIALS)]

    assert asyncio.run(trials()) == [[404, 404]] * TRIALS


def test_a_looser_message_limit_is_the_one_every_layer_uses(
    target_factory: Callable[..., Target],
) -> None:
    target = target_factory(settings={"max_message_bytes": 3 << 20, "max_frame_bytes": 8 << 20})
    assert httpx.post(target.url + "/v1/transcripts", json={"id": "big"}).status_code == 201

    async def scenario() -> list[wire.Ack]:
        async with await RawClient.connect(target.ws_url, max_size=None) as client:
            # Sent together, so the committer takes them in one run.
            for i, size in enumerate((10, 2 << 20, 10)):
                await client.send(
                    op="append",
                    transcriptId="big",
                    messages=[{"role": "user", "content": "x" * size}],
                    ref=i,
                )
            return [await client.expect(wire.Ack, timeout=30) for _ in range(3)]

    acks = asyncio.run(scenario())
    assert [a.revision for a in acks] == [1, 2, 3]
    assert "Task exception was never retrieved" not in target.log()
    assert "Traceback" not in target.log()


def _nested(depth: int) -> str:
    return '{"role":"user","content":"x","metadata":{"a":' + "[" * depth + "]" * depth + "}}"


def test_deeply_nested_json_is_refused_cleanly_on_both_transports(target: Target) -> None:
    assert httpx.post(target.url + "/v1/transcripts", json={"id": "deep"}).status_code == 201
    for depth in (100, 5_000, 200_000):
        raw = '{"messages":[' + _nested(depth) + "]}"
        answer = httpx.post(
            target.url + "/v1/transcripts/deep/messages",
            content=raw,
            headers={"content-type": "application/json"},
            timeout=30,
        )
        assert answer.status_code in (400, 422), (depth, answer.text)
        assert answer.json()["code"] in ("invalid-json", "invalid-message")

    async def over_ws() -> list[str]:
        async with await RawClient.connect(target.ws_url) as client:
            codes = []
            for depth in (100, 5_000):
                await client.ws.send(
                    '{"op":"append","transcriptId":"deep","messages":[' + _nested(depth) + "]}"
                )
                codes.append((await client.expect(wire.ErrorFrame)).code)
            await client.send(op="ping", ref="alive")
            await client.expect(wire.Pong)
            return codes

    assert asyncio.run(over_ws()) == ["invalid-message", "invalid-frame"]
    assert "Traceback" not in target.log()
    # Nothing was appended.
    assert httpx.get(target.url + "/v1/transcripts/deep").json()["revision"] == 0


def test_wrong_typed_messages_on_create_are_refused(target: Target) -> None:
    for messages in ({}, "hello", 0, False, {"role": "user"}):
        answer = httpx.post(
            target.url + "/v1/transcripts", json={"id": "typed", "messages": messages}
        )
        assert answer.status_code == 400, (messages, answer.text)
        assert answer.json()["code"] == "invalid-body"
    assert httpx.get(target.url + "/v1/transcripts/typed").status_code == 404
