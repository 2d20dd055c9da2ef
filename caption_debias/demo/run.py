"""run_demo: every stage of the demo through the library's public API, on the shared progress.

synth (train + test worlds) -> prepare -> stats -> the start (the shipped `demo-start`; the `v1`
preset trains its own stage 1 instead) -> stretch to 248 -> `longclip` and `debias` fine-tunes
from that start with the same budget -> eval + probe on the test world -> grounding on a
planted world -> DIR/results.json and DIR/report.html (demo/report.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import platform
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from caption_debias.demo.config import ARMS, SHIPPED_START, STAGES, START, VARIANTS, DemoConfig, shipped_start
from caption_debias.demo.report import summarise, terminal_table, write_report
from caption_debias.errors import UserError
from caption_debias.progress import DEFAULT_INTERVAL, Progress


class DemoProgress:
    """The demo's stages on the shared Progress: a line as each stage starts and ends, the work
    inside a stage counted below the stage count (an arm's steps and loss with an ETA from the
    measured step time, eval's encodings), and a heartbeat line every interval while a stage
    runs. On a terminal: one bar, each finished stage a line above it. Nothing when quiet."""

    def __init__(self, quiet: bool, interval: float = DEFAULT_INTERVAL, **shown: Any) -> None:
        # the stage count has no rate or ETA: stages take from a second to minutes
        self.progress = Progress(
            "demo",
            "stages",
            len(STAGES),
            quiet=quiet,
            interval=interval,
            rate=False,
            below="steps",
            heartbeat=True,
            **shown,
        )
        self.timings: dict[str, float] = {}
        self.cpu: dict[str, float] = {}  # user + sys CPU seconds of this process, every thread

    def __enter__(self) -> "DemoProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.close()  # no last line: the last stage's end said it all
        self.progress.__exit__(*exc)

    @contextmanager
    def stage(self, name: str, what: str, unit: str = "steps") -> Iterator[None]:
        """A stage's block: `unit` is what the work below it counts (steps, encodings)."""
        progress = self.progress
        t0, cpu0 = progress.clock(), time.process_time()
        progress.reset_below(unit)
        progress.tick(extra=f"started {name}: {what}")
        progress.update(extra=f"running {name}")
        yield
        seconds = progress.clock() - t0
        self.timings[name] = round(seconds, 2)
        self.cpu[name] = round(time.process_time() - cpu0, 2)
        progress.tick(len(self.timings), extra=f"done {name} ({seconds:.1f} s)")
        if progress.mode == "bar":
            progress.note(f"done {name:<9} {what} ({seconds:.1f} s)")


# Training options of every demo run (and of the experiments behind docs/demo.md): a small
# world decoded once into memory, fp32 on the CPU, no reporters; quiet, so a run's steps and
# loss show in the demo's own line.
CPU_RUN = dict(cache_images=True, precision="fp32", report_to="", quiet=True, workers=0)


def train_config(**wanted: Any):
    """A TrainConfig from the demo's settings; fails loudly if the train API lacks a field."""
    from caption_debias.train.config import TrainConfig

    names = {f.name for f in dataclasses.fields(TrainConfig)}
    missing = sorted(k for k in wanted if k not in names)
    if missing:
        raise RuntimeError(f"TrainConfig has no field(s) {missing}: the demo and the train API disagree")
    return TrainConfig(**wanted)


def _read_metrics(run: Path) -> list[dict[str, Any]]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


class _NoWeightsNotice(logging.Filter):
    """open_clip warns "no weights" for every random-init or run-folder load; the demo means it."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not ("No pretrained weights loaded" in msg or "no CLIP weights found" in msg)


def run_demo(
    cfg: DemoConfig,
    quiet: bool = False,
    on_table: Callable[[str], None] | None = None,
    log_interval: float = DEFAULT_INTERVAL,
) -> dict[str, Any]:
    """Run every stage into cfg.out; returns the results dict also written to results.json.

    Progress: a rich display on a terminal, else plain lines every `log_interval` seconds."""
    from caption_debias.locking import folder_lock

    out = Path(cfg.out)
    if cfg.start not in (SHIPPED_START, "train"):
        raise UserError(f"demo start {cfg.start!r}: {SHIPPED_START} or train")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    notice = _NoWeightsNotice()
    logging.getLogger().addFilter(notice)
    try:
        with folder_lock(out, "demo"):  # one demo per folder; its stages lock their own subfolders too
            with DemoProgress(quiet, log_interval) as progress:
                results = _run_stages(cfg, out, progress)
    finally:
        logging.getLogger().removeFilter(notice)
    table = terminal_table(results)
    if on_table is not None:
        on_table(table)
    return results


def _run_stages(cfg: DemoConfig, out: Path, progress: DemoProgress) -> dict[str, Any]:
    """The demo's linear script: each stage in order, its results gathered."""
    for sub in ("world", "prepared", "runs", "probe", "planted"):  # the demo's own folders: a rerun starts clean
        shutil.rmtree(out / sub, ignore_errors=True)
    worlds = {split: out / "world" / split for split in ("train", "test")}
    prepared = {split: out / "prepared" / split for split in ("train", "test")}
    runs = {name: out / "runs" / name for name in (START, *ARMS)}
    started = time.perf_counter()
    results: dict[str, Any] = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}
    }
    _data_stages(cfg, worlds, prepared, progress, results)
    common = dict(
        data=str(prepared["train"]),
        image_root=str(worlds["train"]),
        batch_size=cfg.batch_size,
        seed=cfg.seed,
        group_size=cfg.group_size,
        **CPU_RUN,
        **cfg.extra_train,
    )
    start = results["start"] = _start_stage(cfg, runs[START], common, progress)

    with progress.stage("stretch", f"positions 77 -> {cfg.context_length} (knowledge-preserved)"):
        results["stretch"] = _check_stretch(start, cfg.context_length)

    for arm in ARMS:
        with progress.stage(arm, f"`{arm}` fine-tune from the start, {cfg.finetune_steps} steps"):
            train_library(
                recipe=arm,
                model=start,
                out=str(runs[arm]),
                context_length=cfg.context_length,
                group_key="group" if cfg.finetune_groups else None,
                lambda_short=cfg.lambda_s,
                **budget(cfg.finetune_steps, cfg.finetune_lr),
                **common,
            )

    models = {START: start, **{a: str(runs[a]) for a in ARMS}}
    with progress.stage("evaluate", f"retrieval {', '.join(VARIANTS)} + probe on the test world", "encodings"):
        results["eval"], ranks, results["probe"] = _evaluate(
            cfg, models, prepared["test"], worlds["test"], out / "probe"
        )

    what = f"{cfg.test_images} planted scenes scored by each model (sentence grounding)"
    with progress.stage("grounding", what, "encodings"):
        results["grounding"] = _grounding(cfg, models, out / "planted")

    with progress.stage("report", "results.json, report.html"):
        results["curves"] = {name: _read_metrics(run) for name, run in runs.items()}
        results["summary"] = summarise(results["eval"], ranks, cfg.bootstrap_resamples, cfg.seed)
        results["timings_s"] = progress.timings
        results["cpu_s"] = progress.cpu
        results["total_s"] = round(time.perf_counter() - started, 1)
        results["machine"] = {"python": platform.python_version(), "platform": platform.platform()}
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str), "utf-8")
        write_report(results, out / "report.html", out / "probe")
    return results


