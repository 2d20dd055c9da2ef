"""One end-to-end demo run at a deliberately tiny size: every stage runs for real."""

from __future__ import annotations

import json

import pytest

from caption_debias import html_report
from caption_debias.errors import UserError

TINY = dict(
    start="train",  # the v1 path: a stage-1 run of `tiny` inside the demo
    world="layouts",
    model="tiny",
    train_images=48,
    test_images=24,
    group_size=4,
    batch_size=16,
    stage1_steps=4,
    finetune_steps=3,
    eval_batch_size=32,
    image_size=64,
)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    from caption_debias.demo import DemoConfig, run_demo

    out = tmp_path_factory.mktemp("demo")
    tables: list[str] = []
    results = run_demo(DemoConfig(out=out, seed=5, preset="test", **TINY), quiet=True, on_table=tables.append)
    return out, results, tables


@pytest.mark.slow  # a whole demo run: minutes on 2 cores
def test_artifacts_exist_and_agree(demo_run):
    out, results, tables = demo_run
    on_disk = json.loads((out / "results.json").read_text("utf-8"))
    assert on_disk["summary"] == json.loads(json.dumps(results["summary"]))
    page = (out / "report.html").read_text("utf-8")
    assert html_report.CSS in page  # the shared page builder
    for needle in ("text-to-image R@1", "Long-caption loss", "Dataset statistics", "data:image/png;base64,"):
        assert needle in page
    assert page.index("What was trained") < page.index("<table")  # the headline opens the report
    assert len(tables) == 1 and "longclip" in tables[0] and "debias" in tables[0]
    assert set(results["timings_s"]) >= {
        "synth",
        "prepare",
        "stats",
        "start",
        "stretch",
        "longclip",
        "debias",
        "evaluate",
    }
    # CPU seconds (user + sys, every thread) beside each stage's wall seconds: the idle-wall estimate's input
    assert set(results["cpu_s"]) == set(results["timings_s"]) and all(v >= 0 for v in results["cpu_s"].values())


@pytest.mark.slow  # a whole demo run: minutes on 2 cores
def test_counts_reconcile_through_prepare(demo_run):
    from caption_debias.dataset import PreparedDataset

    out, results, _ = demo_run
    for split, n in (("train", TINY["train_images"]), ("test", TINY["test_images"])):
        ds = PreparedDataset.open(out / "prepared" / split)
        assert ds.rows == n and not list(ds.rejects())
        metas = [json.loads(m) for m in ds.read(["meta"]).column("meta").to_pylist()]
        assert len({m["group"] for m in metas}) == n // TINY["group_size"]


@pytest.mark.slow  # a whole demo run: minutes on 2 cores
def test_numbers_come_from_real_runs(demo_run):
    out, results, _ = demo_run
    # Each run trained its own budget and logged it.
    for name, steps in (
        ("start", TINY["stage1_steps"]),
        ("longclip", TINY["finetune_steps"]),
        ("debias", TINY["finetune_steps"]),
    ):
        curve = results["curves"][name]
        assert curve and max(r["step"] for r in curve if "step" in r) >= steps - 1, name
        assert all(r["loss"] == r["loss"] for r in curve if "loss" in r)  # no NaN
    assert results["stretch"] == {"from": 77, "to": 248, "head_kept": True}
    # Stage 1 batches are whole hard-negative groups; the fine-tunes draw random batches.
    group_keys = {
        name: json.loads((out / "runs" / name / "config.json").read_text("utf-8"))["config"]["group_key"]
        for name in ("start", "longclip", "debias")
    }
    assert group_keys == {"start": "group", "longclip": None, "debias": None}
    # The summary is computed from the eval tables, not written by hand.
    ev = results["eval"]
    for model in ("start", "longclip", "debias"):
        for variant in ("keep", "remove", "move", "filler:3"):
            r1 = ev[model][variant]["t2i"]["r1"]
            assert 0.0 <= r1 <= 100.0
            assert results["summary"]["t2i_r1"][model][variant] == r1
    drop = results["summary"]["remove_drop"]
    assert drop["longclip"] == pytest.approx(
        ev["longclip"]["keep"]["t2i"]["r1"] - ev["longclip"]["remove"]["t2i"]["r1"], abs=0.01
    )
    # Each gap is debias - longclip of the tables, inside its own bootstrap interval.
    for variant, gap in results["summary"]["gaps"].items():
        expected = ev["debias"][variant]["t2i"]["r1"] - ev["longclip"][variant]["t2i"]["r1"]
        assert gap["gap"] == pytest.approx(expected, abs=0.01)
        assert gap["lo"] <= gap["gap"] <= gap["hi"] and gap["level"] == 0.95
    assert results["summary"]["queries"] == TINY["test_images"]
    # Different recipes from the same start end in different weights, so the fine-tuned models differ.
    from caption_debias.model.load import load_model

    a = load_model(str(out / "runs" / "longclip")).model.state_dict()
    b = load_model(str(out / "runs" / "debias")).model.state_dict()
    assert any(not a[k].equal(b[k]) for k in a)
    assert results["probe"]["models"].keys() == {"start", "longclip", "debias"}


