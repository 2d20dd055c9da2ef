"""Issue 37, thresholds chosen where the data is seen: view's /api/thresholds says what `curate
--min-clip-score T --drop-ungrounded G` removes and masks, and curate with the config it writes does
exactly that (rows, reasons, masked sentences). The folder is a curated world's scored copy
(view_fixtures.scored_copy): real Parquet, curate's own columns."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette")

from view_fixtures import app_client, curated_world, scored_copy  # noqa: E402

from caption_debias.view.data import ViewData  # noqa: E402


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("thresholds")
    world = curated_world(root)
    return scored_copy(world["curated"], world["images"], root / "scored"), world


def _client(folders):
    return app_client(folders)


@pytest.mark.parametrize("clip, grounding", [(0.25, None), (None, 0.5), (0.27, 0.3), (0.2, 0.95)])
def test_the_preview_is_what_curate_with_its_config_does(scored, tmp_path, clip, grounding):
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.options import load_config_file

    folder, _ = scored
    params = {k: v for k, v in (("min_clip_score", clip), ("drop_ungrounded", grounding)) if v is not None}
    res = _client([folder]).get("/api/thresholds", params=params)
    assert res.status_code == 200, res.text
    preview = res.json()
    assert preview["config"] == params
    assert preview["removed_total"] + preview["masked_rows"] > 0  # each case does something
    config = tmp_path / "thresholds.json"
    config.write_text(json.dumps(preview["config"]), "utf-8")
    manifest = curate([folder], tmp_path / "out", CurateOptions(quiet=True, **load_config_file(config)))
    removed = {r: n for r, n in manifest["counts"]["removed_by_reason"].items() if n}
    assert removed == preview["removed"]
    masks = manifest["curation"].get("sentence_keep") or {"rows_masked": 0, "sentences_masked": 0}
    assert (masks["rows_masked"], masks["sentences_masked"]) == (preview["masked_rows"], preview["masked_sentences"])
    # row by row: the reason the preview gives each row is the one in removed.jsonl
    data = ViewData([str(folder)])
    reasons, _, _ = data.current().thresholds.decide(clip, grounding)
    keys = data.current().thresholds._read().keys
    want = {k: r for k, r in zip(keys, reasons) if r}
    lines = (tmp_path / "out" / "removed.jsonl").read_text("utf-8").splitlines()
    assert {d["key"]: d["reason"] for d in map(json.loads, lines)} == want


def test_bad_values_are_one_line_400s(scored, tmp_path):
    folder, world = scored
    c = _client([folder])
    for params in ({"min_clip_score": "nan"}, {"drop_ungrounded": "inf"}, {"min_clip_score": "high"}):
        res = c.get("/api/thresholds", params=params)
        assert res.status_code == 400 and "\n" not in res.json()["error"], params
    plain = _client([world["curated"]])  # not scored: no clip_score to cut on
    available = plain.get("/api/meta").json()["thresholds"]
    assert available == {
        "min_clip_score": False,
        "drop_ungrounded": False,
        "semantic_duplicate_threshold": False,
        "repetition_max": True,  # the text-quality cuts read the token ids every folder holds
        "repeated_sentences_max": True,
    }
    res = plain.get("/api/thresholds", params={"min_clip_score": "0.2"})
    assert res.status_code == 400 and "no folder here holds" in res.json()["error"]


def test_the_route_keeps_the_origin_rules(scored):
    folder, _ = scored
    c = _client([folder])
    res = c.get("/api/thresholds", params={"min_clip_score": "0.2"})
    assert res.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in res.headers["content-security-policy"]
    other = c.get("/api/thresholds", params={"min_clip_score": "0.2"}, headers={"Host": "attacker.example.com"})
    assert other.status_code == 400 and "rows" not in other.text


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    from view_fixtures import text_and_embedding_folder

    return text_and_embedding_folder(tmp_path_factory.mktemp("texts"))


@pytest.mark.parametrize(
    "cuts",
    [
        {"semantic_duplicate_threshold": 0.95},
        {"semantic_duplicate_threshold": 0.9, "repeated_sentences_max": 1},
        {"repetition_max": 0.3, "repeated_sentences_max": 2},
        {"semantic_duplicate_threshold": 0.99, "repetition_max": 0.25},
    ],
)
def test_semantic_and_text_quality_cuts_are_what_curate_does(texts, tmp_path, cuts):
    """SemDeDup is pairwise: the preview names the row curate removes and the row it keeps (a chain of
    three near-copies: the third matches the first, the second being gone), and the text-quality cuts
    remove what curate's repetitive_caption does at those values; one NaN embedding is invalid_signal."""
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.options import load_config_file

    c = _client([texts])
    ids = [card["id"] for card in c.get("/api/page", params={"limit": 100}).json()["rows"]]
    res = c.get("/api/thresholds", params={**cuts, "ids": ",".join(ids)})
    assert res.status_code == 200, res.text
    preview = res.json()
    assert preview["config"] == cuts
    config = tmp_path / "cuts.json"
    config.write_text(json.dumps(preview["config"]), "utf-8")
    manifest = curate([texts], tmp_path / "out", CurateOptions(quiet=True, **load_config_file(config)))
    removed = {r: n for r, n in manifest["counts"]["removed_by_reason"].items() if n}
    assert removed == preview["removed"]
    if "semantic_duplicate_threshold" in cuts:
        assert removed["semantic_duplicate"] >= 2 and removed["invalid_signal"] == 1
    lines = [json.loads(x) for x in (tmp_path / "out" / "removed.jsonl").read_text("utf-8").splitlines()]
    data = ViewData([str(texts)])
    keys = data.current().thresholds._read().keys
    key_of = dict(zip(ids, (card["key"] for card in c.get("/api/page", params={"limit": 100}).json()["rows"])))
    # card by card: each mark is the line curate wrote for that row (reason; the row a duplicate matched)
    marks = {key_of[i]: m for i, m in preview["marks"].items()}
    assert {d["key"]: d["reason"] for d in lines} == {k: m["reason"] for k, m in marks.items()}
    for d in lines:
        if d["reason"] == "semantic_duplicate":
            assert marks[d["key"]]["match"] == d["detail"]["match"]
            assert marks[d["key"]]["similarity"] == pytest.approx(d["detail"]["similarity"], abs=1e-4)
    assert len(keys) == len(ids)  # every row was on the page, so every removal is marked


