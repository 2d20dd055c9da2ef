"""`caption-debias view` in a real browser: Playwright driving the system Chromium against the real
server (uvicorn on a free loopback port) and against a static snapshot opened from a file:// URL.

Set CAPTION_DEBIAS_VIEW_SCREENSHOTS=DIR to save a PNG of each view (docs/img/view-*.png come from here).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from browser_support import needs_chromium, playwright_or_skip, shot

sync_api = playwright_or_skip()

from view_fixtures import Server, curated_world, mtimes, scored_copy  # noqa: E402

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("viewb")
    w = curated_world(root)
    w["scored"] = scored_copy(w["curated"], w["images"], root / "scored")
    w["thumbs"] = root / "thumbs"
    return w


@pytest.fixture(scope="module")
def served(world):
    before = mtimes(world["curated"], world["images"], world["prepared"])
    with Server([world["curated"]], thumbs_dir=world["thumbs"]) as server:
        yield server
    # every browser test below ran against this server: none of them wrote to the folders
    assert mtimes(world["curated"], world["images"], world["prepared"]) == before


@pytest.fixture()
def page(browser):
    # Playwright evaluates wait_for_function's predicates with eval, which the page's Content-Security-Policy
    # refuses; tests/test_view_security.py drives the page and the snapshot with their policies in force
    context = browser.new_context(viewport={"width": 1360, "height": 900}, bypass_csp=True)
    pg = context.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    context.close()
    assert not errors, errors


def images_loaded(page, selector: str) -> int:
    """Waits until every <img> under `selector` has decoded; returns how many there are."""
    page.wait_for_function(
        "sel => [...document.querySelectorAll(sel)].every(i => i.complete && i.naturalWidth > 0)", arg=selector
    )
    return page.locator(selector).count()


def removed_keys(folder: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in (folder / "removed.jsonl").read_text().splitlines():
        r = json.loads(line)
        out.setdefault(r["reason"], set()).add(r["key"])
    return out


def test_grid_shows_every_row_with_its_image(served, page, world):
    page.goto(served.url)
    page.wait_for_selector(".card")
    assert page.locator(".card").count() == 13
    assert images_loaded(page, ".card img") == 13
    assert page.locator("#status").inner_text() == "13 kept rows match"
    table = pq.read_table(world["curated"] / "shards")
    assert set(page.locator(".card").evaluate_all("els => els.map(e => e.dataset.key)")) == set(
        table.column("key").to_pylist()
    )
    first = page.locator(".card").first
    assert "tokens" in first.locator(".tok").inner_text() and first.locator(".lim").count() == 2
    page.wait_for_function("document.querySelectorAll('#rows option').length > 1")
    assert not page.locator("#legend-keep").is_visible()  # no scorer columns in this folder: no legend for them
    shot(page, "grid")


def test_summary_sentences_are_marked(served, page, world):
    page.goto(served.url)
    page.wait_for_selector(".card")
    table = pq.read_table(world["curated"] / "shards", columns=["key", "sentences", "summary_mask"]).to_pylist()
    flagged = 0
    for row in table:
        card = page.locator(f'.card[data-key="{row["key"]}"]')
        marked = card.locator(".sent:not(.role-detail)").all_inner_texts()
        expect = [s for s, m in zip(row["sentences"], row["summary_mask"]) if m]
        assert marked == expect, row["key"]
        if row["summary_mask"] and row["summary_mask"][0]:
            assert card.locator(".sent").first.get_attribute("class").split() == ["sent", "role-opening-summary"]
        flagged += len(expect)
    assert flagged > 0  # the world has summary sentences to mark
    weight = page.locator(".role-opening-summary").first.evaluate("e => getComputedStyle(e).borderBottomStyle")
    assert weight == "solid"  # marked in a way one sees, not only by a class name


def test_reason_filter_shows_exactly_the_removed_rows_of_that_reason(served, page, world):
    page.goto(served.url)
    page.wait_for_selector(".card")
    page.wait_for_function("document.querySelectorAll('#rows option').length > 1")
    for reason, keys in removed_keys(world["curated"]).items():
        page.select_option("#rows", f"removed:{reason}")
        page.wait_for_function(
            "n => document.querySelector('#status').textContent === `${n} removed ${n === 1 ? 'row matches' : 'rows match'}`",
            arg=len(keys),
        )
        got = page.locator(".card").evaluate_all("els => els.map(e => e.dataset.key)")
        assert sorted(got) == sorted(keys), reason
        assert set(page.locator(".card .badge.reason").all_inner_texts()) == {reason}
        if reason == "near_duplicate_caption":
            images_loaded(page, ".card img")
            shot(page, "filter-reason")
    images_loaded(page, ".card img")  # removed rows come with their images (or a placeholder saying why)
    page.select_option("#rows", "removed:image_missing")
    page.wait_for_function("document.querySelector('#status').textContent === '1 removed row matches'")
    page.locator('.card[data-key="table/missing"]').click()  # not a duplicate: its own detail, reason first
    page.wait_for_selector("#modal table.sentences")
    assert page.locator("#modal .badge.reason").inner_text() == "image_missing"
    assert page.locator("#modal img.big").get_attribute("src").endswith("removed=0")


def test_duplicate_opens_beside_the_row_it_matched(served, page):
    page.goto(served.url)
    page.wait_for_function("document.querySelectorAll('#rows option').length > 1")
    page.select_option("#rows", "removed:duplicate_image")
    page.locator('.card[data-key="table/byte_copy"]').click()
    page.wait_for_selector("#modal .pair")
    sides = page.locator("#modal .pair .side")
    assert sides.count() == 2
    assert sides.nth(0).locator(".key").inner_text() == "table/byte_copy"
    assert sides.nth(1).locator(".key").inner_text() == "table/c2"
    assert (
        page.locator("#modal .sim").inner_text() == "1.000"
        and "image sha256" in page.locator(".pair-head").inner_text()
    )
    assert images_loaded(page, "#modal img") == 2
    box0, box1 = sides.nth(0).bounding_box(), sides.nth(1).bounding_box()
    assert box1["x"] > box0["x"] + box0["width"] - 1 and abs(box1["y"] - box0["y"]) < 2  # side by side
    page.keyboard.press("Escape")
    page.select_option("#rows", "removed:near_duplicate_caption")
    page.locator('.card[data-key="table/near_caption"] .compare').click()
    page.wait_for_selector("#modal .pair")
    assert page.locator("#modal .pair .side").nth(1).locator(".key").inner_text() == "table/c5"
    images_loaded(page, "#modal img")
    shot(page, "duplicate")


def test_one_row_in_detail(served, page, world):
    page.goto(served.url)
    page.locator('.card[data-key="table/c1"]').click()
    page.wait_for_selector("#modal table.columns")
    row = [r for r in pq.read_table(world["curated"] / "shards").to_pylist() if r["key"] == "table/c1"][0]
    columns = page.locator("#modal table.columns th").all_inner_texts()
    assert {"key", "caption", "sentences", "summary_mask", "image_sha256", "image_phash", "sentence_tokens"} <= set(
        columns
    )
    assert page.locator("#modal table.sentences tbody tr").count() == len(row["sentences"])
    tokens = page.locator("#modal table.sentences tbody tr td:nth-child(4)").all_inner_texts()
    assert [int(t) for t in tokens] == [len(t) for t in row["sentence_tokens"]]
    link = page.locator("#modal a.imglink")
    res = page.request.get(served.url + link.get_attribute("href"))
    assert res.ok and res.body() == (world["images"] / row["image"]).read_bytes()
    images_loaded(page, "#modal img")
    shot(page, "detail")


def test_search_range_and_sort(served, page, world):
    page.goto(served.url)
    page.wait_for_function("document.querySelectorAll('#sort option').length > 1")
    page.select_option("#sort", "num_tokens")
    page.select_option("#order", "1")
    page.wait_for_function("document.querySelector('#status').textContent === '13 kept rows match'")
    page.wait_for_timeout(200)
    tokens = [int(t.split()[0].replace(",", "")) for t in page.locator(".card .tok").all_inner_texts()]
    assert tokens == sorted(tokens, reverse=True) and len(tokens) == 13
    page.select_option("#range-col", "num_tokens")
    page.fill("#range-max", "60")
    page.dispatch_event("#range-max", "change")
    table = pq.read_table(world["curated"] / "shards", columns=["key", "num_tokens"]).to_pylist()
    short = sorted(r["key"] for r in table if r["num_tokens"] <= 60)
    page.wait_for_function("n => document.querySelectorAll('.card').length === n", arg=len(short))
    assert sorted(page.locator(".card").evaluate_all("els => els.map(e => e.dataset.key)")) == short


def test_scored_folder_shading_and_dropped_sentences(browser, world):
    with Server([world["scored"]], thumbs_dir=world["thumbs"]) as server:
        page = browser.new_page(viewport={"width": 1360, "height": 900}, bypass_csp=True)
        page.goto(server.url)
        page.wait_for_selector(".card")
        assert images_loaded(page, ".card img") == 13  # from image_bytes: the folder names no image root
        cards = page.locator(".card")
        for i in range(cards.count()):
            card = cards.nth(i)
            n = card.locator(".sent").count()
            dropped = card.locator(".sent.dropped")
            assert dropped.count() == (1 if n > 1 else 0)  # the fixture drops each caption's second sentence
            if n > 1:
                assert card.locator(".sent").nth(1).get_attribute("class").split()[-1] == "dropped"
                assert dropped.evaluate("e => getComputedStyle(e).textDecorationLine") == "line-through"
        shades = page.locator(".card .sent").evaluate_all("els => els.map(e => e.style.background)")
        assert all(s.startswith("rgba(46, 160, 67") for s in shades) and len(set(shades)) > 1
        assert "clip_score 0.2" in cards.first.locator(".score").inner_text()
        page.wait_for_function("!document.querySelector('#legend-keep').hidden")
        assert page.locator("#legend-grounding").is_visible()
        shot(page, "scored")
        page.close()


def test_static_snapshot_opens_from_a_file_url_without_a_server(browser, world, tmp_path):
    from caption_debias.view.data import ViewData
    from caption_debias.view.static import write_static

    data = ViewData([str(world["curated"])])
    out = write_static(
        data, tmp_path / "share" / "snap.html", sample=8, per_reason=2, seed=1, thumbs_dir=world["thumbs"]
    )
    page = browser.new_page(viewport={"width": 1360, "height": 900}, bypass_csp=True)
    fetched = []
    page.on("request", lambda r: fetched.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    page.goto(out.as_uri())
    page.wait_for_selector(".card")
    assert page.locator(".card").count() == 8 and images_loaded(page, ".card img") == 8
    assert "static snapshot" in page.locator(".badge.snap").inner_text()
    shot(page, "static")
    page.select_option("#rows", "removed:duplicate_image")
    page.wait_for_function("document.querySelector('#status').textContent === '2 removed rows match'")
    assert (
        set(page.locator(".card").evaluate_all("els => els.map(e => e.dataset.key)"))
        == removed_keys(world["curated"])["duplicate_image"]
    )
    page.locator('.card[data-key="table/byte_copy"]').click()
    page.wait_for_selector("#modal .pair")
    assert page.locator("#modal .pair .side").nth(1).locator(".key").inner_text() == "table/c2"
    assert images_loaded(page, "#modal img") == 2
    assert fetched == []  # nothing fetched: no server, no CDN
    page.close()
