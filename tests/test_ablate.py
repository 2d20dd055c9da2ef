"""`caption-debias ablate` end to end on a small planted world: real tiny models trained for three arms
and two seeds, the JSON against its schema, a killed run resumed to the same results, the intervals
against a bootstrap computed here row by row, and WiSE-FT interpolation against a hand computation."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import cli_process
import jsonschema
import numpy as np
import pytest

from caption_debias.errors import UserError

TRAIN = {"recipe": "debias", "steps": 2, "batch_size": 8, "lr": 1e-3, "precision": "fp32", "cache_images": True}


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def write_plan(path: Path, plan: dict) -> Path:
    """A TOML plan from a dict of scalars and one level of tables (arms two)."""
    lines = [f"{k} = {_toml(v)}" for k, v in plan.items() if not isinstance(v, dict)]
    for name, table in plan.items():
        if not isinstance(table, dict):
            continue
        if name == "arms":
            for arm, options in table.items():
                lines.append(f"[arms.{arm}]")
                lines.extend(f"{k} = {_toml(v)}" for k, v in options.items())
        else:
            lines.append(f"[{name}]")
            lines.extend(f"{k} = {_toml(v)}" for k, v in table.items())
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A planted train world and a test world, prepared; a start model (a `short` tiny run at 77)."""
    import caption_debias as cd
    from caption_debias.synth.plant import PlantSpec
    from caption_debias.synth.world import write_world

    root = tmp_path_factory.mktemp("ablate-world")
    for split, n, plant in (("train", 48, PlantSpec()), ("test", 24, None)):
        write_world(root / f"world-{split}", n, 0, image_size=32, split=split, plant=plant)
        cd.prepare(
            root / f"world-{split}" / "sharegpt4v.json",
            root / f"prep-{split}",
            format="sharegpt4v",
            split=split,
            image_root=str(root / f"world-{split}"),
        )
    import shutil

    records = json.loads((root / "world-test" / "sharegpt4v.json").read_text("utf-8"))
    for r in records[:12]:  # a folder-per-class set: the test world's pictures by group
        (root / "classes" / f"group {r['group']}").mkdir(parents=True, exist_ok=True)
        shutil.copy(root / "world-test" / r["image"], root / "classes" / f"group {r['group']}")
    key = json.loads((root / "world-train" / "planted.json").read_text("utf-8"))
    (root / "drop.txt").write_text("".join(e["key"] + "\n" for e in key["mismatched"]), "utf-8")
    cd.train(
        root / "prep-train",
        root / "start",
        model="tiny",
        recipe="short",
        context_length=77,
        max_steps=1,
        batch_size=8,
        precision="fp32",
        report_to="",
    )
    return root


def plan_dict(root: Path, seeds: list[int], alphas: list[float]) -> dict:
    return {
        "base": "prep-train",
        "planted": "world-train",
        "arms": {
            "baseline": {},
            "dropmis": {"exclude_keys": str(root / "drop.txt")},
            "neardup": {"near_duplicate_threshold": 0.5},
        },
        "train": {"model": "start", **TRAIN, "seeds": seeds},
        "eval": {
            "data": ["prep-test"],
            "variants": ["keep", "remove", "move", "first"],
            "alphas": alphas,
            "zeroshot": "classes",
            "grounding": "prep-train",
            "resamples": 300,
        },
    }


@pytest.fixture(scope="module")
def ablation(world):
    import caption_debias as cd

    plan = write_plan(world / "plan.toml", plan_dict(world, [0, 1], [1.0, 0.5]))
    return cd.ablate(plan, world / "out")


