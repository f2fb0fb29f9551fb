"""Health, readiness, metrics, the access log and answers to unknown routes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
import websockets

from protocol.wire import Pong
from server.web.application import create_app
from tests.support.servers import running_server
from tests.support.waiting import until
from tests.support.wsclient import RawClient


def problem(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["code"] == code and body["detail"]
    return body


async def test_healthz_is_liveness_and_readyz_readiness() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        health = await http.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        ready = await http.get("/readyz")
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
        srv.app.lifecycle.draining = True
        draining = await http.get("/readyz")
        assert draining.status_code == 503
        assert draining.json()["status"] == "unready" and "draining" in draining.json()["reason"]
        assert (await http.get("/healthz")).status_code == 200  # still alive
        srv.app.lifecycle.draining = False


async def test_a_draining_server_refuses_new_websockets() -> None:
    async with running_server() as srv:
        srv.app.lifecycle.draining = True
        # Accepted, then closed with 1001: a close code every client (browsers
        # too) can read, saying "the server goes away: reconnect with backoff".
        async with websockets.connect(srv.ws_url) as ws:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        srv.app.lifecycle.draining = False
        async with await RawClient.connect(srv.ws_url) as c:
            await c.send(op="ping", ref="x")
            assert isinstance(await c.recv(), Pong)


async def test_unknown_routes_and_methods_are_problems() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        problem(await http.get("/no/such/path"), 404, "not-found")
        problem(await http.get("/v1/nope"), 404, "not-found")
        wrong = await http.put("/v1/transcripts")
        problem(wrong, 405, "method-not-allowed")
        assert set(wrong.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD", "POST"}
        problem(await http.delete("/healthz"), 405, "method-not-allowed")


def _metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition ``text``."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    head = f"{name}{{{want}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(head + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {head}")


async def test_metrics_count_requests_by_route_template_and_status() -> None:
    async with running_server() as srv, httpx.AsyncClient(base_url=srv.url) as http:
        await http.post("/v1/transcripts", json={"id": "m1"})
        await http.post("/v1/transcripts", json={"id": "m2"})
        await http.get("/v1/transcripts/m1")
        await http.get("/v1/transcripts/m2")
        await http.get("/v1/transcripts/nope")
        await http.get("/whatever/x1")
        await http.get("/whatever/x2")
        text = (await http.get("/metrics")).text
        route = "/v1/transcripts/{transcript_id}"
        count = _metric(text, "tsync_http_requests_total", method="GET", route=route, status="200")
        assert count == 2
        assert _metric(text, "tsync_http_requests_total", method="GET", route=route, status="404")
        unmatched = {"method": "GET", "route": "<unmatched>", "status": "404"}
        assert _metric(text, "tsync_http_requests_total", **unmatched) == 2
        assert "x1" not in text  # paths never become labels
        duration = "tsync_http_request_duration_seconds_count"
        assert _metric(text, duration, method="POST", route="/v1/transcripts", status="201") == 2
        # The standard process collector, and no _created series.
        assert _metric(text, "process_resident_memory_bytes") > 0
        assert _metric(text, "process_cpu_seconds_total") >= 0
        assert "_created" not in text


async def test_the_access_log_has_method_route_status_duration_and_no_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with running_server(token="s3cret") as srv, httpx.AsyncClient(base_url=srv.url) as http:
        headers = {"authorization": "Bearer s3cret"}
        await http.post("/v1/transcripts", json={"id": "logged"}, headers=headers)
        await http.get("/v1/transcripts/logged?token=s3cret&start=0", headers=headers)
        assert (await http.get("/v1/transcripts/logged?token=s3cre")).status_code == 401
        async with await RawClient.connect(srv.ws_url + "?token=s3cret") as c:
            await c.send(op="ping", ref="p")
            await c.recv()
        async with await RawClient.connect(srv.ws_url + "?token=wrong") as refused_ws:
            with pytest.raises(websockets.ConnectionClosed):
                await refused_ws.recv()
        await until(lambda: not srv.hub.subscriptions.connections)
    access = [r for r in caplog.records if r.name == "tsync.access"]
    assert not [r for r in access if r.route == "<unmatched>"]  # type: ignore[attr-defined]
    get = next(r for r in access if getattr(r, "method", "") == "GET")
    assert get.getMessage().startswith("GET /v1/transcripts/{transcript_id} 200 ")
    assert get.route == "/v1/transcripts/{transcript_id}"  # type: ignore[attr-defined]
    assert get.status == 200 and get.duration_ms >= 0  # type: ignore[attr-defined]
    ws = [r for r in caplog.records if r.name == "tsync.ws"]
    closed = next(r for r in ws if r.getMessage() == "connection closed")
    assert closed.code == 1000  # type: ignore[attr-defined]
    refused = next(r for r in ws if r.getMessage().startswith("connection refused"))
    assert refused.code == 4001  # type: ignore[attr-defined]
    # Nothing the server logged says the token, nor comes from uvicorn's
    # access logger (the test's own httpx client logs its URLs: not ours).
    ours = [r for r in caplog.records if r.name.startswith(("tsync", "uvicorn"))]
    every = [r.getMessage() + repr(r.__dict__) for r in ours]
    assert not [line for line in every if "s3cret" in line or "token=wrong" in line]
    assert not [r for r in ours if r.name in ("uvicorn.access", "uvicorn.error")]
    assert not [r for r in ours if r.getMessage() == "connection open"]  # websockets' own


def test_building_the_app_installs_one_handler_that_follows_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from server.config import load_config

    config = load_config({"TSYNC_STORE": "memory", "TSYNC_LOG_FORMAT": "json"})
    create_app(config)
    create_app(config)  # a second build replaces the first one's handler
    logging.getLogger("tsync.test").warning("hello", extra={"n": 1})
    lines = [line for line in capsys.readouterr().err.splitlines() if "hello" in line]
    assert len(lines) == 1 and '"logger":"tsync.test"' in lines[0] and '"n":1' in lines[0]
    create_app(load_config({"TSYNC_STORE": "memory"}))  # back to text for the other tests


async def test_a_client_gone_mid_body_is_one_access_line_not_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with running_server() as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/transcripts HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99\r\n\r\n{"
        )
        await writer.drain()
        writer.close()
        await writer.wait_closed()

        def gone() -> bool:
            return any(
                r.getMessage().startswith("POST /v1/transcripts 499") for r in caplog.records
            )

        await until(gone)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
