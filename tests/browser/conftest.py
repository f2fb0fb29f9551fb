"""Headless Chromium (Debian's package, never a downloaded one) driven by
Playwright's async API; one browser per test module, a fresh context per test."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from tests.conftest import REQUIRE_ALL, require_binary

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]

if importlib.util.find_spec("playwright") is None:
    if REQUIRE_ALL:
        raise RuntimeError("playwright is not installed (TSYNC_REQUIRE_ALL=1: CI must install it)")
    pytest.skip("playwright is not installed", allow_module_level=True)

from playwright.async_api import Browser, BrowserContext, async_playwright  # noqa: E402


@contextlib.asynccontextmanager
async def chromium(*extra_args: str) -> AsyncIterator[Browser]:
    """Debian's headless Chromium under Playwright, with ``extra_args``."""
    executable = require_binary("chromium", CHROMIUM)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=executable, args=[*CHROMIUM_ARGS, *extra_args], timeout=30_000
        )
        try:
            yield browser
        finally:
            await browser.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as launched:
        yield launched


@pytest_asyncio.fixture(loop_scope="module")
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    context = await browser.new_context(viewport={"width": 900, "height": 1000})
    context.set_default_timeout(10_000)
    try:
        yield context
    finally:
        await context.close()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client