def test_three_arms_two_seeds_schema_and_faults(ablation, world):
    from caption_debias.schema import ablation_schema

    summary = json.loads((world / "out" / "ablation.json").read_text("utf-8"))
    jsonschema.validate(summary, ablation_schema())
    assert summary == json.loads(json.dumps(ablation.data))
    arms = {a["name"]: a for a in summary["arms"]}
    assert list(arms) == ["baseline", "dropmis", "neardup"]
    key = json.loads((world / "world-train" / "planted.json").read_text("utf-8"))
    assert arms["baseline"]["rows"] == 48 and arms["baseline"]["rows_removed"] == 0
    mismatched = arms["dropmis"]["faults"]["by_kind"]["mismatched"]
    assert arms["dropmis"]["rows"] == 48 - len(key["mismatched"])
    assert mismatched == {"planted": len(key["mismatched"]), "removed": len(key["mismatched"]), "recall": 1.0}
    assert arms["dropmis"]["faults"]["precision"] == 1.0
    # every arm x seed trained its own model for the same step budget
    for arm in arms:
        for seed in (0, 1):
            metrics = (world / "out" / "arms" / arm / f"seed-{seed}" / "run" / "metrics.jsonl").read_text("utf-8")
            assert json.loads(metrics.splitlines()[-1])["step"] == TRAIN["steps"]
    rows = [m for m in summary["metrics"] if m["arm"] == "neardup" and m["metric"] == "retrieval"]
    assert {(m["variant"], m["direction"], m["alpha"]) for m in rows} == {
        (v, d, a) for v in ("keep", "remove", "move", "first") for d in ("t2i", "i2t") for a in (1.0, 0.5)
    }
    for m in rows:
        crosses = m["delta"]["lo"] <= 0 <= m["delta"]["hi"]
        assert (m["effect"] == "no measurable effect") == crosses
    short = [m for m in summary["metrics"] if m["metric"] == "short"]
    assert short and all(m["variant"] == "first" for m in short)
    page = (world / "out" / "report.html").read_text("utf-8")
    assert page.count("<svg") == 2 and "no measurable effect" in page  # a figure per alpha
    assert "Grounding AUROC" in page and "zero-shot top-1" in page


def test_grounding_auroc_per_arm_is_the_planted_measure_of_its_model(ablation, world, tmp_path):
    """Each unit's grounding AUROC is evaluate/planted.py's on the planted folder scored by that unit's model;
    the summary holds the seeds' mean and the gap to the baseline."""
    import caption_debias as cd
    from caption_debias.evaluate import planted

    run = world / "out" / "arms" / "dropmis" / "seed-1" / "run"
    cd.score(world / "prep-train", tmp_path / "scored", model=str(run))
    scored = planted.read_scored(tmp_path / "scored", ["summary_mask", "sentence_grounding"])
    want = planted.hallucination(scored, planted.read_key(world / "world-train"))
    result = json.loads((run.parent / "result.json").read_text("utf-8"))
    assert result["alphas"]["1"]["grounding"] == want
    rows = {(g["arm"], g["alpha"]): g for g in ablation.data["grounding"]}
    assert set(rows) == {(a, al) for a in ("baseline", "dropmis", "neardup") for al in (1.0, 0.5)}
    mine, ref = rows[("dropmis", 1.0)], rows[("baseline", 1.0)]
    assert mine["auroc_by_seed"][1] == want["auroc"]
    assert mine["auroc"] == pytest.approx(sum(mine["auroc_by_seed"]) / 2, abs=1e-4)
    assert mine["gap"] == pytest.approx(mine["auroc"] - ref["auroc"], abs=2e-4) and ref["gap"] is None