def _data_stages(
    cfg: DemoConfig, worlds: dict[str, Path], prepared: dict[str, Path], progress: DemoProgress, results: dict
) -> None:
    """synth, prepare and stats of the train and test worlds."""
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.stats.compute import compute_stats
    from caption_debias.synth.world import write_world

    with progress.stage("synth", f"{cfg.train_images} train + {cfg.test_images} test scenes ({cfg.world})"):
        results["worlds"] = {
            split: write_world(
                worlds[split],
                n,
                cfg.seed,
                image_size=cfg.image_size,
                split=split,
                group_size=cfg.group_size,
                overwrite=True,
                world=cfg.world,
            )
            for split, n in (("train", cfg.train_images), ("test", cfg.test_images))
        }

    with progress.stage("prepare", "sentences, summaries, tokens -> Parquet"):
        results["prepare"] = {}
        for split in ("train", "test"):
            options = PrepareOptions(
                format="sharegpt4v",
                image_root=str(worlds[split]),
                split=split,
                overwrite=True,
                quiet=True,
                workers=cfg.workers,
            )
            manifest = prepare([worlds[split] / "sharegpt4v.json"], prepared[split], options)
            results["prepare"][split] = {k: manifest.get(k) for k in ("counts", "rows", "rejected") if k in manifest}

    with progress.stage("stats", "caption structure of both worlds"):
        results["stats"] = compute_stats([prepared["train"], prepared["test"]])


def _start_stage(cfg: DemoConfig, run: Path, common: dict[str, Any], progress: DemoProgress) -> str:
    """The model both arms start from: the shipped demo-start, or (v1) a stage-1 run trained here."""
    if cfg.start == SHIPPED_START:
        with progress.stage("start", "the shipped demo-start (short captions at 77)"):
            return f"local-dir:{shipped_start()}"
    with progress.stage("start", f"`short` pretraining of {cfg.model} at 77, {cfg.stage1_steps} steps"):
        return str(
            train_library(
                recipe="short",
                model=cfg.model,
                out=str(run),
                context_length=77,
                group_key="group" if cfg.stage1_groups else None,
                **budget(cfg.stage1_steps, cfg.stage1_lr),
                **common,
            )
        )


