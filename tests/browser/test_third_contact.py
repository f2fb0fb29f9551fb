"""The page after issue "Third contact" (item 9): the presence line sits in the column, messages
are numbered from 1 for people (ids stay 0-based), an empty conversation says so and how to
add to it, and a ``#token=`` link opened in a tab already on the page is taken."""

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


async def test_messages_are_numbered_from_one_for_people(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    messages = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    async with running_server() as srv:
        await http.post(f"{srv.url}/v1/transcripts", json={"id": "count", "messages": messages})
        tab = await open_tab(context, f"{srv.url}/t/count")
        page = tab.page
        await expect(page.locator("#status")).to_have_attribute("data-state", LIVE)
        first = page.locator("#messages li.message").first
        # The protocol's index stays 0-based in the DOM; the labels count from 1.
        await expect(first).to_have_attribute("data-index", "0")
        await expect(first).to_have_attribute("id", "m-0")
        await first.get_by_label("About message 1").click()
        await expect(first.locator(".about-panel dd").first).to_have_text("#1")
        await expect(first.locator(".tool-status a")).to_have_text("result: message 2")
        await expect(first.locator(".tool-status a")).to_have_attribute("href", "#m-1")
        await expect(page.get_by_role("link", name="call: message 1")).to_be_visible()
        await page.locator("#info summary").click()
        await expect(page.locator("#segments li")).to_have_text(
            ["Segment 1: messages 1 to now (active)"]
        )
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


MATH = (
    "Euler: $e^{i\\pi} + 1 = 0$, and it costs $5 and $10 (prices, not math).\n\n"
    "$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$\n\n"
    "Also \\(a^2 + b^2\\) inline and\n\n\\[\\sum_{k=1}^n k = \\frac{n(n+1)}{2}\\]\n\n"
    "`$not math$` in code."
)


async def test_math_is_typeset_and_prices_stay_text(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        await context.add_init_script(
            "window.__violations = [];"
            "document.addEventListener('securitypolicyviolation', e => "
            "window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"
        )
        body = {"id": "math", "messages": [{"role": "assistant", "content": MATH}]}
        await http.post(f"{srv.url}/v1/transcripts", json=body)
        tab = await open_tab(context, f"{srv.url}/t/math")
        page = tab.page
        md = page.locator('li.message[data-index="0"] .md')
        await expect(md.locator(".math.typeset")).to_have_count(4)
        await expect(md.locator(".math-inline .katex")).to_have_count(2)
        await expect(md.locator(".math-display .katex-display")).to_have_count(2)
        # MathML for screen readers, with the TeX as written.
        annotation = md.locator(".math-inline annotation").first
        await expect(annotation).to_have_text("e^{i\\pi} + 1 = 0")
        await expect(md).to_contain_text("it costs $5 and $10 (prices, not math)")
        await expect(md.locator("p > code")).to_have_text("$not math$")
        # KaTeX's fonts load under the page's CSP.
        await page.wait_for_function("() => document.fonts.status === 'loaded'")
        assert await page.evaluate(
            "[...document.fonts].some(f => f.family.startsWith('KaTeX') && f.status === 'loaded')"
        )
        assert await page.evaluate("window.__violations") == []

        # KaTeX runs untrusted: no links, classes or HTML from the TeX.
        await tab.send(
            "$\\href{javascript:window.__pwned=1}{x}$ \\(\\url{javascript:alert(1)}\\) "
            "$$\\htmlClass{pwn}{y}$$ $\\htmlData{a=b}{z}$"
        )
        evil = page.locator('li.message[data-index="1"] .md')
        await expect(evil.locator(".math.typeset")).to_have_count(4)
        assert await evil.locator("a, [href], .pwn, [data-a]").count() == 0
        assert await page.evaluate("window.__pwned") is None
        assert tab.errors == []


RENDER_WITH_THE_PACKAGE = """async () => {
    // As an app does: the package's module, with the libraries handed in.
    const { createRenderer, textOf } = await import('/v1/render.js');
    const { Marked } = await import('/static/vendor/marked/marked.esm.js');
    const { default: DOMPurify } = await import('/static/vendor/dompurify/purify.es.mjs');
    await import('/static/vendor/katex/katex.min.js');
    const r = createRenderer({ Marked, DOMPurify, katex: globalThis.katex });
    const call = r.renderMessage({
        role: 'assistant', content: '',
        tool_calls: [{id: 'c1', type: 'function',
                      function: {name: 'get_weather', arguments: '{"city": "Paris"}'}}],
    }, { index: 2 });
    const result = r.renderMessage({role: 'tool', tool_call_id: 'c1', content: '{"temp": 18}'});
    const html = r.renderMarkdown(
        '# Hi\\n\\n**bold** <b>raw</b> [x](javascript:alert(1)) $x^2$\\n\\n```json\\n{}\\n```');
    return {
        callTag: call.tagName, callId: call.id,
        summary: call.querySelector('.tool-call summary').textContent,
        args: call.querySelector('.tool-call pre code').textContent.trim(),
        status: call.querySelectorAll('.tool-status').length,
        about: call.querySelector('.about summary').getAttribute('aria-label'),
        result: result.querySelector('.tool-result > summary').textContent,
        html, text: textOf({content: [{type: 'text', text: 'a'}, {type: 'text', text: 'b'}]}),
    };
}"""


async def test_the_npm_package_renders_a_tool_call_and_markdown(
    context: BrowserContext,
) -> None:
    async with running_server() as srv:
        tab = await open_tab(context, srv.url)
        got = await tab.page.evaluate(RENDER_WITH_THE_PACKAGE)
        assert got["callTag"] == "LI" and got["callId"] == "m-2"
        assert got["summary"] == 'called get_weather {city: "Paris"}'
        assert got["args"] == '{\n  "city": "Paris"\n}'
        assert got["status"] == 0  # no tool index given: no "waiting for the result"
        assert got["about"] == "About message 3"
        assert got["result"].startswith("Result") and '{"temp": 18}' in got["result"]
        html = got["html"]
        assert "<h1>Hi</h1>" in html and "<strong>bold</strong>" in html
        assert "&lt;b&gt;raw&lt;/b&gt;" in html
        assert "javascript:" not in html and "<a " not in html and "href" not in html
        assert 'class="math math-inline typeset"' in html and 'class="katex"' in html
        assert 'data-action="copy"' in html and 'class="language-json"' in html
        assert got["text"] == "a\nb"
        assert tab.errors == []
