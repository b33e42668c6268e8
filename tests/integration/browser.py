"""A real browser for the console's tests: Debian's chromium (installed by
``scripts/stack install``) driven headless by Playwright, never a browser Playwright
downloads itself."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from playwright.async_api import BrowserContext, Page, async_playwright, expect

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
"""Where each page's screenshot goes (git-ignored): look at them."""


@asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[BrowserContext]:
    """A headless chromium with a fresh profile in ``profile``."""
    if not CHROMIUM.exists():
        raise AssertionError(f"{CHROMIUM} is missing: run scripts/stack install")
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=FLAGS,
            viewport={"width": 1300, "height": 900},
        )
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            await context.close()


async def screenshot(page: Page, name: str) -> Path:
    """Save the whole of ``page`` as ``tests/artifacts/screenshots/<name>.png``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


async def sign_in(page: Page, base: str, token: str) -> None:
    """Sign in through the console's form, as a person would."""
    await page.goto(f"{base}/console/sign-in")
    await page.fill("#token", token)
    await page.click("button:has-text('Sign in')")
    await expect(page).to_have_url(re.compile(r"/console/runs"))
    await expect(page.locator("header .who")).to_contain_text("signed in as")