def test_intervals_match_a_bootstrap_computed_row_by_row(ablation, world):
    """dropmis minus baseline, t2i remove at alpha 1: each query's hit averaged over the seeds, the
    queries resampled one resample at a time (numpy's generator, seed 0)."""
    summary = ablation.data
    resamples = summary["plan"]["eval"]["resamples"]

    def hits(arm: str, direction: str) -> np.ndarray:
        per_seed = []
        for seed in (0, 1):
            result = json.loads((world / "out" / "arms" / arm / f"seed-{seed}" / "result.json").read_text("utf-8"))
            per_seed.append(result["alphas"]["1"]["sets"]["prep-test"]["remove"][f"{direction}_hits"])
        return np.mean(np.asarray(per_seed, dtype=float), axis=0)

    for direction in ("t2i", "i2t"):
        diff = hits("dropmis", direction) - hits("baseline", direction)
        rng = np.random.default_rng(0)
        means = [diff[rng.integers(0, diff.size, size=diff.size)].mean() for _ in range(resamples)]
        lo, hi = np.quantile(means, [0.025, 0.975])
        (row,) = [
            m
            for m in summary["metrics"]
            if (m["arm"], m["metric"], m["variant"], m["direction"], m["alpha"])
            == ("dropmis", "retrieval", "remove", direction, 1.0)
        ]
        assert row["delta"]["gap"] == pytest.approx(100 * diff.mean(), abs=1e-4)
        assert row["delta"]["lo"] == pytest.approx(100 * lo, abs=1e-4)
        assert row["delta"]["hi"] == pytest.approx(100 * hi, abs=1e-4)
        assert row["r1_by_seed"] == [
            pytest.approx(
                100
                * np.mean(
                    json.loads((world / "out" / "arms" / "dropmis" / f"seed-{s}" / "result.json").read_text("utf-8"))[
                        "alphas"
                    ]["1"]["sets"]["prep-test"]["remove"][f"{direction}_hits"]
                ),
                abs=1e-3,
            )
            for s in (0, 1)
        ]


def test_zeroshot_delta_is_a_paired_bootstrap_over_the_same_images(ablation, world):
    """dropmis minus baseline zero-shot top-1 at alpha 1: each image's hit averaged over the seeds, resampled
    as the retrieval deltas are; its effect is what its interval says."""
    summary = ablation.data
    per_arm = {}
    for arm in ("baseline", "dropmis"):
        per_seed = []
        for seed in (0, 1):
            result = json.loads((world / "out" / "arms" / arm / f"seed-{seed}" / "result.json").read_text("utf-8"))
            per_seed.append(result["alphas"]["1"]["zeroshot"]["top1_hits"])
        per_arm[arm] = np.mean(np.asarray(per_seed, dtype=float), axis=0)
    diff = per_arm["dropmis"] - per_arm["baseline"]
    assert diff.size == 12
    rng = np.random.default_rng(0)
    means = [diff[rng.integers(0, diff.size, size=diff.size)].mean() for _ in range(300)]
    lo, hi = np.quantile(means, [0.025, 0.975])
    (row,) = [m for m in summary["metrics"] if (m["arm"], m["metric"], m["alpha"]) == ("dropmis", "zeroshot", 1.0)]
    assert row["delta"]["gap"] == pytest.approx(100 * diff.mean(), abs=1e-4)
    assert (row["delta"]["lo"], row["delta"]["hi"]) == (
        pytest.approx(100 * lo, abs=1e-4),
        pytest.approx(100 * hi, abs=1e-4),
    )
    assert (row["effect"] == "no measurable effect") == (row["delta"]["lo"] <= 0 <= row["delta"]["hi"])
    assert summary["queries"]["zeroshot:classes"] == {"i2t": 12}


def test_sentence_faults_count_masked_sentences_against_the_key(ablation, world):
    """Sentence-level figures: the key's swapped-in sentences among the rows an arm keeps, against the
    sentences it masks; the arms here mask none."""
    from caption_debias.ablate.report import sentence_faults

    key = json.loads((world / "world-train" / "planted.json").read_text("utf-8"))
    arms = {a["name"]: a for a in ablation.data["arms"]}
    kept = set(
        ablation.data and json.loads((world / "out" / "arms" / "dropmis" / "data.json").read_text("utf-8"))["keys"]
    )
    swapped = [e for e in key["hallucinated"] if e["key"] in kept]
    assert arms["dropmis"]["sentence_faults"] == {
        "hallucinated": len(swapped), "masked": 0, "found": 0, "recall": 0.0, "precision": None
    }  # fmt: skip
    clean = next(e for e in key["hallucinated"] if e["key"] in kept)
    masked = {e["key"]: [e["sentence"]] for e in swapped[:2]}
    masked[clean["key"]] = [*masked.get(clean["key"], []), 0]  # a summary sentence: not a planted one
    figures = sentence_faults(key, kept, masked)
    assert figures == {
        "hallucinated": len(swapped),
        "masked": 3,
        "found": 2,
        "recall": round(2 / len(swapped), 4),
        "precision": round(2 / 3, 4),
    }
    dropped = {"sharegpt4v/none": [1]}  # a row the arm does not train on is not counted
    assert sentence_faults(key, kept, dropped)["masked"] == 0


