"""Issue 37, the map: a lasso (a polygon in map coordinates) selects the rows whose point lies inside it,
as matplotlib's Path says (an independent implementation of the same rule); the page draws one and
shows a point's thumbnail on hover (Chromium). The folder: 400 rows with 32-d image embeddings."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

pytest.importorskip("starlette")

from browser_support import needs_chromium, shot, watched_page  # noqa: E402
from view_fixtures import Server, embedding_folder  # noqa: E402

from caption_debias.folder_rows.index import inside_polygon  # noqa: E402
from caption_debias.view.data import ViewData  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from train_fixtures import make_prepared

    root = tmp_path_factory.mktemp("lasso")
    src, images = make_prepared(root, n=8)
    return embedding_folder(src, root / "emb", rows=400, dim=32, rng=np.random.default_rng(3), shard_rows=128), images


def _client(folder, images=None):
    from starlette.testclient import TestClient

    from caption_debias.view.app import create_app

    data = ViewData([str(folder)], None if images is None else str(images))
    return TestClient(create_app(data), base_url="http://127.0.0.1"), data


def test_inside_polygon_is_matplotlibs_rule():
    from matplotlib.path import Path

    rng = np.random.default_rng(0)
    x, y = rng.uniform(-2, 2, 5000), rng.uniform(-2, 2, 5000)
    star = [(np.cos(t) * r, np.sin(t) * r) for t, r in zip(np.linspace(0, 2 * np.pi, 11)[:-1], [1.8, 0.6] * 5)]
    want = Path(star).contains_points(np.column_stack([x, y]))
    assert np.array_equal(inside_polygon(x, y, tuple(star)), want) and 0 < want.sum() < 5000


def test_a_lasso_selects_the_rows_inside_it(folder):
    from matplotlib.path import Path

    folder, _ = folder
    c, data = _client(folder)
    c.get("/api/map")  # starts the projection in the background
    data.current().map.wait()
    points = c.get("/api/map").json()
    assert points["status"] == "ready"
    b = points["bounds"]
    cx, cy, w, h = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2, b[2] - b[0], b[3] - b[1]
    triangle = [(cx - 0.4 * w, cy - 0.3 * h), (cx + 0.4 * w, cy - 0.3 * h), (cx, cy + 0.4 * h)]
    lasso = ";".join(f"{x:.6g},{y:.6g}" for x, y in triangle)
    keys = c.get("/api/keys", params={"lasso": lasso}).json()["keys"]
    coords = data.current().map.coords(False)
    parsed = [tuple(float(v) for v in p.split(",")) for p in lasso.split(";")]
    inside = Path(parsed).contains_points(np.column_stack([coords["x"].to_numpy(), coords["y"].to_numpy()]))
    index = data.current().index.index()
    by_address = {f"{f}:{s}:{r}": k for f, s, r, k in index.select("_folder", "_shard", "_row", "key").iter_rows()}
    assert points["key"] == [by_address[i] for i in points["id"]]  # the hover's label: each point's own key
    rows = coords.filter(inside).join(
        index.select("_folder", "_shard", "_row", "key"), on=["_folder", "_shard", "_row"]
    )
    assert sorted(keys) == sorted(rows["key"].to_list()) and 0 < len(keys) < 400
    for bad in ("1,2;3,4", "1,2;3,x;5,6", ";".join(["0,0"] * 401), "nan,1;2,3;4,5"):
        res = c.get("/api/page", params={"lasso": bad})
        assert res.status_code == 400 and "lasso" in res.json()["error"], bad


@needs_chromium
def test_the_page_draws_a_lasso_and_previews_a_point_on_hover(folder, browser, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    folder, images = folder
    with Server([folder], image_root=images, thumbs_dir=tmp_path / "t") as server:
        with watched_page(browser) as page:
            page.goto(server.url + "#map=1")
            sync_api.expect(page.locator("#map-canvas")).to_have_attribute(
                "data-points", re.compile(r"^[1-9]"), timeout=60000
            )
            box = page.locator("#map-over").bounding_box()
            page.check("#map-lasso")
            corners = [(0.2, 0.2), (0.8, 0.25), (0.7, 0.8), (0.3, 0.7)]
            page.mouse.move(box["x"] + corners[0][0] * box["width"], box["y"] + corners[0][1] * box["height"])
            page.mouse.down()
            for fx, fy in corners[1:] + corners[:1]:
                page.mouse.move(box["x"] + fx * box["width"], box["y"] + fy * box["height"], steps=8)
            page.mouse.up()
            page.wait_for_url(re.compile("lasso="))
            lasso = re.search(r"lasso=([^&]+)", page.url).group(1)
            from urllib.parse import unquote

            c, _ = _client(folder)
            want = c.get("/api/page", params={"lasso": unquote(lasso)}).json()["total"]
            sync_api.expect(page.locator("#status")).to_have_text(
                f"{want} kept rows match" if want != 1 else "1 kept row matches"
            )
            assert 0 < want < 400
            # hover: the nearest point's thumbnail beside the cursor
            page.uncheck("#map-lasso")
            mx = float(page.locator("#map-canvas").evaluate("() => MAP.view.px(MAP.data.x[0])"))
            my = float(page.locator("#map-canvas").evaluate("() => MAP.view.py(MAP.data.y[0])"))
            page.mouse.move(box["x"] + mx, box["y"] + my)
            sync_api.expect(page.locator("#map-tip img")).to_be_visible()
            first_key = page.locator("#map-canvas").evaluate("() => MAP.data.key[0]")
            sync_api.expect(page.locator("#map-tip div")).to_have_text(first_key)  # the row's key, not its address
            shot(page, "map-lasso")


@pytest.fixture(scope="module")
def captions(tmp_path_factory):
    from view_fixtures import text_and_embedding_folder

    return text_and_embedding_folder(tmp_path_factory.mktemp("captions"))


def _ready(client, by: str) -> dict:
    for _ in range(200):
        m = client.get("/api/map", params={"by": by}).json()
        if m.get("status") == "ready":
            return m
        time.sleep(0.1)
    raise AssertionError(f"the {by} map never came")


def test_the_caption_map_places_rows_by_their_caption_embeddings(captions):
    """/api/map?by=caption: the caption embeddings' own map (its coordinates are PCA of caption_embedding,
    not the image map's), and a box drawn on it (mapby=caption) selects the rows whose caption point is in it."""
    from view_fixtures import app_client

    c = app_client([captions])
    meta = c.get("/api/meta").json()
    assert meta["map"] and meta["caption_map"] and meta["caption_map_note"] is None
    image, caption = _ready(c, "image"), _ready(c, "caption")
    assert caption["column"] == "caption_embedding" and caption["rows"] == 48
    assert caption["x"] != image["x"]
    x0, x1 = min(caption["x"]), (min(caption["x"]) + max(caption["x"])) / 2
    box = f"{x0}:{min(caption['y'])}:{x1}:{max(caption['y'])}"
    inside = {i for i, x in zip(caption["id"], caption["x"]) if x <= x1}
    page = c.get("/api/page", params={"box": box, "mapby": "caption", "limit": 100}).json()
    assert {r["id"] for r in page["rows"]} == inside and 0 < len(inside) < 48
    values = c.get("/api/map/values", params={"by": "caption", "column": "num_tokens"}).json()["values"]
    assert len(values) == len(caption["x"]) and all(v is not None for v in values)
    for params in ({"by": "text"}, {"by": "caption", "box": "1:2:3"}):
        res = c.get("/api/map" if "box" not in params else "/api/page", params=params)
        assert res.status_code == 400 and "\n" not in res.json()["error"], params
    res = c.get("/api/map", params={"by": "caption"}, headers={"Host": "attacker.example.com"})
    assert res.status_code == 400 and "rows" not in res.text
    assert "sandbox" in c.get("/api/map", params={"by": "caption"}).headers["content-security-policy"]


