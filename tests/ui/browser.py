"""A real headless browser for the /ui tests: Debian's chromium driven by Playwright (its Python package only;
no browser download). Tests that need it skip with the reason when either is missing."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

WAIT_MS = 15_000
"""A bound on each wait for the page, generous for a loaded machine."""
CHROMIUM_ENV = "ORS_CHROMIUM"
"""Where the chromium binary is, if not `chromium` on PATH (Debian's package puts it at /usr/bin/chromium)."""


def chromium_path() -> str | None:
    return os.environ.get(CHROMIUM_ENV) or shutil.which("chromium") or shutil.which("chromium-browser")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium (a Playwright `Browser`), or skip saying what is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (it is in the [test] extra)")
    path = chromium_path()
    if path is None:
        pytest.skip(f"no chromium: install Debian's `chromium` (.ci/run does) or set {CHROMIUM_ENV}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path)
        try:
            yield browser
        finally:
            browser.close()


def log_in(page: Any, base: str, key: str, path: str = "/ui") -> None:
    """Open `path`, which answers with the login form, and give it the key."""
    page.goto(base + path)
    page.fill("input[name=key]", key)
    page.click("#login button[type=submit]")
    page.wait_for_url(base + path)


@contextmanager
def logged_in_page(browser: Any, base: str, key: str, path: str = "/ui/play") -> Iterator[Any]:
    """A page of a fresh browser context (its own cookies), logged in at `path`; on leaving, it fails the test if
    the Content-Security-Policy refused anything (the page itself never does what it forbids)."""
    context = browser.new_context()
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    refused: list[str] = []
    page.on(
        "console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None
    )
    log_in(page, base, key, path)
    yield page
    context.close()
    assert refused == []
