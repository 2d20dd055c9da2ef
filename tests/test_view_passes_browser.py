"""Issue 37 in a real browser (Playwright on the system Chromium, the page's policy in force): the weakest
sentence is marked whatever its shade, shades mean one value on every page, every card of a
multi-folder view names its folder and a folder filter narrows to it, search finds keys, and a card
shows its whole caption on demand. Two folders of one lineage: a curated folder and its scored copy."""

from __future__ import annotations

import json

import pytest
from browser_support import needs_chromium, playwright_or_skip, shot, watched_page
from cli_process import run_cli

sync_api = playwright_or_skip()

from view_fixtures import Server, curated_world, scored_copy  # noqa: E402

pytestmark = needs_chromium
expect = sync_api.expect


@pytest.fixture(scope="module")
def passes(tmp_path_factory):
    root = tmp_path_factory.mktemp("passes")
    world = curated_world(root)
    scored = scored_copy(world["curated"], world["images"], root / "scored")
    with Server([scored, world["curated"]], thumbs_dir=root / "thumbs") as server:
        yield server, world, scored


@pytest.fixture(scope="module")
def scored_only(passes, tmp_path_factory):
    _, _, scored = passes
    with Server([scored], thumbs_dir=tmp_path_factory.mktemp("thumbs")) as server:
        yield server, scored


@pytest.fixture()
def page(browser):
    with watched_page(browser, accept_downloads=True) as page:
        yield page


def _style(locator, prop: str) -> str:
    return locator.evaluate("(el, p) => getComputedStyle(el).getPropertyValue(p)", prop)


def test_the_weakest_sentence_is_underlined_over_its_shade_and_shades_are_absolute(passes, page):
    server, world, scored = passes
    page.goto(server.url)
    page.wait_for_selector("body[data-ready]")
    weakest = page.locator(".card .sent.weakest").first
    expect(weakest).to_be_visible()
    assert "inset" in _style(weakest, "box-shadow")  # its red line; before: the inline shade hid it
    assert _style(weakest, "background-color") not in ("", "rgba(0, 0, 0, 0)")  # and it keeps its shade
    # one sentence's shade is the same on a page that shows different rows beside it
    card = page.locator(".card").first
    key = card.get_attribute("data-key")
    first = card.locator(".sent").first
    title, shade = first.get_attribute("title"), _style(first, "background-color")
    page.select_option("#range-col", "clip_score")
    page.fill("#range-min", "0.2")
    page.fill("#range-max", "0.205")
    page.dispatch_event("#range-max", "change")
    # two loads (min, then max): the grid is final once the status counts the rows of both bounds
    from view_fixtures import app_client

    total = (
        app_client([scored, world["curated"]])
        .get("/api/page", params={"range": "clip_score:0.2:0.205"})
        .json()["total"]
    )
    expect(page.locator("#status")).to_have_text(f"{total} kept rows match" if total != 1 else "1 kept row matches")
    again = page.locator(f'.card[data-key="{key}"] .sent').first
    expect(again).to_have_attribute("title", title)
    assert _style(again, "background-color") == shade


def test_every_card_names_its_folder_and_the_folder_filter_narrows_to_it(passes, page):
    server, world, scored = passes
    meta = server.data.meta()
    names = [f["name"] for f in meta["folders"]]
    assert len(set(names)) == 2
    page.goto(server.url)
    page.wait_for_selector("body[data-ready]")
    expect(page.locator("#folder-filter")).to_be_visible()
    badges = page.locator(".card .badge.folder")
    expect(badges).to_have_count(page.locator(".card").count())
    assert set(badges.all_inner_texts()) <= set(names)
    page.select_option("#folder", "1")
    rows = meta["folders"][1]["rows"]
    expect(page.locator("#status")).to_have_text(f"{rows} kept rows match")
    assert set(page.locator(".card .badge.folder").all_inner_texts()) == {names[1]}
    assert "folder=1" in page.url
    page.reload()
    expect(page.locator("#status")).to_have_text(f"{rows} kept rows match")
    shot(page, "passes")


def test_search_finds_a_key(passes, page):
    server, _, _ = passes
    page.goto(server.url)
    page.wait_for_selector("body[data-ready]")
    key = page.locator(".card").nth(3).get_attribute("data-key")
    page.select_option("#folder", "0")
    page.fill("#search", key)
    expect(page.locator(".card")).to_have_count(1)
    expect(page.locator(".card").first).to_have_attribute("data-key", key)
    expect(page.locator(".card .key mark")).to_have_count(1)


