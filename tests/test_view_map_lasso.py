"""Issue 37, the map: a lasso (a polygon in map coordinates) selects the rows whose point lies inside it,
as matplotlib's Path says (an independent implementation of the same rule); the page draws one and
shows a point's thumbnail on hover (Chromium). The folder: 400 rows with 32-d image embeddings."""

from __future__ import annotations

import re

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
            shot(page, "map-lasso")
