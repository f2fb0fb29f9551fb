"""How the page looks and how it is used: screenshots (light, dark, a 390 px phone), WCAG AA
contrast measured on every visible text, the conversation list on a phone, an unknown id,
keyboard-only use, and a composer that says why it cannot send.

Screenshots go to ``test-artifacts/``; with ``TSYNC_UPDATE_SCREENSHOTS=1`` they also replace
the ones in ``docs/`` that the README shows.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, Page, WebSocketRoute, expect

from tests.browser.conftest import ARTIFACTS, ROOT
from tests.browser.tabs import LIVE, PROBES, open_tab, png
from tests.support.servers import running_server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

DOCS = ROOT / "docs"
UPDATE_DOCS = os.environ.get("TSYNC_UPDATE_SCREENSHOTS") == "1"

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a concise assistant. Answer with code when it helps."},
    {"role": "user", "content": "What's the weather in Paris this week? Can you chart it?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"city": "Paris", "forecast": [18, 21, 19], "unit": "C"}',
    },
    {
        "role": "assistant",
        "content": (
            "Here is the **3-day forecast** for Paris:\n\n"
            "| Day | Temp (°C) | Sky |\n|---|---:|:---:|\n"
            "| Mon | 18 | sunny |\n| Tue | 21 | cloudy |\n| Wed | 19 | rain |\n\n"
            "The mean is $\\bar t = \\frac{18 + 21 + 19}{3} \\approx 19.3$ °C.\n\n"
            "To chart it:\n\n"
            "```python\nimport matplotlib.pyplot as plt\n\n"
            'temps = [18, 21, 19]  # °C\nplt.plot(["Mon", "Tue", "Wed"], temps, marker="o")\n'
            'plt.title("Paris, next 3 days")\nplt.show()\n```\n\n'
            "- [x] fetched the forecast\n- [ ] ~~book a picnic~~\n\n"
            'Save it with `plt.savefig("week.png")`; see [matplotlib](https://matplotlib.org).'
        ),
    },
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Nice! This is the chart I made:"},
            {
                "type": "image_url",
                "image_url": {
                    "url": "data:image/png;base64," + base64.b64encode(png(240, 120)).decode()
                },
            },
        ],
    },
]
TWO_FRAMES = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
DRAFT = {"role": "assistant", "content": "Looks good. To make the line smoother, pass"}

LOW_CONTRAST = (PROBES / "low_contrast.js").read_text()


async def show_conversation(page: Page, url: str) -> None:
    await page.goto(url)
    await expect(page.locator("#status")).to_have_attribute("data-state", LIVE)
    await expect(page.locator("li.message")).to_have_count(len(CONVERSATION))
    await expect(page.locator(".code-block code .hljs-keyword").first).to_be_visible()
    await expect(page.locator(".math.typeset .katex")).to_have_count(1)
    await page.wait_for_function("() => document.fonts.status === 'loaded'")
    await page.wait_for_function("[...document.images].every(i => i.complete && i.naturalWidth)")
    await page.evaluate("d => window.tsyncPage.timeline.showDraft('draft', d)", DRAFT)
    await page.evaluate(TWO_FRAMES)


def save(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


async def test_screenshots_and_contrast_in_light_and_dark_and_on_a_phone(
    browser: Browser, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        body = {"id": "weather", "messages": CONVERSATION}
        assert (await http.post(f"{srv.url}/v1/transcripts", json=body)).status_code == 201
        shots = [
            ("chat-light.png", "light", {"width": 900, "height": 1280}),
            ("chat-dark.png", "dark", {"width": 900, "height": 1280}),
            ("chat-phone.png", "light", {"width": 390, "height": 844}),
        ]
        for name, scheme, viewport in shots:
            context = await browser.new_context(viewport=viewport, color_scheme=scheme)
            try:
                page = await context.new_page()
                await show_conversation(page, f"{srv.url}/t/weather")
                assert await page.evaluate(LOW_CONTRAST) == [], f"{name}: text below WCAG AA"
                if viewport["width"] == 390:
                    width = await page.evaluate("document.documentElement.scrollWidth")
                    assert width <= 390, "the page is wider than the phone"
                shot = save(name)
                await page.screenshot(path=str(shot))
                assert shot.stat().st_size > 20_000
                if UPDATE_DOCS:
                    (DOCS / name).write_bytes(shot.read_bytes())
                # The list page passes too (its own colours).
                await page.goto(srv.url)
                await expect(page.locator("li.conversation")).to_have_count(1)
                assert await page.evaluate(LOW_CONTRAST) == [], f"{name}: list below WCAG AA"
            finally:
                await context.close()


async def test_the_list_fits_a_phone_and_shows_the_newest_first(
    browser: Browser, http: httpx.AsyncClient
) -> None:
    context = await browser.new_context(viewport={"width": 390, "height": 844})
    try:
        async with running_server() as srv:
            api = f"{srv.url}/v1/transcripts"
            for tid in ("alpha", "beta", "gamma"):
                body = {"id": tid, "messages": [{"role": "user", "content": f"hi from {tid}"}]}
                assert (await http.post(api, json=body)).status_code == 201
            await http.post(
                f"{api}/alpha/messages",
                json={"messages": [{"role": "assistant", "content": "hey"}]},
            )
            tab = await open_tab(context, srv.url)
            page = tab.page
            items = page.locator("li.conversation")
            await expect(items).to_have_count(3)
            # Titles and previews come from the server (the first user message, the last one).
            await expect(items.locator(".conversation-title")).to_have_text(
                ["hi from alpha", "hi from gamma", "hi from beta"]
            )
            await expect(items.first.locator(".conversation-preview")).to_have_text("hey")
            await expect(items.first.locator(".conversation-meta")).to_contain_text("2 messages")
            assert await page.evaluate("document.documentElement.scrollWidth") <= 390
            if UPDATE_DOCS:
                await page.screenshot(path=str(DOCS / "list-phone.png"))

            # When the server sends titles and previews, the list shows them.
            async def with_titles(route: Any) -> None:
                response = await route.fetch()
                data = await response.json()
                for t in data["transcripts"]:
                    t["title"] = f"Talk {t['transcriptId']}"
                    t["preview"] = "the last words"
                await route.fulfill(response=response, json=data)

            await page.route(re.compile(r".*/v1/transcripts\?.*limit=.*"), with_titles)
            await page.get_by_role("button", name="Refresh").click()
            await expect(items.first.locator(".conversation-title")).to_have_text("Talk alpha")
            await expect(items.first.locator(".conversation-preview")).to_have_text(
                "the last words"
            )

            # "New conversation" makes one and opens it.
            await page.get_by_role("button", name="New conversation").click()
            await page.wait_for_url(re.compile(r".*/t/[0-9a-f]{32}$"))
            await expect(page.locator("#status")).to_have_attribute("data-state", LIVE)
            await expect(page.get_by_label("Message", exact=True)).to_be_enabled()
            assert tab.errors == []
    finally:
        await context.close()


async def test_an_unknown_id_says_so_with_no_composer_and_no_live(
    context: BrowserContext,
) -> None:
    async with running_server() as srv:
        tab = await open_tab(context, f"{srv.url}/t/no-such-thing")
        page = tab.page
        await expect(page.get_by_role("heading", name="No such conversation")).to_be_visible()
        await expect(page.locator("#missing-id")).to_have_text("no-such-thing")
        await expect(page.locator("#compose")).to_be_hidden()
        await expect(page.locator("#status")).to_be_hidden()
        await expect(page.get_by_text("Live", exact=True)).to_have_count(0)
        assert await page.title() == "No such conversation · transcript-sync"
        assert tab.errors_other_than("404") == []


async def test_keyboard_only(context: BrowserContext, http: httpx.AsyncClient) -> None:
    async with running_server() as srv:
        body = {"id": "keys", "messages": CONVERSATION}
        assert (await http.post(f"{srv.url}/v1/transcripts", json=body)).status_code == 201
        tab = await open_tab(context, f"{srv.url}/t/keys")
        page = tab.page
        await expect(page.locator("#status")).to_have_attribute("data-state", LIVE)
        await expect(page.locator("li.message")).to_have_count(len(CONVERSATION))

        await page.keyboard.press("Tab")
        await expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(page.locator("#main-chat")).to_be_focused()
        # Tab through the conversation to the message box: every stop is visibly focused.
        seen: list[str] = []
        for _ in range(60):
            await page.keyboard.press("Tab")
            # Focusing scrolls; let the page see that scroll (and show or hide the jump
            # button) before looking at where the focus is.
            await page.evaluate(TWO_FRAMES)
            stop = await page.evaluate("""() => {
                const el = document.activeElement, s = getComputedStyle(el);
                const ring = s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0
                    || s.boxShadow !== 'none' || el.closest('.compose-box:focus-within');
                const what = el.id || el.className || el.tagName;
                return {what, text: el.textContent.trim().slice(0, 40), ring: Boolean(ring)};
            }""")
            assert stop["ring"], f"no visible focus on {stop} after {seen}"
            seen.append(stop["text"] or stop["what"])
            if stop["what"] == "text":
                break
        assert seen[-1] == "text", seen
        assert any(s.startswith("called get_weather") for s in seen), seen
        assert "Copy" in seen, seen
        # A tool call opens with the keyboard.
        call = page.locator("li.tool-call summary")
        await call.focus()
        await page.keyboard.press("Enter")
        await expect(page.locator("li.tool-call details")).to_have_attribute("open", "")
        # Write and send without a mouse.
        await page.get_by_label("Message", exact=True).focus()
        await page.keyboard.type("sent with the keyboard")
        await page.keyboard.press("Enter")
        await tab.wait_revision(2)
        await expect(page.locator("li.message").last).to_contain_text("sent with the keyboard")
        assert tab.errors == []


async def test_the_composer_says_why_when_the_server_refuses_writes(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    """The server has no read-only tokens yet, so a proxy in the browser turns the answer to
    this page's append into the `forbidden` error such a server would send (the frame keeps
    its real seq; only its code and message change)."""
    async with running_server() as srv:
        assert (await http.post(f"{srv.url}/v1/transcripts", json={"id": "ro"})).status_code == 201

        def proxy(ws: WebSocketRoute) -> None:
            server = ws.connect_to_server()

            def from_page(message: str | bytes) -> None:
                frame = json.loads(message)
                if frame.get("op") == "append":
                    frame["messages"] = [{"role": "not-a-role", "content": "x"}]
                server.send(json.dumps(frame))

            def from_server(message: str | bytes) -> None:
                lines = []
                for line in str(message).split("\n"):
                    frame = json.loads(line)
                    if frame.get("type") == "error" and frame.get("code") == "invalid-message":
                        frame.update(code="forbidden", message="this token may only read")
                    lines.append(json.dumps(frame))
                ws.send("\n".join(lines))

            ws.on_message(from_page)
            server.on_message(from_server)

        page = await context.new_page()
        await page.route_web_socket(re.compile(r".*/v1/ws.*"), proxy)
        await page.goto(f"{srv.url}/t/ro")
        await expect(page.locator("#status")).to_have_attribute("data-state", LIVE)
        box = page.get_by_label("Message", exact=True)
        await box.fill("may I?")
        await box.press("Enter")
        await expect(page.locator("#compose-disabled")).to_have_text(
            "You cannot send messages here: forbidden: this token may only read"
        )
        await expect(box).to_be_disabled()
        await expect(page.get_by_role("button", name="Send")).to_be_disabled()
        await expect(box).to_have_value("may I?")  # the words are given back
