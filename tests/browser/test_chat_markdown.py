"""What a message looks like in the page: Markdown rendered safely, code blocks, tool calls
tied to their results, folded system messages, metadata behind a toggle.

The XSS corpus goes through the real server and the real page (its CSP included), and the test
checks three things: the canary ``window.__pwned`` stays unset, the browser reported no CSP
violation (so nothing even tried to run and got blocked), and the DOM holds no element or
attribute that could run code.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from playwright.async_api import BrowserContext, expect

from tests.browser.tabs import LIVE, PROBES, Tab, open_tab, png
from tests.support.servers import running_server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

SVG_PAYLOAD = base64.b64encode(
    b'<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=1"/>'
).decode()
HTML_PAYLOAD = base64.b64encode(b"<script>window.__pwned=1</script>").decode()

# Each one tries to run `window.__pwned = ...` or to leave something dangerous in the DOM.
XSS_CORPUS: list[str] = [
    "<script>window.__pwned='script'</script>",
    "<img src=x onerror=\"window.__pwned='onerror'\">",
    "<svg onload=\"window.__pwned='svg'\"><script>window.__pwned='svg-script'</script></svg>",
    "<svg><a xlink:href=\"javascript:window.__pwned='xlink'\"><text>x</text></a></svg>",
    "<iframe src=\"javascript:window.__pwned='iframe'\"></iframe>",
    "<object data=x></object><embed src=x>",
    "<details open ontoggle=\"window.__pwned='ontoggle'\">x</details>",
    "<style>body{display:none}</style>",
    "<form action=\"javascript:window.__pwned='form'\"><button>go</button></form>",
    "<a href=\"javascript:window.__pwned='raw-a'\">raw link</a>",
    "<math><mtext><table><mglyph><style><img src=x onerror=\"window.__pwned='mxss'\">",
    '<base href="javascript:/"><meta http-equiv=refresh content="0;url=javascript:1">',
    "[md link](javascript:window.__pwned='md-link')",
    "[mixed case](JaVaScRiPt:window.__pwned='case')",
    "[tab inside](java\tscript:window.__pwned='tab')",
    "[entity](&#106;avascript:window.__pwned='entity')",
    "[encoded](javascript&colon;window.__pwned='colon')",
    "[vbscript](vbscript:msgbox(1))",
    f"[data link](data:text/html;base64,{HTML_PAYLOAD})",
    f"![data svg image](data:image/svg+xml;base64,{SVG_PAYLOAD})",
    "![js image](javascript:window.__pwned='md-image')",
    "<javascript:window.__pwned='autolink'>",
    "[ref link][r]\n\n[r]: javascript:window.__pwned='reference'",
    '[title](https://example.invalid/ "t\\" onmouseover=\\"window.__pwned=\'title\'")',
    '```"><img src=x onerror="window.__pwned=\'fence\'">\nx\n```',
    "&lt;script&gt;window.__pwned='entities'&lt;/script&gt; &#60;img src=x onerror=alert(1)&#62;",
    "<scr<script>ipt>window.__pwned='nested'</scr</script>ipt>",
    "`<img src=x onerror=\"window.__pwned='inline-code'\">`",
]


def at(prefix: str) -> int:
    """The index of the corpus entry that starts with ``prefix``."""
    return next(i for i, text in enumerate(XSS_CORPUS) if text.startswith(prefix))


XSS_MESSAGES: list[dict[str, Any]] = [
    *(
        {"role": "user" if i % 2 else "assistant", "content": text}
        for i, text in enumerate(XSS_CORPUS)
    ),
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "<img src=x onerror=\"window.__pwned='part'\">"},
            {"type": "image_url", "image_url": {"url": "javascript:window.__pwned='image_url'"}},
        ],
    },
    {
        "role": "user",
        "name": "<img src=x onerror=\"window.__pwned='name'\">",
        "content": "named",
        "metadata": {"html": "<script>window.__pwned='metadata'</script>", "fence": "```"},
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "<b>id</b>",
                "type": "function",
                "function": {
                    "name": "<img src=x onerror=\"window.__pwned='tool'\">",
                    "arguments": '{"q": "<script>window.__pwned=\'args\'</script>"}',
                },
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "<b>id</b>",
        "content": "<svg onload=\"window.__pwned='result'\">",
    },
    {"role": "system", "content": "<img src=x onerror=\"window.__pwned='system'\">"},
    {
        "role": "user",
        "content": [
            {
                "type": "attachment",
                "name": "<img onerror=alert(1)>.html",
                "mime": "text/html",
                "content": "<script>window.__pwned='blob'</script>",
            }
        ],
    },
]

FIND_DANGER = (PROBES / "find_danger.js").read_text()


async def open_conversation(
    context: BrowserContext,
    http: httpx.AsyncClient,
    url: str,
    tid: str,
    messages: list[dict[str, Any]],
) -> Tab:
    response = await http.post(f"{url}/v1/transcripts", json={"id": tid, "messages": messages})
    assert response.status_code == 201, response.text
    # Record CSP violations from the very first script on.
    await context.add_init_script(
        "window.__violations = [];"
        "document.addEventListener('securitypolicyviolation', e => "
        "window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"
        # The types of the blobs the page makes (fetching a blob: URL is outside the CSP).
        "window.__blobTypes = []; const made = URL.createObjectURL;"
        "URL.createObjectURL = b => { window.__blobTypes.push(b.type); return made(b); };"
    )
    tab = await open_tab(context, f"{url}/t/{tid}")
    await expect(tab.page.locator("#status")).to_have_attribute("data-state", LIVE)
    await tab.wait_revision(1)
    return tab


async def test_the_xss_corpus_runs_nothing_and_leaves_nothing_dangerous(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        tab = await open_conversation(context, http, srv.url, "xss", XSS_MESSAGES)
        page = tab.page
        await page.evaluate("window.tsyncPage.timeline.ensureRendered(0)")  # all of them
        await expect(page.locator("#messages li.message")).to_have_count(len(XSS_MESSAGES))
        # Give every trigger a chance: open all folds, hover and focus everything, then let
        # the highlighter and two frames run.
        await page.evaluate("""() => {
            for (const d of document.querySelectorAll('#messages details')) d.open = true;
            for (const n of document.querySelectorAll('#messages *')) {
                n.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
                n.dispatchEvent(new FocusEvent('focus'));
            }
        }""")
        await page.evaluate(
            "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
        )
        assert await page.evaluate("window.__pwned") is None
        assert await page.evaluate("window.__violations") == []
        assert await page.evaluate(FIND_DANGER) == []

        # Raw HTML is shown as text, not dropped: the reader sees what was sent.
        texts: list[str] = await page.evaluate(
            "[...document.querySelectorAll('#messages li.message')].map(li => li.textContent)"
        )
        assert "<script>window.__pwned='script'</script>" in texts[0]
        assert "<img src=x onerror=\"window.__pwned='onerror'\">" in texts[1]
        assert "<script>window.__pwned='entities'</script>" in texts[at("&lt;script&gt;")]
        # Dropped links keep their words; a dropped image shows its alt text.
        assert (
            "md link" in texts[at("[md link]")]
            and "[image: data svg image]" in texts[at("![data svg")]
        )
        # The attachment is offered for download as bytes, never as an HTML page of ours.
        assert await page.evaluate("window.__blobTypes") == ["application/octet-stream"]
        assert tab.errors_other_than("ERR_", "Failed to load resource") == []


MARKDOWN = """# Plan

