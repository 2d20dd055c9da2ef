"""Issue 37, `view --model SPEC`: find images by text. The real shipped `tiny` model's text tower
encodes the query; the rows come back in the order of a brute-force cosine against the folder's image
embeddings; a model of another width, an empty or huge query are one line; the page shows the rows."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("open_clip")

from browser_support import needs_chromium, watched_page  # noqa: E402
from view_fixtures import Server, app_client, embedding_folder  # noqa: E402

from caption_debias.view.text_search import TextSearch  # noqa: E402

TINY_DIM = 64  # the shipped tiny config's embed_dim (caption_debias/assets/tiny.json)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from train_fixtures import make_prepared

    root = tmp_path_factory.mktemp("textsearch")
    src, _ = make_prepared(root, n=8)
    return embedding_folder(src, root / "emb", rows=200, dim=TINY_DIM, rng=np.random.default_rng(1), shard_rows=64)


def _client(folder, search):
    return app_client([folder], text_search=search)


def _reference(folder, query: np.ndarray, k: int):
    import pyarrow.parquet as pq

    scored = []
    for s, path in enumerate(sorted((folder / "shards").glob("*.parquet"))):
        for r, v in enumerate(pq.read_table(path, columns=["image_embedding"]).column(0).to_pylist()):
            scored.append((float(np.array(v, np.float16).astype(np.float32) @ query), (0, s, r)))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return scored[:k]


def test_a_text_query_ranks_the_images_as_a_brute_force_cosine(folder):
    import torch

    search = TextSearch("tiny")
    res = _client(folder, search).get("/api/text", params={"q": "a red circle near the left edge", "k": 10})
    assert res.status_code == 200, res.text
    loaded = search._model()  # the model the server loaded (tiny has random weights: this one's)
    with torch.no_grad():
        q = torch.nn.functional.normalize(
            loaded.model.encode_text(loaded.tokenizer(["a red circle near the left edge"])).float(), dim=-1
        )[0].numpy()
    assert np.allclose(search.encode("a red circle near the left edge"), q, atol=1e-5)
    want = _reference(folder, q, 10)
    assert [r["id"] for r in res.json()["rows"]] == [f"{a[0]}:{a[1]}:{a[2]}" for _, a in want]


def test_bad_queries_are_one_line(folder, tmp_path):
    c = _client(folder, TextSearch("tiny"))
    for params in ({"q": ""}, {"q": "x" * 1001}, {"q": "a", "k": 0}):
        res = c.get("/api/text", params=params)
        assert res.status_code == 400 and "\n" not in res.json()["error"], params
    wide = embedding_folder(folder, tmp_path / "wide", rows=20, dim=32, rng=np.random.default_rng(2))
    res = _client(wide, TextSearch("tiny")).get("/api/text", params={"q": "a dog"})
    assert res.status_code == 400 and "embeds text in 64 dimensions, the folder's images in 32" in res.json()["error"]
    assert _client(folder, None).get("/api/text", params={"q": "a"}).status_code == 400


@needs_chromium
def test_the_page_finds_images_by_text(folder, browser, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    with Server([folder], thumbs_dir=tmp_path / "t", text_search=TextSearch("tiny")) as server:
        with watched_page(browser) as page:
            page.goto(server.url)
            page.wait_for_selector("body[data-ready]")
            sync_api.expect(page.locator("#text-search")).to_be_visible()
            page.fill("#text-q", "a green square")
            page.press("#text-q", "Enter")
            sync_api.expect(page.locator("#modal .like-card")).to_have_count(24)
