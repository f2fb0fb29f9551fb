"""Every WebSocket op and every HTTP route, with every kind of credentials:
exactly the answer docs/protocol.md documents, and nothing changed in the
store when the answer is a refusal.

Kinds of credentials: none, a malformed token, a bad signature, an expired
token, a token for another audience, one that may only read the transcript,
one that may read and write another transcript only, an admin token and the
static token. The rights each needs are ``protocol.rights``'s table, which
this test does not consult: it states the answers itself.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec
import pytest
import pytest_asyncio
import websockets

from protocol import wire
from server.config import ServerConfig
from tests.auth.conftest import AUDIENCE, OTHER_SECRET, SECRET, STATIC, keep, mint
from tests.support.servers import RunningServer, running_server

pytestmark = pytest.mark.asyncio(loop_scope="module")

CREDENTIALS: dict[str, str | None] = {
    "none": None,
    "malformed": keep("abc.def.ghi"),
    "bad-signature": mint(secret=OTHER_SECRET, admin=True),
    "expired": mint(ttl=-30, admin=True),
    "wrong-audience": mint(audience="someone-else", admin=True),
    "read-only": mint(read=["t", "x-*"]),
    "write-other": mint(read=["other"], write=["other"]),
    "admin": mint("root", admin=True),
    "static": STATIC,
}
INVALID = ("malformed", "bad-signature", "expired", "wrong-audience")
READERS = ("read-only", "admin", "static")
WRITERS = ("admin", "static")
ADMINS = ("admin", "static")

USER = {"role": "user", "content": "hello"}
_n = itertools.count()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv() -> AsyncIterator[RunningServer]:
    config = ServerConfig(
        store="memory",
        token=STATIC,
        jwt_secret=SECRET,
        jwt_audience=AUDIENCE,
        log_level="debug",
        graceful_shutdown_s=2.0,
    )
    async with running_server(config) as server:
        for tid in ("t", "other", "x-1", "y-1"):
            await server.hub.writes.create(tid, [USER])
        yield server


def _headers(kind: str) -> dict[str, str]:
    token = CREDENTIALS[kind]
    return {"authorization": f"Bearer {token}"} if token else {}


async def _state(srv: RunningServer) -> list[tuple[str, int, int]]:
    return [(i.transcript_id, i.revision, i.length) for i in await srv.hub.store.list(limit=1000)]


# --- HTTP ---------------------------------------------------------------------------


def _route_cases() -> list[tuple[str, str, str, dict[str, Any], int]]:
    """(need, method, path, request options, status when allowed)."""
    lmml = {"content": b"## user\nhi\n", "headers": {"content-type": "text/markdown"}}
    return [
        ("admin", "POST", "/v1/transcripts", {"json": {"id": "new-{n}"}}, 201),
        ("admin", "POST", "/v1/transcripts/import", {**lmml, "params": {"id": "imp-{n}"}}, 201),
        ("admin", "DELETE", "/v1/transcripts/victim-{n}", {}, 204),
        ("list", "GET", "/v1/transcripts", {}, 200),
        ("list", "GET", "/v1/auth", {"params": {"transcriptId": "t"}}, 200),
        ("read", "GET", "/v1/transcripts/t", {}, 200),
        ("read", "GET", "/v1/transcripts/t/events", {"params": {"after": "0"}}, 200),
        ("read", "GET", "/v1/transcripts/t/chat", {}, 200),
        ("read", "GET", "/v1/transcripts/t/export.lmml", {}, 200),
        ("read", "GET", "/v1/transcripts/t/export.lmmlz", {}, 200),
        ("write", "POST", "/v1/transcripts/t/messages", {"json": {"messages": [USER]}}, 201),
        ("write", "POST", "/v1/transcripts/t/segments", {}, 201),
        ("read", "GET", "/v1/transcripts/t/messages", {"params": {"start": "0", "end": "1"}}, 200),
        ("read", "GET", "/v1/transcripts/t/views", {}, 200),
        ("read", "GET", "/v1/transcripts/t/usage", {}, 200),
        ("write", "PUT", "/v1/transcripts/t/views/v-{n}", {"json": {"start": 0}}, 201),
        ("write", "DELETE", "/v1/transcripts/t/views/gone-{n}", {}, 200),
    ]


def _allowed(need: str, kind: str) -> bool:
    return {
        "admin": kind in ADMINS,
        "list": True,
        "read": kind in READERS,
        "write": kind in WRITERS,
    }[need]


@pytest.mark.parametrize("kind", list(CREDENTIALS))
@pytest.mark.parametrize(
    ("need", "method", "path", "options", "ok"),
    _route_cases(),
    ids=[f"{m} {p}" for _, m, p, _, _ in _route_cases()],
)
async def test_http(
    srv: RunningServer,
    kind: str,
    need: str,
    method: str,
    path: str,
    options: dict[str, Any],
    ok: int,
) -> None:
    n = next(_n)
    path = path.format(n=n)
    options = msgspec.json.decode(msgspec.json.encode(options).replace(b"{n}", str(n).encode()))
    if "content" in options:
        options["content"] = options["content"].encode()
    if path.startswith("/v1/transcripts/victim"):
        await srv.hub.writes.create(path.rsplit("/", 1)[1])
    if path.endswith("/segments"):
        await srv.hub.writes.append("t", [USER])  # room for one more segment
    before = await _state(srv)
    headers = {**options.pop("headers", {}), **_headers(kind)}
    async with httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.request(method, path, headers=headers, **options)
    if kind == "none" or kind in INVALID:
        assert r.status_code == 401, r.text
        assert r.json()["code"] == "unauthorized"
        assert r.headers["www-authenticate"].startswith("Bearer")
    elif not _allowed(need, kind):
        assert r.status_code == 403, r.text
        problem = r.json()
        assert problem["code"] == "forbidden"
        # The transcript the right is missing on is named (the routes that name one).
        if "{transcript_id}" in _template(path):
            assert problem["transcriptId"] == path.split("/")[3]
            assert repr(path.split("/")[3]) in problem["detail"]
    else:
        assert r.status_code == ok, r.text
    if r.status_code >= 400:
        assert r.headers["content-type"] == "application/problem+json"
        assert await _state(srv) == before  # nothing changed


def _template(path: str) -> str:
    parts = path.split("/")
    return (
        "/".join(["", "v1", "transcripts", "{transcript_id}", *parts[4:]])
        if (len(parts) > 3 and parts[3] not in ("import",))
        else path
    )


@pytest.mark.parametrize("kind", ["read-only", "write-other", "admin", "static"])
async def test_list_shows_only_what_the_caller_may_read(srv: RunningServer, kind: str) -> None:
    async with httpx.AsyncClient(base_url=srv.url, headers=_headers(kind)) as http:
        listed = [
            t["transcriptId"] for t in (await http.get("/v1/transcripts")).json()["transcripts"]
        ]
        # Paging by one still finds every readable one (pages are filled, not cut).
        paged: list[str] = []
        after = ""
        while True:
            page = (await http.get("/v1/transcripts", params={"limit": 1, "after": after})).json()
            if not page["transcripts"]:
                break
            paged.append(after := page["transcripts"][0]["transcriptId"])
        info = (await http.get("/v1/auth", params={"transcriptId": "t"})).json()
    everything = [t for t, _, _ in await _state(srv)]
    expected = {
        "read-only": [t for t in everything if t == "t" or t.startswith("x-")],
        "write-other": ["other"],
    }.get(kind, everything)
    assert listed == paged == expected
    assert info["transcript"] == {
        "transcriptId": "t",
        "read": kind in READERS,
        "write": kind in WRITERS,
    }
    assert info["admin"] == (kind in ADMINS)
    assert info["sub"] == {"static": None, "admin": "root"}.get(kind, "alice")
    assert (info["expiresAt"] is None) == (kind == "static")


# --- WebSocket -------------------------------------------------------------------------


OPS: dict[str, dict[str, Any]] = {
    "subscribe": {"op": "subscribe", "transcriptId": "t"},
    "unsubscribe": {"op": "unsubscribe", "transcriptId": "t"},
    "append": {"op": "append", "transcriptId": "t", "messages": [USER]},
    "startSegment": {"op": "startSegment", "transcriptId": "t"},
    "setView": {"op": "setView", "transcriptId": "t", "name": "v", "start": 0},
    "leaveView": {"op": "leaveView", "transcriptId": "t", "name": "v"},
    "draft": {"op": "draft", "transcriptId": "t", "draftId": "d", "delta": "hi"},
    "ping": {"op": "ping"},
}


async def _exchange(
    url: str, headers: dict[str, str], *ops: dict[str, Any]
) -> tuple[list[wire.ServerFrame], int | None]:
    """Send ``ops`` (refs 0, 1, ...) and a last ping; the frames that came
    back until its pong (and the answers of appends, which are pipelined and
    may come after it), draft frames aside, and the close code if the server
    closed instead."""
    frames: list[wire.ServerFrame] = []
    appends = {ref for ref, op in enumerate(ops) if op["op"] == "append"}
    ended = False
    async with websockets.connect(url, additional_headers=headers, compression=None) as ws:
        try:
            for ref, op in enumerate(ops):
                await ws.send(msgspec.json.encode({**op, "ref": ref}).decode())
            await ws.send(msgspec.json.encode({"op": "ping", "ref": "end"}).decode())
            while True:
                for raw in wire.split_frames(await ws.recv()):
                    frame = wire.accept_transcript_update(raw)
                    if isinstance(frame, wire.Pong) and frame.ref == "end":
                        ended = True
                    elif isinstance(frame, wire.DraftFrame):
                        # The drafts the `draft` op's cases left open on the
                        # shared server, sent behind a baseline: not an answer.
                        continue
                    else:
                        frames.append(frame)
                        appends.discard(getattr(frame, "ref", None))  # type: ignore[arg-type]
                if ended and not appends:
                    return frames, None
        except websockets.ConnectionClosed:
            pass
        return frames, ws.close_code


@pytest.mark.parametrize("kind", list(CREDENTIALS))
@pytest.mark.parametrize("op", list(OPS))
async def test_websocket(srv: RunningServer, kind: str, op: str) -> None:
    if op == "startSegment":
        await srv.hub.writes.append("t", [USER])  # room for one more segment
    before = await _state(srv)
    frames, closed = await _exchange(srv.ws_url, _headers(kind), OPS[op])
    codes = [f.code for f in frames if isinstance(f, wire.ErrorFrame)]
    if kind in INVALID:
        # Refused at once, after the handshake: nothing read, nothing answered.
        assert (frames, closed) == ([], 4001)
    elif kind == "none":
        # Without credentials the first op must be `auth`: anything else is
        # answered `unauthorized` (naming the op's ref and transcript), then 4001.
        first = frames[0]
        assert isinstance(first, wire.ErrorFrame) and first.code == "unauthorized"
        assert first.ref == 0 and first.transcript_id == OPS[op].get("transcriptId")
        assert closed == 4001
    else:
        assert closed is None
        need = {
            "subscribe": "read",
            "append": "write",
            "startSegment": "write",
            "setView": "write",
            "leaveView": "write",
            "draft": "write",
        }.get(op)
        allowed = need is None or kind in (READERS if need == "read" else WRITERS)
        if not allowed:
            assert codes == ["forbidden"]
            (error,) = frames
            assert isinstance(error, wire.ErrorFrame)
            assert (error.ref, error.transcript_id) == (0, "t")
            assert "'t'" in error.message
        else:
            expected = {
                "subscribe": [wire.Baseline],
                "unsubscribe": [],
                "append": [wire.Ack],
                "startSegment": [wire.Ack],
                "setView": [wire.Ack],
                "leaveView": [wire.Ack],
                "draft": [wire.Ack],
                "ping": [wire.Pong],
            }[op]
            assert [type(f) for f in frames] == expected, frames
    if codes or closed:
        assert await _state(srv) == before  # nothing changed


@pytest.mark.parametrize("kind", [k for k in CREDENTIALS if k != "none"])
async def test_the_auth_op_brings_credentials_to_a_connection_made_without(
    srv: RunningServer, kind: str
) -> None:
    token = CREDENTIALS[kind]
    frames, closed = await _exchange(
        srv.ws_url, {}, {"op": "auth", "token": token}, OPS["subscribe"], OPS["append"]
    )
    if kind in INVALID:
        assert closed == 4001
        first = frames[0]
        assert isinstance(first, wire.ErrorFrame)
        assert (first.code, first.ref) == ("unauthorized", 0)
        return
    assert closed is None
    pong = frames[0]
    assert isinstance(pong, wire.Pong) and pong.ref == 0
    answers = [  # the append's own increment aside
        type(f).__name__ if not isinstance(f, wire.ErrorFrame) else f.code
        for f in frames[1:]
        if not isinstance(f, wire.Increment)
    ]
    assert answers == {
        "read-only": ["Baseline", "forbidden"],
        "write-other": ["forbidden", "forbidden"],
    }.get(kind, ["Baseline", "Ack"])


async def test_an_auth_op_without_a_token_is_invalid_and_the_connection_is_closed_in_time() -> None:
    """A connection that never brings credentials is closed (4001) after
    ``auth_timeout_s``; an ``auth`` op without a token is an invalid frame."""
    async with (
        running_server(jwt_secret=SECRET, auth_timeout_s=0.3) as srv,
        websockets.connect(srv.ws_url) as ws,
    ):
        await ws.send('{"op":"auth","ref":"a"}')
        error = wire.accept_transcript_update(await ws.recv())
        assert isinstance(error, wire.ErrorFrame) and error.code == "invalid-frame"
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 4001
