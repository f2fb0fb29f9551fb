"""What the browser tests share: a page with its errors, and small builders."""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.async_api import BrowserContext, Page

#: Functions that the tests evaluate in the page, kept as JavaScript files.
PROBES = Path(__file__).resolve().parent / "probes"

LIVE = re.compile(r"^(live|resynced)$")

# What the page shows: (index, role, text of the text parts) per message, in DOM order.
# Text parts are rendered as Markdown with line breaks kept (<br>): read them back as text.
DOM_MESSAGES = """() => [...document.querySelectorAll('#messages li.message')].map(li => [
    Number(li.dataset.index), li.dataset.role,
    [...li.querySelectorAll('.body .text')].map(p => {
        const copy = p.cloneNode(true);
        for (const br of copy.querySelectorAll('br')) br.replaceWith('\\n');
        return copy.textContent;
    }).join('')])"""


# Every DOM change in the chat from now on, as batches in window.__batches ("add <index>" for a
# message, "remove draft"): swapping a draft for its message must be a single batch.
WATCH_DRAFT_SWAP = """() => {
    window.__batches = [];
    const seen = records => records.map(r => [
        ...[...r.addedNodes].filter(n => n.classList?.contains('message'))
            .map(n => 'add ' + n.dataset.index),
        ...[...r.removedNodes].filter(n => n.classList?.contains('draft'))
            .map(() => 'remove draft'),
    ]).flat();
    new MutationObserver(records => window.__batches.push(seen(records)))
        .observe(document.getElementById('main-chat'), {childList: true, subtree: true});
}"""


@dataclass
class Tab:
    """A page and the errors it reported: uncaught exceptions, and console
    errors (the browser's own network errors among them)."""

    page: Page
    errors: list[str] = field(default_factory=list)

    def errors_other_than(self, *expected: str) -> list[str]:
        """The errors that mention none of ``expected`` (a server that is
        away, on purpose, makes the browser log refused connections)."""
        return [e for e in self.errors if not any(x in e for x in expected)]

    async def messages(self) -> list[tuple[int, str, str]]:
        rows: list[list[Any]] = await self.page.evaluate(DOM_MESSAGES)
        return [(int(i), str(role), str(text)) for i, role, text in rows]

    async def wait_revision(self, revision: int, timeout: float = 10_000) -> None:
        await self.page.wait_for_function(
            "r => Number(document.getElementById('meta').dataset.revision) === r",
            arg=revision,
            timeout=timeout,
        )

    async def send(self, text: str, role: str = "user") -> None:
        """Type a message and press Enter, as a person would."""
        await self.page.get_by_label("Role").select_option(role)
        box = self.page.get_by_label("Message", exact=True)
        await box.fill(text)
        await box.press("Enter")


async def open_tab(context: BrowserContext, url: str) -> Tab:
    page = await context.new_page()
    tab = Tab(page)
    page.on("pageerror", lambda exc: tab.errors.append(f"pageerror: {exc}"))
    page.on(
        "console",
        lambda msg: tab.errors.append(f"console: {msg.text}") if msg.type == "error" else None,
    )
    await page.goto(url)
    return tab


def server_rows(snapshot: dict[str, Any]) -> list[tuple[int, str, str]]:
    """The server's messages as the page should show them."""
    start = snapshot["start"]
    rows = []
    for i, raw in enumerate(snapshot["messages"]):
        content = raw["content"]
        text = (
            content
            if isinstance(content, str)
            else "".join(p["text"] for p in content if p["type"] == "text")
        )
        rows.append((start + i, raw["role"], text))
    return rows


def say(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}


def png(width: int, height: int) -> bytes:
    """A small gradient PNG, made here so the test needs no image file."""
    rows = b"".join(
        b"\x00"
        + b"".join(
            bytes((30 + 200 * x // width, 80 + 120 * y // height, 190)) for x in range(width)
        )
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + (chunk(b"IEND", b""))
    )
