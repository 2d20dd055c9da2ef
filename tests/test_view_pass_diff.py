"""Issue 37, passes compared: view's /api/diff says which rows of folder A folder B removed (by the
reason B's removed.jsonl gives), kept and masked, and whether B descends from A; the page shows it
(Chromium). Folders: a curated world's prepared folder and the curated pass of it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette")

from browser_support import needs_chromium, shot, watched_page  # noqa: E402
from view_fixtures import Server, app_client, curated_world  # noqa: E402


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return curated_world(tmp_path_factory.mktemp("diff"))


def _client(folders):
    return app_client(folders)


def test_a_pass_diff_counts_what_the_later_pass_removed_by_reason(world):
    manifest = json.loads((world["curated"] / "manifest.json").read_text("utf-8"))
    c = _client([world["prepared"], world["curated"]])
    d = c.get("/api/diff", params={"a": 0, "b": 1}).json()
    want = {r: n for r, n in manifest["counts"]["removed_by_reason"].items() if n}
    assert d["removed_by_reason"] == want and d["removed"] == sum(want.values())
    assert d["kept"] == manifest["counts"]["written"] and d["added"] == 0
    assert d["a"]["rows"] == manifest["counts"]["read"] and d["descends"] is True
    back = c.get("/api/diff", params={"a": 1, "b": 0}).json()  # the other way: nothing removed, rows added
    assert back["removed"] == 0 and back["added"] == d["removed"] and back["descends"] is False


def test_bad_pairs_are_one_line(world):
    c = _client([world["prepared"], world["curated"]])
    for params, status in (({"a": 0, "b": 0}, 400), ({"a": 0, "b": 7}, 404), ({"a": 0}, 404)):
        res = c.get("/api/diff", params=params)
        assert res.status_code == status and "\n" not in res.json()["error"], params


@needs_chromium
def test_the_page_compares_two_passes(world, browser, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    manifest = json.loads((world["curated"] / "manifest.json").read_text("utf-8"))
    with Server([world["prepared"], world["curated"]], thumbs_dir=tmp_path / "t") as server:
        with watched_page(browser) as page:
            page.goto(server.url)
            page.wait_for_selector("body[data-ready]")
            sync_api.expect(page.locator("#compare")).to_be_visible()
            page.select_option("#diff-a", "0")
            page.select_option("#diff-b", "1")
            page.click("#diff-go")
            sync_api.expect(page.locator("#diff-removed")).to_have_text(str(manifest["counts"]["removed"]))
            sync_api.expect(page.locator("#diff-kept")).to_have_text(str(manifest["counts"]["written"]))
            assert "is a later pass of" in page.inner_text("#diff-out")
            shot(page, "pass-diff")
