"""The page after issue "Third contact" (item 9): the presence line sits in the column, an empty
conversation says so and how to add to it, and a ``#token=`` link opened in a tab already on
the page is taken."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import BrowserContext, expect

from tests.auth.conftest import SECRET, mint
from tests.browser.tabs import LIVE, open_tab
from tests.support.servers import running_server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]


async def test_the_presence_line_sits_in_the_column(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server(presence_interval_s=0.2) as srv:
        await http.post(
            f"{srv.url}/v1/transcripts",
            json={"id": "wide", "messages": [{"role": "user", "content": "hi"}]},
        )
        tab = await open_tab(context, f"{srv.url}/t/wide?name=Ana")
        page = tab.page
        await page.set_viewport_size({"width": 1400, "height": 800})
        await expect(page.locator("#presence")).to_have_text("1 watching")
        line = await page.locator("#presence").bounding_box()
        box = await page.locator(".compose-box").bounding_box()
        assert line is not None and box is not None
        # In the composer's column (48rem wide, centred), not at the window's left edge.
        assert box["x"] <= line["x"] <= box["x"] + 16, (line, box)
        assert line["x"] + line["width"] <= box["x"] + box["width"] + 1
        assert tab.errors == []


async def test_an_empty_conversation_says_so_and_how_to_add(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        await http.post(f"{srv.url}/v1/transcripts", json={"id": "blank", "messages": []})
        tab = await open_tab(context, f"{srv.url}/t/blank")
        page = tab.page
        await expect(page.locator("#status")).to_have_attribute("data-state", LIVE)
        empty = page.locator("#empty")
        await expect(empty).to_be_visible()
        await expect(empty.get_by_role("heading")).to_have_text("No messages yet")
        await expect(empty).to_contain_text("POST /v1/transcripts/blank/messages")
        await tab.send("first words")
        await expect(page.locator("#messages li.message")).to_have_count(1)
        await expect(empty).to_be_hidden()
        assert tab.errors == []


async def test_a_token_link_opened_in_a_tab_on_the_page_is_taken(
    context: BrowserContext,
) -> None:
    async with running_server(jwt_secret=SECRET) as srv:
        await srv.hub.writes.create("t")
        tab = await open_tab(context, f"{srv.url}/t/t")
        page = tab.page
        await expect(page.locator("#token-form")).to_be_visible()
        # Only the fragment changes, as when a link to this page is opened in this tab.
        await page.evaluate(
            "t => { location.hash = 'token=' + t; }", mint(admin=True, audience=None)
        )
        await expect(page.locator("#status")).to_have_attribute("data-state", LIVE)
        await expect(page.locator("#token-form")).to_be_hidden()
        assert "token" not in page.url
        await expect(page.locator("#empty")).to_be_visible()