def test_killed_ablation_resumes_to_the_same_results(ablation, world):
    """A CLI run killed once its first unit's completion record is written; the rerun reuses that unit,
    redoes the others from scratch, and every unit's result is the uninterrupted run's, byte for byte."""
    import caption_debias as cd

    killed = plan_dict(world, [0], [1.0, 0.5])
    del killed["arms"]["neardup"]  # two arms are enough to kill one run between them
    plan = write_plan(world / "plan-kill.toml", killed)
    out = world / "out-kill"
    first = out / "arms" / "baseline" / "seed-0" / "done.json"
    # the CLI in a process forked from the warm server (tests/cli_process.py): a fresh one would spend
    # most of its CPU importing torch; the kill still ends a command process of its own
    server = cli_process._warm_server()
    files = {name: str(world / f"kill.{name}") for name in ("stdout", "stderr", "status")}
    for name in ("stdout", "stderr"):
        Path(files[name]).touch()
    pid = server.start({"argv": ["ablate", str(plan), "--out", str(out), "-q"], "cwd": str(world), **files})
    status = Path(files["status"])
    try:
        deadline = time.monotonic() + 240
        while not first.is_file() and not status.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert first.is_file(), f"no completion record ({Path(files['stderr']).read_text('utf-8')[-500:]})"
    finally:
        os.kill(pid, signal.SIGKILL)
        while not status.exists():  # reaped by the server: the command is gone before the rerun
            time.sleep(0.01)
    assert not (out / "ablation.json").exists()
    record = first.read_bytes()
    result = cd.ablate(plan, out)
    assert result.counts["reused_units"] >= 1
    assert first.read_bytes() == record
    for arm in ("baseline", "dropmis"):
        resumed = (out / "arms" / arm / "seed-0" / "result.json").read_bytes()
        assert resumed == (world / "out" / "arms" / arm / "seed-0" / "result.json").read_bytes(), arm


def test_interpolation_is_the_hand_computed_mix(ablation, world, tmp_path):
    """export --interpolate on a real tiny run: alpha 0 is its start (stretched 77 -> 248 by hand), 1 the
    run, 0.5 the mean, tensor by tensor."""
    import torch
    from safetensors.torch import load_file

    from caption_debias.model.export import export
    from caption_debias.model.load import load_model
    from caption_debias.model.stretch import knowledge_preserved_stretch, merged_state_dict

    run = world / "out" / "arms" / "baseline" / "seed-0" / "run"
    tuned = merged_state_dict(load_model(str(run)).model.state_dict())
    start = dict(load_model(str(world / "start")).model.state_dict())
    start["positional_embedding"] = knowledge_preserved_stretch(start["positional_embedding"].float(), 20)
    assert start["positional_embedding"].shape == tuned["positional_embedding"].shape
    for alpha in (0.0, 0.5, 1.0):
        written = load_file(
            str(export(str(run), tmp_path / f"a{alpha}", interpolate=alpha) / "open_clip_model.safetensors")
        )
        assert set(written) == set(tuned)
        for name, value in tuned.items():
            if not torch.is_floating_point(value):
                continue
            want = (1 - alpha) * start[name].float() + alpha * value.float()
            assert torch.allclose(written[name].float(), want, atol=1e-6), (alpha, name)
    config = json.loads((tmp_path / "a0.5" / "open_clip_config.json").read_text("utf-8"))
    assert config["caption_debias"]["interpolate"] == 0.5
    with pytest.raises(UserError, match="random weights"):
        export(str(world / "start"), tmp_path / "random", interpolate=0.5)


