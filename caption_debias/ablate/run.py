"""`ablate`: every arm of a plan curated, trained and evaluated alike, through the public API.

    OUT/arms/ARM/curated/           curate's output for an arm of curate options (cd.curate)
    OUT/arms/ARM/data.json          the arm's training folder, its rows, sentences and removed keys
    OUT/arms/ARM/seed-S/run/        the fine-tune (cd.train), the plan's recipe and step budget
    OUT/arms/ARM/seed-S/result.json recall per eval set and variant (with per-query hits), short text, zero-shot
    OUT/arms/ARM/seed-S/done.json   its completion record (runner.Task sidecar: a fingerprint of
                                    what it was made from), written last
    OUT/ablation.json, OUT/report.html

Each arm x seed is one task on the stage runner: a rerun reuses every unit whose record matches
(same data, recipe, seed, evaluation) and redoes the others from scratch, so a killed ablation
gives the results an uninterrupted one gives. The units run on the engines: one after another in
this process (--workers 1), side by side in processes (--workers N) or on Ray (--engine ray).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from caption_debias.ablate.options import AblateOptions
from caption_debias.ablate.plan import Arm, EvalSet, Plan, read_plan
from caption_debias.errors import UserError
from caption_debias.runner import StageFolder, Task, fingerprint, stage_run, write_json

RESULT = "ablation.json"
REPORT = "report.html"
SHORT_VARIANT = "first"  # without a short-text set: each held-out caption's opening sentence alone


@dataclass(frozen=True)
class Unit:
    """One arm x seed: what its task trains on and where it stands in the run."""

    arm: str
    seed: int
    data: str
    image_root: str | None
    number: int
    total: int


def unit_dir(out: Path, arm: str, seed: int) -> Path:
    return out / "arms" / arm / f"seed-{seed}"


def ablate(plan_path: str | Path, out: str | Path, options: AblateOptions) -> dict[str, Any]:
    """Run the plan into `out`; returns what ablation.json holds."""
    from caption_debias import engines
    from caption_debias.ablate.report import summarise, write_report
    from caption_debias.progress import Progress, say
    from caption_debias.runner import run_tasks

    options.validate()
    plan = read_plan(plan_path)
    out = Path(out)
    inputs = [plan.base, *(a.folder for a in plan.arms if a.folder), *(s.path for s in plan.eval_sets)]
    units = len(plan.arms) * len(plan.seeds)
    say(
        f"ablating {len(plan.arms)} arms x {len(plan.seeds)} seed(s), {plan.steps} steps each, on "
        f"{', '.join(s.label for s in plan.eval_sets)}",
        options.quiet,
    )
    folder = StageFolder(
        out,
        "ablate",
        state_dir=".ablate",
        owned=("arms", RESULT, REPORT),
        work=("arms/*/seed-*/done.json",),
        verb="ablated",
    )
    started = time.perf_counter()
    with stage_run(folder, options, inputs):  # checked, locked, the engine's runtime up
        folder.start({"command": "ablate"}, options.overwrite)  # each unit's own fingerprint decides its reuse
        timings: dict[str, Any] = {"curate_s": {}, "units": {}}
        with Progress(
            "ablate",
            "arms",
            units,
            quiet=options.quiet,
            interval=options.log_interval,
            rate=False,
            below="steps",
            heartbeat=True,
        ) as progress:
            arms_data = {}
            for arm in plan.arms:
                progress.update(extra=f"curating {arm.name}")
                t0 = time.perf_counter()
                arms_data[arm.name] = arm_data(plan, arm, out, options.quiet)
                timings["curate_s"][arm.name] = round(time.perf_counter() - t0, 3)
            tasks = []
            for i, (arm, seed) in enumerate((a, s) for a in plan.arms for s in plan.seeds):
                data = arms_data[arm.name]
                unit = Unit(arm.name, seed, data["folder"], data["image_root"], i + 1, units)
                what = {"data": data["fingerprint"], "seed": seed, "plan": _unit_shaping(plan)}
                sidecar = str(unit_dir(out, arm.name, seed).relative_to(out) / "done.json")
                tasks.append(Task(i, str(out), fingerprint(what), sidecar, work=unit))
            done = {"units": 0}

            def on_side(task: Task, side: dict[str, Any]) -> None:
                done["units"] += 1
                timings["units"][f"{task.work.arm}/seed-{task.work.seed}"] = {
                    k: side.get(k) for k in ("train_s", "eval_s", "total_s")
                }
                progress.update(
                    done["units"], extra=f"arm {done['units']} / {units} done ({task.work.arm}, seed {task.work.seed})"
                )

            engine = engines.mapper(SimpleNamespace(engine=options.engine, workers=options.workers, max_in_flight=1))
            reused = run_tasks(
                folder, tasks, partial(run_unit, plan=plan, device=options.device), engine, on_side, progress
            )
        results = {unit.work.arm + f"/seed-{unit.work.seed}": _read_result(out, unit.work) for unit in tasks}
        total = round(time.perf_counter() - started, 3)
        summary = summarise(plan, arms_data, results, reused=reused, timings={**timings, "total_s": total})
        write_json(summary, out / RESULT)
        write_report(summary, out / REPORT)
    return summary


def _unit_shaping(plan: Plan) -> dict[str, Any]:
    """What every unit's result depends on besides its data and seed: the recipe and the evaluation."""
    return {
        "train": plan.train,
        "steps": plan.steps,
        "eval_sets": [s.__dict__ for s in plan.eval_sets],
        "variants": plan.variants,
        "short": None if plan.short is None else plan.short.__dict__,
        "zeroshot": plan.zeroshot,
        "alphas": plan.alphas,
        "batch_size": plan.batch_size,
        **({"grounding": plan.grounding} if plan.grounding is not None else {}),  # older units' records stay valid
    }