def test_text_quality_cuts_keep_curate_limits(texts):
    c = _client([texts])
    for params in (
        {"repetition_max": "0"},
        {"repeated_sentences_max": "-1"},
        {"repeated_sentences_max": "1.5"},
        {"semantic_duplicate_threshold": "1.5"},
    ):
        res = c.get("/api/thresholds", params=params)
        assert res.status_code == 400 and "\n" not in res.json()["error"], (params, res.text)
    assert "--repetition-max" in c.get("/api/thresholds", params={"repetition_max": "0"}).json()["error"]


def test_the_semantic_preview_has_a_bounded_cost(texts, monkeypatch):
    """Over SEMANTIC_MAX_ROWS rows the preview says so in one line (curate decides), not a long request."""
    from caption_debias.view import thresholds

    monkeypatch.setattr(thresholds, "SEMANTIC_MAX_ROWS", 10)
    res = _client([texts]).get("/api/thresholds", params={"semantic_duplicate_threshold": "0.9"})
    assert res.status_code == 400 and "at most 10 rows" in res.json()["error"], res.text
    assert "\n" not in res.json()["error"]


def test_the_new_cuts_and_the_caption_map_keep_the_origin_rules_and_write_nothing(texts):
    """The cuts' route and the caption map: the page's headers, the Host check, and the folder untouched."""
    import time

    from view_fixtures import mtimes

    before = mtimes(texts)
    c = _client([texts])
    routes = [
        ("/api/thresholds", {"semantic_duplicate_threshold": "0.9", "repetition_max": "0.3", "ids": "0:0:0"}),
        ("/api/map", {"by": "caption"}),
    ]
    for _ in range(100):  # the caption map is computed in the background
        if c.get("/api/map", params={"by": "caption"}).json().get("status") == "ready":
            break
        time.sleep(0.1)
    routes.append(("/api/map/values", {"by": "caption", "column": "num_tokens"}))
    for route, params in routes:
        res = c.get(route, params=params)
        assert res.status_code == 200, (route, res.text)
        assert res.headers["x-content-type-options"] == "nosniff"
        assert "sandbox" in res.headers["content-security-policy"]
        other = c.get(route, params=params, headers={"Host": "attacker.example.com"})
        assert other.status_code == 400 and "rows" not in other.text and "values" not in other.text, route
    assert mtimes(texts) == before
