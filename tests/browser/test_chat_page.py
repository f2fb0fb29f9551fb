"""End to end in headless Chromium: the chat page and /v1/client.js against a
real server on 127.0.0.1.

Every wait is on a DOM condition with a timeout (Playwright's ``expect`` and
``wait_for_function``), never a sleep.
"""

from __future__ import annotations

import asyncio
import base64
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import BrowserContext, expect

import client_py
from protocol.types import Message
from tests.browser.conftest import ARTIFACTS
from tests.browser.tabs import LIVE, open_tab, png, say, server_rows
from tests.support.servers import ServerProcess, running_server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

# --- tests ----------------------------------------------------------------------------


async def test_messages_appended_over_http_appear_in_order(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        api = f"{srv.url}/v1/transcripts"
        assert (await http.post(api, json={"id": "order", "messages": [say(0)]})).status_code == 201
        tab = await open_tab(context, f"{srv.url}/t/order")
        await expect(tab.page.locator("#status")).to_have_attribute("data-state", LIVE)
        await tab.wait_revision(1)
        # Every message element the page ever adds, in the order it adds them.
        await tab.page.evaluate("""() => {
            window.added = [];
            new MutationObserver(records => { for (const r of records)
                for (const n of r.addedNodes) if (n.classList?.contains('message'))
                    window.added.push(Number(n.dataset.index)); })
              .observe(document.getElementById('messages'), {childList: true});
        }""")
        n = 1
        for size in (1, 3, 1, 7, 2, 1, 5):
            batch = [say(i) for i in range(n, n + size)]
            response = await http.post(f"{api}/order/messages", json={"messages": batch})
            assert response.status_code == 201, response.text
            n += size
            if n == 6:
                assert (await http.post(f"{api}/order/segments", json={})).status_code == 201
        snapshot = (await http.get(f"{api}/order")).json()
        await tab.wait_revision(snapshot["revision"])
        assert await tab.messages() == server_rows(snapshot)
        assert [row[2] for row in await tab.messages()] == [f"message {i}" for i in range(n)]
        assert await tab.page.evaluate("window.added") == list(range(1, n))
        separator = tab.page.locator("#messages li.segment")
        await expect(separator).to_have_count(1)
        await expect(separator).to_have_attribute("data-start", "6")
        # The separator sits right before message #6.
        assert (
            await tab.page.evaluate(
                "document.querySelector('li.segment').nextElementSibling.dataset.index"
            )
            == "6"
        )
        assert tab.errors == []


async def test_the_page_shows_the_digest_it_checked_and_repairs_a_broken_copy(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    """Issue 29 on the page: the copy's digest (computed by client.js from
    every change) is the server's; a copy made wrong takes a fresh baseline
    at the next change and the page says so."""
    async with running_server() as srv:
        api = f"{srv.url}/v1/transcripts"
        assert (await http.post(api, json={"id": "dg", "messages": [say(0)]})).status_code == 201
        tab = await open_tab(context, f"{srv.url}/t/dg")
        await expect(tab.page.locator("#status")).to_have_attribute("data-state", LIVE)
        for i in (1, 2):
            assert (await http.post(f"{api}/dg/messages", json={"messages": [say(i)]})).is_success
        assert (await http.post(f"{api}/dg/segments", json={})).is_success
        await tab.wait_revision(4)
        snapshot = (await http.get(f"{api}/dg")).json()
        meta = tab.page.locator("#meta")
        await expect(meta).to_have_attribute("data-digest", snapshot["digest"])
        # Break the copy: its digest is no longer the history's.
        await tab.page.evaluate("() => { tsyncClient.mirror('dg').digest = '0'.repeat(32); }")
        assert (await http.post(f"{api}/dg/messages", json={"messages": [say(3)]})).is_success
        await tab.wait_revision(5)
        snapshot = (await http.get(f"{api}/dg")).json()
        await expect(meta).to_have_attribute("data-digest", snapshot["digest"])
        await expect(tab.page.locator("#transcript-error")).to_contain_text("digest")
        assert await tab.messages() == server_rows(snapshot)


async def test_two_pages_on_one_transcript_stay_identical(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        api = f"{srv.url}/v1/transcripts"
        assert (await http.post(api, json={"id": "pair"})).status_code == 201
        left = await open_tab(context, f"{srv.url}/t/pair")
        right = await open_tab(context, f"{srv.url}/t/pair")
        for tab in (left, right):
            await expect(tab.page.locator("#status")).to_have_attribute("data-state", LIVE)
        # Writers on every side at once: both pages and the HTTP API.
        http_appends = [
            http.post(f"{api}/pair/messages", json={"messages": [say(100 + i)]}) for i in range(6)
        ]
        await asyncio.gather(
            *http_appends,
            left.send("from the left page"),
            right.send("from the right page", role="assistant"),
        )
        await left.send("left again")
        await right.send("right again")
        # Both page appends were acknowledged, so they are in the snapshot once it has 10.
        await left.wait_revision(10)
        await right.wait_revision(10)
        snapshot = (await http.get(f"{api}/pair")).json()
        assert snapshot["revision"] == 10
        expected = server_rows(snapshot)
        assert await left.messages() == expected
        assert await right.messages() == expected
        texts = [row[2] for row in expected]
        for text in ("from the left page", "from the right page", "left again", "right again"):
            assert texts.count(text) == 1, texts
        await expect(left.page.locator("#outbox li")).to_have_count(0)
        await expect(right.page.locator("#outbox li")).to_have_count(0)
        assert left.errors == right.errors == []


async def test_a_message_typed_into_the_page_reaches_a_python_mirror(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        assert (await http.post(f"{srv.url}/v1/transcripts", json={"id": "typed"})).status_code
        async with client_py.connect(srv.ws_url) as python:
            mirror = await python.subscribe("typed")
            tab = await open_tab(context, f"{srv.url}/t/typed")
            await expect(tab.page.locator("#status")).to_have_attribute("data-state", LIVE)
            await tab.send("Hello from Chromium ✓\nsecond line")
            await mirror.wait_for_revision(1, timeout=10)
            assert mirror.messages == (
                Message(role="user", content="Hello from Chromium ✓\nsecond line"),
            )
            await tab.wait_revision(1)
            assert await tab.messages() == [(0, "user", "Hello from Chromium ✓\nsecond line")]
            # Shift+Enter is a new line, not a send.
            box = tab.page.get_by_label("Message", exact=True)
            await box.fill("first")
            await box.press("Shift+Enter")
            await box.press_sequentially("second")
            await expect(box).to_have_value("first\nsecond")
            await box.press("Enter")
            await mirror.wait_for_revision(2, timeout=10)
            assert [m.text() for m in mirror.messages] == [
                "Hello from Chromium ✓\nsecond line",
                "first\nsecond",
            ]
        assert tab.errors == []


async def test_the_page_recovers_from_a_server_restart_with_nothing_lost_or_doubled(
    context: BrowserContext, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    server = ServerProcess(store=f"sqlite:{tmp_path / 'data'}", log_path=tmp_path / "server.log")
    await asyncio.to_thread(server.start)
    try:
        api = f"{server.url}/v1/transcripts"
        first = [say(i) for i in range(4)]
        assert (await http.post(api, json={"id": "phoenix", "messages": first})).status_code == 201
        tab = await open_tab(context, f"{server.url}/t/phoenix")
        status = tab.page.locator("#status")
        await expect(status).to_have_attribute("data-state", LIVE)
        for i in range(4, 8):
            await http.post(f"{api}/phoenix/messages", json={"messages": [say(i)]})
        await tab.wait_revision(5)

        await asyncio.to_thread(server.kill)
        await expect(status).to_have_attribute("data-state", "reconnecting")
        # Written while the server is down: it waits in the outbox, then goes once.
        await tab.send("typed while the server was down")
        await expect(tab.page.locator("#outbox li")).to_have_count(1)
        await expect(tab.page.locator("#outbox li")).to_contain_text("Waiting for the connection")

        await asyncio.to_thread(server.start)
        for i in range(8, 11):
            await http.post(f"{api}/phoenix/messages", json={"messages": [say(i)]})
        await expect(status).to_have_attribute("data-state", "resynced", timeout=15_000)
        await expect(tab.page.locator("#outbox li")).to_have_count(0)
        snapshot = (await http.get(f"{api}/phoenix")).json()
        assert snapshot["revision"] == 9  # 1 + 4 + 1 (the page's) + 3
        await tab.wait_revision(9)
        rows = await tab.messages()
        assert rows == server_rows(snapshot)
        texts = [text for _, _, text in rows]
        assert len(texts) == len(set(texts)) == 12
        assert texts.count("typed while the server was down") == 1
        assert {f"message {i}" for i in range(11)} <= set(texts)
        counters = await tab.page.evaluate("window.tsyncClient.stats")
        assert counters["reconnects"] >= 1
        assert tab.errors_other_than("ERR_CONNECTION_REFUSED", "ERR_CONNECTION_RESET") == []
    finally:
        await asyncio.to_thread(server.kill)


async def test_with_a_token_the_list_creates_and_opens_transcripts(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server(token="s3cret") as srv:
        headers = {"Authorization": "Bearer s3cret"}
        created = await http.post(
            f"{srv.url}/v1/transcripts",
            json={"id": "listed", "messages": [say(0)]},
            headers=headers,
        )
        assert created.status_code == 201
        # The token comes in the fragment (never in a request line), is kept in the
        # tab's sessionStorage and taken off the address bar; links need not carry it.
        tab = await open_tab(context, f"{srv.url}/#token=s3cret")
        link = tab.page.locator('li.conversation[data-id="listed"] a')
        await expect(link).to_have_attribute("href", "/t/listed")
        assert "s3cret" not in tab.page.url
        await tab.page.get_by_text("New conversation with an id of your choice").click()
        await tab.page.get_by_label("Conversation id").fill("made-in-browser")
        await tab.page.get_by_role("button", name="Create", exact=True).click()
        await tab.page.wait_for_url("**/t/made-in-browser")
        await expect(tab.page.locator("#status")).to_have_attribute("data-state", LIVE)
        await tab.send("hello with a token")
        await tab.wait_revision(1)
        assert tab.errors == []

        # Without the token the page says why instead of retrying forever.
        stranger = await open_tab(context, f"{srv.url}/t/listed")
        await expect(stranger.page.locator("#status")).to_have_attribute(
            "data-state", "unauthorized"
        )
        await expect(stranger.page.locator("#token-why")).to_have_text("This server needs a token.")
        # ... and the composer says that it cannot send, instead of queueing forever.
        await expect(stranger.page.get_by_label("Message", exact=True)).to_be_disabled()
        await expect(stranger.page.locator("#compose-disabled")).to_contain_text("token")


CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a concise assistant for a small design studio."},
    {"role": "user", "content": "Can you suggest a colour for our new logo? Here is the draft."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "The gradient we have so far:"},
            {
                "type": "image_url",
                "image_url": {
                    "url": "data:image/png;base64," + base64.b64encode(png(160, 90)).decode()
                },
            },
        ],
    },
    {
        "role": "assistant",
        "content": "A deep blue (#1f4e9c) keeps the calm of the gradient and reads well on white.",
    },
]
SECOND_SEGMENT: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "New topic: please check the meeting notes."},
            {
                "type": "attachment",
                "name": "notes.txt",
                "mime": "text/plain",
                "content": "Monday: logo review\nTuesday: print proofs\n",
            },
        ],
    },
    {"role": "assistant", "content": "Noted: the logo review is on Monday, the proofs on Tuesday."},
]


