"""Presence on the chat page, end to end in Chromium: two tabs and a Python
client on one conversation; the line above the composer says how many
watch and who else is typing (the composer sets ``typing`` while its user
types and clears it on send)."""

from __future__ import annotations

import pytest
from playwright.async_api import BrowserContext, expect

import client_py
from protocol.presence import PresenceCopy
from tests.browser.tabs import LIVE, open_tab
from tests.support.servers import running_server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]


async def test_the_page_says_who_watches_and_who_is_typing(context: BrowserContext) -> None:
    async with (
        running_server(presence_interval_s=0.2) as srv,
        client_py.connect(srv.ws_url) as agent,
    ):
        await agent.create("page-presence", [{"role": "user", "content": "hello"}])
        ana = await open_tab(context, f"{srv.url}/t/page-presence?name=Ana")
        await expect(ana.page.locator("#status")).to_have_attribute("data-state", LIVE)
        line = ana.page.locator("#presence")
        await expect(line).to_have_text("1 watching")
        # localStorage is shared by the context's tabs: Bo names itself after Ana did.
        bo = await open_tab(context, f"{srv.url}/t/page-presence?name=Bo")
        await expect(line).to_have_text("2 watching")
        await agent.subscribe("page-presence")
        await agent.state_presence("page-presence", name="helper", kind="agent")
        await expect(line).to_have_text("3 watching")

        await bo.page.locator("#text").fill("I am writ")
        await expect(line).to_have_text("3 watching, Bo is typing")
        # Bo's own page does not say Bo is typing.
        await expect(bo.page.locator("#presence")).to_have_text("3 watching")
        await agent.state_presence("page-presence", state={"typing": True})
        await expect(line).to_have_text("3 watching, Bo and helper are typing")
        await agent.state_presence("page-presence", state={})
        await bo.page.locator("#text").press("Enter")  # sent: no longer typing
        await expect(line).to_have_text("3 watching")
        await expect(ana.page.locator('#messages li.message[data-index="1"]')).to_have_count(1)
        await bo.page.close()
        await expect(line).to_have_text("2 watching")
        assert ana.errors == [] and bo.errors == []


async def test_typing_ends_after_five_idle_seconds(context: BrowserContext) -> None:
    """The page's clock is Playwright's: five idle seconds pass at once."""
    async with (
        running_server(presence_interval_s=0.2) as srv,
        client_py.connect(srv.ws_url) as agent,
    ):
        await agent.create("page-idle", [{"role": "user", "content": "hello"}])
        mirror = await agent.subscribe("page-idle", presence=True)
        page = await context.new_page()
        await page.clock.install()
        await page.goto(f"{srv.url}/t/page-idle?name=Cy")
        await expect(page.locator("#status")).to_have_attribute("data-state", LIVE)

        def typing(presence: PresenceCopy | None) -> list[str]:
            assert presence is not None
            return [m.who for m in presence.listed() if m.state.get("typing")]

        said = "tsyncClient.core.subscriptions.get('page-idle').stated.state?.typing ?? false"

        await page.locator("#text").fill("half a thou")
        await mirror.wait_presence(lambda p: typing(p) == ["Cy"], 10)
        await page.clock.fast_forward(4000)
        await page.locator("#text").press_sequentially("ght")  # typing again: a new 5 s
        await page.clock.fast_forward(4000)
        assert await page.evaluate(said) is True  # 8 s since it began, 4 since the last key
        await page.clock.fast_forward(1500)
        assert await page.evaluate(said) is False
        presence = await mirror.wait_presence(lambda p: typing(p) == [], 10)
        assert [m.who for m in presence.listed()] == ["Cy"]  # still here, no longer typing
        await page.close()
