"""The core HTTP API (docs/protocol.md, section 3) against a real server on 127.0.0.1."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from protocol.types import TranscriptEvent
from protocol.wire import Baseline, ErrorFrame
from server.store.memory import MemoryStore
from tests.support.servers import running_server
from tests.support.wsclient import RawClient


def msg(text: str, role: str = "user") -> dict[str, str]:
    return {"role": role, "content": text}


def assert_problem(r: httpx.Response, status: int, code: str, detail: str = "") -> dict[str, Any]:
    """``r`` is an RFC 9457 problem document with this status and code."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["code"] == code
    assert body["type"].endswith("/" + code) and body["title"]
    assert detail in body["detail"], body["detail"]
    return body


# --- create, read, list, delete -------------------------------------------------------


async def test_create_is_201_with_revision_and_409_when_the_id_exists() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post("/v1/transcripts", json={"id": "t", "messages": [msg("hi")]})
        assert r.status_code == 201 and r.headers["content-type"] == "application/json"
        first = r.json()
        assert first["transcriptId"] == "t" and first["revision"] == 1
        r = await http.post("/v1/transcripts", json={"id": "t"})
        assert_problem(r, 409, "conflict", "'t'")
        r = await http.post("/v1/transcripts")  # no body at all: an empty, generated one
        assert r.status_code == 201 and r.json()["revision"] == 0
        assert len(r.json()["transcriptId"]) == 32
        assert r.json()["epoch"] != first["epoch"]
        listed = (await http.get("/v1/transcripts")).json()["transcripts"]
        assert {t["transcriptId"] for t in listed} == {"t", r.json()["transcriptId"]}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid-json"),
        (b"[1]", 400, "invalid-body"),
        (b'{"id": 5}', 400, "invalid-body"),
        (b'{"id": "a/b"}', 400, "invalid-body"),
        (b'{"id": "t", "mesages": []}', 400, "invalid-body"),
        (b'{"messages": [{"role": "robot", "content": "x"}]}', 422, "invalid-message"),
    ],
)
async def test_a_bad_create_is_a_problem_and_creates_nothing(
    body: bytes, status: int, code: str
) -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        assert_problem(await http.post("/v1/transcripts", content=body), status, code)
        assert (await http.get("/v1/transcripts")).json() == {"transcripts": []}


async def test_get_returns_the_snapshot_or_a_range_of_it() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        messages = [msg(f"m{i}") for i in range(5)]
        await http.post("/v1/transcripts", json={"id": "t", "messages": messages})
        whole = (await http.get("/v1/transcripts/t")).json()
        assert whole["transcriptId"] == "t" and whole["revision"] == 1 and whole["start"] == 0
        assert whole["messages"] == messages
        assert whole["activeStart"] == 0 and whole["segments"] == [{"start": 0, "end": None}]
        part = (await http.get("/v1/transcripts/t", params={"start": 1, "end": 3})).json()
        assert part["start"] == 1 and part["messages"] == messages[1:3]
        assert part["revision"] == 1 and part["epoch"] == whole["epoch"]
        tail = (await http.get("/v1/transcripts/t", params={"start": 4})).json()
        assert tail["messages"] == messages[4:]
        empty = (await http.get("/v1/transcripts/t", params={"start": 5, "end": 5})).json()
        assert empty["start"] == 5 and empty["messages"] == []


@pytest.mark.parametrize(
    "params",
    [
        {"start": 3, "end": 2},
        {"end": 6},
        {"start": 6},
        {"start": -1},
        {"start": "x"},
    ],
)
async def test_a_bad_range_is_400(params: dict[str, Any]) -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        messages = [msg(f"m{i}") for i in range(5)]
        await http.post("/v1/transcripts", json={"id": "t", "messages": messages})
        assert_problem(await http.get("/v1/transcripts/t", params=params), 400, "invalid-query")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/transcripts/nope", None),
        ("GET", "/v1/transcripts/nope/events", None),
        ("POST", "/v1/transcripts/nope/messages", {"messages": [msg("x")]}),
        ("POST", "/v1/transcripts/nope/segments", {}),
        ("DELETE", "/v1/transcripts/nope", None),
    ],
)
async def test_unknown_transcripts_are_404(method: str, path: str, body: Any) -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.request(method, path, json=body)
        assert_problem(r, 404, "not-found", "nope")
        assert (await http.get("/v1/transcripts")).json() == {"transcripts": []}


