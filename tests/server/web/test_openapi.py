"""``/v1/openapi.json`` and ``/v1/schema.json`` against real traffic: every
HTTP answer the server gives is valid under the document's schema for that
operation and status, and every WebSocket frame under ``ServerFrame``, so the
documents cannot drift from the server."""

from __future__ import annotations

import asyncio
import io
import re
import zipfile
from typing import Any

import httpx
import jsonschema
import msgspec
import pytest
import websockets
from starlette.routing import Route

from protocol.wire import split_frames
from tests.support.servers import running_server

METHODS = ("get", "post", "delete", "put", "patch")


class Documents:
    def __init__(self, openapi: dict[str, Any], schema: dict[str, Any]) -> None:
        self.openapi = openapi
        self.schema = schema
        self.checked: set[tuple[str, str, str]] = set()
        # Stricter than the document on purpose: a field the server sends but
        # the document does not name fails here too.
        for component in openapi["components"]["schemas"].values():
            if "properties" in component:
                component.setdefault("additionalProperties", False)
        jsonschema.Draft202012Validator.check_schema(schema)
        self.templates = [
            (
                re.compile(
                    "^"
                    + re.sub(
                        r"\{[^}]+\}",
                        "[^/]+",
                        re.escape(path).replace(r"\{", "{").replace(r"\}", "}"),
                    )
                    + "$"
                ),
                path,
            )
            for path in openapi["paths"]
        ]

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any]]:
        for pattern, template in sorted(self.templates, key=lambda t: "{" in t[1]):
            if pattern.match(path) and method in self.openapi["paths"][template]:
                return template, self.openapi["paths"][template][method]
        raise AssertionError(f"{method.upper()} {path} is not in the OpenAPI document")

    def check_response(self, r: httpx.Response) -> None:
        method = r.request.method.lower()
        if r.status_code in (404, 405) and not self.documented(method, r.request.url.path):
            # No operation: Starlette's own 404/405, answered as a problem.
            assert r.headers["content-type"] == "application/problem+json"
            self.validate(r.json(), {"$ref": "#/components/schemas/Problem"})
            self.checked.add((method, r.request.url.path, str(r.status_code)))
            return
        template, op = self.operation(method, r.request.url.path)
        responses = op["responses"]
        status = str(r.status_code)
        answer = responses.get(status)
        if answer is None:
            assert r.status_code >= 400, f"{method} {template}: {status} is not documented"
            answer = responses["default"]
        media = r.headers.get("content-type", "").partition(";")[0]
        content = answer.get("content")
        if content is None:
            assert not r.content, f"{method} {template} {status}: a body where none is documented"
        else:
            assert media in content, f"{method} {template} {status}: {media} not documented"
            if media.endswith("json"):
                self.validate(r.json(), content[media]["schema"])
        self.checked.add((method, template, status))

    def documented(self, method: str, path: str) -> bool:
        try:
            self.operation(method, path)
        except AssertionError:
            return False
        return True

    def validate(self, value: Any, schema: dict[str, Any]) -> None:
        schema = schema | {"components": self.openapi["components"]}
        jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator)

    def check_frame(self, kind: str, frame: str) -> None:
        schema = {"$ref": f"#/$defs/{kind}", "$defs": self.schema["$defs"]}
        jsonschema.validate(msgspec.json.decode(frame), schema, cls=jsonschema.Draft202012Validator)
        jsonschema.validate(msgspec.json.decode(frame), self.schema)


@pytest.fixture
async def documents_and_server() -> Any:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        openapi = (await http.get("/v1/openapi.json")).json()
        schema = (await http.get("/v1/schema.json")).json()
        yield Documents(openapi, schema), srv, http


def test_the_document_describes_every_http_route() -> None:
    from server.config import ServerConfig
    from server.web.application import create_app
    from server.web.openapi import openapi_document

    app = create_app(ServerConfig(store="memory"), configure_logging=False)
    documented = {
        (method, path) for path, ops in openapi_document()["paths"].items() for method in ops
    }
    served = set()
    for route in app.starlette.routes:
        if isinstance(route, Route) and not route.path.startswith(("/t/", "/static")):
            if route.path == "/" or route.path.endswith(".js"):
                continue  # the chat page and the client's modules, not the API
            path = re.sub(r":\w+}", "}", route.path)
            served |= {(m.lower(), path) for m in route.methods or () if m != "HEAD"}
    assert served == documented
    doc = openapi_document()
    assert doc["openapi"].startswith("3.1")
    for name in ("AppendBody", "CreateBody", "TranscriptSnapshot", "Problem", "Readiness"):
        assert name in doc["components"]["schemas"]


