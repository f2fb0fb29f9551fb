"""Host, Origin, media types and CORS, as a browser would send them (the
headers set by hand here; ``test_browser.py`` has a real one)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import websockets

from server.config import ServerConfig
from server.errors import Refused
from server.web.origins import OriginPolicy
from server.web.problems import problem_response
from tests.support.servers import RunningServer, running_server

USER = {"role": "user", "content": "hi"}


async def _ws_close(srv: RunningServer, host: str | None = None, **headers: str) -> int | None:
    """The close code the server answers a WebSocket with these headers (and
    this ``Host``) with (``None``: it served the connection)."""
    port = int(srv.url.rsplit(":", 1)[1])
    url = srv.ws_url if host is None else f"ws://{host}/v1/ws"
    # host/port: where to connect, whatever the URL names (as DNS rebinding does).
    async with websockets.connect(
        url, additional_headers=headers, host="127.0.0.1", port=port
    ) as ws:
        try:
            await ws.send('{"op":"ping","ref":1}')
            await ws.recv()
        except websockets.ConnectionClosed:
            return ws.close_code
    return None


async def _ids(http: httpx.AsyncClient) -> list[str]:
    return [t["transcriptId"] for t in (await http.get("/v1/transcripts")).json()["transcripts"]]


async def test_a_loopback_server_serves_only_loopback_host_names() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        port = srv.url.rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "app.localhost", "[::1]:80"):
            assert (await http.get("/healthz", headers={"host": host})).status_code == 200, host
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):
            r = await http.get("/v1/transcripts", headers={"host": host})
            assert r.status_code == 403 and r.json()["code"] == "forbidden", host
            assert "allowed_hosts" in r.json()["detail"]
        # DNS rebinding reaches the WebSocket the same way: refused with 1008.
        assert await _ws_close(srv, host=f"evil.example:{port}") == 1008


async def test_allowed_hosts_adds_names_and_keeps_probes_and_loopback_working() -> None:
    """Behind ``--allowed-hosts tsync.example.com`` (docs/deploy.md): the
    named hosts pass, other names are refused, and a probe or the local CLI
    calling by IP (``Host: 127.0.0.1``) still gets its answer."""
    async with (
        running_server(allowed_hosts="tsync.example.com, *.tsync.example.com") as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        port = srv.url.rsplit(":", 1)[1]
        for host, status in (
            ("tsync.example.com", 200),
            ("eu.tsync.example.com:8443", 200),
            (f"127.0.0.1:{port}", 200),  # the local CLI, a probe on the machine
            ("localhost", 200),
            ("example.com", 403),
        ):
            r = await http.get("/v1/transcripts", headers={"host": host})
            assert r.status_code == status, host
        for path in ("/healthz", "/readyz", "/metrics", "/"):
            r = await http.get(path, headers={"host": f"127.0.0.1:{port}"})
            assert r.status_code == 200, path
        # The probes answer whatever the Host (a load balancer asks by its own IP).
        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await http.get(path, headers={"host": "10.0.0.7"})).status_code == 200
        assert (await http.get("/", headers={"host": "10.0.0.7"})).status_code == 403
        assert await _ws_close(srv, host=f"evil.example:{port}") == 1008
        assert await _ws_close(srv, host=f"127.0.0.1:{port}") is None


def _scope(path: str, host: str, arrived_on: str, kind: str = "http") -> dict[str, Any]:
    return {
        "type": kind,
        "path": path,
        "headers": [(b"host", host.encode())],
        "server": (arrived_on, 8765),
        "method": "GET",
    }


def test_the_host_rule_for_requests_that_arrive_on_another_address() -> None:
    """Through a load balancer (the request arrives on the machine's own
    address): a loopback name in ``Host`` is no pass there, probes are."""
    policy = OriginPolicy(ServerConfig(allowed_hosts="tsync.example.com"))
    assert policy.host_refusal(_scope("/v1/transcripts", "tsync.example.com", "10.0.0.7")) is None
    assert policy.host_refusal(_scope("/v1/transcripts", "127.0.0.1", "10.0.0.7")) is not None
    assert policy.host_refusal(_scope("/", "10.0.0.7:8765", "10.0.0.7")) is not None
    assert policy.host_refusal(_scope("/healthz", "10.0.0.7:8765", "10.0.0.7")) is None
    assert policy.host_refusal(_scope("/readyz", "10.0.0.7:8765", "10.0.0.7")) is None
    assert policy.host_refusal(_scope("/healthz", "evil", "10.0.0.7", "websocket")) is not None
    # Without allowed_hosts, only loopback arrivals are checked.
    default = OriginPolicy(ServerConfig())
    assert default.host_refusal(_scope("/v1/transcripts", "anything", "10.0.0.7")) is None
    assert default.host_refusal(_scope("/v1/transcripts", "evil.example", "127.0.0.1")) is not None


async def test_pages_of_other_origins_cannot_connect_or_change_anything() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        own = srv.url  # http://127.0.0.1:PORT
        assert await _ws_close(srv, Origin=own) is None
        assert await _ws_close(srv, Origin="http://localhost:5173") is None  # a local dev page
        for evil in ("http://evil.example", "https://127.0.0.1.evil.example", "null"):
            assert await _ws_close(srv, Origin=evil) == 1008, evil
            r = await http.post("/v1/transcripts", json={"id": "x"}, headers={"origin": evil})
            assert r.status_code == 403 and r.json()["code"] == "forbidden"
        assert await _ids(http) == []
        # Reading is CORS's business (no CORS answer: the browser hides it), not refused here.
        assert (
            await http.get("/v1/transcripts", headers={"origin": "http://evil.example"})
        ).status_code == 200
        r = await http.post("/v1/transcripts", json={"id": "mine"}, headers={"origin": own})
        assert r.status_code == 201
        # No Origin: not a page (a program, this test): served.
        assert await _ws_close(srv) is None


async def test_allowed_origins_replaces_the_loopback_pages_but_not_the_own_origin() -> None:
    async with running_server(allowed_origins="https://app.example.com") as srv:
        assert await _ws_close(srv, Origin="https://app.example.com") is None
        assert await _ws_close(srv, Origin=srv.url) is None
        assert await _ws_close(srv, Origin="http://localhost:5173") == 1008


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", b'{"id": "x"}'),
        ("application/x-www-form-urlencoded", b"id=x"),
        (
            "multipart/form-data; boundary=b",
            b'--b\r\nContent-Disposition: form-data; name="id"\r\n\r\nx\r\n--b--\r\n',
        ),
        (None, b'{"id": "x"}'),
    ],
)
async def test_a_state_changing_body_must_be_json_when_a_page_sends_it(
    content_type: str | None, body: bytes
) -> None:
    """What a page of another site may send without a preflight is refused
    (415) even where its Origin is allowed; programs may leave the type out."""
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        headers = {"origin": srv.url}
        if content_type:
            headers["content-type"] = content_type
        for path in ("/v1/transcripts", "/v1/transcripts/import"):
            r = await http.post(path, content=body, headers=headers)
            assert r.status_code == 415 and r.json()["code"] == "unsupported-media-type"
        await srv.hub.writes.create("t")
        r = await http.post(
            "/v1/transcripts/t/messages", content=b'{"messages": []}', headers=headers
        )
        assert r.status_code == 415
        assert await _ids(http) == ["t"]
        if content_type is None:  # the same from a program: served
            r = await http.post("/v1/transcripts", content=body)
            assert r.status_code == 201


async def test_imports_take_the_lmml_types_and_empty_bodies_need_none() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.post(
            "/v1/transcripts/import",
            content=b"## user\nhi\n",
            headers={"content-type": "text/markdown; charset=utf-8", "origin": srv.url},
        )
        assert r.status_code == 201
        tid = r.json()["transcriptId"]
        await srv.hub.writes.append(tid, [USER])
        # A segment start needs no body, so no type either.
        r = await http.post(f"/v1/transcripts/{tid}/segments", headers={"origin": srv.url})
        assert r.status_code == 201


async def test_cors_origins_get_answers_and_preflights_others_do_not() -> None:
    app_origin = "https://app.example.com"
    async with (
        running_server(cors_origins=app_origin) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        preflight: dict[str, Any] = {
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
        }
        ok = await http.options("/v1/transcripts", headers={**preflight, "origin": app_origin})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == app_origin
        assert "authorization" in ok.headers["access-control-allow-headers"].lower()
        evil = await http.options(
            "/v1/transcripts", headers={**preflight, "origin": "https://evil.example"}
        )
        assert "access-control-allow-origin" not in evil.headers
        r = await http.post("/v1/transcripts", json={"id": "c"}, headers={"origin": app_origin})
        assert r.status_code == 201
        assert r.headers["access-control-allow-origin"] == app_origin
        r = await http.get("/v1/transcripts/c", headers={"origin": app_origin})
        assert "x-transcript-revision" in r.headers.get("access-control-expose-headers", "") or (
            r.headers["access-control-allow-origin"] == app_origin
        )
        # A CORS origin may use the WebSocket too.
        assert await _ws_close(srv, Origin=app_origin) is None


def test_unavailable_and_rate_limited_answers_say_when_to_retry() -> None:
    for code in ("unavailable", "rate-limited"):
        assert problem_response(Refused(code, "later")).headers["retry-after"] == "1"
    assert "retry-after" not in problem_response(Refused("not-found", "no")).headers


@pytest.mark.parametrize("remote", [False, True])
async def test_the_page_loads_remote_images_only_when_allowed(remote: bool) -> None:
    async with running_server(page_remote_images=remote) as srv, httpx.AsyncClient() as http:
        page = await http.get(f"{srv.url}/t/x")
        policy = page.headers["content-security-policy"]
        img = next(p for p in policy.split(";") if p.strip().startswith("img-src"))
        assert ("https:" in img) == remote and "data:" in img
        assert f'data-remote-images="{"on" if remote else "off"}"' in page.text
