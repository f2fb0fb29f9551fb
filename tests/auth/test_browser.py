"""A real Chromium, a page of another site, and a local server that asks for no
credentials (the setup issue 16 found open to any page the user visits).

The other site is ``http://evil.test:<port>``: a second local server, its
name mapped to 127.0.0.1 inside Chromium (``--host-resolver-rules``). From
its page a WebSocket to the server, a ``text/plain`` POST, a form post, a
JSON POST (which needs a preflight) and an import must all fail, and nothing
may be created. DNS rebinding: ``evil.test`` on the server's own port is
refused by its Host. The server's own page does the same things and
succeeds, so that the refusals are the server's doing.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from tests.auth.conftest import SECRET, mint
from tests.browser.conftest import chromium
from tests.browser.tabs import png
from tests.support.servers import RunningServer, running_server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

# After tests.browser.conftest, which skips (or, in CI, fails) without Playwright.
from playwright.async_api import Browser, Page, expect  # noqa: E402

EVIL = "evil.test"

#: What the other site's page tries; each step reports what it saw.
ATTACKS = """async (target) => {
  const seen = {};
  seen.websocket = await new Promise((done) => {
    const ws = new WebSocket(`ws://${target}/v1/ws`);
    ws.onmessage = () => { seen.websocketData = true; };
    ws.onopen = () => ws.send(JSON.stringify({op: "subscribe", transcriptId: "secret"}));
    ws.onclose = (close) => done(close.code);
    setTimeout(() => done("timeout"), 5000);
  });
  const post = (path, init) =>
    fetch(`http://${target}${path}`, {method: "POST", ...init}).then(
      (r) => (r.type === "opaque" ? "opaque" : r.status), () => "blocked");
  seen.textPlain = await post("/v1/transcripts", {mode: "no-cors", body: '{"id": "pwned-text"}'});
  const blob = new Blob(['{"id": "pwned-blob"}']);
  seen.blob = await post("/v1/transcripts", {mode: "no-cors", body: blob});
  seen.json = await post("/v1/transcripts", {
    headers: {"content-type": "application/json"}, body: '{"id": "pwned-json"}'});
  seen.importText = await post("/v1/transcripts/import?id=pwned-import",
    {mode: "no-cors", body: "## user\\nhi\\n"});
  const frame = document.createElement("iframe");
  frame.name = "sink";
  document.body.append(frame);
  const form = document.createElement("form");
  Object.assign(form, {method: "post", target: "sink", enctype: "text/plain",
    action: `http://${target}/v1/transcripts`});
  const field = document.createElement("input");
  Object.assign(field, {name: '{"id": "pwned-form", "x": "', value: '"}'});
  form.append(field);
  document.body.append(form);
  seen.form = await new Promise((done) => {
    frame.onload = () => done("loaded");
    form.submit();
    setTimeout(() => done("timeout"), 5000);
  });
  return seen;
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium(f"--host-resolver-rules=MAP {EVIL} 127.0.0.1") as launched:
        yield launched


#: The paths the other site was asked for (its images: who looked at them).
EVIL_REQUESTS: list[str] = []


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def evil_site() -> AsyncIterator[str]:
    """A second local server: the other site's page (a blank one) and an image."""

    async def page(request: Any) -> Response:
        EVIL_REQUESTS.append(request.url.path)
        if request.url.path.endswith(".png"):
            return Response(png(4, 4), media_type="image/png")
        return HTMLResponse("<!doctype html><title>another site</title><body></body>")

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            Starlette(routes=[Route("/", page), Route("/{name}.png", page)]),
            host="127.0.0.1",
            port=port,
            log_config=None,
            lifespan="off",
        )
    )
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(10):
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event
            await asyncio.sleep(0.01)
    try:
        yield f"http://{EVIL}:{port}/"
    finally:
        server.should_exit = True
        await task


@pytest_asyncio.fixture(loop_scope="module")
async def srv() -> AsyncIterator[RunningServer]:
    async with running_server() as server:  # no credentials: the browser rules alone
        await server.hub.writes.create("secret", [{"role": "user", "content": "private"}])
        yield server


async def _page(browser: Browser, url: str) -> Page:
    context = await browser.new_context()
    context.set_default_timeout(10_000)
    page = await context.new_page()
    await page.goto(url)
    return page


async def _ids(srv: RunningServer) -> list[str]:
    return [i.transcript_id for i in await srv.hub.store.list()]


