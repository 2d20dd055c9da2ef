"""The curator's view without a browser: sentence signals (batched = row by row), removals in words,
the word diff, the box and key queries, the embedding map (every row placed, deterministic), and the
new routes under the origin's rules (tests/test_view_curator_browser.py drives the page itself)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("starlette")

from view_fixtures import curated_world, hostile_folder, planted_world  # noqa: E402

from caption_debias.folder_rows import sentence_signals  # noqa: E402
from caption_debias.folder_rows.query import Query, parse_box  # noqa: E402
from caption_debias.folder_rows.reasons import describe  # noqa: E402
from caption_debias.folder_rows.word_diff import word_diff  # noqa: E402
from caption_debias.view import embedding_map  # noqa: E402
from caption_debias.view.data import ViewData  # noqa: E402


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return planted_world(tmp_path_factory.mktemp("planted"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return curated_world(tmp_path_factory.mktemp("cw"))


def client(folders):
    from starlette.testclient import TestClient

    from caption_debias.view.app import create_app

    return TestClient(create_app(ViewData([str(f) for f in folders])), base_url="http://127.0.0.1")


# ---- sentence signals -----------------------------------------------------------------------------


def test_sentence_signals_batched_equal_row_by_row(planted):
    import polars as pl

    cols = ["key", "summary_mask", "sentence_grounding", "sentence_keep"]
    table = pq.read_table(planted["curated"] / "shards", columns=cols)
    df = pl.from_arrow(table)
    edge = pl.DataFrame(  # what a folder may hold besides: no grounding, NaN, a summary-only caption, no mask
        {
            "key": ["a", "b", "c", "d"],
            "summary_mask": [[True, False], [True, True], None, [False, False]],
            "sentence_grounding": [None, [0.1, 0.2], [0.3], [float("nan"), -0.5]],
            "sentence_keep": [None, [True, False], [False], []],
        },
        schema=df.schema,
    )
    df = pl.concat([df, edge])
    batched = sentence_signals.batch_signals(df, list(sentence_signals.COLUMNS))
    for row, got in zip(df.iter_rows(named=True), batched.iter_rows(named=True)):
        want = sentence_signals.row_signals(row["sentence_grounding"], row["summary_mask"], row["sentence_keep"])
        assert {k: got[k] for k in want} == pytest.approx(want, nan_ok=True), row["key"]
    assert batched["masked_sentences"].sum() > 0  # the planted world's --drop-ungrounded 0 masked sentences
    last = batched.tail(4).select(sentence_signals.COLUMNS).rows()
    assert last == [(None, None, None), (None, None, 1), (pytest.approx(0.3), 1, 1), (-0.5, 2, 0)]


def test_the_index_filters_and_sorts_by_the_weakest_detail_sentence(planted):
    data = ViewData([str(planted["curated"])])
    rows = pq.read_table(planted["curated"] / "shards", columns=["key", "sentence_grounding", "summary_mask"])
    weakest = {}
    for r in rows.to_pylist():
        got = sentence_signals.row_signals(r["sentence_grounding"], r["summary_mask"], None)
        weakest[r["key"]] = got["min_detail_grounding"]
    page = data.page(Query(ranges=(("min_detail_grounding", None, 0.5),), sort="min_detail_grounding", limit=200))
    expect = sorted((v, k) for k, v in weakest.items() if v is not None and v <= 0.5)
    assert [c["key"] for c in page["rows"]] == [k for _, k in expect] and page["total"] == len(expect)
    assert {"min_detail_grounding", "min_grounding_position", "masked_sentences"} <= set(data.numeric_columns)
    card = page["rows"][0]
    assert card["scalars"]["min_detail_grounding"] == pytest.approx(expect[0][0])
    pos = card["scalars"]["min_grounding_position"]
    assert card["sentences"][pos - 1]["role"] == "detail"


# ---- removals in words, the diff, phash bits -----------------------------------------------------------


def test_every_reason_reads_as_a_sentence(world):
    t = json.loads((world["curated"] / "manifest.json").read_text())["curation"]["thresholds"]
    cases = [
        ("image_missing", {}, "no file 'sam/gone.jpg' under the image root"),
        ("image_too_small", {"width": 20, "height": 40}, "20 x 40 px: shorter side below --min-image-side 32"),
        (
            "duplicate_image",
            {"match": "t/c3", "by": "image phash", "hamming": 3, "similarity": 0.95},
            "the same picture as t/c3: perceptual hashes 3 of 64 bits apart, at most 4",
        ),
        (
            "duplicate_image",
            {"match": "t/c2", "by": "image sha256", "similarity": 1.0},
            "the same bytes as t/c2 (sha256)",
        ),
        (
            "near_duplicate_caption",
            {"match": "t/c5", "by": "caption minhash", "similarity": 0.8625},
            "caption near t/c5: estimated Jaccard 0.86 of word 3-grams, at least 0.8",
        ),
        (
            "low_alignment",
            {"clip_score": 0.0812, "min_clip_score": 0.1},
            "clip_score 0.0812, below --min-clip-score 0.1",
        ),
        (
            "low_alignment",
            {"clip_score": 0.2, "keep_top_alignment": 30.0, "kept_by_rank": 12, "cutoff": 0.25},
            "clip_score 0.2, outside the top 30% of clip_score: the 12 best kept, cut-off 0.25",
        ),
        (
            "ungrounded_caption",
            {"detail_grounding_max": -0.42, "threshold": 0.0},
            "every detail sentence grounds below --drop-ungrounded 0 (the best: -0.42)",
        ),
        (
            "repetitive_caption",
            {"caption_repetition": 0.62, "caption_repeated_sentences": 0, "caption_tail_loop": 0},
            "repetitive: 62% of its tokens in repeated 4-grams (--repetition-max 0.5)",
        ),
        (
            "excluded_by_user",
            {"by": "listed in --exclude-keys", "file": "k.txt", "sha256": "ab"},
            "listed in --exclude-keys k.txt",
        ),
        ("invalid_signal", {"column": "clip_score", "problem": "NaN"}, "clip_score cannot be used: NaN"),
        ("some_new_reason", {"x": 1}, 'some_new_reason: {"x": 1}'),
    ]
    for reason, detail, text in cases:
        assert describe(reason, detail, t, "sam/gone.jpg") == text, reason


def test_removed_cards_say_why_and_near_duplicates_come_with_a_word_diff(world):
    data = ViewData([str(world["curated"])])
    rows = data.page(Query(view="removed", limit=200))["rows"]
    by_key = {c["key"]: c for c in rows}
    assert all(c["why"] and not c["why"].startswith("{") for c in rows)
    assert "bits apart" in by_key["table/resized_copy"]["why"]
    assert by_key["table/resized_copy"]["detail"]["hamming"] <= 4
    assert by_key["table/tiny"]["why"] == "20 x 40 px: shorter side below --min-image-side 32"
    gen = data.current()
    near = next(i for i, c in enumerate(rows) if c["key"] == "table/near_caption")
    pair = gen.removals.pair(0, int(rows[near]["id"].split(":r")[1]))
    diff = pair["diff"]
    assert " ".join(w for w, _ in diff["left"]) == " ".join(pair["removed"]["caption"].split())
    assert " ".join(w for w, _ in diff["right"]) == " ".join(pair["match"]["caption"].split())
    changed = [w for w, op in diff["left"] if op != "same"]
    assert 1 <= len(changed) <= 4 and diff["same_share"] > 0.8  # two words changed (curate_fixtures)
    image_pair = gen.removals.pair(0, int(by_key["table/byte_copy"]["id"].split(":r")[1]))
    assert "diff" not in image_pair  # two captions of two pictures: nothing to compare word by word


def test_word_diff_marks_what_each_side_lacks():
    d = word_diff("A red kite flies over the hill.", "A red  kite soars over the green hill.")
    assert [w for w, op in d["left"] if op == "removed"] == ["flies"]
    assert [w for w, op in d["right"] if op == "added"] == ["soars", "green"]
    assert word_diff("", "") == {"left": [], "right": [], "same_share": 1.0}


# ---- queries: the box and every key of a filter ------------------------------------------------------


def test_box_parameter_is_four_finite_numbers():
    assert parse_box("1:2:-3:0.5") == (-3.0, 0.5, 1.0, 2.0)
    assert parse_box("") is None
    for bad in ("1:2:3", "a:b:c:d", "nan:0:1:1", "inf:0:1:1", "1:2:3:4:5"):
        with pytest.raises(ValueError):
            parse_box(bad)


def test_keys_of_a_filter_are_every_row_it_selects(world):
    data = ViewData([str(world["curated"])])
    gen = data.current()
    kept = pq.read_table(world["curated"] / "shards", columns=["key", "caption", "num_tokens"]).to_pylist()
    assert sorted(gen.keys(Query())["keys"]) == sorted(r["key"] for r in kept)
    short = gen.keys(Query(ranges=(("num_tokens", None, 60),), sort="num_tokens"))["keys"]
    assert short == [r["key"] for r in sorted(kept, key=lambda r: r["num_tokens"]) if r["num_tokens"] <= 60]
    word = kept[0]["caption"].split()[2]
    assert sorted(gen.keys(Query(text=word))["keys"]) == sorted(
        r["key"] for r in kept if word.lower() in r["caption"].lower()
    )
    removed = [json.loads(x) for x in (world["curated"] / "removed.jsonl").read_text().splitlines()]
    dup = gen.keys(Query(view="removed", reason="duplicate_image"))["keys"]
    assert sorted(dup) == sorted(r["key"] for r in removed if r["reason"] == "duplicate_image")


# ---- the map -------------------------------------------------------------------------------------------


def test_the_map_places_every_row_the_same_way_twice(planted):
    removed = [json.loads(x) for x in (planted["curated"] / "removed.jsonl").read_text().splitlines()]
    pages = []
    for _ in range(2):
        gen = ViewData([str(planted["curated"])]).current()
        gen.map.wait() if gen.map.start() is None else None
        pages.append(gen.map_page())
    a, b = pages
    assert a["x"] == b["x"] and a["y"] == b["y"] and a["id"] == b["id"]  # seeded: a link's box selects the same rows
    kept = pq.read_table(planted["curated"] / "shards", columns=["key"]).num_rows
    assert a["kept_rows"] == kept and a["removed_rows"] == len(removed) and a["without"] == 0
    assert a["reasons"][0] == "kept" and {r["reason"] for r in removed} <= set(a["reasons"])
    assert sum(1 for c in a["reason"] if c) == len(removed)
    values = gen.map_values("clip_score")["values"]
    assert len(values) == len(a["x"]) and all(isinstance(v, float) for v, i in zip(values, a["id"]) if ":r" not in i)
    # a removed row is coloured by its own clip_score (from the scored folder it was read from), not left grey
    scored = dict(zip(*pq.read_table(planted["scored"] / "shards", columns=["key", "clip_score"]).to_pydict().values()))
    lines = {f"0:r{i}": r["key"] for i, r in enumerate(removed)}
    own = {i: v for v, i in zip(values, a["id"]) if ":r" in i}
    assert own and all(v == round(float(scored[lines[i]]), 6) for i, v in own.items()), own


def test_the_box_filter_selects_the_rows_inside_it(planted):
    gen = ViewData([str(planted["curated"])]).current()
    gen.map.start()
    gen.map.wait()
    m = gen.map_page()
    xs, ys = np.array(m["x"]), np.array(m["y"])
    box = (float(np.median(xs)), float(ys.min()), float(xs.max()), float(np.median(ys)))
    inside = {
        i
        for i, x, y in zip(m["id"], m["x"], m["y"])
        if box[0] <= x <= box[2] and box[1] <= y <= box[3] and ":r" not in i
    }
    page = gen.page(Query(box=box, limit=200))
    assert {c["id"] for c in page["rows"]} == inside and page["total"] == len(inside) > 0
    assert sorted(gen.keys(Query(box=box))["keys"]) == sorted(c["key"] for c in page["rows"])


def test_projection_fits_a_sample_and_places_every_row():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((500, 16)).astype(np.float32)
    x[:, 0] *= 10  # the first direction carries most of the variance
    model = embedding_map.project(x[:100])
    xy = model.transform(x)
    assert xy.shape == (500, 2) and abs(np.corrcoef(xy[:, 0], x[:, 0])[0, 1]) > 0.99


def test_map_routes_keep_the_origin_rules(planted, world, tmp_path):
    c = client([planted["curated"]])
    deadline = 120
    import time

    t0 = time.monotonic()
    while (res := c.get("/api/map")).json().get("status") == "computing" and time.monotonic() - t0 < deadline:
        time.sleep(0.2)
    body = res.json()
    assert res.status_code == 200 and body["status"] == "ready" and body["rows"] > 0
    for r in (res, c.get("/api/map/values", params={"column": "clip_score"}), c.get("/api/keys")):
        assert r.headers["x-content-type-options"] == "nosniff" and "sandbox" in r.headers["content-security-policy"]
        assert r.status_code == 200 and r.content.isascii() and b"<" not in r.content
    assert c.get("/api/map/values", params={"column": "nope"}).json() == {"error": "no column 'nope' to colour by"}
    for bad in ("1:2:3", "nan:1:2:3", "x:1:2:3"):
        res = c.get("/api/page", params={"box": bad})
        assert res.status_code == 400 and "box must be" in res.json()["error"]
    plain = client([world["curated"]])  # no embeddings: one line, never a traceback
    assert plain.get("/api/meta").json()["map"] is False
    res = plain.get("/api/map")
    assert res.status_code == 400 and res.json()["error"].startswith("no map: no folder here holds image_embedding")
    assert plain.get("/api/page", params={"box": "0:0:1:1"}).status_code == 400
    hostile = hostile_folder(tmp_path / "h")
    h = client([hostile["folder"]])
    for params in ({}, {"view": "removed"}):
        res = h.get("/api/keys", params=params)
        assert res.status_code == 200 and res.content.isascii() and b"<" not in res.content
        assert len(res.json()["keys"]) == (hostile["rows"] if not params else hostile["removed"])