def budget(steps: int, lr: float) -> dict[str, Any]:
    """Steps, peak lr, a 10% warm-up (the paper's 200 steps would be most of a demo run), logging."""
    return dict(
        max_steps=steps,
        lr=lr,
        warmup_steps=steps // 10,
        log_every=max(1, steps // 30),
        checkpoint_every=steps,
        keep_checkpoints=1,
    )


def train_library(**wanted: Any) -> Path:
    from caption_debias.train.loop import train

    return Path(train(train_config(**wanted).validate()))


def _check_stretch(start: str, context_length: int) -> dict[str, Any]:
    """Stretch the start's positions as the fine-tunes do, and check the kept head."""
    import torch

    from caption_debias.model.load import load_model
    from caption_debias.model.stretch import merged_state_dict, stretch_positional_embedding

    loaded = load_model(start)
    before = loaded.model.positional_embedding.detach().clone()
    stretch_positional_embedding(loaded.model, context_length)
    after = merged_state_dict(loaded.model.state_dict())["positional_embedding"]
    keep = 20
    return {
        "from": int(before.shape[0]),
        "to": int(after.shape[0]),
        "head_kept": bool(torch.equal(after[:keep], before[:keep])),
    }


def _evaluate(cfg: DemoConfig, models: dict[str, str], prepared: Path, image_root: Path, probe_dir: Path):
    """Recall tables and per-query t2i ranks of every model, then the probe (same image features)."""
    from caption_debias.evaluate.probe import probe
    from caption_debias.evaluate.retrieval import as_data, run_retrieval
    from caption_debias.model.load import load_model

    data = as_data(prepared, image_root)
    loaded = {name: load_model(spec) for name, spec in models.items()}
    runs = {name: run_retrieval(m, data, VARIANTS, cfg.eval_batch_size) for name, m in loaded.items()}
    scores = {name: run.table for name, run in runs.items()}
    ranks = {name: run.t2i_ranks for name, run in runs.items()}
    return scores, ranks, probe(loaded, data, probe_dir, batch_size=cfg.eval_batch_size)


GROUNDING_EXAMPLES = 4  # hallucinated captions shown in the report, each as every model grounds it


def _grounding(cfg: DemoConfig, models: dict[str, str], folder: Path) -> dict[str, Any]:
    """A held-out world with planted faults (synth --plant, split `planted`), scored by every
    model; per model the AUROC of low sentence grounding for the swapped-in sentences against
    the clean detail sentences, and a few hallucinated captions with every sentence's grounding."""
    from caption_debias.evaluate import planted
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.score.options import ScoreOptions
    from caption_debias.score.run import score_folder
    from caption_debias.synth.plant import PlantSpec
    from caption_debias.synth.world import write_world

    world, prepared = folder / "world", folder / "prepared"
    write_world(
        world,
        cfg.test_images,
        cfg.seed,
        image_size=cfg.image_size,
        split="planted",
        group_size=cfg.group_size,
        overwrite=True,
        world=cfg.world,
        plant=PlantSpec(),
    )
    options = PrepareOptions(
        format="sharegpt4v", image_root=str(world), split="planted", overwrite=True, quiet=True, workers=cfg.workers
    )
    prepare([world / "sharegpt4v.json"], prepared, options)
    key = planted.read_key(world)
    shown = key["hallucinated"][:GROUNDING_EXAMPLES]
    examples = [{"key": e["key"], "sentence": e["sentence"], "grounding": {}} for e in shown]
    result: dict[str, Any] = {
        "rows": cfg.test_images,
        "planted": {k: len(key[k]) for k in ("hallucinated", "mismatched", "redrawn")},
        "auroc": {},
        "counts": {},
    }
    for name, spec in models.items():
        score_options = ScoreOptions(
            model=spec, image_root=str(world), overwrite=True, quiet=True, batch_size=cfg.eval_batch_size
        )
        score_folder([str(prepared)], str(folder / "scored" / name), score_options)
        scored = planted.read_scored(
            folder / "scored" / name, ["summary_mask", "sentence_grounding", "sentences", "image"]
        )
        figures = planted.hallucination(scored, key)
        result["auroc"][name] = figures["auroc"]
        result["counts"][name] = {k: v for k, v in figures.items() if k != "auroc"}
        rows = {k: i for i, k in enumerate(scored["key"])}
        for example in examples:
            i = rows[example["key"]]
            example["sentences"], example["image"] = scored["sentences"][i], scored["image"][i]
            example["grounding"][name] = [
                None if g is None or g != g else round(g, 3) for g in scored["sentence_grounding"][i]
            ]
    result["examples"] = examples
    return result
