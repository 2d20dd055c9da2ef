"""What the browser tests share: the system Chromium that Playwright drives, the mark that skips a
module where it is missing, and screenshots on request (CAPTION_DEBIAS_VIEW_SCREENSHOTS=DIR: the
docs/img/view-*.png come from there). The session-scoped `browser` fixture is in conftest.py."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

CHROMIUM = os.environ.get("CAPTION_DEBIAS_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no system Chromium (apt-get install chromium; .ci/run installs it)"
)
SHOTS = os.environ.get("CAPTION_DEBIAS_VIEW_SCREENSHOTS")


def playwright_or_skip() -> Any:
    """Playwright's sync API for a browser test module, the module skipped where the web app's packages
    (starlette, uvicorn) or Playwright are not installed."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    return pytest.importorskip("playwright.sync_api")


def shot(page, name: str, full: bool = False) -> None:
    """Save the page as SHOTS/view-NAME.png when screenshots were asked for."""
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"view-{name}.png"), full_page=full)


@contextmanager
def chromium(sync_api: Any) -> Iterator[Any]:
    """The system Chromium under Playwright, closed on the way out."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def watched_page(browser: Any, **context_kw: Any) -> Iterator[Any]:
    """A page in a fresh context (1360 x 900, the page's own policy in force) that fails the test on
    a page error or a Content-Security-Policy report."""
    ctx = browser.new_context(viewport={"width": 1360, "height": 900}, **context_kw)
    page = ctx.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    try:
        yield page
    finally:
        ctx.close()
    assert problems == [], problems