def test_each_shard_s_embeddings_are_tested_once(captions, monkeypatch):
    """The map reads a shard's embeddings twice (to fit, then to place every row) but tests them under
    curate's rule (bad_embeddings, the costly part at 100k rows) once: the place pass keeps the fit
    pass's answer, and still leaves the one NaN vector out."""
    from caption_debias.curate import rules

    tested: list[int] = []
    rule = rules.bad_embeddings
    monkeypatch.setattr(rules, "bad_embeddings", lambda e: tested.append(len(e)) or rule(e))
    reading = ViewData([str(captions)]).current()
    reading.map.compute()
    assert tested == [20, 20, 8]  # the folder's three shards, once each
    assert reading.map.facts["kept_rows"] == 47 and reading.map.facts["left_out"]["invalid_signal"] == 1


def test_a_folder_without_caption_embeddings_is_said_in_one_line(tmp_path):
    from view_fixtures import app_client, curated_world

    world = curated_world(tmp_path)
    meta = app_client([world["curated"]]).get("/api/meta").json()
    assert meta["caption_map"] is False
    assert meta["caption_map_note"].startswith("no caption map: no folder here holds caption_embedding")
    res = app_client([world["curated"]]).get("/api/map", params={"by": "caption"})
    assert res.status_code == 400 and "caption_embedding" in res.json()["error"]


