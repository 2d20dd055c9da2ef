"""view in Chromium (Playwright) on a folder whose rows name members of img2dataset's tars: every card
shows the member's thumbnail, not the "image not found" tile, and the snapshot too.

Set CAPTION_DEBIAS_VIEW_SCREENSHOTS=DIR to save view-tars.png (docs/img/view-tars.png comes from here).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_support import SHOTS, needs_chromium, playwright_or_skip

sync_api = playwright_or_skip()

from image_worlds import built, i2d_world, url_world  # noqa: E402
from view_fixtures import Server  # noqa: E402

pytestmark = needs_chromium

CONTENT_TYPES = """sel => Promise.all([...document.querySelectorAll(sel)].map(
    i => fetch(i.src).then(r => r.headers.get('content-type'))))"""


@pytest.fixture(scope="module")
def wds(tmp_path_factory):
    urls = built(tmp_path_factory, "urls", url_world)
    return built(tmp_path_factory, "wds", lambda base: i2d_world(base, "webdataset", urls))


@pytest.fixture(scope="module")
def page(browser):
    """One page for the module, in its own context of the session's Chromium (conftest.py)."""
    context = browser.new_context(viewport={"width": 1360, "height": 900}, bypass_csp=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    context.close()
    assert not errors, errors


def loaded(page, selector: str) -> int:
    page.wait_for_function(
        "sel => [...document.querySelectorAll(sel)].every(i => i.complete && i.naturalWidth > 0)", arg=selector
    )
    return page.locator(selector).count()


def test_cards_show_the_tar_members_thumbnails(wds, page, tmp_path):
    with Server([wds.prepared], thumbs_dir=tmp_path / "thumbs") as server:
        page.goto(server.url)
        page.wait_for_selector(".card")
        assert loaded(page, ".card img") == len(wds.refs)
        assert set(page.evaluate(CONTENT_TYPES, ".card img")) == {"image/jpeg"}  # no placeholder tile
        sizes = page.locator(".card img").evaluate_all("els => els.map(e => [e.naturalWidth, e.naturalHeight])")
        assert all(0 < w <= 256 and 0 < h <= 256 and [w, h] != [256, 192] for w, h in sizes), sizes
        assert "image not found" not in page.content()
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(Path(SHOTS) / "view-tars.png"))


def test_the_snapshot_of_a_tar_folder_shows_the_same_thumbnails(wds, page, tmp_path):
    from caption_debias.view.options import ViewOptions
    from caption_debias.view.server import run_view

    out = tmp_path / "snap.html"
    run_view([str(wds.prepared)], ViewOptions(static=str(out), quiet=True), announce=lambda line: None)
    page.goto(out.as_uri())
    page.wait_for_selector(".card")
    assert loaded(page, ".card img") == len(wds.refs)
    srcs = page.locator(".card img").evaluate_all("els => els.map(e => e.src.slice(0, 23))")
    assert set(srcs) == {"data:image/jpeg;base64,"}