async def test_a_page_of_another_site_can_neither_connect_nor_change_anything(
    browser: Browser, evil_site: str, srv: RunningServer
) -> None:
    target = srv.url.removeprefix("http://")
    evil = await _page(browser, evil_site)
    seen = await evil.evaluate(ATTACKS, target)
    assert seen["websocket"] == 1008 and "websocketData" not in seen
    assert seen["json"] == "blocked"  # its preflight got no CORS answer
    assert await _ids(srv) == ["secret"]  # not one of the simple requests got through
    # The server's own page, doing the same, succeeds: the refusals were the server's.
    own = await _page(browser, srv.url + "/")
    mine = await own.evaluate(ATTACKS.replace("pwned", "own"), target)
    assert mine["websocketData"] is True and mine["json"] == 201
    assert "own-json" in await _ids(srv)
    await evil.context.close()
    await own.context.close()


async def test_dns_rebinding_meets_the_host_check(browser: Browser, srv: RunningServer) -> None:
    """``evil.test`` now resolves to the server: its pages are same-origin with
    the server as far as the browser knows; the server refuses their Host."""
    port = srv.url.rsplit(":", 1)[1]
    page = await _page(browser, f"http://{EVIL}:{port}/")
    assert "forbidden" in (await page.content())
    seen = await page.evaluate(ATTACKS, f"{EVIL}:{port}")
    assert seen["websocket"] == 1008
    assert seen["json"] in (403, "blocked")
    assert await _ids(srv) == ["secret"]
    await page.context.close()


# --- the page's credentials and images ---------------------------------------------------


async def test_the_page_takes_the_token_from_the_fragment_and_says_read_only(
    browser: Browser,
) -> None:
    reader = mint(audience=None, read=["t"])
    async with running_server(jwt_secret=SECRET) as server:
        await server.hub.writes.create("t", [{"role": "user", "content": "readable"}])
        page = await _page(browser, f"{server.url}/t/t#token={reader}")
        await expect(page.locator("#status")).to_have_attribute("data-state", "live")
        assert reader not in page.url  # off the address bar at once
        assert await page.evaluate("sessionStorage.getItem('tsync.token')") == reader
        await expect(page.locator("#access")).to_be_visible()
        await expect(page.get_by_label("Message", exact=True)).to_be_disabled()
        await expect(page.locator("#compose-disabled")).to_contain_text("read-only")
        await expect(page.locator("#messages")).to_contain_text("readable")
        await page.context.close()


async def test_without_a_token_the_page_asks_for_one_and_then_connects(
    browser: Browser,
) -> None:
    writer = mint(audience=None, read=["t"], write=["t"])
    async with running_server(jwt_secret=SECRET) as server:
        await server.hub.writes.create("t")
        page = await _page(browser, f"{server.url}/t/t")
        await expect(page.locator("#status")).to_have_attribute("data-state", "unauthorized")
        await expect(page.locator("#token-form")).to_be_visible()
        await page.get_by_label("Token").fill(writer)
        await page.get_by_role("button", name="Use this token").click()
        await expect(page.locator("#status")).to_have_attribute("data-state", "live")
        await expect(page.locator("#token-form")).to_be_hidden()
        await expect(page.locator("#access")).to_be_hidden()
        await expect(page.get_by_label("Message", exact=True)).to_be_enabled()
        await page.context.close()


@pytest.mark.parametrize("remote", [False, True])
async def test_remote_images_are_links_unless_the_server_allows_them(
    browser: Browser, evil_site: str, remote: bool
) -> None:
    image = f"{evil_site}{'allowed' if remote else 'tracker'}.png"
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": f"look ![pixel]({image}?md)"},
            {"type": "image_url", "image_url": {"url": image + "?part"}},
        ],
    }
    EVIL_REQUESTS.clear()
    async with running_server(page_remote_images=remote) as server:
        await server.hub.writes.create("img", [message])
        page = await _page(browser, f"{server.url}/t/img")
        await expect(page.locator("#status")).to_have_attribute("data-state", "live")
        links = page.locator("#messages a.remote-image")
        images = page.locator("#messages img")
        if remote:
            await expect(images).to_have_count(2)
            await page.wait_for_function(
                "() => [...document.querySelectorAll('#messages img')].every(i => i.complete)"
            )
            assert EVIL_REQUESTS.count("/allowed.png") == 2
        else:
            await expect(links).to_have_count(2)
            await expect(images).to_have_count(0)
            await expect(links.first).to_have_text("[image: pixel]")
            assert EVIL_REQUESTS == []  # the author's server never heard of this reader
        await page.context.close()
