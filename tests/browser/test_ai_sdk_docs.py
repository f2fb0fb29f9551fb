"""docs/ai-sdk.md, "Using tsync with the AI SDK", as written: its route
handler (``app/api/chat/route.ts``) and its ``useChat`` component
(``app/chat/Chat.tsx``) are taken from the page, type-checked with
``tsc --strict``, and run: the route in Node (bundled by esbuild, its exported
``POST`` called with a real ``Request`` by tests/browser/ai_docs_app.mjs)
against a real tsync server, with the page's own test double of the model
(``MockLanguageModelV4`` of ``ai/test``, no network); the component in
headless Chromium, built from the npm packages (``react``, ``@ai-sdk/react``,
``ai``, the packed ``client_js``).

It shows the reply as the route wrote it into tsync, a second tab opened in
the middle resumes it from tsync with nothing twice, and the route as a
webhook answers the conversation with the commit's ack."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from playwright.async_api import BrowserContext, Page, expect

from tests.js_package import npm
from tests.support.servers import RunningServer, free_port, running_server

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ai-sdk.md"
APP = Path(__file__).resolve().parent / "ai_docs_app.mjs"
SECRET = "ai-sdk-docs-suite-secret-0123456789abcdef"
#: What the page's test double of the model says, word by word.
REPLY = "Hello from the mock model: this reply was streamed into tsync, word by word."

#: The page's entry (the test's, not the docs'): the stored conversation as
#: initialMessages, as the docs say the page fetches it, then the component.
MAIN = """
import { createRoot } from "react-dom/client";
import type { UIMessage } from "ai";
import { Chat } from "./app/chat/Chat";

const params = new URLSearchParams(location.search);
const tsyncUrl = params.get("tsync") ?? "";
const token = params.get("token") ?? "";
const id = params.get("id") ?? "";

