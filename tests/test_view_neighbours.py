"""Issue 37, rows like this one: view's /api/neighbours gives a kept row's nearest kept rows by its
embedding, the same rows and order as a brute-force cosine over every usable embedding (curate's rule:
finite, unit length, the common length), and the page shows them in the row's detail (Chromium)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("starlette")

from browser_support import needs_chromium, shot, watched_page  # noqa: E402
from view_fixtures import Server, _rewrite_shards, app_client, embedding_folder  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from train_fixtures import make_prepared

    root = tmp_path_factory.mktemp("neighbours")
    src, _ = make_prepared(root, n=8)
    out = embedding_folder(src, root / "emb", rows=300, dim=32, rng=np.random.default_rng(0), shard_rows=128)

    def spoil(t: pa.Table) -> pa.Table:  # row 5 of every shard: a NaN; row 6: not unit length
        col = t.column("image_embedding").to_pylist()
        col[5] = [float("nan")] * 32
        col[6] = [v * 3 for v in col[6]]
        at = t.schema.get_field_index("image_embedding")
        return t.set_column(at, t.schema.field(at), pa.array(col, t.schema.field(at).type))

    _rewrite_shards(out, spoil)
    return out


def _client(folder):
    return app_client([folder])


def _reference(folder, address, k):
    """Brute force, row by row: cosine to every usable row (float16 as stored, float32 products)."""
    import pyarrow.parquet as pq

    vectors = {}
    for s, path in enumerate(sorted((folder / "shards").glob("*.parquet"))):
        for r, v in enumerate(pq.read_table(path, columns=["image_embedding"]).column(0).to_pylist()):
            x = np.array(v, np.float16)
            if np.all(np.isfinite(x.astype(np.float64))) and abs(np.linalg.norm(x.astype(np.float64)) - 1) <= 0.01:
                vectors[(0, s, r)] = x.astype(np.float32)
    me = vectors[address]
    scored = [(float(np.float32(v @ me)), a) for a, v in vectors.items() if a != address]
    scored.sort(key=lambda t: (-t[0], t[1]))
    return scored[:k]


@pytest.mark.parametrize("address", [(0, 0, 0), (0, 1, 40), (0, 2, 43)])
def test_the_nearest_rows_are_a_brute_force_cosines(folder, address):
    res = _client(folder).get("/api/neighbours", params=dict(zip("fsr", address), by="image", k=10))
    assert res.status_code == 200, res.text
    got = [(c["id"], c["similarity"]) for c in res.json()["rows"]]
    want = _reference(folder, address, 10)
    assert [i for i, _ in got] == [f"{a[0]}:{a[1]}:{a[2]}" for _, a in want]
    assert np.allclose([s for _, s in got], [s for s, _ in want], atol=1e-5)
    assert not {i.split(":")[2] for i, _ in got} & {"5", "6"}  # the spoiled rows are never a neighbour


def test_bad_requests_are_one_line(folder):
    c = _client(folder)
    assert c.get("/api/meta").json()["neighbours"] == ["image"]
    for params, status in (
        ({"f": 0, "s": 0, "r": 0, "by": "sound"}, 400),
        ({"f": 0, "s": 0, "r": 0, "k": 0}, 400),
        ({"f": 0, "s": 0, "r": 0, "k": 999}, 400),
        ({"f": 0, "s": 0, "r": 0, "by": "caption"}, 400),  # no caption_embedding here
        ({"f": 0, "s": 0, "r": 5}, 400),  # its own embedding is not usable
        ({"f": 0, "s": 0, "r": "x"}, 404),
    ):
        res = c.get("/api/neighbours", params=params)
        assert res.status_code == status and "\n" not in res.json()["error"], (params, res.text)
    other = c.get("/api/neighbours", params={"f": 0, "s": 0, "r": 0}, headers={"Host": "attacker.example.com"})
    assert other.status_code == 400


@needs_chromium
def test_the_row_detail_shows_rows_like_it(folder, browser, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    with Server([folder], thumbs_dir=tmp_path / "thumbs") as server:
        with watched_page(browser) as page:
            page.goto(server.url)
            page.wait_for_selector("body[data-ready]")
            page.locator(".card").first.click()
            page.locator(".like-bar button[data-by=image]").click()
            sync_api.expect(page.locator(".like-card")).to_have_count(12)
            want = _reference(folder, (0, 0, 0), 12)
            ids = page.locator(".like-card").evaluate_all("els => els.map(e => e.dataset.id)")
            assert ids == [f"{a[0]}:{a[1]}:{a[2]}" for _, a in want]
            shot(page, "neighbours")
            page.locator(".like-card").first.click()  # opens that row
            sync_api.expect(page.locator("#modal h2")).to_have_text(server.data.current().cards([want[0][1]])[0]["key"])
