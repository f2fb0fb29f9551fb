"""``useChat`` in two Chromium tabs, on each of the AI SDK's transports, kept
equal to the transcript by ``useTranscriptChat`` (client_js/ai_chat_react.js,
``syncChat`` of client_js/ai_chat.js as a hook): the component of
client_js/README.md ("useChat in every tab"), as written, bundled with
React, ``@ai-sdk/react``, ``ai`` and the packed package by esbuild, served on
an origin of its own.

One tab sends; an agent (a ``RawClient`` on ``/v1/ws``, writing ``draft``
ops with UI chunks in steps the test controls) answers; both tabs show the
reply growing. The other tab is reloaded in the middle of the reply: it
resumes (``useChat({resume: true})``) and neither tab ever shows a message or
its text twice. Then a Stop in the sending tab: the agent is told and both
tabs show the same partial reply, the one committed.

``TSYNC_UPDATE_SCREENSHOTS=1`` also writes the two tabs side by side to
docs/ai-chat-tabs.png."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, Page, expect

from protocol import codes
from protocol.ui_stream import UIMessageState
from protocol.wire import ErrorFrame, Increment
from tests.browser.conftest import ARTIFACTS, ROOT
from tests.browser.tabs import Tab, open_tab
from tests.browser.test_react_package import static_site
from tests.js_package import npm
from tests.support.servers import RunningServer, running_server
from tests.support.wsclient import RawClient

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.browser, pytest.mark.slow]

DOCS = ROOT / "docs"
UPDATE_DOCS = os.environ.get("TSYNC_UPDATE_SCREENSHOTS") == "1"
DOCS_SHOTS = ("ai-chat-tabs.png", "ai-chat-stop.png")

MAIN = """
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { DefaultChatTransport, WebSocketChatTransport } from "ai";
import { SyncedChat } from "./SyncedChat.tsx";

const params = new URLSearchParams(location.search);
const server = params.get("server");
const transport =
  params.get("transport") === "http"
    ? new DefaultChatTransport({ api: `${server}/v1/ai/chat` })
    : new WebSocketChatTransport({ url: `${server.replace(/^http/, "ws")}/v1/ai/chat` });
createRoot(document.getElementById("root")).render(
  <StrictMode>
    <SyncedChat server={server} chatId={params.get("id")} transport={transport} />
  </StrictMode>,
);
"""
HTML = (
    '<!doctype html><meta charset="utf-8"><title>useChat</title><link rel="icon" href="data:,">'
    "<style>body{font:15px system-ui,sans-serif;margin:16px}li{margin:6px 0;padding:6px 10px;"
    "border-radius:8px;list-style:none}li.user{background:#e8f0fe}li.assistant{background:#f1f3f4}"
    "ol{padding:0}input{width:60%}</style>"
    '<div id="root"></div><script type="module" src="app.js"></script>'
)

#: What each tab shows: (id, role, text of the text parts) per message.
SHOWN = """() => [...document.querySelectorAll('li')].map(li => [
    li.dataset.id, li.className, li.textContent])"""

#: From now on, count every DOM state that shows a message twice (same id) or
#: a reply's text twice in one message.
WATCH_ONCE = """(phrase) => {
  window.twice = [];
  const check = () => {
    const items = [...document.querySelectorAll('li')];
    const ids = items.map((li) => li.dataset.id);
    if (new Set(ids).size !== ids.length) window.twice.push('ids ' + ids.join(','));
    for (const li of items) {
      const text = li.textContent;
      const at = text.indexOf(phrase);
      if (at !== -1 && text.indexOf(phrase, at + 1) !== -1) window.twice.push('text ' + text);
    }
  };
  check();
  new MutationObserver(check).observe(document.body,
    { subtree: true, childList: true, characterData: true });
}"""

PAIR = """(shots) => {
  document.body.style.cssText = 'margin:0;display:flex;gap:12px;padding:12px;background:#ccd';
  for (const [label, data] of shots) {
    const figure = document.createElement('figure');
    figure.style.cssText = 'margin:0;background:#fff;box-shadow:0 1px 4px #0004';
    const caption = document.createElement('figcaption');
    caption.textContent = label;
    caption.style.cssText = 'font:13px system-ui;padding:6px 10px;background:#eef';
    const img = document.createElement('img');
    img.src = 'data:image/png;base64,' + data;
    img.style.display = 'block';
    figure.append(caption, img);
    document.body.append(figure);
  }
}"""

WEATHER: list[list[dict[str, Any]]] = [
    [{"type": "start", "messageId": "reply-1"}],
    [{"type": "start-step"}, {"type": "text-start", "id": "t"}],
    [{"type": "text-delta", "id": "t", "delta": "It is 18 "}],
    [{"type": "text-delta", "id": "t", "delta": "°C "}],
    [{"type": "text-delta", "id": "t", "delta": "in Paris."}],
    [{"type": "text-end", "id": "t"}, {"type": "finish-step"}],
    [{"type": "finish", "finishReason": "stop"}],
]


class Agent:
    """An agent on ``/v1/ws``: it waits for the user's message, then writes
    its reply as a draft with UI chunks, a step at a time."""

    def __init__(self, writer: RawClient, reader: RawClient, tid: str) -> None:
        self.writer = writer
        self.reader = reader
        self.tid = tid

    @classmethod
    async def start(cls, srv: RunningServer, tid: str) -> Agent:
        reader = await RawClient.connect(srv.ws_url)
        await reader.send(op="subscribe", transcriptId=tid)
        await reader.recv()  # the baseline
        return cls(await RawClient.connect(srv.ws_url), reader, tid)

    async def user_message(self) -> str:
        """The text of the next user message appended."""
        while True:
            frame = await self.reader.recv(timeout=15)
            if isinstance(frame, Increment):
                change: Any = frame.event.change
                for message in getattr(change, "messages", ()):
                    if message.role == "user":
                        content = message.content
                        return content if isinstance(content, str) else content[0].text

    async def write(self, draft_id: str, batch: list[dict[str, Any]]) -> None:
        await self.writer.send(op="draft", transcriptId=self.tid, draftId=draft_id, chunks=batch)

    async def commit(self, draft_id: str, batches: list[list[dict[str, Any]]]) -> None:
        state = UIMessageState(draft_id)
        for batch in batches:
            state.apply_all(batch)
        await self.writer.send(
            op="append",
            transcriptId=self.tid,
            draftId=draft_id,
            format="ui",
            messages=[state.message()],
            ref="commit",
        )
        await self.writer.recv()

    async def talk_until_told(self, draft_id: str) -> ErrorFrame:
        """Write a word at a time until the server says the draft was stopped."""
        for _ in range(500):
            await self.write(draft_id, [{"type": "text-delta", "id": "t", "delta": "word "}])
            try:
                frame = await self.writer.recv(timeout=0.02)
            except TimeoutError:
                continue
            if isinstance(frame, ErrorFrame):
                return frame
        raise AssertionError("the agent was never told to stop")

    async def close(self) -> None:
        await self.writer.close()
        await self.reader.close()


def readme_component() -> str:
    return npm.readme_block("useChat in every tab", "useChat component")


def bundle(folder: Path) -> None:
    """The README's component, React, the AI SDK and the packed package, as one ES module."""
    npm.tools()
    npm.install(npm.pack(folder))
    (folder / "SyncedChat.tsx").write_text(readme_component())
    (folder / "main.jsx").write_text(MAIN)
    (folder / "index.html").write_text(HTML)
    npm.bundle_for_browser(folder / "main.jsx", folder / "app.js")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ai-chat-app")
    bundle(folder)
    return folder