def test_a_card_shows_its_whole_caption_on_demand(passes, page):
    server, _, _ = passes
    page.goto(server.url)
    page.wait_for_selector("body[data-ready]")
    caption = page.locator(".card .caption").first
    expect(caption).to_be_visible()
    assert _style(caption, "max-height") != "none"
    page.locator(".card .full-caption").first.click()
    assert _style(caption, "max-height") == "none"
    expect(page.locator("#modal")).to_be_hidden()  # the button does not open the row


def _slide(page, slider: str, value: float) -> None:
    page.check(f"#{slider}-on")
    page.locator(f"#{slider}").evaluate(
        "(el, v) => { el.value = v; el.dispatchEvent(new Event('input', { bubbles: true })); }", str(value)
    )


def test_thresholds_in_the_page_are_what_curate_does_with_the_config_it_writes(scored_only, page, tmp_path):
    server, scored = scored_only
    page.goto(server.url)
    page.wait_for_selector("body[data-ready]")
    expect(page.locator("#th-ground-label")).to_be_visible()  # the sliders span the folder's values
    expect(page.locator(".card")).to_have_count(server.data.total_rows)  # every row on one page
    _slide(page, "th-clip", 0.215)
    _slide(page, "th-ground", 0.5)
    clip, ground = (float(page.input_value(f"#{s}")) for s in ("th-clip", "th-ground"))
    page.wait_for_function("() => lastPreview && Object.keys(lastPreview.config).length === 2")  # both cuts counted
    expect(page.locator("#th-removed")).to_be_visible()
    removed = int(page.inner_text("#th-removed").replace(",", ""))
    masked = int(page.inner_text("#th-masked").replace(",", ""))
    assert removed > 0 and masked > 0
    expect(page.locator(".card.would-go")).to_have_count(removed)  # the cards say it too
    expect(page.locator(".sent.would-strike")).to_have_count(masked)
    shot(page, "thresholds")
    with page.expect_download() as got:
        page.click("#th-config")
    config = tmp_path / "curate-thresholds.json"
    got.value.save_as(config)
    assert json.loads(config.read_text("utf-8")) == {"min_clip_score": clip, "drop_ungrounded": ground}
    out = tmp_path / "curated"
    proc = run_cli("curate", str(scored), "--config", str(config), "--out", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text("utf-8"))
    assert manifest["counts"]["removed"] == removed
    assert manifest["curation"]["sentence_keep"]["sentences_masked"] == masked
    assert "cutClip=" in page.url  # a link reopens the same cuts


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    from view_fixtures import text_and_embedding_folder

    root = tmp_path_factory.mktemp("texts")
    folder = text_and_embedding_folder(root)
    with Server([folder], thumbs_dir=root / "thumbs") as server:
        yield server, folder


def test_semantic_and_text_quality_sliders_are_what_curate_does(texts, page, tmp_path):
    """The sliders for semantic duplicates and repeated sentences mark the cards curate removes (a
    duplicate names the row that stays), and the config the page writes makes curate remove exactly them."""
    server, folder = texts
    page.goto(server.url)
    page.wait_for_selector("body[data-ready]")
    expect(page.locator("#th-sem-label")).to_be_visible()
    expect(page.locator("#th-clip-label")).to_be_hidden()  # no clip_score here: no slider for it
    expect(page.locator(".card")).to_have_count(server.data.total_rows)  # every row on one page
    _slide(page, "th-sem", 0.95)
    _slide(page, "th-rsent", 1)
    page.wait_for_function("() => lastPreview && Object.keys(lastPreview.config).length === 2")
    removed = int(page.inner_text("#th-removed").replace(",", ""))
    counts = page.inner_text("#th-counts")
    assert "semantic_duplicate" in counts and "repetitive_caption" in counts, counts
    expect(page.locator(".card.would-go")).to_have_count(removed)
    marked = {
        el.get_attribute("data-key"): el.locator(".badge.would").inner_text()
        for el in page.locator(".card.would-go").all()
    }
    page.locator(".card.would-go .badge.would", has_text="semantic_duplicate").first.scroll_into_view_if_needed()
    shot(page, "thresholds-semantic")
    with page.expect_download() as got:
        page.click("#th-config")
    config = tmp_path / "curate-thresholds.json"
    got.value.save_as(config)
    assert json.loads(config.read_text("utf-8")) == {"semantic_duplicate_threshold": 0.95, "repeated_sentences_max": 1}
    out = tmp_path / "curated"
    proc = run_cli("curate", str(folder), "--config", str(config), "--out", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in (out / "removed.jsonl").read_text("utf-8").splitlines()]
    assert {d["key"] for d in lines} == set(marked)
    for d in lines:
        assert d["reason"] in marked[d["key"]]
        if d["reason"] == "semantic_duplicate":
            assert f"like {d['detail']['match']}" in marked[d["key"]]
