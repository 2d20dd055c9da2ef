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
    reasons, _ = data.current().thresholds.decide(clip, grounding)
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
    assert plain.get("/api/meta").json()["thresholds"] == {"min_clip_score": False, "drop_ungrounded": False}
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