async def shown(page: Page) -> list[tuple[str, str, str]]:
    rows: list[list[str]] = await page.evaluate(SHOWN)
    return [(str(i), str(role), str(text)) for i, role, text in rows]


async def stored(srv: RunningServer, tid: str) -> list[tuple[str, str, str]]:
    async with httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.get(f"/v1/transcripts/{tid}/ui-messages")
        assert r.status_code == 200, r.text
    return [
        (m["id"], m["role"], "".join(p["text"] for p in m["parts"] if p["type"] == "text"))
        for m in r.json()["messages"]
    ]


async def both_show(tabs: list[Tab], expected: list[tuple[str, str, str]]) -> None:
    for tab in tabs:
        items = tab.page.locator("li")
        await expect(items).to_have_count(len(expected))
        for i, (_id, role, text) in enumerate(expected):
            await expect(items.nth(i)).to_have_text(text)
            await expect(items.nth(i)).to_have_class(role)
    for tab in tabs:
        assert await shown(tab.page) == expected


async def twice(page: Page) -> list[str]:
    seen: list[str] = await page.evaluate("window.twice")
    return seen


async def send(tab: Tab, text: str) -> None:
    box = tab.page.get_by_label("Message")
    await box.fill(text)
    await tab.page.get_by_role("button", name="Send").click()


def shot_name(what: str, transport: str) -> str:
    """docs/ai-chat-tabs.png and docs/ai-chat-stop.png are the WebSocket's;
    the HTTP transport's stay in test-artifacts/."""
    return f"{what}.png" if transport == "websocket" else f"{what}-{transport}.png"


async def side_by_side(
    context: BrowserContext, tabs: list[Tab], name: str, labels: tuple[str, str]
) -> None:
    """The two tabs side by side in one picture (test-artifacts/, and docs/ on request)."""
    shots = []
    for label, tab in zip(labels, tabs, strict=True):
        data = await tab.page.screenshot()
        shots.append([label, base64.b64encode(data).decode()])
    page = await context.new_page()
    await page.set_viewport_size({"width": 2 * 520 + 36, "height": 380})
    await page.evaluate(PAIR, shots)
    await page.locator("img").nth(1).evaluate("img => img.decode()")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / name
    await page.screenshot(path=str(shot), full_page=True)
    await page.close()
    assert shot.stat().st_size > 10_000
    if UPDATE_DOCS and (DOCS / name).name in DOCS_SHOTS:
        (DOCS / name).write_bytes(shot.read_bytes())