@pytest.mark.slow  # a whole demo run: minutes on 2 cores
def test_report_shows_stats_long_loss_and_probe(demo_run):
    out, results, _ = demo_run
    page = (out / "report.html").read_text("utf-8")
    # The stats report's own sections (pictures and its figures table), not a JSON dump.
    for needle in ("Tokens per caption", "median tokens per caption", "Top opening phrases", "long-caption loss"):
        assert needle in page
    assert '"tokens_per_caption": {' not in page
    assert "Attention by token position" in page and "Filler prefix probe" in page
    assert page.count("data:image/png;base64,") >= 5  # stats plots, loss, attention, filler


@pytest.mark.slow  # a whole demo run: minutes on 2 cores
def test_shipped_start_is_shared_and_loads_like_any_checkpoint(tmp_path):
    """The default presets fine-tune both arms from the package's demo-start, read through
    load_model's local-dir: path; its weights are fp16 and under 20 MB."""
    from caption_debias.demo import DemoConfig, preset, run_demo, shipped_start
    from caption_debias.model.load import load_model

    start = shipped_start()
    weights = start / "open_clip_model.safetensors"
    assert weights.stat().st_size < 20 * 2**20
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as f:
        assert {str(f.get_slice(k).get_dtype()) for k in f.keys()} == {"F16"}
    loaded = load_model(f"local-dir:{start}")
    assert loaded.context_length == 77
    assert preset("full", tmp_path).start == preset("quick", tmp_path).start == "shipped"

    tiny = dict(train_images=24, test_images=16, batch_size=8, finetune_steps=2, eval_batch_size=16)
    results = run_demo(DemoConfig(out=tmp_path / "demo", seed=1, preset="test", **tiny), quiet=True)
    assert results["start"] == f"local-dir:{start}"
    assert results["stretch"] == {"from": 77, "to": 248, "head_kept": True}
    assert not (tmp_path / "demo" / "runs" / "start").exists()  # nothing trained for the start
    for arm in ("longclip", "debias"):
        cfg = json.loads((tmp_path / "demo" / "runs" / arm / "config.json").read_text("utf-8"))["config"]
        assert cfg["model"] == f"local-dir:{start}"


def test_presets(tmp_path):
    from caption_debias.demo import preset

    full, quick, v1 = (preset(name, tmp_path) for name in ("full", "quick", "v1"))
    assert full.world == quick.world == "objects"
    assert quick.finetune_steps < full.finetune_steps and quick.train_images < full.train_images
    # v1 reproduces the first demo's documented table: its world, its own stage 1, its budgets.
    assert (v1.world, v1.start, v1.stage1_steps, v1.finetune_steps, v1.finetune_lr) == (
        "layouts",
        "train",
        600,
        300,
        2e-3,
    )
    with pytest.raises(UserError, match="preset"):
        preset("huge", tmp_path)