Some **bold**, *italic*, ~~struck~~ and `inline code`, then a [link](https://example.invalid/docs).

```python
def greet(name: str) -> str:
    return f"hello {name}"
```

| Day | Temp |
|:----|-----:|
| Mon | 18 |
| Tue | 21 |

1. first
2. second

- [x] done
- [ ] to do

> quoted
"""


async def test_markdown_renders_to_the_expected_elements(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    await context.grant_permissions(["clipboard-read", "clipboard-write"])
    async with running_server() as srv:
        messages = [
            {"role": "user", "content": "Show me"},
            {"role": "assistant", "content": MARKDOWN},
        ]
        tab = await open_conversation(context, http, srv.url, "md", messages)
        md = tab.page.locator('li.message[data-index="1"] .md')
        await expect(md.locator("h1")).to_have_text("Plan")
        await expect(md.locator("strong")).to_have_text("bold")
        await expect(md.locator("em")).to_have_text("italic")
        await expect(md.locator("del")).to_have_text("struck")
        await expect(md.locator("p > code")).to_have_text("inline code")
        link = md.get_by_role("link", name="link")
        await expect(link).to_have_attribute("href", "https://example.invalid/docs")
        await expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
        await expect(link).to_have_attribute("target", "_blank")

        block = md.locator(".code-block")
        await expect(block.locator(".code-lang")).to_have_text("python")
        await expect(block.locator("pre code.language-python")).to_contain_text(
            "def greet(name: str)"
        )
        # Highlighting arrives a moment later, in the same text.
        await expect(block.locator("code .hljs-keyword").first).to_have_text("def")
        await expect(block.locator("pre code")).to_have_text(
            'def greet(name: str) -> str:\n    return f"hello {name}"'
        )
        await block.get_by_role("button", name="Copy python code").click()
        await expect(block.get_by_role("button", name="Copy python code")).to_have_text("Copied")
        copied = await tab.page.evaluate("navigator.clipboard.readText()")
        assert copied == 'def greet(name: str) -> str:\n    return f"hello {name}"'

        await expect(md.locator("table thead th")).to_have_text(["Day", "Temp"])
        await expect(md.locator("table tbody tr")).to_have_count(2)
        await expect(md.locator("table tbody tr").first.locator("td").nth(1)).to_have_attribute(
            "align", "right"
        )
        await expect(md.locator("ol > li")).to_have_text(["first", "second"])
        boxes = md.locator("ul > li input[type=checkbox]")
        await expect(boxes).to_have_count(2)
        await expect(boxes.first).to_be_checked()
        await expect(boxes.first).to_be_disabled()
        await expect(boxes.nth(1)).not_to_be_checked()
        await expect(md.locator("blockquote")).to_have_text("quoted")
        # A typed line break stays a line break.
        await tab.send("line one\nline two")
        await tab.wait_revision(2)
        await expect(tab.page.locator('li.message[data-index="2"] .md br')).to_have_count(1)
        assert tab.errors == []


TOOLS_CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a weather assistant.\nAlways answer in Celsius."},
    {"role": "user", "content": "Weather in Paris?", "metadata": {"client": "test", "lang": "en"}},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temp": 18, "sky": "sunny"})},
    {"role": "assistant", "content": "It is 18 °C and sunny in Paris."},
    {"role": "context", "content": "Narrative preamble from an imported file."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look:"},
            {
                "type": "image_url",
                "image_url": {
                    "url": "data:image/png;base64," + base64.b64encode(png(40, 20)).decode()
                },
            },
        ],
    },
]


async def test_tool_calls_results_folded_roles_and_metadata(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        tab = await open_conversation(context, http, srv.url, "tools", TOOLS_CONVERSATION)
        page = tab.page
        # The title is the first user message; the header speaks no protocol.
        await expect(page.locator("#title")).to_have_text("Weather in Paris?")
        await expect(page.locator("#transcript-view header.bar")).not_to_contain_text("revision")

        system = page.locator('li.message[data-index="0"] details.folded')
        await expect(system).not_to_have_attribute("open", "")
        await expect(system.locator("summary")).to_have_text(
            "System instructionsYou are a weather assistant. Always answer in Celsius."
        )
        await expect(
            page.locator('li.message[data-index="5"] details.folded summary')
        ).to_contain_text("Context")

        call = page.locator('li.message[data-index="2"] li.tool-call')
        await expect(call.locator("summary")).to_have_text('called get_weather {city: "Paris"}')
        await expect(call.locator("details")).not_to_have_attribute("open", "")
        await call.locator("summary").click()
        await expect(call.locator("pre code")).to_have_text('{\n  "city": "Paris"\n}')
        await expect(call.locator(".tool-status a")).to_have_text("result: message 4")

        result = page.locator('li.message[data-index="3"]')
        await expect(result.locator(".tool-result > summary")).to_contain_text(
            "Result of get_weather"
        )
        await expect(result.locator("summary .preview")).to_have_text(
            '{"temp": 18, "sky": "sunny"}'
        )
        await expect(result.get_by_role("link", name="call: message 3")).to_be_visible()

        about = page.locator('li.message[data-index="1"] details.about')
        await expect(about.locator(".about-panel")).to_be_hidden()
        await about.get_by_label("About message 2").click()
        await expect(about.locator(".about-panel pre code")).to_contain_text('"client": "test"')

        # A result that arrives later finds its call on screen and points it there.
        late = [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": "{}"},
                    }
                ],
            },
        ]
        await http.post(f"{srv.url}/v1/transcripts/tools/messages", json={"messages": late})
        waiting = page.locator('li.message[data-index="7"] .tool-status')
        await expect(waiting).to_have_text("waiting for the result…")
        await http.post(
            f"{srv.url}/v1/transcripts/tools/messages",
            json={"messages": [{"role": "tool", "tool_call_id": "call_2", "content": "12:00"}]},
        )
        await expect(waiting).to_have_text("result: message 9")
        await expect(
            page.locator('li.message[data-index="8"] .tool-result > summary')
        ).to_contain_text("Result of get_time")
        assert tab.errors == []
