"""The chat page where no WebSocket gets through (issue 27, section 2), and
Chromium's own ``EventSource`` on a transcript's Durable Stream (section 3).

The page is served through ``UpgradeBlocker``: a relay on 127.0.0.1 that
answers every WebSocket handshake 403 and passes everything else to the real
server. The client then reads over SSE (the transcript's Durable Stream) and
appends with HTTP POSTs, and the page says so. Every wait is on a DOM or page
condition with a timeout, never a sleep.
"""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import BrowserContext, expect

import client_py
from tests.browser.tabs import LIVE, open_tab, say, server_rows
from tests.support.servers import running_server
from tests.support.upgrade_blocker import UpgradeBlocker

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

#: What Chromium logs for a refused handshake (expected here, nothing else is).
WS_REFUSED = "WebSocket connection to"


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def test_the_page_falls_back_to_sse_and_http_when_websockets_are_blocked(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv, UpgradeBlocker(_port(srv.url)) as proxy:
        api = f"{srv.url}/v1/transcripts"
        history = [say(i) for i in range(5)]
        created = await http.post(api, json={"id": "walled", "messages": history})
        assert created.status_code == 201, created.text
        tab = await open_tab(context, f"{proxy.url}/t/walled")
        status = tab.page.locator("#status")
        # History first, over HTTP, and the page says which way it is connected.
        await expect(status).to_have_attribute("data-state", LIVE)
        await expect(status).to_have_attribute("data-transport", "sse")
        await expect(tab.page.locator("#status-text")).to_have_text("Live (HTTP fallback)")
        await tab.wait_revision(1)
        snapshot = (await http.get(f"{api}/walled")).json()
        assert await tab.messages() == server_rows(snapshot)
        assert proxy.refused >= 2, "the page never tried a WebSocket"

        async with client_py.connect(srv.ws_url) as other:
            mirror = await other.subscribe("walled")
            # Another client's appends reach the page live, over SSE.
            await other.append("walled", [say(5)])
            await other.append("walled", [say(6), say(7)])
            await tab.wait_revision(3)
            # The page's own message goes out as an HTTP POST and reaches the other client.
            await tab.send("sent without a WebSocket")
            await tab.wait_revision(4)
            await mirror.wait_for_revision(4, timeout=10)
            assert mirror.messages[-1].content == "sent without a WebSocket"
        await expect(tab.page.locator("#outbox li")).to_have_count(0)
        snapshot = (await http.get(f"{api}/walled")).json()
        assert snapshot["revision"] == 4
        assert await tab.messages() == server_rows(snapshot)
        client = await tab.page.evaluate(
            "() => ({transport: tsyncClient.transport, stats: tsyncClient.stats})"
        )
        assert client["transport"] == "sse"
        assert client["stats"]["fallbacks"] == 1
        assert tab.errors_other_than(WS_REFUSED) == []


async def test_the_fallback_carries_the_pages_token(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server(token="s3cret") as srv, UpgradeBlocker(_port(srv.url)) as proxy:
        headers = {"Authorization": "Bearer s3cret"}
        api = f"{srv.url}/v1/transcripts"
        created = await http.post(api, json={"id": "locked", "messages": [say(0)]}, headers=headers)
        assert created.status_code == 201, created.text
        tab = await open_tab(context, f"{proxy.url}/t/locked#token=s3cret")
        await expect(tab.page.locator("#status")).to_have_attribute("data-state", LIVE)
        await expect(tab.page.locator("#status")).to_have_attribute("data-transport", "sse")
        await tab.wait_revision(1)
        await tab.send("with a token, over HTTP")
        await tab.wait_revision(2)
        appended = await http.post(
            f"{api}/locked/messages", json={"messages": [say(2)]}, headers=headers
        )
        assert appended.status_code == 201, appended.text
        await tab.wait_revision(3)
        snapshot = (await http.get(f"{api}/locked", headers=headers)).json()
        assert await tab.messages() == server_rows(snapshot)
        assert tab.errors_other_than(WS_REFUSED) == []


# What a page of the server's origin runs: a plain EventSource on a transcript's stream, every
# item and control event kept for the test to read.
FOLLOW = """url => {
    window.__items = [];
    window.__controls = [];
    window.__errors = 0;
    const source = new EventSource(url);
    source.addEventListener('data', e => window.__items.push(...JSON.parse(e.data)));
    source.addEventListener('control', e => window.__controls.push(JSON.parse(e.data)));
    source.onerror = () => { window.__errors += 1; };
    window.__source = source;
}"""


async def test_chromium_eventsource_follows_a_transcript(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        api = f"{srv.url}/v1/transcripts"
        created = await http.post(api, json={"id": "es", "messages": [say(0), say(1)]})
        assert created.status_code == 201, created.text
        assert (await http.post(f"{api}/es/messages", json={"messages": [say(2)]})).status_code
        tab = await open_tab(context, f"{srv.url}/")  # any page of the server's origin
        await tab.page.evaluate(FOLLOW, "/v1/stream/transcripts/es?offset=-1&live=sse")
        # The messages so far: the events of revisions 1 and 2, then a control that is up to date.
        await tab.page.wait_for_function(
            "() => window.__controls.some(c => c.upToDate) && window.__items.length === 2"
        )
        items = await tab.page.evaluate("window.__items")
        assert [e["revision"] for e in items] == [1, 2]
        messages = [m for e in items for m in e["change"]["messages"]]
        assert messages == [say(0), say(1), say(2)]
        # A live append arrives as the next item, on the same EventSource.
        appended = await http.post(f"{api}/es/messages", json={"messages": [say(3)]})
        assert appended.status_code == 201, appended.text
        await tab.page.wait_for_function("() => window.__items.length === 3")
        last = (await tab.page.evaluate("window.__items"))[-1]
        assert last["revision"] == 3
        assert last["change"] == {"kind": "messages-appended", "start": 3, "messages": [say(3)]}
        offsets = [c["streamNextOffset"] for c in await tab.page.evaluate("window.__controls")]
        assert offsets == sorted(offsets)
        assert offsets[-1].endswith(f"_{3:016d}")
        assert await tab.page.evaluate("window.__errors") == 0
        await tab.page.evaluate("window.__source.close()")
        assert tab.errors == []


# A page of the relay's origin that follows a transcript with /v1/client.js, trying the
# WebSocket again every 300 ms while it is on the fallback.
CLIENT = """async ([wsUrl, transcriptId]) => {
    const { TsyncClient } = await import('/v1/client.js');
    const client = new TsyncClient(wsUrl, { webSocketRetryMs: 300, initialBackoffMs: 50 });
    window.client = client;
    window.statuses = [];
    client.on('status', ({ state, transport }) => window.statuses.push(`${state}/${transport}`));
    client.subscribe(transcriptId);
    client.connect();
}"""


async def test_the_client_goes_back_to_the_websocket_once_one_gets_through(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv, UpgradeBlocker(_port(srv.url)) as proxy:
        api = f"{srv.url}/v1/transcripts"
        created = await http.post(api, json={"id": "back", "messages": [say(0)]})
        assert created.status_code == 201, created.text
        tab = await open_tab(context, f"{proxy.url}/")
        ws_url = f"ws://127.0.0.1:{proxy.port}/v1/ws"
        await tab.page.evaluate(CLIENT, [ws_url, "back"])
        await tab.page.wait_for_function(
            "() => client.state === 'live' && client.transport === 'sse'"
        )
        assert (await http.post(f"{api}/back/messages", json={"messages": [say(1)]})).is_success
        await tab.page.wait_for_function("() => client.mirror('back')?.revision === 2")
        # The network lets WebSockets through again: the next try opens one, and the client
        # moves to it and resumes from its copy's revision (increments, not a new baseline).
        proxy.blocking = False
        await tab.page.wait_for_function(
            "() => client.transport === 'websocket' && client.state === 'resynced'"
        )
        assert (await http.post(f"{api}/back/messages", json={"messages": [say(2)]})).is_success
        await tab.page.wait_for_function("() => client.mirror('back')?.revision === 3")
        seen = await tab.page.evaluate(
            "() => ({statuses, stats: client.stats, resumes: "
            "client.subscriptions.get('back').continuity.counters.resumes, "
            "baselines: client.subscriptions.get('back').continuity.counters.baselines})"
        )
        assert seen["statuses"][-2:] == ["reconnecting/websocket", "resynced/websocket"]
        assert "live/sse" in seen["statuses"]
        assert seen["stats"]["fallbacks"] == 1
        assert seen["baselines"] == 1
        assert seen["resumes"] >= 1
        ack = await tab.page.evaluate(
            "async () => (await client.append('back', [{role: 'user', content: 'hi'}])).revision"
        )
        assert ack == 4
        assert tab.errors_other_than(WS_REFUSED) == []
