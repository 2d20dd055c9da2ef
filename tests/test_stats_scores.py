"""stats on a scored folder: the clip_score histogram and grounding by sentence position, in stats.json and the report."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from curate_fixtures import caption
from score_fixtures import read_rows, with_scores

from caption_debias.stats.compute import compute_stats
from caption_debias.stats.report import write_report

N = 60


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path_factory.mktemp("stats_scores")
    rng = random.Random(2)
    rows = [{"key": f"s{i}", "image": f"{i}.jpg", "caption": caption(rng, rng.randrange(2, 9))} for i in range(N)]
    (root / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([root / "t.jsonl"], root / "p", PrepareOptions(format="table", quiet=True, shard_rows=25))
    base = read_rows(root / "p", ["summary_mask"])
    nrng = np.random.default_rng(1)
    # a summary-biased scorer: grounding falls with the sentence's position
    grounding = [
        (3.0 - 0.4 * np.arange(len(m)) + nrng.normal(0, 0.3, len(m))).astype(np.float32) for m in base["summary_mask"]
    ]
    clip = nrng.normal(0.3, 0.05, N).astype(np.float32)
    clip[0] = None  # an unscored row (e.g. its image was unreadable at scoring time) is left out, not a zero
    cols = {
        "clip_score": [None if np.isnan(c) else float(c) for c in clip],
        "sentence_grounding": [g.tolist() for g in grounding],
        "sentence_keep": [(g >= 1.0).tolist() for g in grounding],
    }
    folder = with_scores(root / "p", root / "scored", cols)
    return {"folder": folder, "prepared": root / "p", "clip": clip, "grounding": grounding}


def test_score_stats_match_the_columns(scored):
    stats = compute_stats([scored["folder"]])
    s = stats["datasets"][0]["scores"]
    clip = scored["clip"][~np.isnan(scored["clip"])]
    assert s["scored_rows"] == N - 1 and s["clip_score"]["count"] == N - 1
    assert s["clip_score"]["mean"] == pytest.approx(float(clip.astype(np.float64).mean()), abs=1e-4)
    assert sum(s["clip_score"]["histogram"]["counts"].values()) == N - 1
    by_pos = {r["position"]: r for r in s["grounding_by_position"]}
    longest = max(len(g) for g in scored["grounding"])
    for k in range(longest):
        vals = [float(g[k]) for g in scored["grounding"] if len(g) > k]
        assert by_pos[str(k + 1)]["mean"] == pytest.approx(np.mean(vals), abs=1e-3)
        assert by_pos[str(k + 1)]["sentences"] == len(vals)
    means = [r["mean"] for r in s["grounding_by_position"]]
    assert means[0] > means[-1] + 1.0  # the planted bias shows
    assert s["sentences_dropped"] == sum(int((g < 1.0).sum()) for g in scored["grounding"])
    assert "scores" not in compute_stats([scored["prepared"]])["datasets"][0]  # an unscored folder: no section


def test_report_has_the_model_scores_section(scored, tmp_path):
    stats = compute_stats([scored["folder"]])
    files = write_report(stats, tmp_path / "r")
    html = files["html"].read_text("utf-8")
    md = files["markdown"].read_text("utf-8")
    assert "<h2>Model scores</h2>" in html and "grounding by sentence position" in html
    assert "## Model scores" in md
    for name in ("clip_score", "grounding_by_position", "grounding"):
        assert (tmp_path / "r" / "plots" / f"{name}.png").stat().st_size > 1000
        assert f"plots/{name}.png" in md
