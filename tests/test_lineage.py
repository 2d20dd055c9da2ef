"""A folder's lineage (caption_debias/lineage.py) and what stats shows of it: every pass from prepare
on (prepare -> curate -> score -> curate), the thresholds the last curate used marked on the score
histograms, and the Samples section's images from the root the manifests record, however far back.

The chain is made by the real commands, run from one folder with relative paths, and read from
another, as a user who moves on does."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from caption_debias import lineage
from caption_debias.image_source.roots import folder_root


def test_every_pass_is_found_from_anywhere_and_reconciles(chain, tmp_path, monkeypatch):
    root, manifests = chain
    monkeypatch.chdir(tmp_path)  # the recorded paths are relative to root: found under the folder's parents
    passes = lineage.passes(root / "c2")
    assert [p["stage"] for p in passes] == ["prepare", "curate", "score", "curate"]
    assert [Path(p["folder"]).name for p in passes] == ["p", "c1", "s1", "c2"]
    for before, after in zip(passes, passes[1:]):
        assert after["read"] == before["written"]
    assert passes[-1]["written"] == manifests["c2"]["counts"]["written"]
    assert passes[-1]["steps"] == {r: n for r, n in manifests["c2"]["counts"]["removed_by_reason"].items() if n}
    assert passes[2]["model"] == "tiny" and passes[-1]["thresholds"]["keep_top_alignment"] == 75.0
    assert folder_root(root / "c2").resolved == str((root / "w").resolve())
    # a folder recording none (made before roots were carried): found back through its inputs
    bare = {**manifests["c2"], "options": {k: v for k, v in manifests["c2"]["options"].items() if k != "image_root"}}
    assert folder_root(root / "c2", None, bare).resolved == str((root / "w").resolve())  # by c1 and s1's input


def test_an_input_changed_since_is_not_followed_and_says_why(chain, tmp_path):
    root, _ = chain
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    scored = copy / "s1" / "manifest.json"
    scored.write_text(scored.read_text() + "\n")
    passes = lineage.passes(copy / "c2")
    assert [p["stage"] for p in passes] == ["curate"]
    assert passes[0]["not_followed"] == [{"path": "s1", "why": "changed since (its manifest is not the one recorded)"}]
    want = json.loads((copy / "c2" / "manifest.json").read_text())["inputs"][0]["manifest_sha256"]
    assert hashlib.sha256(scored.read_bytes()).hexdigest() != want


def test_stats_shows_every_pass_the_thresholds_and_the_images(chain, tmp_path, monkeypatch):
    from caption_debias.stats.compute import compute_stats
    from caption_debias.stats.curation import lineage_funnel
    from caption_debias.stats.report import write_report

    root, manifests = chain
    monkeypatch.chdir(tmp_path)
    stats = compute_stats([root / "c2"])
    entry = stats["datasets"][0]
    assert [p["stage"] for p in entry["lineage"]] == ["prepare", "curate", "score", "curate"]
    funnel = lineage_funnel(entry["lineage"])
    assert [s["step"].split(" ")[1] for s in funnel if s["step"].endswith(": read")] == [
        "prepare",
        "curate",
        "score",
        "curate",
    ]
    assert funnel[-1] == {"step": "written", "rows": manifests["c2"]["counts"]["written"], "pass": 4}
    cut = manifests["c2"]["curation"]["low_alignment"]["cutoff"]
    marks = entry["scores"]["thresholds"]
    assert marks == {
        "min_clip_score": -1.0,
        "keep_top_alignment": 75.0,
        "keep_top_alignment_cutoff": cut,
        "drop_ungrounded": 0.0,
        "curated": str(root / "c2"),
    }
    page = write_report(stats, tmp_path / "r")["html"].read_text("utf-8")
    assert "every pass, oldest first" in page and "model tiny" in page
    assert f"--keep-top-alignment 75 (cut at {cut:.3f})" in page
    samples = page[page.index("<h2>Samples</h2>") :]
    assert samples.count('src="data:image/jpeg;base64,') >= 3  # the root c1 recorded, found through s1
    assert "no --image-root" not in samples


def test_threshold_lines_are_drawn_where_curate_cut():
    from caption_debias.stats.plots import _mark_thresholds, _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots()
    marks = {
        "min_clip_score": 0.1,
        "keep_top_alignment": 30.0,
        "keep_top_alignment_cutoff": 0.62,
        "drop_ungrounded": 0.5,
    }
    _mark_thresholds(ax, "clip_score", marks, None)
    assert [line.get_xdata()[0] for line in ax.lines] == [0.1, 0.62]
    assert [t.get_text() for t in ax.texts] == ["--min-clip-score 0.1", "--keep-top-alignment 30: cut at 0.620"]
    _mark_thresholds(ax, "grounding", marks, "scored")
    assert ax.lines[-1].get_xdata()[0] == 0.5 and ax.texts[-1].get_text() == "scored: --drop-ungrounded 0.5"
    plt.close(fig)
