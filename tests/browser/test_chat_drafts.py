"""Live drafts on the chat page, end to end: a Python client streams an answer
through a real server, the page shows it growing with a typing indicator and
swaps in the committed message in one DOM step, where the draft was; a
cancelled draft goes away."""

from __future__ import annotations

import pytest
from playwright.async_api import BrowserContext, expect

import client_py
from tests.browser.tabs import LIVE, WATCH_DRAFT_SWAP, open_tab
from tests.support.servers import running_server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

TWO_FRAMES = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
ANSWER = "Streaming **works**: each token arrives and the answer grows in place."
WORDS = ANSWER.split(" ")


async def test_a_streamed_draft_grows_on_the_page_and_becomes_its_message(
    context: BrowserContext,
) -> None:
    async with running_server() as srv, client_py.connect(srv.ws_url) as writer:
        await writer.create("page-drafts", [{"role": "user", "content": "Does streaming work?"}])
        tab = await open_tab(context, f"{srv.url}/t/page-drafts")
        page = tab.page
        await expect(page.locator("#status")).to_have_attribute("data-state", LIVE)
        await tab.wait_revision(1)
        draft = page.locator("#drafts li.message.draft")

        async with writer.draft("page-drafts", draft_id="answer") as d:
            for n, word in enumerate(WORDS):
                await d.write(word if n == 0 else " " + word)
                if n == 2:
                    # The answer so far, with the typing indicator, below the messages.
                    await expect(draft).to_have_count(1)
                    await expect(draft.locator(".body")).to_have_text("Streaming works: each")
                    await expect(draft.locator(".typing")).to_be_visible()
                    await expect(draft).to_have_attribute("aria-busy", "true")
            await expect(draft.locator(".body")).to_have_text(
                "Streaming works: each token arrives and the answer grows in place."
            )
            await page.evaluate(TWO_FRAMES)
            box = await draft.bounding_box()
            assert box is not None
            await page.evaluate(WATCH_DRAFT_SWAP)
            ack = await d.commit()
        assert ack.start == 1

        committed = page.locator('#messages li.message[data-index="1"]')
        await expect(committed).to_have_count(1)
        await expect(draft).to_have_count(0)
        await expect(committed.locator(".body")).to_have_text(
            "Streaming works: each token arrives and the answer grows in place."
        )
        batches = [b for b in await page.evaluate("window.__batches") if b]
        assert batches[0] == ["add 1", "remove draft"], batches
        # Measured once a frame was drawn: until then a message's box is its
        # `contain-intrinsic-block-size` (content-visibility: auto), which the
        # browser replaces before it paints (and which a loaded CI saw once).
        await page.evaluate(TWO_FRAMES)
        after = await committed.bounding_box()
        assert after is not None
        assert abs(after["y"] - box["y"]) <= 1 and abs(after["height"] - box["height"]) <= 1, (
            box,
            after,
        )

        # A cancelled draft leaves nothing behind.
        async with writer.draft("page-drafts", draft_id="dropped") as d:
            await d.write("never mind")
            await expect(draft.locator(".body")).to_have_text("never mind")
        await expect(draft).to_have_count(0)
        await expect(page.locator("#messages li.message")).to_have_count(2)
        assert tab.errors == []
