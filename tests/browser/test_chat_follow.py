"""Following the conversation: the page opens at the newest message, stays at the bottom while
the reader is there, never moves what they are reading when they have scrolled up, swaps a
draft for its committed message without a jump, and opens a 5,000-message transcript fast.

Timings are printed (run with ``-s`` to see them) and saved to
``test-artifacts/chat-page-timings.json``; the bounds asserted are generous on purpose (the
machine may be shared), the printed figures are the measurement.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from playwright.async_api import BrowserContext, Page, expect

from tests.browser.conftest import ARTIFACTS
from tests.browser.tabs import LIVE, WATCH_DRAFT_SWAP, Tab, open_tab
from tests.support.servers import running_server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

DISTANCE_FROM_BOTTOM = (
    "() => { const s = document.getElementById('main-chat');"
    " return s.scrollHeight - s.scrollTop - s.clientHeight; }"
)
TWO_FRAMES = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"


def chat(i: int) -> dict[str, Any]:
    """A message of a few lines, some with Markdown, so that 60 of them scroll."""
    if i % 2 == 0:
        return {"role": "user", "content": f"Question {i}: how does step {i} work?"}
    return {
        "role": "assistant",
        "content": f"Answer {i}.\n\n- first point of {i}\n- second point\n\n"
        f"`code {i}` and **bold**",
    }


async def create(http: httpx.AsyncClient, url: str, tid: str, n: int) -> None:
    assert (await http.post(f"{url}/v1/transcripts", json={"id": tid})).status_code == 201
    for start in range(0, n, 1000):
        batch = [chat(i) for i in range(start, min(n, start + 1000))]
        response = await http.post(f"{url}/v1/transcripts/{tid}/messages", json={"messages": batch})
        assert response.status_code == 201, response.text


async def append(http: httpx.AsyncClient, url: str, tid: str, *indices: int) -> None:
    response = await http.post(
        f"{url}/v1/transcripts/{tid}/messages", json={"messages": [chat(i) for i in indices]}
    )
    assert response.status_code == 201, response.text


async def distance(page: Page) -> float:
    return float(await page.evaluate(DISTANCE_FROM_BOTTOM))


async def open_live(context: BrowserContext, url: str, tid: str, revision: int) -> Tab:
    tab = await open_tab(context, f"{url}/t/{tid}")
    await expect(tab.page.locator("#status")).to_have_attribute("data-state", LIVE)
    await tab.wait_revision(revision)
    return tab


async def test_the_page_opens_at_the_newest_and_follows_while_at_the_bottom(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        await create(http, srv.url, "follow", 60)
        tab = await open_live(context, srv.url, "follow", 1)
        page = tab.page
        await expect(page.locator('li.message[data-index="59"]')).to_be_in_viewport()
        assert await distance(page) <= 2
        # Older messages are not rendered until the reader goes up to them.
        assert await page.locator("li.message").count() < 60
        await expect(page.locator("#jump")).to_be_hidden()

        for n in (60, 61):
            await append(http, srv.url, "follow", n)
            await expect(page.locator(f'li.message[data-index="{n}"]')).to_be_in_viewport()
            await page.evaluate(TWO_FRAMES)
            assert await distance(page) <= 2, f"left the bottom after message {n}"
        await expect(page.locator("#jump")).to_be_hidden()
        await expect(page.locator("#announcer")).to_have_text(
            "New message from assistant: Answer 61. first point of 61 second point code 61 and bold"
        )
        assert tab.errors == []


async def test_scrolled_up_nothing_moves_and_a_button_counts_new_messages(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        await create(http, srv.url, "reading", 60)
        tab = await open_live(context, srv.url, "reading", 1)
        page = tab.page
        scroller = page.locator("#main-chat")
        await scroller.hover()
        await page.mouse.wheel(0, -700)
        await page.wait_for_function(f"() => ({DISTANCE_FROM_BOTTOM})() > 600")
        await expect(page.locator("#jump")).to_be_visible()
        await page.evaluate(TWO_FRAMES)
        # What the reader is looking at: the first message in view and where it is.
        before = await page.evaluate("""() => {
            const top = document.getElementById('main-chat').getBoundingClientRect().top;
            const li = [...document.querySelectorAll('li.message')]
                .find(li => li.getBoundingClientRect().top >= top);
            return {index: li.dataset.index, top: li.getBoundingClientRect().top};
        }""")

        await append(http, srv.url, "reading", 60, 61)
        await expect(page.locator('li.message[data-index="61"]')).to_have_count(1)
        await page.evaluate(TWO_FRAMES)
        after = await page.evaluate(
            "i => document.querySelector(`li.message[data-index='${i}']`)"
            ".getBoundingClientRect().top",
            before["index"],
        )
        assert abs(after - before["top"]) <= 1, "the message being read moved"
        await expect(page.locator("#jump")).to_have_text("↓ 2 new messages")
        await expect(page.locator('li.message[data-index="61"]')).not_to_be_in_viewport()

        # The button takes the reader down, and following resumes.
        await page.locator("#jump").click()
        await page.wait_for_function(f"() => ({DISTANCE_FROM_BOTTOM})() <= 2")
        await expect(page.locator("#jump")).to_be_hidden()
        await append(http, srv.url, "reading", 62)
        await expect(page.locator('li.message[data-index="62"]')).to_be_in_viewport()

        # The keyboard scrolls the conversation too, and reaches the oldest message.
        await scroller.focus()
        for _ in range(200):
            if await page.evaluate(
                "document.querySelector('li.message[data-index=\"0\"]')"
                " && document.getElementById('main-chat').scrollTop === 0"
            ):
                break
            await page.keyboard.press("Home")
            await page.evaluate(TWO_FRAMES)
        await expect(page.locator('li.message[data-index="0"]')).to_be_in_viewport()
        assert tab.errors == []


DRAFT_TEXT = (
    "Here is the plan:\n\n1. read the file\n2. fix the bug\n\n```python\nprint('done')\n```"
)


async def test_a_draft_grows_and_becomes_its_message_without_a_jump(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        await create(http, srv.url, "drafts", 30)
        tab = await open_live(context, srv.url, "drafts", 1)
        page = tab.page
        # The draft grows word by word, as a streamed answer would.
        words = DRAFT_TEXT.split(" ")
        for n in range(1, len(words) + 1):
            await page.evaluate(
                "text => window.tsyncPage.timeline.showDraft("
                "'d1', {role: 'assistant', content: text})",
                " ".join(words[:n]),
            )
        draft = page.locator("#drafts li.message.draft")
        await expect(draft).to_have_count(1)
        await expect(draft).to_have_attribute("aria-busy", "true")
        await expect(draft.locator(".typing")).to_be_visible()
        await expect(draft.locator(".code-block .code-lang")).to_have_text("python")
        await page.evaluate(TWO_FRAMES)
        assert await distance(page) <= 2, "a growing draft keeps a follower at the bottom"
        box = await draft.bounding_box()
        assert box is not None

        # Watch every DOM change from here: the swap must be a single step.
        await page.evaluate(WATCH_DRAFT_SWAP)
        await page.evaluate("window.tsyncPage.timeline.commitDraft('d1', 30)")
        await expect(draft).to_have_count(1)  # it waits for its message
        response = await http.post(
            f"{srv.url}/v1/transcripts/drafts/messages",
            json={"messages": [{"role": "assistant", "content": DRAFT_TEXT}]},
        )
        assert response.status_code == 201
        committed = page.locator('#messages li.message[data-index="30"]')
        await expect(committed).to_have_count(1)
        await expect(draft).to_have_count(0)
        batches = [b for b in await page.evaluate("window.__batches") if b]
        assert batches[0] == ["add 30", "remove draft"], batches
        after = await committed.bounding_box()
        assert after is not None
        assert abs(after["y"] - box["y"]) <= 1 and abs(after["height"] - box["height"]) <= 1, (
            box,
            after,
        )
        await page.evaluate(TWO_FRAMES)
        assert await distance(page) <= 2

        # A draft that never becomes a message can be dropped.
        await page.evaluate(
            "window.tsyncPage.timeline.showDraft('d2', {role: 'assistant', content: 'hm'})"
        )
        await expect(draft).to_have_count(1)
        await page.evaluate("window.tsyncPage.timeline.dropDraft('d2')")
        await expect(draft).to_have_count(0)
        assert tab.errors == []


async def test_five_thousand_messages_open_fast_and_scroll_smoothly(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    n = 5000
    async with running_server() as srv:
        await create(http, srv.url, "long", n)
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.add_init_script("""
            window.__longTasks = [];
            new PerformanceObserver(list => { for (const e of list.getEntries())
                window.__longTasks.push(e.duration); }).observe({type: 'longtask', buffered: true});
        """)
        await page.goto(f"{srv.url}/t/long")
        last = page.locator(f'li.message[data-index="{n - 1}"]')
        await expect(last).to_be_in_viewport(timeout=30_000)
        opened = await page.evaluate("""() => ({
            lastMessageMs: performance.now(),
            firstContentfulPaintMs:
                performance.getEntriesByName('first-contentful-paint')[0]?.startTime,
            rendered: document.querySelectorAll('li.message').length,
        })""")
        await expect(page.locator("#status")).to_have_attribute("data-state", LIVE)

        # Scroll up as a reader flinging the wheel would, 400 px a frame (24,000 px/s at 60
        # frames a second) for 300 frames, measuring each frame's gap; older messages get
        # rendered on the way.
        await page.evaluate("window.__longTasks.length = 0")
        scrolled = await page.evaluate("""async () => {
            const s = document.getElementById('main-chat');
            const gaps = []; let last = performance.now(); const began = last;
            for (let frame = 0; frame < 300; frame += 1) {
                s.scrollTop -= 400;
                await new Promise(r => requestAnimationFrame(r));
                const now = performance.now(); gaps.push(now - last); last = now;
            }
            gaps.sort((a, b) => a - b);
            return {frames: gaps.length, totalMs: performance.now() - began,
                    medianFrameMs: gaps[gaps.length >> 1],
                    p95FrameMs: gaps[Math.floor(gaps.length * 0.95)],
                    maxFrameMs: gaps[gaps.length - 1],
                    rendered: document.querySelectorAll('li.message').length};
        }""")
        long_tasks = await page.evaluate("window.__longTasks")
        timings = {
            "messages": n,
            "open": opened,
            "scroll_up_300_frames": scrolled,
            "long_tasks_while_scrolling_ms": sorted(long_tasks, reverse=True)[:10],
        }
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "chat-page-timings.json").write_text(json.dumps(timings, indent=2))
        print(f"\n5,000-message transcript: {json.dumps(timings)}")

        assert opened["rendered"] < 200, "only the newest messages are rendered at first"
        assert opened["lastMessageMs"] < 10_000
        assert scrolled["rendered"] > 300, "scrolling up rendered older messages"
        assert scrolled["medianFrameMs"] < 100
        assert max(long_tasks, default=0) < 1_000
        assert errors == []


async def test_scrolled_to_the_top_older_messages_are_fetched_and_appear_in_order(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    """The page opens with the newest messages only (a windowed subscription);
    going up past the oldest one held fetches older ones from the server,
    which appear above, in order, without moving what the reader sees."""
    n = 700
    async with running_server() as srv:
        await create(http, srv.url, "history", n)
        tab = await open_live(context, srv.url, "history", 1)
        page = tab.page
        held = await page.evaluate("window.tsyncClient.mirror('history').start")
        assert 0 < held < n - 50, "the page holds only the newest messages"
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url) if "/messages?" in r.url else None)
        scroller = page.locator("#main-chat")
        await scroller.hover()
        # Bounded in time, not in scroll steps: a loaded machine draws fewer frames.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if await page.locator('li.message[data-index="0"]').count():
                break
            await page.evaluate("document.getElementById('main-chat').scrollTop = 0")
            await page.evaluate(TWO_FRAMES)
        await expect(page.locator('li.message[data-index="0"]')).to_have_count(1)
        indices = await page.evaluate(
            "[...document.querySelectorAll('li.message')].map(li => Number(li.dataset.index))"
        )
        assert indices == list(range(n)), "every message, once, in order"
        texts = await page.evaluate(
            "[0, 1, 350].map(i => document.querySelector(`li.message[data-index='${i}'] .body`)"
            ".textContent.trim())"
        )
        assert texts[0].startswith("Question 0") and texts[1].startswith("Answer 1")
        assert "Question 350" in texts[2]
        assert await page.evaluate("window.tsyncClient.mirror('history').start") == 0
        assert requests and all("epoch=" in url for url in requests)
        # The title comes from the first message although the page opened at the end.
        await expect(page.locator("#title")).to_have_text("Question 0: how does step 0 work?")
        assert tab.errors == []
