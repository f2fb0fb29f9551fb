"""The React component of client_js/README.md, as written, rendered by React 19
in Chromium against a real server: it shows the baseline, then live messages,
then a draft growing and its commit (never both, never neither).

The component is bundled with the packed npm package and React (esbuild from
tests/js_package) and served by a static server of its own, on another origin
than the sync server's, which lets it in with ``allowed_origins``: how an app
that embeds the client is deployed."""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, Page, expect

import client_py
from tests.js_package import npm
from tests.support.servers import running_server

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.browser, pytest.mark.slow]

MAIN = """
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { LiveTranscript } from "./LiveTranscript.tsx";

const params = new URLSearchParams(location.search);
createRoot(document.getElementById("root")).render(
  <StrictMode>
    <LiveTranscript url={params.get("url")} transcriptId={params.get("id")} />
  </StrictMode>,
);
"""
HTML = (
    '<!doctype html><meta charset="utf-8"><div id="root"></div>'
    '<script type="module" src="app.js"></script>'
)


WATCH_ONCE = """() => {
  window.notOnce = 0;
  const count = () =>
    [...document.querySelectorAll("li")].filter((li) => li.textContent.includes("Growing")).length;
  new MutationObserver(() => {
    if (count() !== 1) window.notOnce += 1;
  }).observe(document.body, { subtree: true, childList: true, characterData: true });
}"""


@contextlib.contextmanager
def static_site(folder: Path) -> Iterator[str]:
    """``folder`` served over HTTP on 127.0.0.1 (a thread); yields its origin."""
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def readme_component() -> str:
    return npm.readme_block("React", "React component")


def bundle(folder: Path) -> None:
    """The README's component, React and the packed package, as one ES module."""
    npm.tools()
    npm.install(npm.pack(folder))
    (folder / "LiveTranscript.tsx").write_text(readme_component())
    (folder / "main.jsx").write_text(MAIN)
    npm.bundle_for_browser(folder / "main.jsx", folder / "app.js")


async def test_the_readme_component_renders_a_live_transcript_with_drafts(
    context: BrowserContext, tmp_path: Path
) -> None:
    bundle(tmp_path)  # app.js beside index.html
    (tmp_path / "index.html").write_text(HTML)
    with static_site(tmp_path) as site:
        async with (
            running_server(allowed_origins=site) as srv,
            client_py.connect(srv.url) as writer,
        ):
            await writer.create("react-1", [{"role": "user", "content": "hello from the baseline"}])
            page = await context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            # The server's URL as the Python client takes it (http://host:port).
            await page.goto(f"{site}/index.html?url={srv.url}&id=react-1")
            await live_transcript(page, writer)
            assert errors == []


async def live_transcript(page: Page, writer: client_py.Client) -> None:
    items = page.locator("li")
    await expect(items).to_have_count(1)
    await expect(items.nth(0)).to_contain_text("hello from the baseline")
    await expect(page.locator(".status")).to_have_text(re.compile("live|resynced"))

    await writer.append("react-1", [{"role": "assistant", "content": "a live answer"}])
    await expect(items).to_have_count(2)
    await expect(items.nth(1)).to_contain_text("a live answer")

    async with writer.draft("react-1") as draft:
        await draft.write("Grow")
        await expect(page.locator("li.draft")).to_contain_text("Grow")
        await draft.write("ing")
        await expect(page.locator("li.draft")).to_contain_text("Growing")
        # From here on, every DOM change must show the answer exactly once.
        await page.evaluate(WATCH_ONCE)
        await draft.commit()
    await expect(page.locator("li.draft")).to_have_count(0)
    await expect(items).to_have_count(3)
    await expect(items.nth(2)).to_contain_text("Growing")
    assert await page.evaluate("window.notOnce") == 0
