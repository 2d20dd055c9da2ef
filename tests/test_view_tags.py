"""Issue 37, tags: `view --tags FILE` writes the curator's tags only to that file (JSON lines, whole
after every change), filters by a tag and exports a tag as a keys file curate reads; the data folders
stay as they were; the one write route answers only a same-origin JSON request."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette")

from browser_support import needs_chromium, watched_page  # noqa: E402
from view_fixtures import Server, app_client, curated_world, mtimes  # noqa: E402

from caption_debias.errors import UserError  # noqa: E402
from caption_debias.view.tags import TagFile  # noqa: E402

ORIGIN = "http://127.0.0.1"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return curated_world(tmp_path_factory.mktemp("tags"))


def _client(folder, tags):
    return app_client([folder], tags=tags)


def _post(c, body, **headers):
    headers = {"Content-Type": "application/json", "Origin": ORIGIN, **headers}
    return c.post("/api/tags", content=json.dumps(body), headers=headers)


def test_tags_go_to_the_file_only_and_filter_and_export(world, tmp_path):
    before = mtimes(world["curated"])
    path = tmp_path / "tags.jsonl"
    c = _client(world["curated"], TagFile(path))
    keys = [r["key"] for r in c.get("/api/page").json()["rows"]]
    assert _post(c, {"keys": keys[:3], "tag": "blurry"}).status_code == 200
    assert _post(c, {"keys": keys[2:4], "tag": "keep"}).status_code == 200
    res = _post(c, {"keys": [keys[0]], "tag": "blurry", "on": False})
    assert res.json()["names"] == {"keep": 2, "blurry": 2}
    lines = [json.loads(x) for x in path.read_text("utf-8").splitlines()]
    assert lines == sorted(
        [
            {"key": keys[1], "tags": ["blurry"]},
            {"key": keys[2], "tags": ["blurry", "keep"]},
            {"key": keys[3], "tags": ["keep"]},
        ],
        key=lambda d: d["key"],
    )
    page = c.get("/api/page", params={"tag": "keep"}).json()
    assert [r["key"] for r in page["rows"]] == keys[2:4] and page["rows"][0]["tags"] == ["blurry", "keep"]
    assert c.get("/api/keys", params={"tag": "blurry"}).json()["keys"] == keys[1:3]
    assert c.get("/api/tags/keys", params={"tag": "keep"}).json()["keys"] == sorted(keys[2:4])
    assert TagFile(path).tags == {keys[1]: {"blurry"}, keys[2]: {"blurry", "keep"}, keys[3]: {"keep"}}  # read back
    assert mtimes(world["curated"]) == before  # the data folder untouched


@pytest.mark.parametrize(
    "headers, body, status",
    [
        ({"Origin": "http://evil.example"}, {"keys": ["k"], "tag": "x"}, 403),
        ({"Origin": ""}, {"keys": ["k"], "tag": "x"}, 403),
        ({"Content-Type": "text/plain"}, {"keys": ["k"], "tag": "x"}, 415),  # a form post from another site
        ({}, {"keys": ["k"], "tag": "<script>"}, 400),
        ({}, {"keys": ["k"], "tag": ""}, 400),
        ({}, {"keys": "k", "tag": "x"}, 400),
        ({}, {"keys": [1], "tag": "x"}, 400),
    ],
)
def test_a_change_from_elsewhere_or_malformed_is_refused(world, tmp_path, headers, body, status):
    path = tmp_path / "tags.jsonl"
    c = _client(world["curated"], TagFile(path))
    res = _post(c, body, **headers)
    assert res.status_code == status and "\n" not in res.json()["error"], res.text
    assert not path.exists()


def test_without_tags_the_routes_say_so_and_a_bad_file_is_one_line(world, tmp_path):
    c = _client(world["curated"], None)
    assert _post(c, {"keys": ["k"], "tag": "x"}).status_code == 404
    assert c.get("/api/page", params={"tag": "x"}).status_code == 400
    assert c.get("/api/meta").json()["tags"] is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "a", "tags": ["ok"]}\nnot json\n', "utf-8")
    with pytest.raises(UserError, match="line 2 is not"):
        TagFile(bad)
    with pytest.raises(UserError, match="no folder"):
        TagFile(tmp_path / "nowhere" / "tags.jsonl")


@needs_chromium
def test_the_page_tags_selected_rows_and_filters_by_the_tag(world, browser, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    path = tmp_path / "tags.jsonl"
    with Server([world["curated"]], thumbs_dir=tmp_path / "t", tags=TagFile(path)) as server:
        with watched_page(browser) as page:
            page.goto(server.url)
            page.wait_for_selector("body[data-ready]")
            sync_api.expect(page.locator("#tagging")).to_be_visible()
            cards = page.locator(".card")
            picked = [cards.nth(i).get_attribute("data-key") for i in (0, 2)]
            for i in (0, 2):
                cards.nth(i).locator(".pick").check()
            page.fill("#tag-name", "check-me")
            page.click("#tag-add")
            sync_api.expect(page.locator("#status")).to_contain_text("2 rows have the tag check-me")
            page.select_option("#tag", "check-me")
            sync_api.expect(page.locator(".card")).to_have_count(2)
            assert sorted(page.locator(".card").evaluate_all("els => els.map(e => e.dataset.key)")) == sorted(picked)
            sync_api.expect(page.locator(".card .badge.tag").first).to_have_text("check-me")
            assert [json.loads(x)["key"] for x in path.read_text("utf-8").splitlines()] == sorted(picked)