def _read_result(out: Path, unit: Unit) -> dict[str, Any]:
    return json.loads((unit_dir(out, unit.arm, unit.seed) / "result.json").read_text("utf-8"))


# -- the arms' data --------------------------------------------------------------------------


def arm_data(plan: Plan, arm: Arm, out: Path, quiet: bool) -> dict[str, Any]:
    """The folder an arm trains on (curated here for an arm of curate options), with its counts."""
    from caption_debias.curate.api import curate as run_curate
    from caption_debias.curate.options import CurateOptions

    record = out / "arms" / arm.name / "data.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    if arm.kind == "base":
        folder, removed = plan.base, None
    elif arm.kind == "folder":
        folder, removed = str(arm.folder), None
    else:
        folder = str(out / "arms" / arm.name / "curated")
        shaping = {"base": _data_digest(plan.base), "curate": arm.curate, "image_root": plan.image_root}
        before = json.loads(record.read_text("utf-8")) if record.is_file() else {}
        options = CurateOptions(**arm.curate, image_root=plan.image_root, quiet=True)
        options.overwrite = before.get("shaping") != fingerprint(shaping)  # other options than last time: anew
        try:
            run_curate(plan.base, folder, options=options)
        except UserError as exc:
            raise UserError(f"arm {arm.name}: {exc}") from None
        removed = _removed_keys(Path(folder))
    counts = folder_counts(folder)
    data = {
        "arm": arm.name,
        "kind": arm.kind,
        "folder": folder,
        "image_root": plan.image_root,
        "fingerprint": _data_digest(folder),
        **counts,
        "removed_keys": removed,
    }
    if arm.kind == "curate":
        data["shaping"] = fingerprint(shaping)
    write_json(data, record)
    return data


def _data_digest(folder: str) -> str:
    """What a folder's rows are: its shards' digests and counts (a rewritten manifest's timestamps aside)."""
    manifest = json.loads((Path(folder) / "manifest.json").read_text("utf-8"))
    shards = [(s.get("path"), s.get("sha256"), s.get("rows")) for s in manifest.get("shards") or []]
    return fingerprint({"shards": shards, "counts": manifest.get("counts")})


def _removed_keys(folder: Path) -> dict[str, str]:
    """key -> reason of every row a curate run removed (removed.jsonl)."""
    path = folder / "removed.jsonl"
    if not path.is_file():
        return {}
    lines = (json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip())
    return {str(e["key"]): str(e.get("reason")) for e in lines}