def test_cli_help_and_one_line_error(tmp_path):
    import subprocess
    import sys

    exe = [sys.executable, "-m", "caption_debias.cli.main", "demo"]
    helped = subprocess.run([*exe, "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "--quick" in helped.stdout and "--seed" in helped.stdout
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    bad = subprocess.run([*exe, "--out", str(blocker), "--quiet"], capture_output=True, text=True)
    assert bad.returncode != 0
    assert bad.stderr.strip().count("\n") == 0 and "not a folder" in bad.stderr


def test_cli_preset_errors_are_one_line(tmp_path):
    import subprocess
    import sys

    exe = [sys.executable, "-m", "caption_debias.cli.main", "demo", "--out", str(tmp_path / "d"), "--quiet"]
    for extra, needle in (
        (["--preset", "huge"], "unknown --preset 'huge'"),
        (["--quick", "--preset", "v1"], "--quick"),
    ):
        bad = subprocess.run([*exe, *extra], capture_output=True, text=True)
        assert bad.returncode != 0
        assert bad.stderr.strip().count("\n") == 0 and needle in bad.stderr, bad.stderr
    assert not (tmp_path / "d" / "runs").exists()


def _ranks(longclip_hits: list[bool], debias_hits: list[bool]):
    import numpy as np

    def arm(hits):
        r = np.where(np.asarray(hits), 0, 5)
        return {v: r for v in ("keep", "remove", "move")}

    return {"longclip": arm(longclip_hits), "debias": arm(debias_hits)}


def _scores(ranks):
    table = {
        m: {v: {"t2i": {"r1": 100.0 * float((r < 1).mean())}} for v, r in arms.items()} for m, arms in ranks.items()
    }
    for m in table:
        table[m]["filler:3"] = table[m]["keep"]
    return table


def test_verdict_not_judged_where_the_remove_interval_reaches_zero():
    """A remove gap of +5 points on 20 queries (one query) passes the checks, but its interval
    reaches zero: no "met"; the quick preset says its intervals are wider and to run the full one."""
    from caption_debias.demo import summarise, verdict

    ranks = _ranks([False] * 20, [True] + [False] * 19)
    summary = summarise(_scores(ranks), ranks, resamples=500, seed=0)
    assert summary["gaps"]["remove"]["gap"] == 5.0 and summary["gaps"]["remove"]["lo"] <= 0
    assert all(summary["checks"].values()) and summary["judged"] is False and summary["target_met"] is False
    quick = verdict(summary, "quick")
    assert "not judged" in quick and "run the full preset" in quick and " met" not in quick
    assert "full preset" not in verdict(summary, "full") and "not judged" in verdict(summary, "full")
    # 40 of 400 queries won, none lost: the interval is above zero and the verdict is "met".
    ranks = _ranks([False] * 400, [True] * 40 + [False] * 360)
    summary = summarise(_scores(ranks), ranks, resamples=500, seed=0)
    assert summary["judged"] and summary["target_met"]
    assert verdict(summary, "quick").endswith("target on this seed met")


@pytest.mark.slow  # a whole demo run: minutes on 2 cores (shared with the slow tests above)
def test_report_links_results_instead_of_dumping_them(demo_run):
    out, results, tables = demo_run
    page = (out / "report.html").read_text("utf-8")
    assert '<a href="results.json">' in page
    assert "<pre>" not in page and '"timings_s"' not in page and '"config"' not in page
    judged = results["summary"]["judged"]
    assert ("not judged" in page) == (not judged) and ("not judged" in tables[0]) == (not judged)


@pytest.mark.slow  # a whole demo run: minutes on 2 cores (shared with the slow tests above)
def test_report_shows_grounding_per_arm(demo_run):
    """The grounding stage scores a planted world with every model; the report has the AUROC per
    model and a few hallucinated captions shaded sentence by sentence, the swapped one outlined."""
    from caption_debias.evaluate import planted

    out, results, _ = demo_run
    grounding = results["grounding"]
    assert set(grounding["auroc"]) == {"start", "longclip", "debias"}
    key = planted.read_key(out / "planted" / "world")
    assert grounding["planted"]["hallucinated"] == len(key["hallucinated"]) == round(0.2 * TINY["test_images"])
    for name, value in grounding["auroc"].items():
        scored = planted.read_scored(out / "planted" / "scored" / name, ["summary_mask", "sentence_grounding"])
        assert planted.hallucination(scored, key)["auroc"] == value and 0.0 <= value <= 1.0
    examples = grounding["examples"]
    assert len(examples) == 4
    for example in examples:
        assert example["key"] in {e["key"] for e in key["hallucinated"]}
        assert all(len(g) == len(example["sentences"]) for g in example["grounding"].values())
    page = (out / "report.html").read_text("utf-8")
    assert "Sentence grounding on planted hallucinations" in page
    assert page.count("outline:2px dashed") == len(examples) * 3


def test_report_opens_with_a_plain_headline(tmp_path):
    """Before the tables: the result in words, what was trained, what keep / remove / move mean,
    what the gap shows; its figures are the summary's."""
    import dataclasses

    from caption_debias.demo import preset, summarise
    from caption_debias.demo.report import headline

    ranks = _ranks([False] * 300 + [True] * 100, [True] * 160 + [False] * 240)
    summary = summarise(_scores(ranks), ranks, resamples=500, seed=0)
    config = {k: str(v) if k == "out" else v for k, v in dataclasses.asdict(preset("full", tmp_path)).items()}
    text = headline({"config": config, "summary": summary})
    remove = summary["gaps"]["remove"]
    assert summary["judged"] and remove["gap"] == 15.0
    assert (
        f"a gap of +15.0 points (95% interval [{remove['lo']:+.1f}, {remove['hi']:+.1f}])" in text
        and "<code>debias</code> finds the right picture for 40.0%" in text
        and "<code>longclip</code> for 25.0%" in text
    )
    for needle in (
        "What was trained",
        "fine-tuned for\n200 steps on 2,000 synthetic scenes",
        "<b>keep</b>, as written",
        "<b>remove</b>, with the\nsummary sentence dropped",
        "<b>move</b>, with the summary moved to the fourth",
        "What the gap shows",
        "the shipped <code>demo-start</code>",
        f"moved to the fourth place the gap is\n{summary['gaps']['move']['gap']:+.1f} [",
    ):
        assert needle in text, needle
    # a quick run that tells the arms apart is a result like the full preset's
    assert "run the full preset" not in headline({"config": {**config, "preset": "quick"}, "summary": summary})
    # a gap whose interval reaches zero is said to tell the arms apart in no way
    ranks = _ranks([False] * 20, [True] + [False] * 19)
    summary = summarise(_scores(ranks), ranks, resamples=500, seed=0)
    assert "cannot tell the two arms apart" in headline({"config": config, "summary": summary})
    assert "cannot tell: run the full preset" in headline({"config": {**config, "preset": "quick"}, "summary": summary})