@pytest.mark.parametrize("transport", ["websocket", "http"])
async def test_two_tabs_see_one_turn_a_reload_resumes_it_and_a_stop_stops_it_for_both(
    browser: Browser, site: Path, transport: str
) -> None:
    tid = f"tabs-{transport}"
    context = await browser.new_context(viewport={"width": 520, "height": 340})
    context.set_default_timeout(10_000)
    with static_site(site) as origin:
        # The app is on another origin: its WebSockets are let in (allowed_origins), its
        # fetches (ui-messages, DefaultChatTransport's POST) answered with CORS.
        servers = running_server(allowed_origins=origin, cors_origins=origin, draft_coalesce_s=0)
        async with servers as srv:
            async with httpx.AsyncClient(base_url=srv.url) as http:
                earlier = [
                    {"role": "user", "content": "Hello"},
                    {"role": "assistant", "content": "Hi! Ask me anything."},
                ]
                r = await http.post("/v1/transcripts", json={"id": tid, "messages": earlier})
                assert r.status_code == 201, r.text
            agent = await Agent.start(srv, tid)
            url = f"{origin}/index.html?server={srv.url}&id={tid}&transport={transport}"
            a = await open_tab(context, url)
            b = await open_tab(context, url)
            tabs = [a, b]
            try:
                await both_show(tabs, await stored(srv, tid))

                # Tab 1 sends; both tabs show its message, then the reply growing.
                await send(a, "Weather in Paris?")
                assert await agent.user_message() == "Weather in Paris?"
                for batch in WEATHER[:3]:
                    await agent.write("d1", batch)
                for tab in tabs:
                    await expect(tab.page.locator("li").nth(2)).to_have_text("Weather in Paris?")
                    await expect(tab.page.locator("li").nth(3)).to_have_text("It is 18 ")
                assert (await shown(a.page))[2][0] == (await shown(b.page))[2][0]  # one id
                await a.page.evaluate(WATCH_ONCE, "It is 18")

                # Tab 2 is reloaded in the middle of the reply: it resumes.
                await b.page.reload()
                await expect(b.page.locator("li").nth(3)).to_have_text("It is 18 ")
                await b.page.evaluate(WATCH_ONCE, "It is 18")
                await agent.write("d1", WEATHER[3])
                for tab in tabs:
                    await expect(tab.page.locator("li").nth(3)).to_have_text("It is 18 °C ")
                await side_by_side(
                    context,
                    tabs,
                    shot_name("ai-chat-tabs", transport),
                    ("Tab 1: sent it", "Tab 2: reloaded in the middle of the reply"),
                )
                for batch in WEATHER[4:]:
                    await agent.write("d1", batch)
                await agent.commit("d1", WEATHER)
                committed = await stored(srv, tid)
                assert committed[2:] == [
                    (committed[2][0], "user", "Weather in Paris?"),
                    ("reply-1", "assistant", "It is 18 °C in Paris."),
                ]
                await both_show(tabs, committed)
                for tab in tabs:
                    await expect(tab.page.locator(".status")).to_have_text("ready")
                    assert await twice(tab.page) == []

                # Tab 2 sends; Stop in it: the agent is told, both tabs show what was kept.
                for tab in tabs:
                    await tab.page.evaluate(WATCH_ONCE, "Rome is")
                await send(b, "And in Rome?")
                assert await agent.user_message() == "And in Rome?"
                await agent.write("d2", [{"type": "start", "messageId": "reply-2"}])
                await agent.write("d2", [{"type": "start-step"}, {"type": "text-start", "id": "t"}])
                await agent.write("d2", [{"type": "text-delta", "id": "t", "delta": "Rome is "}])
                for tab in tabs:
                    await expect(tab.page.locator("li").nth(5)).to_have_text("Rome is ")
                await b.page.get_by_role("button", name="Stop").click()
                told = await agent.talk_until_told("d2")
                assert told.code == codes.DRAFT_CLOSED, told
                kept = await stored(srv, tid)
                assert kept[:4] == committed
                assert kept[4][1:] == ("user", "And in Rome?")
                assert kept[5][:2] == ("reply-2", "assistant")
                assert kept[5][2].startswith("Rome is ")
                await both_show(tabs, kept)
                for tab in tabs:
                    await expect(tab.page.locator(".status")).to_have_text("ready")
                    assert tab.errors_other_than() == [], tab.errors
                    assert await twice(tab.page) == []
                await side_by_side(
                    context,
                    tabs,
                    shot_name("ai-chat-stop", transport),
                    ("Tab 1", "Tab 2: sent it, then Stop"),
                )
            finally:
                await agent.close()
                await context.close()