async function stored(): Promise<UIMessage[]> {
  const response = await fetch(`${tsyncUrl}/v1/transcripts/${id}/ui-messages`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return response.ok ? ((await response.json()) as { messages: UIMessage[] }).messages : [];
}

const root = document.getElementById("root");
if (root === null) throw new Error("no #root");
const initialMessages = await stored();
(window as unknown as { initialCount: number }).initialCount = initialMessages.length;
createRoot(root).render(
  <Chat id={id} tsyncUrl={tsyncUrl} token={token} initialMessages={initialMessages} />,
);
"""
HTML = (
    '<!doctype html><meta charset="utf-8"><div id="root"></div>'
    '<script type="module" src="app.js"></script>'
)
TSCONFIG = {
    "compilerOptions": {
        "target": "ES2022",
        "module": "ESNext",
        "moduleResolution": "bundler",
        "strict": True,
        "noEmit": True,
        "jsx": "react-jsx",
        "skipLibCheck": True,
        "lib": ["ES2022", "DOM", "DOM.Iterable"],
        "types": ["node"],
    },
    "files": [
        "app/api/chat/route.ts",
        "app/api/chat/model.ts",
        "app/api/chat/model.gateway.ts",
        "app/chat/Chat.tsx",
        "main.tsx",
    ],
}


def token(**claims: object) -> str:
    return jwt.encode({"sub": "s", "exp": int(time.time()) + 600, **claims}, SECRET, "HS256")


def doc_block(name: str) -> str:
    """The code block of docs/ai-sdk.md whose info string names ``name``."""
    text = DOC.read_text()
    match = re.search(rf"^```tsx? {re.escape(name)}\n(.*?)^```", text, re.S | re.M)
    assert match is not None, f"docs/ai-sdk.md lost its {name} block"
    return match.group(1)


def tool(name: str) -> str:
    return str(npm.PROJECT / "node_modules" / ".bin" / name)


def run(args: list[str], cwd: Path) -> None:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs' app in a folder of its own (its node_modules: the test
    project's, with the packed client): type-checked, the route bundled for
    Node and the page for the browser."""
    folder = tmp_path_factory.mktemp("ai-sdk-docs")
    npm.tools()
    npm.install(npm.pack(folder))
    (folder / "node_modules").symlink_to(npm.PROJECT / "node_modules")
    files = {
        "app/api/chat/route.ts": doc_block("app/api/chat/route.ts"),
        # The route runs with the page's test double of the model; the real
        # model.ts is type-checked beside it.
        "app/api/chat/model.ts": doc_block("app/api/chat/model.test-double.ts"),
        "app/api/chat/model.gateway.ts": doc_block("app/api/chat/model.ts"),
        "app/chat/Chat.tsx": doc_block("app/chat/Chat.tsx"),
        "main.tsx": MAIN,
        "tsconfig.json": json.dumps(TSCONFIG),
        "site/index.html": HTML,
    }
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    run([tool("tsc"), "-p", "tsconfig.json"], folder)
    common = ["--bundle", "--format=esm", "--log-level=warning"]
    run(
        [
            tool("esbuild"),
            "app/api/chat/route.ts",
            *common,
            "--platform=node",
            "--packages=external",
            "--outfile=route.mjs",
        ],
        folder,
    )
    run(
        [
            tool("esbuild"),
            "main.tsx",
            *common,
            "--jsx=automatic",
            "--target=es2022",
            '--define:process.env.NODE_ENV="development"',
            "--outfile=site/app.js",
        ],
        folder,
    )
    return folder


@contextlib.asynccontextmanager
async def docs_app(folder: Path, srv: RunningServer, port: int) -> AsyncIterator[str]:
    """The route and the page served by Node on ``port``; yields its origin."""
    env = {**os.environ, "TSYNC_URL": srv.url, "TSYNC_TOKEN": token(admin=True)}
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(APP),
        str(folder / "route.mjs"),
        str(folder / "site"),
        str(port),
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(30):
            ready = await proc.stdout.readline()
        if json.loads(ready or b"null") != {"ready": True}:
            _, err = await proc.communicate()
            raise AssertionError(f"the docs' app did not start: {ready!r} {err!r}")
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.returncode is None:
            proc.terminate()
            _, err = await proc.communicate()
            # The route logs what it could not store: nothing may be.
            assert b"not stored" not in err, err.decode()


async def ui_messages(srv: RunningServer, chat: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=srv.url) as http:
        r = await http.get(
            f"/v1/transcripts/{chat}/ui-messages",
            headers={"authorization": f"Bearer {token(admin=True)}"},
        )
        assert r.status_code == 200, r.text
        messages: list[dict[str, Any]] = r.json()["messages"]
        return messages


def text_of(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


async def open_chat(context: BrowserContext, site: str, srv: RunningServer, chat: str) -> Page:
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    reader = token(read=[chat])  # the browser may only read its chat
    await page.goto(f"{site}/?tsync={srv.url}&token={reader}&id={chat}")
    await expect(page.locator(".status")).to_have_text("ready", timeout=20_000)
    assert errors == []
    return page


async def test_the_docs_route_writes_the_reply_into_tsync_and_the_component_shows_it(
    app: Path, context: BrowserContext
) -> None:
    port = free_port()
    site = f"http://127.0.0.1:{port}"
    async with (
        running_server(jwt_secret=SECRET, cors_origins=site, allowed_origins=site) as srv,
        docs_app(app, srv, port),
    ):
        first = await open_chat(context, site, srv, "docs-1")
        await first.locator("input").fill("What do you say?")
        await first.locator("button[type=submit]").click()
        assistant = first.locator("li.assistant")
        # A second tab opened while the reply is being written: it resumes
        # the reply from tsync (GET /v1/ai/chat/{id}/stream) and ends with it
        # whole, once.
        await expect(assistant).to_contain_text("Hello from", timeout=20_000)
        second = await open_chat_resuming(context, site, srv, "docs-1")
        for page in (first, second):
            await expect(page.locator("li.assistant")).to_have_text(REPLY, timeout=20_000)
            await expect(page.locator("li.assistant")).to_have_count(1)
            await expect(page.locator("li.user")).to_have_text("What do you say?")
            await expect(page.locator(".status")).to_have_text("ready")

        stored = await ui_messages(srv, "docs-1")
        assert [m["role"] for m in stored] == ["user", "assistant"]
        assert text_of(stored[0]) == "What do you say?"
        assert text_of(stored[1]) == REPLY

        # A reload after the commit shows the stored conversation (nothing to resume).
        await first.reload()
        await expect(first.locator(".status")).to_have_text("ready")
        await expect(first.locator("li.assistant")).to_have_text(REPLY)
        await expect(first.locator("li")).to_have_count(2)


async def open_chat_resuming(
    context: BrowserContext, site: str, srv: RunningServer, chat: str
) -> Page:
    """A tab opened in the middle of a reply: it shows the reply growing
    (before it is committed) through the component's resume."""
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    reader = token(read=[chat])
    await page.goto(f"{site}/?tsync={srv.url}&token={reader}&id={chat}")
    # It loaded before the reply was committed: what it shows of it came
    # through the resume.
    await expect(page.locator(".status")).to_have_text(
        re.compile("submitted|streaming|ready"), timeout=20_000
    )
    assert await page.evaluate("window.initialCount") == 1
    assert errors == []
    return page


async def test_the_docs_route_as_a_webhook_answers_the_stored_conversation(app: Path) -> None:
    port = free_port()
    async with (
        running_server(jwt_secret=SECRET) as srv,
        docs_app(app, srv, port) as site,
        httpx.AsyncClient(timeout=30) as http,
    ):
        admin = {"authorization": f"Bearer {token(admin=True)}"}
        user = {"id": "u-1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
        r = await http.post(f"{srv.url}/v1/transcripts", json={"id": "docs-hook"}, headers=admin)
        assert r.status_code == 201, r.text
        r = await http.post(
            f"{srv.url}/v1/transcripts/docs-hook/messages",
            params={"format": "ui"},
            json={"messages": [user]},
            headers=admin,
        )
        assert r.status_code in (200, 201), r.text
        r = await http.post(f"{site}/api/chat", json={"id": "docs-hook"})
        assert r.status_code == 200, r.text
        ack = r.json()
        stored = await ui_messages(srv, "docs-hook")
    assert ack["revision"] == 2, ack
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert text_of(stored[1]) == REPLY