async def test_delete_is_204_then_404_and_subscribers_are_told() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        await http.post("/v1/transcripts", json={"id": "t", "messages": [msg("a")]})
        async with await RawClient.connect(srv.ws_url) as ws:
            await ws.send(op="subscribe", transcriptId="t")
            await ws.expect(Baseline)
            r = await http.delete("/v1/transcripts/t")
            assert r.status_code == 204 and r.content == b""
            error = await ws.recv()
            assert getattr(error, "code", None) == "not-found"
        assert_problem(await http.get("/v1/transcripts/t"), 404, "not-found")
        assert_problem(await http.delete("/v1/transcripts/t"), 404, "not-found")
        assert (await http.get("/v1/transcripts")).json() == {"transcripts": []}
        # The id is free again, under a new epoch.
        assert (await http.post("/v1/transcripts", json={"id": "t"})).status_code == 201


async def test_list_pages_by_id() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        for tid in ("c", "a", "b"):
            await http.post("/v1/transcripts", json={"id": tid})
        first = (await http.get("/v1/transcripts", params={"limit": 2})).json()["transcripts"]
        assert [t["transcriptId"] for t in first] == ["a", "b"]
        rest = (await http.get("/v1/transcripts", params={"after": "b"})).json()["transcripts"]
        assert [t["transcriptId"] for t in rest] == ["c"]


# --- appends and segments ---------------------------------------------------------------


async def test_append_ack_duplicate_conflict_and_invalid_message() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        await http.post("/v1/transcripts", json={"id": "t", "messages": [msg("a")]})
        path = "/v1/transcripts/t/messages"
        body = {"messages": [msg("b"), msg("c", "assistant")], "idempotencyKey": "k1"}
        r = await http.post(path, json=body)
        assert r.status_code == 201
        ack = r.json()
        assert ack == {
            "transcriptId": "t",
            "revision": 2,
            "start": 1,
            "count": 2,
            "duplicate": False,
        }
        again = await http.post(path, json=body)
        assert again.status_code == 200
        assert again.json() == {**ack, "duplicate": True}
        # The same key in the header works like the body field.
        header = await http.post(
            path,
            json={"messages": [msg("b"), msg("c", "assistant")]},
            headers={"idempotency-key": "k1"},
        )
        assert header.status_code == 200 and header.json()["revision"] == 2

        conflict = await http.post(path, json={"messages": [msg("d")], "expectedRevision": 1})
        assert assert_problem(conflict, 409, "revision-conflict")["revision"] == 2
        ok = await http.post(path, json={"messages": [msg("d")], "expectedRevision": 2})
        assert ok.status_code == 201 and ok.json()["revision"] == 3

        bad = await http.post(
            path, json={"messages": [msg("fine"), {"role": "user", "content": 5}]}
        )
        problem = assert_problem(bad, 422, "invalid-message")
        assert problem["path"].startswith("messages[1]")
        unknown = await http.post(
            path, json={"messages": [{"role": "user", "content": [{"type": "video"}]}]}
        )
        assert assert_problem(unknown, 422, "invalid-message")["path"].startswith("messages[0]")
        assert_problem(await http.post(path, json={}), 400, "invalid-body", "messages")
        assert_problem(await http.post(path, content=b"messages"), 400, "invalid-json")
        assert_problem(await http.post(path, content=b""), 400, "invalid-json", "empty")
        assert_problem(
            await http.post(path, json={"messages": [], "expectedRevison": 1}),
            400,
            "invalid-body",
            "expectedRevison",
        )
        assert_problem(
            await http.post(path, json={"messages": [], "expectedRevision": -1}),
            400,
            "invalid-body",
            "$.expectedRevision",
        )

        snapshot = (await http.get("/v1/transcripts/t")).json()
        assert snapshot["revision"] == 3  # nothing of the refused batches was kept
        assert [m["content"] for m in snapshot["messages"]] == ["a", "b", "c", "d"]


async def test_an_empty_append_changes_nothing() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        await http.post("/v1/transcripts", json={"id": "t", "messages": [msg("a")]})
        r = await http.post("/v1/transcripts/t/messages", json={"messages": []})
        assert r.status_code == 200  # nothing was created
        assert r.json()["revision"] == 1 and r.json()["count"] == 0
        assert (await http.get("/v1/transcripts/t")).json()["revision"] == 1


async def test_segments_move_the_active_start_and_bad_ones_are_422() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        messages = [msg(f"m{i}") for i in range(4)]
        await http.post("/v1/transcripts", json={"id": "t", "messages": messages})
        r = await http.post("/v1/transcripts/t/segments", json={"start": 2})
        assert r.status_code == 201 and r.json()["revision"] == 2
        for start in (2, 1, 5):  # must be active_start < start <= length
            bad = await http.post("/v1/transcripts/t/segments", json={"start": start})
            assert_problem(bad, 422, "invalid-segment")
        r = await http.post("/v1/transcripts/t/segments")  # no body: start = length
        assert r.status_code == 201 and r.json()["revision"] == 3
        snapshot = (await http.get("/v1/transcripts/t")).json()
        assert snapshot["activeStart"] == 4
        # A closed segment ends at the length when the next one started: they overlap.
        assert snapshot["segments"] == [
            {"start": 0, "end": 4},
            {"start": 2, "end": 4},
            {"start": 4, "end": None},
        ]
        assert snapshot["messages"] == messages  # segments copy and drop nothing