async def test_http_answers_fit_the_openapi_document(documents_and_server: Any) -> None:
    docs, srv, http = documents_and_server
    user = {"role": "user", "content": "hi"}
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    answers = [
        await http.post("/v1/transcripts", json={"id": "doc", "messages": [user]}),
        await http.post("/v1/transcripts", json={"id": "doc"}),
        await http.post("/v1/transcripts", content=b"{nope"),
        await http.post("/v1/transcripts", json={"id": 5}),
        await http.post("/v1/transcripts", json={"messages": [{"role": "x", "content": ""}]}),
        await http.get("/v1/transcripts"),
        await http.get("/v1/transcripts", params={"limit": "x"}),
        await http.get("/v1/transcripts/doc"),
        await http.get("/v1/transcripts/doc", params={"start": 0, "end": 1}),
        await http.get("/v1/transcripts/nope"),
        await http.post(
            "/v1/transcripts/doc/messages",
            json={"messages": [{"role": "assistant", "content": [image]}], "idempotencyKey": "k"},
        ),
        await http.post(
            "/v1/transcripts/doc/messages", json={"messages": [user], "idempotencyKey": "k"}
        ),
        await http.post(
            "/v1/transcripts/doc/messages", json={"messages": [user], "expectedRevision": 0}
        ),
        await http.post("/v1/transcripts/doc/messages", json={"messages": [{"role": "robot"}]}),
        await http.post("/v1/transcripts/doc/segments", json={"start": 1}),
        await http.post("/v1/transcripts/doc/segments", json={"start": 99}),
        await http.get("/v1/transcripts/doc/events", params={"after": 0}),
        await http.get("/v1/transcripts/doc/chat", params={"segment": "all"}),
        await http.get("/v1/transcripts/doc/export.lmml"),
        await http.get("/v1/transcripts/doc/export.lmmlz"),
        await http.post(
            "/v1/transcripts/import", params={"filename": "x.lmml"}, content=b"## user\nhello\n"
        ),
        await http.get("/healthz"),
        await http.get("/readyz"),
        await http.get("/metrics"),
        await http.get("/v1/openapi.json"),
        await http.get("/v1/schema.json"),
        await http.put("/v1/transcripts"),
        await http.get("/no/such/thing"),
    ]
    srv.app.lifecycle.draining = True
    answers.append(await http.get("/readyz"))
    srv.app.lifecycle.draining = False
    answers.append(await http.delete("/v1/transcripts/doc"))
    answers.append(await http.delete("/v1/transcripts/doc"))
    for r in answers:
        docs.check_response(r)
    assert {status for _, _, status in docs.checked} >= {
        "200", "201", "204", "400", "404", "405", "409", "422", "503",
    }  # fmt: skip
    bundle = next(r for r in answers if r.url.path.endswith(".lmmlz"))
    with zipfile.ZipFile(io.BytesIO(bundle.content)) as archive:
        assert archive.namelist()


async def test_websocket_frames_fit_the_json_schema(documents_and_server: Any) -> None:
    docs, srv, http = documents_and_server
    await http.post("/v1/transcripts", json={"id": "ws-doc"})
    ops = [
        '{"op":"subscribe","transcriptId":"ws-doc","ref":1}',
        '{"op":"append","transcriptId":"ws-doc","messages":[{"role":"user","content":"a"}],'
        '"idempotencyKey":"i1","ref":"a1"}',
        '{"op":"append","transcriptId":"ws-doc","messages":[{"role":"user","content":"b"}],'
        '"expectedRevision":0,"ref":"a2"}',
        '{"op":"startSegment","transcriptId":"ws-doc","start":1,"ref":"s"}',
        '{"op":"subscribe","transcriptId":"nope","ref":"n"}',
        '{"op":"subscribe","transcriptId":"ws-doc","fromRevision":0,"epoch":"x"}',
        '{"op":"unsubscribe","transcriptId":"ws-doc"}',
        '{"op":"ping","ref":"last"}',
    ]
    for op in ops:
        docs.check_frame("ClientOp", op)
    with pytest.raises(jsonschema.ValidationError):
        docs.check_frame("ClientOp", '{"op":"append","transcriptId":"x"}')
    kinds: set[str] = set()
    async with asyncio.timeout(10), websockets.connect(srv.ws_url, compression=None) as ws:
        for op in [*ops, "not json"]:
            await ws.send(op)
        while "pong" not in kinds or "error" not in kinds or len(kinds) < 5:
            message = await ws.recv(decode=True)
            for frame in split_frames(message):
                assert isinstance(frame, str)
                docs.check_frame("ServerFrame", frame)
                kinds.add(msgspec.json.decode(frame)["type"])
    assert kinds == {"baseline", "increment", "ack", "error", "pong"}