def folder_counts(folder: str) -> dict[str, Any]:
    """Rows, sentences and sentences kept for training (a sentence curate marked not kept is not)."""
    from caption_debias.dataset import PreparedDataset

    table = PreparedDataset.open(folder).read(["key", "sentences", "sentence_keep"])
    sentences = table.column("sentences").to_pylist()
    keep = table.column("sentence_keep").to_pylist()
    keys = table.column("key").to_pylist()
    kept = sum(len(s) if k is None else sum(bool(x) for x in k) for s, k in zip(sentences, keep))
    masked = {key: [i for i, x in enumerate(k) if not x] for key, k in zip(keys, keep) if k is not None}
    return {
        "rows": table.num_rows,
        "sentences": sum(len(s) for s in sentences),
        "sentences_kept": kept,
        "keys": keys,
        "masked": {key: m for key, m in masked.items() if m},  # key -> indices of sentences not trained on
    }


# -- one arm x seed ---------------------------------------------------------------------------


def train_options(plan: Plan, unit: Unit, run: Path, device: str):
    """The TrainConfig of one unit: the plan's recipe, the same step budget for every arm."""
    from caption_debias.train.config import TrainConfig

    steps = plan.steps
    defaults = dict(
        warmup_steps=steps // 10,
        log_every=max(1, steps // 30),
        checkpoint_every=steps,
        keep_checkpoints=1,
        report_to="",
    )
    return TrainConfig(
        **{**defaults, **plan.train},
        data=unit.data,
        image_root=unit.image_root,
        out=str(run),
        seed=unit.seed,
        max_steps=steps,
        device=device,
        quiet=True,
    )


def run_unit(task: Task, *, plan: Plan, device: str) -> dict[str, Any]:
    """Train and evaluate one arm x seed from scratch, write result.json, then the completion record."""
    import caption_debias as cd
    from caption_debias.progress import active

    unit: Unit = task.work
    out = Path(task.out)
    folder = unit_dir(out, unit.arm, unit.seed)
    shutil.rmtree(folder, ignore_errors=True)  # an unfinished unit starts over: the same seed, the same result
    folder.mkdir(parents=True)
    shown = active()
    if shown is not None:
        shown.reset_below("steps")
        shown.update(extra=f"arm {unit.number} / {unit.total}: {unit.arm}, seed {unit.seed}, training")
    t0 = time.perf_counter()
    try:
        cd.train(options=train_options(plan, unit, folder / "run", device))
    except UserError as exc:
        raise UserError(f"arm {unit.arm} seed {unit.seed}: {exc}") from None
    train_s = time.perf_counter() - t0
    if shown is not None:
        shown.reset_below("encodings")
        shown.update(extra=f"arm {unit.number} / {unit.total}: {unit.arm}, seed {unit.seed}, evaluating")
    result = {"arm": unit.arm, "seed": unit.seed, "alphas": evaluate_run(plan, folder / "run", device)}
    eval_s = time.perf_counter() - t0 - train_s
    write_json(result, folder / "result.json")
    side = {
        "fingerprint": task.fingerprint,
        "path": str((folder / "result.json").relative_to(out)),
        "bytes": (folder / "result.json").stat().st_size,
        "train_s": round(train_s, 3),
        "eval_s": round(eval_s, 3),
        "total_s": round(time.perf_counter() - t0, 3),
    }
    write_json(side, task.sidecar_path)
    return side


def _load_set(spec: EvalSet, cache: dict[str, Any]):
    from caption_debias.evaluate.benchmarks import load_benchmark, load_prepared

    if spec.label not in cache:
        if spec.kind == "prepared":
            cache[spec.label] = load_prepared(Path(spec.path), spec.image_root)
        else:
            cache[spec.label] = load_benchmark(spec.kind, Path(spec.path), None, "fast")
    return cache[spec.label]


def _hits(ranks) -> list[int]:
    """Each query's hit at 1 (0 or 1): what the paired bootstrap resamples."""
    return [int(r) for r in (ranks < 1).tolist()]


def _retrieval(model, data, variants: list[str], batch_size: int) -> dict[str, Any]:
    from caption_debias.evaluate.retrieval import run_retrieval

    run = run_retrieval(model, data, variants, batch_size, want_i2t_ranks=True)
    return {
        v: {
            "t2i_r1": run.table[v]["t2i"]["r1"],
            "i2t_r1": run.table[v]["i2t"]["r1"],
            "t2i_hits": _hits(run.t2i_ranks[v]),
            "i2t_hits": _hits(run.i2t_ranks[v]),
        }
        for v in variants
    }


def evaluate_run(plan: Plan, run: Path, device: str) -> dict[str, Any]:
    """Per alpha: recall@1 both ways with per-query hits on every eval set and variant, the short-text
    set, zero-shot accuracy. An alpha below 1 is the run mixed with its start (WiSE-FT), not retrained."""
    from caption_debias.evaluate.suite import resolve_device
    from caption_debias.evaluate.zeroshot import zeroshot
    from caption_debias.model.interpolate import interpolated_model, run_start_spec, start_state
    from caption_debias.model.load import load_model

    where = resolve_device(device)
    tuned = load_model(str(run), device=where)
    cache: dict[str, Any] = {}
    start = None
    results: dict[str, Any] = {}
    for alpha in plan.alphas:
        if alpha == 1.0:
            model = tuned
        else:
            if start is None:  # the weights the run started from, stretched as train stretched them
                spec = run_start_spec(run)
                start = start_state(
                    str(spec["model"]),
                    spec["pretrained"],
                    str(spec["recipe"]),
                    int(spec["context_length"]),
                    int(spec["keep_positions"]),
                    where,
                )
            model = interpolated_model(tuned, start, alpha)
        entry: dict[str, Any] = {"sets": {}}
        for eval_set in plan.eval_sets:
            entry["sets"][eval_set.label] = _retrieval(
                model, _load_set(eval_set, cache), plan.variants, plan.batch_size
            )
        if plan.short is not None:
            short = _retrieval(model, _load_set(plan.short, cache), ["keep"], plan.batch_size)["keep"]
            entry["short"] = {"set": plan.short.label, "variant": "keep", **short}
        else:
            first = plan.eval_sets[0]
            short = _retrieval(model, _load_set(first, cache), [SHORT_VARIANT], plan.batch_size)[SHORT_VARIANT]
            entry["short"] = {"set": first.label, "variant": SHORT_VARIANT, **short}
        if plan.zeroshot is not None:
            entry["zeroshot"] = zeroshot(model, plan.zeroshot, batch_size=plan.batch_size, hits=True)
        if plan.grounding is not None:
            entry["grounding"] = grounding(plan.grounding, run, alpha, model)
        results[f"{alpha:g}"] = entry
        for data in cache.values():  # image features are cached per model object: each alpha is another
            data.image_features.pop(model.model, None)
    return results


def grounding(folder: str, run: Path, alpha: float, model: Any) -> dict[str, Any]:
    """The planted world's sentences scored by this unit's model (score's own sentence grounding, as the
    demo does): AUROC of low grounding for the swapped-in sentences against clean detail sentences
    (evaluate/planted.py). An alpha below 1 is the WiSE-FT mix, exported for score to load."""
    from caption_debias.evaluate import planted
    from caption_debias.image_source.roots import folder_root
    from caption_debias.model.export import export
    from caption_debias.score.options import ScoreOptions
    from caption_debias.score.run import score_folder

    where = run.parent / f"grounding-{alpha:g}"
    shutil.rmtree(where, ignore_errors=True)
    spec = str(run)
    if alpha != 1.0:
        spec = "local-dir:" + str(export(str(run), where / "model", interpolate=alpha))
    world = folder_root(folder)
    options = ScoreOptions(model=spec, quiet=True, overwrite=True, device=_score_device(model))
    score_folder([folder], str(where / "scored"), options)
    scored = planted.read_scored(where / "scored", ["summary_mask", "sentence_grounding"])
    figures = planted.hallucination(scored, planted.read_key(str(world)))
    shutil.rmtree(where, ignore_errors=True)  # the figures are what the unit keeps
    return figures


def _score_device(model: Any) -> str:
    """The device the unit's model sits on, as score's --device names it."""
    from caption_debias.evaluate.retrieval import model_device

    return "cuda" if str(model_device(model)).startswith("cuda") else "cpu"