# --- events -----------------------------------------------------------------------------


async def test_events_after_a_revision_from_the_window_and_from_the_store() -> None:
    # A window of 2 events: older ones come from the store (memory keeps them all).
    async with (
        running_server(event_window=2) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        await http.post("/v1/transcripts", json={"id": "t", "messages": [msg("a")]})
        for text in ("b", "c", "d"):
            await http.post("/v1/transcripts/t/messages", json={"messages": [msg(text)]})
        await http.post("/v1/transcripts/t/segments", json={"start": 3})
        for after in range(6):
            r = await http.get("/v1/transcripts/t/events", params={"after": after})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["transcriptId"] == "t"
            assert [e["revision"] for e in body["events"]] == list(range(after + 1, 6))
        events = (await http.get("/v1/transcripts/t/events")).json()["events"]
        assert events[0]["change"] == {
            "kind": "messages-appended",
            "start": 0,
            "messages": [msg("a")],
        }
        assert events[4]["change"] == {
            "kind": "segment-started",
            "previousStart": 0,
            "start": 3,
            "end": 4,
        }
        assert all(isinstance(e["occurredAt"], int) for e in events)
        assert_problem(
            await http.get("/v1/transcripts/t/events", params={"after": "x"}), 400, "invalid-query"
        )


class ForgetfulStore(MemoryStore):
    """A memory store whose history is trimmed: it never returns old events.

    No real store here trims (memory and sqlite keep the whole log), so this
    is the only way to make the server meet a store that cannot answer.
    """

    async def events_after(
        self, transcript_id: str, revision: int, *, limit: int | None = None
    ) -> list[TranscriptEvent] | None:
        await super().events_after(transcript_id, revision, limit=limit)  # 404s as usual
        return None


async def test_events_no_longer_held_are_410() -> None:
    async with (
        running_server(store=ForgetfulStore(), event_window=2) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        await http.post("/v1/transcripts", json={"id": "t", "messages": [msg("a")]})
        # Freshly loaded: nothing in the window, and the store has forgotten.
        gone = await http.get("/v1/transcripts/t/events", params={"after": 0})
        assert_problem(gone, 410, "gone", "after revision 0")
        for text in ("b", "c", "d"):
            await http.post("/v1/transcripts/t/messages", json={"messages": [msg(text)]})
        # Revisions 3 and 4 are in the window: still served.
        held = await http.get("/v1/transcripts/t/events", params={"after": 2})
        assert [e["revision"] for e in held.json()["events"]] == [3, 4]
        current = await http.get("/v1/transcripts/t/events", params={"after": 4})
        assert current.json()["events"] == []
        assert_problem(await http.get("/v1/transcripts/t/events", params={"after": 1}), 410, "gone")
        assert_problem(
            await http.get("/v1/transcripts/nope/events", params={"after": 0}), 404, "not-found"
        )


# --- health, metrics, limits, auth --------------------------------------------------


async def test_healthz_and_metrics_in_prometheus_text_format() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        health = await http.get("/healthz")
        assert health.status_code == 200
        assert health.json()["status"] == "ok" and health.json()["store"] == "memory"
        await http.post("/v1/transcripts", json={"id": "t"})
        await http.post("/v1/transcripts/t/messages", json={"messages": [msg("a")]})
        r = await http.get("/metrics")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        text = r.text
        assert "# TYPE tsync_appends_total counter" in text
        assert 'tsync_appends_total{kind="messages-appended",transport="http"} 1.0' in text


async def test_a_body_over_the_limit_is_413_declared_or_streamed() -> None:
    async with (
        running_server(max_http_body_bytes=1000) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        await http.post("/v1/transcripts", json={"id": "t"})
        big = {"messages": [msg("x" * 2000)]}
        assert_problem(await http.post("/v1/transcripts/t/messages", json=big), 413, "too-large")

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            yield b'{"messages": [{"role": "user", "content": "'
            for _ in range(20):
                yield b"x" * 100
            yield b'"}]}'

        streamed = await http.post("/v1/transcripts/t/messages", content=chunks())
        assert "content-length" not in streamed.request.headers
        assert_problem(streamed, 413, "too-large")
        assert_problem(await http.post("/v1/transcripts", json=big), 413, "too-large")
        assert (await http.get("/v1/transcripts/t")).json()["revision"] == 0
        small = await http.post("/v1/transcripts/t/messages", json={"messages": [msg("ok")]})
        assert small.status_code == 201


async def test_a_token_protected_server_needs_the_bearer_over_http_and_ws() -> None:
    async with running_server(token="s3cret") as srv:
        async with httpx.AsyncClient(base_url=srv.url) as anonymous:
            assert_problem(await anonymous.get("/v1/transcripts"), 401, "unauthorized")
            r = await anonymous.post("/v1/transcripts", json={"id": "t"})
            assert_problem(r, 401, "unauthorized")
            wrong = await anonymous.get(
                "/v1/transcripts", headers={"authorization": "Bearer s3cre"}
            )
            assert_problem(wrong, 401, "unauthorized")
            assert (await anonymous.get("/healthz")).status_code == 200
        headers = {"authorization": "Bearer s3cret"}
        async with httpx.AsyncClient(base_url=srv.url, headers=headers) as http:
            assert (await http.get("/v1/transcripts")).status_code == 200
            assert (await http.post("/v1/transcripts", json={"id": "t"})).status_code == 201

        # Refusals come after the handshake, as close code 4001, so that browsers learn them:
        # a wrong token at once, no token at the first op that is not `auth`.
        for url, answers in ((srv.ws_url, ["unauthorized"]), (srv.ws_url + "?token=wrong", [])):
            async with await RawClient.connect(url) as refused:
                with pytest.raises(ConnectionClosed) as closed:
                    await refused.send(op="subscribe", transcriptId="t", ref=1)
                    while True:
                        error = await refused.expect(ErrorFrame)
                        assert (error.ref, error.transcript_id) == (1, "t")
                        answers.remove(error.code)
                assert answers == []
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001
        for client in (
            await RawClient.connect(srv.ws_url + "?token=s3cret"),
            await RawClient.connect(srv.ws_url, additional_headers=headers),
        ):
            async with client:
                await client.send(op="subscribe", transcriptId="t")
                assert (await client.expect(Baseline)).snapshot.transcript_id == "t"


# --- the seed's details (issue 12) --------------------------------------------------------


async def test_messages_that_are_not_a_list_do_not_create_an_empty_transcript() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        for body in ({"id": "t", "messages": {}}, {"id": "t", "messages": ""}):
            r = await http.post("/v1/transcripts", json=body)
            assert_problem(r, 400, "invalid-body", "messages")
        assert (await http.get("/v1/transcripts")).json() == {"transcripts": []}
        r = await http.post("/v1/transcripts", json={"id": "t", "messages": None})
        assert r.status_code == 201 and r.json()["revision"] == 0


async def test_an_empty_append_is_200_not_201() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        await http.post("/v1/transcripts", json={"id": "t", "messages": [msg("a")]})
        r = await http.post("/v1/transcripts/t/messages", json={"messages": []})
        assert r.status_code == 200, r.text
        assert r.json()["count"] == 0 and r.json()["revision"] == 1


async def test_a_range_says_the_length_of_the_whole() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        messages = [msg(f"m{i}") for i in range(5)]
        await http.post("/v1/transcripts", json={"id": "t", "messages": messages})
        whole = (await http.get("/v1/transcripts/t")).json()
        part = (await http.get("/v1/transcripts/t", params={"end": 2})).json()
        assert whole["length"] == part["length"] == 5
        assert (part["start"], len(part["messages"]), part["revision"]) == (0, 2, 1)


@pytest.mark.parametrize(
    ("request_id", "expected"),
    [
        ("req-1", "http:req-1"),
        ("ws:7", "http:ws:7"),  # namespaced: it cannot pass for a WebSocket connection
        ("x" * 500, None),  # too long: a generated one instead
        ("has space", None),
        ("ünïcode", None),
        (None, None),
    ],
)
async def test_an_http_origin_is_namespaced_and_bounded(
    request_id: str | None, expected: str | None
) -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        headers = {} if request_id is None else {"X-Request-Id": request_id}
        r = await http.post(
            "/v1/transcripts",
            json={"id": "t", "messages": [msg("a")]},
            headers={k: v.encode() for k, v in headers.items()},  # type: ignore[misc]
        )
        assert r.status_code == 201, r.text
        (event,) = (await http.get("/v1/transcripts/t/events")).json()["events"]
        context = event["origin"]["contextId"]
        assert context.startswith("http:") and len(context) <= 128
        assert re.fullmatch(r"[A-Za-z0-9._:-]+", context), context
        if expected is not None:
            assert context == expected