async def test_a_real_conversation_renders_and_is_saved_as_a_screenshot(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        api = f"{srv.url}/v1/transcripts"
        body = {"id": "design-chat", "messages": CONVERSATION}
        assert (await http.post(api, json=body)).status_code == 201
        assert (await http.post(f"{api}/design-chat/segments", json={})).status_code == 201
        tab = await open_tab(context, f"{srv.url}/t/design-chat")
        await expect(tab.page.locator("#status")).to_have_attribute("data-state", LIVE)
        await tab.wait_revision(2)
        await http.post(f"{api}/design-chat/messages", json={"messages": SECOND_SEGMENT})
        await tab.wait_revision(3)
        await tab.send("Thanks! Can you send the blue as RGB too?")
        await tab.wait_revision(4)
        page = tab.page

        image = page.locator("li.message img")
        await expect(image).to_have_count(1)
        await expect(image).to_have_attribute("alt", "Image 2 of message #3")
        await page.wait_for_function(
            "() => { const i = document.querySelector('li.message img'); "
            "return i.complete && i.naturalWidth === 160; }"
        )
        link = page.get_by_role("link", name=re.compile("notes.txt"))
        await expect(link).to_have_attribute("download", "notes.txt")
        href = await link.get_attribute("href")
        assert href is not None and href.startswith("blob:")
        async with page.expect_download() as download_info:
            await link.click()
        download = await download_info.value
        assert download.suggested_filename == "notes.txt"
        saved = await download.path()
        assert await asyncio.to_thread(Path(saved).read_text, encoding="utf-8") == (
            "Monday: logo review\nTuesday: print proofs\n"
        )
        await expect(page.locator("li.segment")).to_have_attribute("data-start", "4")
        # New messages are announced politely by a live region of their own (a live list
        # would also announce the older messages rendered as the reader scrolls up).
        await expect(page.locator("#announcer")).to_have_attribute("aria-live", "polite")
        await expect(page.locator("#announcer")).to_contain_text("Thanks! Can you send")

        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "chat-page.png"
        await page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        assert tab.errors == []