def test_a_plan_with_faults_is_one_line_each(world, tmp_path):
    from caption_debias.ablate.plan import read_plan

    plan = write_plan(
        tmp_path / "bad.toml",
        {
            "base": "nowhere",
            "arms": {"clip": {"min_clip_scor": 0.3}, "dup": {"near_duplicate_threshold": 2.0}},
            "train": {"model": "tiny", "steps": 0, "seed": 3},
            "eval": {"data": ["bogus=/x"], "variants": ["keep", "sideways"], "alphas": [0.5]},
        },
    )
    with pytest.raises(UserError) as caught:
        read_plan(plan)
    lines = str(caught.value).splitlines()
    assert lines[0].endswith("8 faults"), lines
    wanted = (
        "base: ",
        "arms.clip.min_clip_scor: unknown key (did you mean 'min_clip_score'?)",
        "arms.dup.near_duplicate_threshold: --near-duplicate-threshold must be in (0, 1]",
        "train.seed: set by ablate",
        "train.steps: ",
        "eval.data[0]: unknown benchmark 'bogus'",
        "eval.variants: unknown caption variant 'sideways'",
        "eval.alphas: an alpha below 1 mixes in the start's weights",
    )
    for text in wanted:
        assert any(line.strip().startswith(text) for line in lines[1:]), (text, lines)


def test_the_sharegpt4v_example_plan_names_only_known_options():
    """docs/examples/ablate-sharegpt4v.toml is read here without its data: every fault is a path."""
    from caption_debias.ablate.plan import read_plan

    example = Path(__file__).resolve().parents[1] / "docs" / "examples" / "ablate-sharegpt4v.toml"
    with pytest.raises(UserError) as caught:
        read_plan(example)
    for line in str(caught.value).splitlines()[1:]:
        assert "no such" in line, line


@pytest.mark.slow  # two small ablations, one of them on Ray
def test_arms_as_ray_tasks_give_the_local_results(world, tmp_path, ray_runtime):
    """--engine ray: each arm x seed unit a Ray task; every unit's result byte for byte the local engine's."""
    import caption_debias as cd

    small = plan_dict(world, [0], [1.0])
    del small["arms"]["neardup"]
    plan = write_plan(world / "plan-ray.toml", small)
    local = cd.ablate(plan, tmp_path / "local")
    on_ray = cd.ablate(plan, tmp_path / "ray", engine="ray", workers=2)
    assert on_ray.counts == local.counts
    for arm in ("baseline", "dropmis"):
        got = (tmp_path / "ray" / "arms" / arm / "seed-0" / "result.json").read_bytes()
        assert got == (tmp_path / "local" / "arms" / arm / "seed-0" / "result.json").read_bytes(), arm


def test_an_arms_files_are_relative_to_the_plan(world, tmp_path):
    """A keys file and a --decontaminate set named in an arm are read from the plan's folder, as every
    other path of a plan is."""
    from caption_debias.ablate.plan import read_plan

    plan = plan_dict(world, [0], [1.0])
    plan["arms"] = {
        "leaks": {"decontaminate": ["sharegpt4v-1k=world-test/sharegpt4v.json"]},
        "drop": {"exclude_keys": "drop.txt"},
    }
    arms = {a.name: a for a in read_plan(write_plan(world / "plan-paths.toml", plan)).arms}
    assert arms["leaks"].curate["decontaminate"] == [f"sharegpt4v-1k={world / 'world-test' / 'sharegpt4v.json'}"]
    assert arms["drop"].curate["exclude_keys"] == str(world / "drop.txt")
