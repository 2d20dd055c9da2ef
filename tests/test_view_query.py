"""Issue 37, query: search by key or by a regular expression, and a read-only field query (a SQL
expression over the index, polars' sql_expr: a filter, never a statement or a table function), on the
API and in the page (Chromium). The folder: a curated world's scored copy."""

from __future__ import annotations

import re

import pyarrow.parquet as pq
import pytest

pytest.importorskip("starlette")

from browser_support import needs_chromium, watched_page  # noqa: E402
from view_fixtures import Server, app_client, curated_world, scored_copy  # noqa: E402


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("query")
    world = curated_world(root)
    return scored_copy(world["curated"], world["images"], root / "scored")


def _client(folder):
    return app_client([folder])


def _rows(folder):
    return pq.read_table(folder / "shards", columns=["key", "caption", "clip_score", "source"]).to_pylist()


def test_a_regex_search_and_a_field_query_select_what_python_selects(scored):
    c, rows = _client(scored), _rows(scored)
    keys = lambda params: c.get("/api/keys", params={"view": "kept", **params}).json()["keys"]  # noqa: E731
    rx = r"c1\d|wooden (cloud|kite)"
    want = [r["key"] for r in rows if re.search(rx, r["caption"], re.I) or re.search(rx, r["key"], re.I)]
    assert 0 < len(want) < len(rows) and keys({"q": rx, "re": "1"}) == want
    assert keys({"q": "table/c1"}) == [r["key"] for r in rows if "table/c1" in r["key"].lower()]  # a key, literal
    want = [r["key"] for r in rows if r["clip_score"] > 0.215 and r["key"] != "table/c3"]
    assert keys({"where": "clip_score > 0.215 AND key <> 'table/c3'"}) == want
    page = c.get("/api/page", params={"where": "clip_score > 0.215", "q": "wooden"}).json()
    assert {r["key"] for r in page["rows"]} <= set(want) | {"table/c3"}


@pytest.mark.parametrize(
    "params, says",
    [
        ({"where": "read_parquet('/etc/passwd') IS NOT NULL"}, "unsupported function"),
        ({"where": "clip_score > 0; DROP TABLE rows"}, "where:"),
        ({"where": "(SELECT 1) = 1"}, "where:"),
        ({"where": "no_such_column > 1"}, "where:"),
        ({"where": "x" * 2_001}, "at most 2,000 characters"),
        ({"q": "(unclosed", "re": "1"}, "not a regular expression"),
    ],
)
def test_a_hostile_or_broken_query_is_a_one_line_400(scored, params, says):
    res = _client(scored).get("/api/page", params=params)
    assert res.status_code == 400 and says in res.json()["error"] and "\n" not in res.json()["error"], res.text


@needs_chromium
def test_the_page_runs_a_field_query_and_a_regex_search(scored, browser, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    rows = _rows(scored)
    with Server([scored], thumbs_dir=tmp_path / "t") as server:
        with watched_page(browser) as page:
            page.goto(server.url)
            page.wait_for_selector("body[data-ready]")
            page.fill("#where", "clip_score > 0.215")
            page.press("#where", "Enter")
            n = sum(r["clip_score"] > 0.215 for r in rows)
            sync_api.expect(page.locator("#status")).to_have_text(f"{n} kept rows match")
            assert "where=" in page.url
            page.check("#search-re")
            page.fill("#search", r"c1\d")
            hit = lambda r: any(re.search(r"c1\d", t, re.I) for t in (r["key"], r["caption"]))  # noqa: E731
            want = [r["key"] for r in rows if r["clip_score"] > 0.215 and hit(r)]
            sync_api.expect(page.locator(".card")).to_have_count(len(want))
            page.fill("#where", "nope >")
            page.press("#where", "Enter")
            sync_api.expect(page.locator("#status")).to_contain_text("error: where:")
