"""The machine-readable descriptions are valid and say what the server does
(issue 23, item 4), checked with tools this project did not write:
``openapi-spec-validator`` for ``/v1/openapi.json``, and the findings of
``schemathesis`` (``tests/server/web/test_schemathesis.py`` runs it) pinned here
one by one, with what the document says about each.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import quote

import httpx
import jsonschema
import msgspec
import pytest
import websockets
from openapi_spec_validator import OpenAPIV31SpecValidator

from protocol.wire import split_frames
from tests.support.servers import running_server


@pytest.fixture
async def server_and_http() -> Any:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        yield srv, http


async def test_the_served_openapi_document_is_valid_openapi_3_1(server_and_http: Any) -> None:
    _, http = server_and_http
    document = (await http.get("/v1/openapi.json")).json()
    errors = [
        f"{e.message} at {list(e.path)}" for e in OpenAPIV31SpecValidator(document).iter_errors()
    ]
    assert errors == []
    # What used to make it invalid: a `default: null` on an integer.
    length = document["components"]["schemas"]["TranscriptSnapshot"]["properties"]["length"]
    assert length == {"type": "integer", "minimum": 0}
    schema = (await http.get("/v1/schema.json")).json()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert "default" not in schema["$defs"]["TranscriptSnapshot"]["properties"]["length"]


def _check(document: dict[str, Any], name: str, value: Any) -> None:
    jsonschema.validate(
        value,
        {"$ref": f"#/$defs/{name}", "$defs": document["$defs"]},
        cls=jsonschema.Draft202012Validator,
    )


async def test_an_open_view_has_no_end_in_frames_answers_and_the_schema(
    server_and_http: Any,
) -> None:
    """docs/protocol.md: `end` absent means open. The server never sends
    `"end": null` (JSON or MessagePack), and the JSON Schema says so."""
    srv, http = server_and_http
    schema = (await http.get("/v1/schema.json")).json()
    for name in ("View", "ViewChanged", "ViewLeft"):
        end = schema["$defs"][name]["properties"]["end"]
        assert end["type"] == "integer" and "anyOf" not in end, name
        with pytest.raises(jsonschema.ValidationError):
            _check(schema, name, {"name": "v", "start": 0, "end": None} | _kind(name))
        _check(schema, name, {"name": "v", "start": 0} | _kind(name))
    await http.post(
        "/v1/transcripts", json={"id": "t", "messages": [{"role": "user", "content": "a"}]}
    )
    async with asyncio.timeout(20), websockets.connect(srv.ws_url, compression=None) as ws:
        await ws.send('{"op":"subscribe","transcriptId":"t","ref":"s"}')
        await _frame(ws, "baseline")
        assert (
            await http.put("/v1/transcripts/t/views/open", json={"start": 1})
        ).status_code == 201
        changed = (await _frame(ws, "increment"))["event"]["change"]
        assert changed == {"kind": "view-changed", "name": "open", "start": 1}
        await ws.send('{"op":"subscribe","transcriptId":"t","ref":"again"}')
        baseline = await _frame(ws, "baseline")
        assert baseline["snapshot"]["views"] == [{"name": "open", "start": 1}]
        assert (await http.delete("/v1/transcripts/t/views/open")).status_code == 200
        left = (await _frame(ws, "increment"))["event"]["change"]
        assert left == {"kind": "view-left", "name": "open", "start": 1}
    async with (
        asyncio.timeout(20),
        websockets.connect(srv.ws_url, subprotocols=["tsync.v1.msgpack"], compression=None) as ws,
    ):
        await http.put("/v1/transcripts/t/views/again", json={"start": 0})
        await ws.send(msgspec.msgpack.encode({"op": "subscribe", "transcriptId": "t"}))
        frame = msgspec.msgpack.decode(await asyncio.wait_for(ws.recv(), 10))
        assert frame["type"] == "baseline"
        assert frame["snapshot"]["views"] == [{"name": "again", "start": 0}]
    answer = (await http.get("/v1/transcripts/t/views")).json()
    assert answer["views"] == [{"name": "again", "start": 0}]
    events = (await http.get("/v1/transcripts/t/events")).json()["events"]
    assert [e["change"] for e in events if e["change"]["kind"].startswith("view")] == [
        {"kind": "view-changed", "name": "open", "start": 1},
        {"kind": "view-left", "name": "open", "start": 1},
        {"kind": "view-changed", "name": "again", "start": 0},
    ]
    # A closed View has its end everywhere; null is still read as open.
    await http.put("/v1/transcripts/t/views/closed", json={"start": 0, "end": 1})
    await http.put("/v1/transcripts/t/views/again", json={"start": 1, "end": None})
    views = (await http.get("/v1/transcripts/t/views")).json()["views"]
    assert views == [{"name": "again", "start": 1}, {"name": "closed", "start": 0, "end": 1}]


def _kind(name: str) -> dict[str, str]:
    return {"ViewChanged": {"kind": "view-changed"}, "ViewLeft": {"kind": "view-left"}}.get(
        name, {}
    )


async def _frame(ws: Any, kind: str) -> dict[str, Any]:
    while True:
        for text in split_frames(await asyncio.wait_for(ws.recv(), 10)):
            frame: dict[str, Any] = msgspec.json.decode(text)
            if frame["type"] == kind:
                return frame


async def test_an_import_without_a_body_is_refused_and_creates_nothing(
    server_and_http: Any,
) -> None:
    _, http = server_and_http
    document = (await http.get("/v1/openapi.json")).json()
    assert document["paths"]["/v1/transcripts/import"]["post"]["requestBody"]["required"] is True
    for headers in ({}, {"content-type": "text/markdown"}, {"content-type": "application/zip"}):
        r = await http.post(
            "/v1/transcripts/import", params={"filename": "", "id": "empty"}, headers=headers
        )
        assert r.status_code == 400, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["code"] == "invalid-body" and "empty" in r.json()["detail"]
    assert (await http.get("/v1/transcripts/empty")).status_code == 404
    ok = await http.post("/v1/transcripts/import", params={"id": "x"}, content=b"## user\nhi\n")
    assert ok.status_code == 201 and ok.json()["count"] == 1


@pytest.mark.parametrize(
    "query",
    [
        "limit=5&limit=",
        "limit=",
        "limit=5&limit=6",
        "after=a&after=b",
    ],
)
async def test_an_empty_integer_or_a_repeated_query_parameter_is_refused(
    server_and_http: Any, query: str
) -> None:
    _, http = server_and_http
    r = await http.get(f"/v1/transcripts?{query}")
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "invalid-query"
    name = query.partition("=")[0]
    assert f"'{name}'" in r.json()["detail"]


async def test_other_routes_refuse_repeats_and_empty_choices_too(server_and_http: Any) -> None:
    _, http = server_and_http
    await http.post(
        "/v1/transcripts", json={"id": "t", "messages": [{"role": "user", "content": "a"}]}
    )
    for path in (
        "/v1/transcripts/t?start=0&start=1",
        "/v1/transcripts/t/messages?epoch=a&epoch=b",
        "/v1/transcripts/t/chat?segment=",
        "/v1/transcripts/t/chat?context=",
        "/v1/transcripts/t/events?after=",
        "/v1/auth?transcriptId=t&transcriptId=u",
        "/v1/openapi.json?x=1&x=2",
    ):
        r = await http.get(path)
        assert (r.status_code, r.json()["code"]) == (400, "invalid-query"), path
    assert (await http.get("/v1/transcripts/t?start=0&end=1")).status_code == 200
    assert (await http.get("/v1/transcripts/t/chat")).status_code == 200


async def test_the_limits_the_server_enforces_are_in_the_document(server_and_http: Any) -> None:
    """Ids and View names in paths and queries, the idempotency key's length,
    and which bodies are required: a value the document refuses is refused
    by the server (400/422), and one it allows is not refused for its form."""
    _, http = server_and_http
    document = (await http.get("/v1/openapi.json")).json()

    def param(path: str, method: str, name: str) -> dict[str, Any]:
        (found,) = [p for p in document["paths"][path][method]["parameters"] if p["name"] == name]
        return found["schema"]  # type: ignore[no-any-return]

    transcript = "/v1/transcripts/{transcript_id}"
    view = transcript + "/views/{name}"
    id_pattern = re.compile(param(transcript, "get", "transcript_id")["pattern"])
    name_pattern = re.compile(param(view, "put", "name")["pattern"])
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            for p in op.get("parameters", ()):
                if p["name"] == "transcript_id":
                    assert p["schema"]["pattern"] == id_pattern.pattern, (method, path)
                    assert "400" in op["responses"], (method, path)
    assert param("/v1/auth", "get", "transcriptId")["pattern"] == id_pattern.pattern
    key = param(transcript + "/messages", "post", "Idempotency-Key")
    assert (key["minLength"], key["maxLength"]) == (1, 200)
    for path, method in ((transcript + "/messages", "post"), (view, "put")):
        assert document["paths"][path][method]["requestBody"]["required"] is True

    await http.post("/v1/transcripts", json={"id": "t"})
    for bad_id in ("a b", "x" * 129, "é", "a\n"):
        assert not id_pattern.search(bad_id)
        r = await http.get(f"/v1/transcripts/{quote(bad_id, safe='')}")
        assert r.status_code == 400, bad_id
        r = await http.get("/v1/auth", params={"transcriptId": bad_id})
        assert r.status_code == 400, bad_id
    for bad_name in ("a b", "x" * 65, ";"):
        assert not name_pattern.search(bad_name)
        r = await http.put(f"/v1/transcripts/t/views/{quote(bad_name, safe='')}", json={"start": 0})
        assert r.status_code == 422 and r.json()["code"] == "invalid-view", bad_name
    assert name_pattern.search("x" * 64) and id_pattern.search("a.b:c-D_9" + "x" * 119)
    messages = [{"role": "user", "content": "a"}]
    for bad_key, status in (("k" * 201, 422), ("", 422), ("k" * 200, 201)):
        r = await http.post(
            "/v1/transcripts/t/messages",
            json={"messages": messages},
            headers={"idempotency-key": bad_key},
        )
        assert r.status_code == status, (len(bad_key), r.text)
    # The header is checked even beside a body key, and two keys must agree.
    for body_key, header_key, status in (
        ("b1", "", 422),
        ("b2", "k" * 201, 422),
        ("b3", "other", 422),
        ("b4", "b4", 201),
    ):
        r = await http.post(
            "/v1/transcripts/t/messages",
            json={"messages": messages, "idempotencyKey": body_key},
            headers={"idempotency-key": header_key},
        )
        assert r.status_code == status, (body_key, r.text)
        if status == 422:
            assert r.json()["code"] == "invalid-message", r.text
    for path, method in ((transcript + "/messages", "POST"), (view, "PUT")):
        url = path.replace("{transcript_id}", "t").replace("{name}", "v")
        r = await http.request(method, url)
        assert r.status_code == 400 and r.json()["code"] == "invalid-json", url


async def test_a_body_of_whitespace_is_not_an_absent_body(server_and_http: Any) -> None:
    """schemathesis sent `\\r` as a JSON body and got 201: only no bytes at
    all is an absent (optional) body; whitespace is JSON that is not there."""
    _, http = server_and_http
    json_type = {"content-type": "application/json"}
    for body in (b"\r", b" ", b"\n\t"):
        r = await http.post("/v1/transcripts", content=body, headers=json_type)
        assert (r.status_code, r.json()["code"]) == (400, "invalid-json"), body
    assert (await http.post("/v1/transcripts", headers=json_type)).status_code == 201
    assert (await http.get("/v1/transcripts")).json()["transcripts"][0]["length"] == 0