@needs_chromium
def test_the_caption_map_is_drawn_beside_the_image_map_with_hover_and_lasso(captions, browser, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    from urllib.parse import unquote

    from view_fixtures import app_client

    with Server([captions], thumbs_dir=tmp_path / "t") as server:
        with watched_page(browser) as page:
            page.goto(server.url + "#map=1")
            for canvas, n in (("#map-canvas", "47"), ("#cmap-canvas", "48")):  # both maps, side by side
                sync_api.expect(page.locator(canvas)).to_have_attribute("data-points", n, timeout=60000)
            sync_api.expect(page.locator("#map-status")).to_contain_text("invalid_signal: 1")  # the NaN vector
            image_box = page.locator("#map-over").bounding_box()
            box = page.locator("#cmap-over").bounding_box()
            assert (
                box["x"] >= image_box["x"] + image_box["width"] and abs(box["y"] - image_box["y"]) < box["height"] / 4
            )
            sync_api.expect(page.locator("#cmap-status")).to_contain_text("caption_embedding: 48 rows")
            sync_api.expect(page.locator("#cmap-legend")).to_contain_text("kept (48)")  # coloured as the image map
            page.check("#map-lasso")
            corners = [(0.05, 0.05), (0.55, 0.05), (0.55, 0.95), (0.05, 0.95)]
            page.mouse.move(box["x"] + corners[0][0] * box["width"], box["y"] + corners[0][1] * box["height"])
            page.mouse.down()
            for fx, fy in corners[1:] + corners[:1]:
                page.mouse.move(box["x"] + fx * box["width"], box["y"] + fy * box["height"], steps=8)
            page.mouse.up()
            page.wait_for_url(re.compile("lasso=.*mapBy=caption|mapBy=caption.*lasso="))
            lasso = unquote(re.search(r"lasso=([^&]+)", page.url).group(1))
            want = app_client([captions]).get("/api/page", params={"lasso": lasso, "mapby": "caption"}).json()["total"]
            assert 0 < want < 48
            sync_api.expect(page.locator("#status")).to_have_text(f"{want} kept rows match")
            page.uncheck("#map-lasso")
            mx = float(page.locator("#cmap-canvas").evaluate("() => CMAP.view.px(CMAP.data.x[0])"))
            my = float(page.locator("#cmap-canvas").evaluate("() => CMAP.view.py(CMAP.data.y[0])"))
            page.mouse.move(box["x"] + mx, box["y"] + my)
            sync_api.expect(page.locator("#cmap-tip img")).to_be_visible()
            shot(page, "map-captions")
