"""The curator's second hour in a real browser (Playwright on the system Chromium, the page's own
Content-Security-Policy in force): filter by grounding, the view's state in the URL (reload, back),
select rows and export their keys, `curate --exclude-keys` on the exported file, and the embedding map
with a box selection; 100,000 points drawn and boxed interactively.

The data comes from the real pipeline (view_fixtures.planted_world: synth --plant, prepare, score with
the shipped demo-start model and --keep-embeddings, curate). CAPTION_DEBIAS_VIEW_SCREENSHOTS=DIR saves
the pictures of docs/view.md.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from browser_support import needs_chromium, playwright_or_skip, shot
from cli_process import run_cli

sync_api = playwright_or_skip()

from curate_fixtures import hostile_keys_world, make_world  # noqa: E402
from view_fixtures import Server, embedding_folder, planted_world  # noqa: E402

pytestmark = needs_chromium
expect = sync_api.expect


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return planted_world(tmp_path_factory.mktemp("planted"))


@pytest.fixture(scope="module")
def served(planted, tmp_path_factory):
    with Server([planted["curated"]], thumbs_dir=tmp_path_factory.mktemp("thumbs")) as server:
        yield server


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return hostile_keys_world(tmp_path_factory.mktemp("hostile-keys"))


@pytest.fixture()
def context(browser, tmp_path):
    ctx = browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)  # policy in force
    ctx.problems = []
    yield ctx
    ctx.close()
    assert ctx.problems == [], ctx.problems


def _page(context):
    page = context.new_page()
    page.on("pageerror", lambda e: context.problems.append(str(e)))
    page.on("console", lambda m: context.problems.append(m.text) if "Content Security Policy" in m.text else None)
    return page


def _rows(folder: Path, columns: list[str]) -> list[dict]:
    return pq.read_table(folder / "shards", columns=columns).to_pylist()


def _weakest(row: dict) -> float | None:
    detail = [
        g
        for g, s in zip(row["sentence_grounding"] or [], row["summary_mask"] or [])
        if not s and g is not None and g == g
    ]
    return min(detail) if detail else None


def _grid_keys(page) -> list[str]:
    return page.locator(".card").evaluate_all("els => els.map(e => e.dataset.key)")


def test_filter_by_grounding_and_the_url_reopens_the_view(served, planted, context):
    rows = _rows(planted["curated"], ["key", "sentence_grounding", "summary_mask"])
    weak = sorted(
        ((w, r["key"]) for r in rows if (w := _weakest(r)) is not None and w <= 0.5), key=lambda t: (t[0], t[1])
    )
    assert 0 < len(weak) < len(rows)  # the planted world has detail sentences on both sides of 0.5
    page = _page(context)
    page.goto(served.url)
    expect(page.locator(".card")).to_have_count(min(48, len(rows)))
    expect(
        page.locator(
            "#range-col option[value='min_detail_grounding'], #range-col option:text-is('min_detail_grounding')"
        )
    ).to_have_count(1)
    page.select_option("#range-col", "min_detail_grounding")
    page.fill("#range-max", "0.5")
    page.dispatch_event("#range-max", "change")
    expect(page.locator("#status")).to_have_text(f"{len(weak)} kept rows match")
    page.select_option("#sort", "min_detail_grounding")
    expect(page.locator(".card").first).to_have_attribute("data-key", weak[0][1])
    assert _grid_keys(page) == [k for _, k in weak]
    assert page.locator(".card").first.locator(".sent.weakest").count() == 1  # the weakest sentence is marked
    first_state = page.url
    assert "rangeCol=min_detail_grounding" in first_state and "max=0.5" in first_state
    page.fill("#search", "circle")  # a search: matches marked, and a second entry in the history
    expect(page.locator(".card mark").first).to_be_visible()
    marks = page.locator(".card mark").all_inner_texts()
    assert marks and all(m.lower() == "circle" for m in marks)
    searched = sorted(_grid_keys(page))
    shot(page, "grounding-filter")
    page.reload()  # the same view from the URL alone: filters, sort and search
    expect(page.locator("#status")).to_have_text(f"{len(searched)} kept rows match")
    assert sorted(_grid_keys(page)) == searched
    assert page.input_value("#search") == "circle" and page.input_value("#range-max") == "0.5"
    expect(page.locator("#range-col")).to_have_value("min_detail_grounding")
    page.go_back()  # the browser's back button: the view before the search
    expect(page.locator("#status")).to_have_text(f"{len(weak)} kept rows match")
    assert page.url == first_state and page.input_value("#search") == ""
    assert _grid_keys(page) == [k for _, k in weak]
    fresh = _page(context)  # a link opened in another tab reopens the same view
    fresh.goto(first_state)
    expect(fresh.locator("#status")).to_have_text(f"{len(weak)} kept rows match")
    assert _grid_keys(fresh) == [k for _, k in weak]


def test_select_export_and_curate_exclude_keys_on_the_file(served, planted, context, tmp_path):
    rows = _rows(planted["curated"], ["key", "sentence_grounding", "summary_mask"])
    page = _page(context)
    page.goto(served.url + "#rangeCol=min_detail_grounding&max=0.5")
    weak = sorted(r["key"] for r in rows if (w := _weakest(r)) is not None and w <= 0.5)
    expect(page.locator("#status")).to_have_text(f"{len(weak)} kept rows match")
    page.click("#sel-all")  # every row matching this filter
    expect(page.locator("#sel-count")).to_have_text(f"{len(weak)} selected")
    page.fill("#range-max", "")  # one more, by hand, from the unfiltered grid
    page.dispatch_event("#range-max", "change")
    expect(page.locator("#status")).to_have_text(f"{len(rows)} kept rows match")
    extra = next(k for k in _grid_keys(page) if k not in weak)
    page.locator(f'.card[data-key="{extra}"] .pick').check()
    assert page.locator(f'.card[data-key="{extra}"]').get_attribute("class").split()[-1] == "picked"
    expect(page.locator("#sel-count")).to_have_text(f"{len(weak) + 1} selected")
    with page.expect_download() as info:
        page.click("#sel-export")
    assert info.value.suggested_filename == f"selected-keys-{len(weak) + 1}.jsonl"
    saved = tmp_path / "keys.jsonl"
    info.value.save_as(saved)
    page.reload()  # the selection outlives a reload of the tab
    expect(page.locator("#sel-count")).to_have_text(f"{len(weak) + 1} selected")
    expect(page.locator(f'.card[data-key="{extra}"] .pick')).to_be_checked()
    assert sorted(json.loads(x) for x in saved.read_text("utf-8").split("\n") if x) == sorted(weak + [extra])
    shot(page, "selection")
    # the exported file, handed to a real curate run (the command line, as a user runs it)
    out = tmp_path / "curated-v2"
    cmd = ["curate", str(planted["scored"]), "--out", str(out)]
    cmd += ["--drop-ungrounded", "0", "--min-clip-score", "0.1", "--exclude-keys", str(saved), "-q"]
    proc = run_cli(*cmd)
    assert proc.returncode == 0, proc.stderr
    before = [r["key"] for r in _rows(planted["curated"], ["key"])]
    after = [r["key"] for r in _rows(out, ["key"])]
    assert after == [k for k in before if k not in set(weak + [extra])]
    lines = [json.loads(x) for x in (out / "removed.jsonl").read_text().splitlines()]
    excluded = sorted(r["key"] for r in lines if r["reason"] == "excluded_by_user")
    assert excluded == sorted(weak + [extra])
    manifest = json.loads((out / "manifest.json").read_text())
    import hashlib

    assert (
        manifest["curation"]["thresholds"]["user_keys"]["exclude"]["sha256"]
        == hashlib.sha256(saved.read_bytes()).hexdigest()
    )
    assert manifest["counts"]["read"] == manifest["counts"]["written"] + manifest["counts"]["removed"]


def test_keys_with_line_breaks_are_exported_and_curate_keeps_exactly_them(hostile, context, tmp_path):
    """Every key prepare accepts (a line break, a carriage return, a NUL, ...) survives the page's export."""
    with Server([hostile["curated"]], thumbs_dir=tmp_path / "thumbs") as server:
        page = _page(context)
        page.goto(server.url)
        n = len(hostile["keys"])
        expect(page.locator(".card")).to_have_count(n)
        page.click("#sel-all")
        expect(page.locator("#sel-count")).to_have_text(f"{n} selected")
        expect(page.locator(".card.picked")).to_have_count(n)  # every card shows it, a key with \r too
        with page.expect_download() as info:
            page.click("#sel-export")
        saved = tmp_path / "keys.jsonl"
        info.value.save_as(saved)
        expect(page.locator("#status")).to_contain_text(f"exported {n} keys")
    assert info.value.suggested_filename == f"selected-keys-{n}.jsonl"
    assert sorted(json.loads(x) for x in saved.read_text("utf-8").split("\n") if x) == sorted(hostile["keys"])
    out = tmp_path / "only"
    proc = run_cli(
        "curate", str(hostile["prepared"]), "--out", str(out), "--image-root", str(hostile["images"]),
        "--include-keys", str(saved), "-q",
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert [r["key"] for r in _rows(out, ["key"])] == hostile["keys"]


def _map_ready(page) -> None:  # no wait_for_function: its predicates use eval, which the page's policy refuses
    expect(page.locator("#map-canvas")).to_have_attribute("data-points", re.compile(r"^[1-9]"), timeout=60000)


def _drag(page, box: dict, a: tuple[float, float], b: tuple[float, float]) -> None:
    page.mouse.move(box["x"] + a[0] * box["width"], box["y"] + a[1] * box["height"])
    page.mouse.down()
    page.mouse.move(box["x"] + b[0] * box["width"], box["y"] + b[1] * box["height"], steps=5)
    page.mouse.up()


def test_the_map_colours_points_and_a_box_filters_the_grid(served, planted, context):
    page = _page(context)
    page.goto(served.url)
    page.wait_for_selector("#map-toggle:not([hidden])")
    page.click("#map-toggle")
    _map_ready(page)
    n = json.loads(page.request.get(served.url + "api/map").text())
    removed = sum(1 for _ in (planted["curated"] / "removed.jsonl").open())
    assert n["rows"] == n["shown"] == len(_rows(planted["curated"], ["key"])) + removed  # every row, removed ones too
    assert "low_alignment" in page.locator("#map-legend").inner_text()  # coloured by removal reason
    page.select_option("#map-color", "clip_score")
    expect(page.locator("#map-legend")).to_contain_text("clip_score")
    box = page.locator("#map-over").bounding_box()
    _drag(page, box, (0.02, 0.02), (0.5, 0.98))  # the left half of the map
    page.wait_for_url(re.compile("box="))
    x0, y0, x1, y1 = (
        float(v) for v in page.evaluate("new URLSearchParams(location.hash.slice(1)).get('box')").split(":")
    )
    inside = {
        i
        for i, x, y in zip(n["id"], n["x"], n["y"])
        if min(x0, x1) <= x <= max(x0, x1) and min(y0, y1) <= y <= max(y0, y1)
    }
    kept_inside = {i for i in inside if ":r" not in i}
    assert 0 < len(kept_inside) < n["kept_rows"]
    expect(page.locator("#status")).to_have_text(f"{len(kept_inside)} kept rows match")
    assert set(page.locator(".card").evaluate_all("els => els.map(e => e.dataset.id)")) == kept_inside
    shot(page, "map", full=False)
    page.select_option("#rows", "removed:")  # the same box over the removed rows
    removed_inside = {i for i in inside if ":r" in i}
    expect(page.locator("#status")).to_contain_text(f"{len(removed_inside)} removed")
    page.click("#map-clear")
    expect(page.locator("#status")).to_have_text(f"{removed} removed rows match")
    page.select_option("#rows", "kept")
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    for _ in range(3):
        page.mouse.wheel(0, -100)  # zoomed in about the centre: a box drawn now is still in map coordinates
    _drag(page, box, (0.3, 0.2), (0.7, 0.8))
    page.wait_for_url(re.compile("box="))
    x0, y0, x1, y1 = (
        float(v) for v in page.evaluate("new URLSearchParams(location.hash.slice(1)).get('box')").split(":")
    )
    assert x1 - x0 < (n["bounds"][2] - n["bounds"][0]) * 0.4 * 0.55  # about 0.4 of a view 1.25^3 times smaller
    zoomed = {i for i, x, y in zip(n["id"], n["x"], n["y"]) if x0 <= x <= x1 and y0 <= y <= y1 and ":r" not in i}
    expect(page.locator("#status")).to_have_text(
        f"{len(zoomed)} kept {'row matches' if len(zoomed) == 1 else 'rows match'}"
    )
    page.dblclick("#map-over")
    page.reload()  # the map, its colouring and the rows come back from the URL
    _map_ready(page)
    assert page.input_value("#map-color") == "clip_score"


@pytest.fixture(scope="module")
def many_points(tmp_path_factory):
    """A folder of 100,000 rows with 64-d image embeddings (random unit vectors around 12 centres): real
    Parquet shards of the shard schema, rows copied from a real prepared folder. The page draws and boxes
    2-D points whatever the width; the projection's cost at a model's width is benchmarks/bench_view_map.py's."""
    import numpy as np

    root = tmp_path_factory.mktemp("many")
    world = make_world(root / "w")
    return embedding_folder(world["prepared"], root / "big", rows=100_000, dim=64, rng=np.random.default_rng(0))


def test_a_hundred_thousand_points_are_drawn_and_boxed_interactively(many_points, context, tmp_path):
    with Server([many_points], thumbs_dir=tmp_path / "t") as server:
        page = _page(context)
        page.goto(server.url + "#map=1")
        _map_ready(page)
        assert page.locator("#map-canvas").get_attribute("data-points") == "100000"
        draw_ms = int(page.locator("#map-canvas").get_attribute("data-draw-ms"))
        box = page.locator("#map-over").bounding_box()
        t0 = time.monotonic()
        _drag(page, box, (0.3, 0.3), (0.7, 0.7))
        page.wait_for_url(re.compile("box="))
        expect(page.locator("#status")).to_have_text(re.compile("kept rows? match"), timeout=60000)
        boxed_s = time.monotonic() - t0
        shown = int(page.locator("#status").inner_text().split()[0].replace(",", ""))
        assert 0 < shown < 100_000 and page.locator(".card").count() == min(48, shown)
        redraw_ms = int(page.locator("#map-canvas").get_attribute("data-draw-ms"))
        print(f"100k points: first draw {draw_ms} ms, redraw {redraw_ms} ms, box to grid {boxed_s:.2f} s")
        assert draw_ms < 3000 and redraw_ms < 3000 and boxed_s < 20  # generous: a loaded 2-core machine
        shot(page, "map-100k")


def test_a_hostile_link_sets_values_and_runs_nothing(served, context):
    from urllib.parse import quote

    evil = "<img src=x onerror=\"document.title='pwned'\">"
    state = f"q={quote(evil)}&rangeCol={quote(evil)}&sort={quote(evil)}&color={quote(evil)}&source={quote(evil)}&map=1"
    page = _page(context)
    page.goto(served.url + "#" + state)
    expect(page.locator("#search")).to_have_value(evil)  # a value, never markup
    expect(page.locator("#status")).to_contain_text("error")  # the server refuses the unknown column in one line
    page.wait_for_timeout(500)
    assert page.title() == "caption-debias view" and page.locator("img[src=x]").count() == 0


def test_a_keep_list_from_the_removed_rows_makes_curate_keep_them(served, planted, context, tmp_path):
    """What a filter got wrong: the rows low_alignment removed, selected in the page and exported, given
    to curate --keep-keys: those rows are kept, unmasked, and counted by the reason they overrode."""
    removed = [json.loads(x) for x in (planted["curated"] / "removed.jsonl").read_text("utf-8").splitlines()]
    low = sorted(r["key"] for r in removed if r["reason"] == "low_alignment")
    assert low
    page = _page(context)
    page.goto(served.url + "#view=removed&reason=low_alignment")
    expect(page.locator("#status")).to_have_text(
        f"{len(low)} removed {'row matches' if len(low) == 1 else 'rows match'}"
    )
    page.click("#sel-all")
    expect(page.locator("#sel-count")).to_have_text(f"{len(low)} selected")
    with page.expect_download() as info:
        page.click("#sel-export")
    saved = tmp_path / "keep.jsonl"
    info.value.save_as(saved)
    assert sorted(json.loads(x) for x in saved.read_text("utf-8").splitlines() if x) == low
    out = tmp_path / "curated-keep"
    cmd = ["curate", str(planted["scored"]), "--out", str(out), "--drop-ungrounded", "0", "--min-clip-score", "0.1"]
    proc = run_cli(*cmd, "--keep-keys", str(saved), "-q")
    assert proc.returncode == 0, proc.stderr
    kept = {r["key"]: r for r in _rows(out, ["key", "sentence_keep"])}
    assert set(low) <= set(kept) and all(kept[k]["sentence_keep"] is None or all(kept[k]["sentence_keep"]) for k in low)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["curation"]["kept_by_user"]["overrode"] == {"low_alignment": len(low)}
