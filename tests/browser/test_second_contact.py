"""What a newcomer saw on the page after the quick start (issue 25): the
list shows plain text, an imported file shows once (as the file, not as its
``@@@`` fence, in the bubble and in the title), a server that wants a token
says so once, and a refused token says why."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import BrowserContext, expect

from tests.auth.conftest import OTHER_SECRET, SECRET, mint
from tests.browser.tabs import LIVE, open_tab
from tests.support.servers import running_server

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

NOTES = """<!-- user -->
here are my **notes**
@@@notes.txt
buy milk
@@@
<!-- assistant -->
```python
xs = [1, 2]
```
"""


async def test_an_imported_file_and_markdown_show_as_a_reader_sees_them(
    context: BrowserContext, http: httpx.AsyncClient
) -> None:
    async with running_server() as srv:
        r = await http.post(
            f"{srv.url}/v1/transcripts/import",
            params={"id": "notes", "filename": "notes.lmml"},
            content=NOTES.encode(),
            headers={"content-type": "text/markdown"},
        )
        assert r.status_code == 201, r.text
        tab = await open_tab(context, f"{srv.url}/")
        item = tab.page.locator('li.conversation[data-id="notes"]')
        await expect(item.locator(".conversation-title")).to_have_text("here are my notes")
        await expect(item.locator(".conversation-preview")).to_have_text("xs = [1, 2]")

        await item.locator("a").click()
        await expect(tab.page.locator("#status")).to_have_attribute("data-state", LIVE)
        first = tab.page.locator("#messages li.message").first
        await expect(first.locator(".attachment a")).to_have_text("⬇ notes.txt")
        await expect(first.locator(".body")).not_to_contain_text("@@@")
        await expect(first.locator(".body")).not_to_contain_text("buy milk")
        await expect(tab.page).to_have_title("here are my notes · transcript-sync")
        await expect(tab.page.locator("#title")).to_have_text("here are my notes")
        assert tab.errors == []


async def _count(tab_page: object, text: str) -> int:
    count: int = await tab_page.evaluate(  # type: ignore[attr-defined]
        "(text) => document.body.innerText.split(text).length - 1", text
    )
    return count


async def test_a_server_that_wants_a_token_says_so_once(context: BrowserContext) -> None:
    async with running_server(jwt_secret=SECRET) as srv:
        await srv.hub.writes.create("t")
        for path in ("/", "/t/t"):
            tab = await open_tab(context, f"{srv.url}{path}")
            await expect(tab.page.locator("#token-form")).to_be_visible()
            await expect(tab.page.locator("#token-why")).to_have_text("This server needs a token.")
            assert await _count(tab.page, "This server needs a token.") == 1, path
            await tab.page.close()


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (lambda: mint(audience=None, ttl=-60, admin=True), "the token has expired"),
        (
            lambda: mint(audience=None, secret=OTHER_SECRET, admin=True),
            "the token's signature does not verify",
        ),
    ],
)
async def test_a_refused_token_says_why(context: BrowserContext, token: object, says: str) -> None:
    async with running_server(jwt_secret=SECRET) as srv:
        await srv.hub.writes.create("t")
        for path in ("/", "/t/t"):
            tab = await open_tab(context, f"{srv.url}{path}#token={token()}")  # type: ignore[operator]
            await expect(tab.page.locator("#token-why")).to_contain_text(says)
            await expect(tab.page.locator("#token-why")).to_contain_text("refused this token")
            await tab.page.close()
