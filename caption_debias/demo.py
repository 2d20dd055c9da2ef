"""`caption-debias demo`: the whole method on the built-in synthetic world, minutes on a CPU.

synth (train + test worlds) -> prepare -> stats -> the start (the shipped `demo-start`, a
small model with CLIP's habits; the `v1` preset trains its own stage 1 instead) -> stretch to
248 -> `longclip` and `debias` fine-tunes from that start with the same budget -> eval + probe
on the test world, each gap between the arms with a paired bootstrap interval ->
DIR/results.json, DIR/report.html, a terminal table. Every stage calls the library's public
API; this module only wires them and writes the report.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import platform
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from caption_debias import html_report
from caption_debias.errors import UserError
from caption_debias.options import ProgressOptions, option
from caption_debias.progress import DEFAULT_INTERVAL, PlainProgress, on_terminal

ARMS = ("longclip", "debias")
VARIANTS = ("keep", "remove", "move", "filler:3")
GAP_VARIANTS = ("keep", "remove", "move")  # debias - longclip t2i R@1, each with an interval
STAGES = ("synth", "prepare", "stats", "start", "stretch", "longclip", "debias", "evaluate", "grounding", "report")
START = "start"  # the label of the shared start in results, tables and plots
SHIPPED_START = "shipped"
# The target on every seed (docs/demo.md): debias remove at least 3 points above longclip's,
# debias keep at least longclip keep minus 1.
REMOVE_GAP_MIN, KEEP_GAP_MIN = 3.0, -1.0


@dataclass
class DemoConfig:
    """Sizes and budgets of one demo run (`preset` picks them; tests shrink them further)."""

    out: Path
    seed: int = 0
    world: str = "objects"  # synth.world.WORLDS
    # "shipped": both arms start from the package's demo-start (experiments/demo_start.py);
    # "train": a stage-1 `short` run of `model` inside the demo (the v1 preset).
    start: str = SHIPPED_START
    model: str = "demo-small"
    image_size: int = 64
    train_images: int = 2000
    test_images: int = 800
    group_size: int = 4
    batch_size: int = 64
    stage1_steps: int = 0
    finetune_steps: int = 300
    stage1_lr: float = 5e-4
    finetune_lr: float = 1e-3
    # Fine-tune batches are random, as on a real dump, where the summary alone separates a
    # batch: that is how the shortcut is learned. The v1 stage 1 trained on whole groups.
    stage1_groups: bool = True
    finetune_groups: bool = False
    lambda_s: float = 0.1
    context_length: int = 248
    eval_batch_size: int = 256
    bootstrap_resamples: int = 2000
    workers: int = 1
    preset: str = "full"
    extra_train: dict[str, Any] = field(default_factory=dict)
    changed: dict[str, str] = field(default_factory=dict)  # a tuning run's fields changed from its preset


PRESETS = ("full", "quick", "v1")


def preset(name: str, out: Path, seed: int = 0) -> DemoConfig:
    """`full`: the measured demo (docs/demo.md); `quick`: the same pipeline on small worlds and
    budgets, a smoke run of every stage, not a result; `v1`: the first demo (the `layouts`
    world, its own stage 1), so its documented table can be reproduced."""
    if name == "full":
        return DemoConfig(out=Path(out), seed=seed, preset=name)
    if name == "quick":
        return DemoConfig(
            out=Path(out), seed=seed, preset=name, train_images=400, test_images=200, finetune_steps=30, batch_size=32
        )
    if name == "v1":
        return DemoConfig(
            out=Path(out),
            seed=seed,
            preset=name,
            world="layouts",
            start="train",
            stage1_steps=600,
            finetune_steps=300,
            finetune_lr=2e-3,
        )
    raise UserError(f"unknown demo preset {name!r} ({', '.join(PRESETS)})")


@dataclass
class DemoOptions(ProgressOptions):
    """Every option of `caption-debias demo` (the CLI reads defaults and --help from here);
    `config(out)` is the run's DemoConfig, from its preset. --quiet still writes results.json and report.html."""

    seed: int = option(0, "Seed of the worlds and of every training run.")
    quick: bool = option(
        False, "Smaller worlds and budgets (same as --preset quick): a smoke run of every stage, not a result."
    )
    preset: str = option(
        "full",
        "full (the measured demo) | quick | v1 (the first demo: layouts world, its own stage 1; docs/demo.md).",
        choices=PRESETS,
    )

    def check(self) -> None:
        if self.quick and self.preset not in ("full", "quick"):
            raise UserError(f"--quick is --preset quick; it cannot go with --preset {self.preset}")

    def config(self, out: Path) -> DemoConfig:
        self.validate()
        return preset("quick" if self.quick else self.preset, out, self.seed)


def shipped_start() -> Path:
    """The package's demo-start folder (an open_clip local-dir: export, fp16 weights)."""
    from importlib import resources

    folder = Path(str(resources.files("caption_debias").joinpath("assets", "demo-start")))
    if not (folder / "open_clip_config.json").is_file():
        raise UserError(f"{folder}: the shipped demo start is missing (reinstall caption-debias)")
    return folder


class _Progress:
    """Stages on a rich display on a terminal; without one (a pipe, a SLURM log) a plain line as each
    stage starts and ends, and one every `interval` seconds while it runs; nothing when quiet."""

    def __init__(self, quiet: bool, interval: float = DEFAULT_INTERVAL) -> None:
        self.quiet, self.interval = quiet, interval
        self.timings: dict[str, float] = {}
        self._progress = None
        self.plain: PlainProgress | None = None
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self.lock = threading.Lock()  # the heartbeat thread and the stages print through one PlainProgress
        self.current = ""

    def __enter__(self) -> "_Progress":
        if self.quiet:
            return self
        if not on_terminal():
            self.plain = PlainProgress("demo", "stages", total=len(STAGES), interval=self.interval)
            # a stage may run for minutes: a thread prints the heartbeat the stages cannot
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
            return self
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description:<48}"), BarColumn(), TimeElapsedColumn()
        )
        self._progress.__enter__()
        self._overall = self._progress.add_task("demo", total=len(STAGES))
        return self

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            with self.lock:
                self.plain.update(len(self.timings), extra=f"running {self.current}")

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def stage(self, name: str, what: str) -> "_Stage":
        return _Stage(self, name, what)


class _Stage:
    def __init__(self, owner: _Progress, name: str, what: str) -> None:
        self.owner, self.name, self.what = owner, name, what

    def __enter__(self) -> "_Stage":
        self.t0 = time.perf_counter()
        owner = self.owner
        owner.current = f"{self.name}: {self.what}"
        if owner._progress is not None:
            owner._progress.update(owner._overall, description=owner.current)
        if owner.plain is not None:
            with owner.lock:
                owner.plain.finish(len(owner.timings), extra=f"started {owner.current}")
        return self

    def __exit__(self, exc_type, *exc) -> None:
        seconds = time.perf_counter() - self.t0
        owner = self.owner
        owner.timings[self.name] = round(seconds, 2)
        if exc_type is not None:
            return
        if owner._progress is not None:
            owner._progress.console.print(f"[green]done[/] {self.name:<9} {self.what} ({seconds:.1f} s)")
            owner._progress.advance(owner._overall)
        if owner.plain is not None:
            with owner.lock:
                owner.plain.finish(len(owner.timings), extra=f"done {self.name} ({seconds:.1f} s)")


# Training options of every demo run (and of the experiments behind docs/demo.md): a small
# world decoded once into memory, fp32 on the CPU, no reporters or progress bars.
CPU_RUN = dict(cache_images=True, precision="fp32", report_to="", quiet=True, workers=0)


def _train_config(**wanted: Any):
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
    notice = _NoWeightsNotice()
    logging.getLogger().addFilter(notice)
    try:
        return _run_demo(cfg, quiet, on_table, log_interval)
    finally:
        logging.getLogger().removeFilter(notice)


def _run_demo(
    cfg: DemoConfig, quiet: bool, on_table: Callable[[str], None] | None, log_interval: float
) -> dict[str, Any]:
    from caption_debias.locking import folder_lock

    out = Path(cfg.out)
    if cfg.start not in (SHIPPED_START, "train"):
        raise UserError(f"demo start {cfg.start!r}: {SHIPPED_START} or train")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    with folder_lock(out, "demo"):  # one demo per folder; its stages lock their own subfolders too
        return _run_demo_locked(cfg, out, quiet, on_table, log_interval)


def _run_demo_locked(
    cfg: DemoConfig, out: Path, quiet: bool, on_table: Callable[[str], None] | None, log_interval: float
) -> dict[str, Any]:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.stats.compute import compute_stats
    from caption_debias.synth.world import write_world

    for sub in ("world", "prepared", "runs", "probe", "planted"):  # the demo's own folders: a rerun starts clean
        shutil.rmtree(out / sub, ignore_errors=True)
    worlds = {split: out / "world" / split for split in ("train", "test")}
    prepared = {split: out / "prepared" / split for split in ("train", "test")}
    runs = {name: out / "runs" / name for name in (START, *ARMS)}
    started = time.perf_counter()
    results: dict[str, Any] = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}
    }

    with _Progress(quiet, log_interval) as progress:
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
                results["prepare"][split] = {
                    k: manifest.get(k) for k in ("counts", "rows", "rejected") if k in manifest
                }

        with progress.stage("stats", "caption structure of both worlds"):
            results["stats"] = compute_stats([prepared["train"], prepared["test"]])

        common = dict(
            data=str(prepared["train"]),
            image_root=str(worlds["train"]),
            batch_size=cfg.batch_size,
            seed=cfg.seed,
            group_size=cfg.group_size,
            **CPU_RUN,
            **cfg.extra_train,
        )
        if cfg.start == SHIPPED_START:
            with progress.stage("start", "the shipped demo-start (short captions at 77)"):
                start = f"local-dir:{shipped_start()}"
        else:
            with progress.stage("start", f"`short` pretraining of {cfg.model} at 77, {cfg.stage1_steps} steps"):
                start = str(
                    _train_library(
                        recipe="short",
                        model=cfg.model,
                        out=str(runs[START]),
                        context_length=77,
                        group_key="group" if cfg.stage1_groups else None,
                        **_budget(cfg.stage1_steps, cfg.stage1_lr),
                        **common,
                    )
                )
        results["start"] = start

        with progress.stage("stretch", f"positions 77 -> {cfg.context_length} (knowledge-preserved)"):
            results["stretch"] = _check_stretch(start, cfg.context_length)

        for arm in ARMS:
            with progress.stage(arm, f"`{arm}` fine-tune from the start, {cfg.finetune_steps} steps"):
                _train_library(
                    recipe=arm,
                    model=start,
                    out=str(runs[arm]),
                    context_length=cfg.context_length,
                    group_key="group" if cfg.finetune_groups else None,
                    lambda_short=cfg.lambda_s,
                    **_budget(cfg.finetune_steps, cfg.finetune_lr),
                    **common,
                )

        with progress.stage("evaluate", f"retrieval {', '.join(VARIANTS)} + probe on the test world"):
            models = {START: start, **{a: str(runs[a]) for a in ARMS}}
            results["eval"], ranks, results["probe"] = _evaluate(
                cfg, models, prepared["test"], worlds["test"], out / "probe"
            )

        with progress.stage("grounding", f"{cfg.test_images} planted scenes scored by each model (sentence grounding)"):
            results["grounding"] = _grounding(cfg, models, out / "planted")

        with progress.stage("report", "results.json, report.html"):
            results["curves"] = {name: _read_metrics(run) for name, run in runs.items()}
            results["summary"] = summarise(results["eval"], ranks, cfg.bootstrap_resamples, cfg.seed)
            results["timings_s"] = progress.timings
            results["total_s"] = round(time.perf_counter() - started, 1)
            results["machine"] = {"python": platform.python_version(), "platform": platform.platform()}
            (out / "results.json").write_text(json.dumps(results, indent=2, default=str), "utf-8")
            write_report(results, out / "report.html", out / "probe")

    table = terminal_table(results)
    if on_table is not None:
        on_table(table)
    return results


def _budget(steps: int, lr: float) -> dict[str, Any]:
    """Steps, peak lr, a 10% warm-up (the paper's 200 steps would be most of a demo run), logging."""
    return dict(
        max_steps=steps,
        lr=lr,
        warmup_steps=steps // 10,
        log_every=max(1, steps // 30),
        checkpoint_every=steps,
        keep_checkpoints=1,
    )


def _train_library(**wanted: Any) -> Path:
    from caption_debias.train.loop import train

    return Path(train(_train_config(**wanted).validate()))


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


def summarise(
    scores: dict[str, Any], ranks: dict[str, dict[str, Any]], resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """t2i R@1 per model and variant; debias - longclip on keep, remove and move, each with a
    paired bootstrap 95% interval over the test queries; this seed's part of the target."""
    from caption_debias.evaluate.metrics import paired_bootstrap

    def r1(model: str, variant: str) -> float:
        return float(scores[model][variant]["t2i"]["r1"])

    gaps = {}
    for variant in GAP_VARIANTS:
        hits = {arm: (ranks[arm][variant] < 1).tolist() for arm in ARMS}
        gap = paired_bootstrap(hits["longclip"], hits["debias"], resamples=resamples, seed=seed)
        gaps[variant] = {k: round(v, 2) for k, v in gap.items()}
    checks = {
        f"remove gap >= {REMOVE_GAP_MIN:g}": gaps["remove"]["gap"] >= REMOVE_GAP_MIN,
        f"keep gap >= {KEEP_GAP_MIN:g}": gaps["keep"]["gap"] >= KEEP_GAP_MIN,
    }
    # The target says debias reads past the summary where longclip does not: a remove gap whose
    # interval reaches zero or below cannot say that either way (a small world, a short run).
    judged = gaps["remove"]["lo"] > 0
    return {
        "t2i_r1": {m: {v: r1(m, v) for v in VARIANTS} for m in scores},
        "remove_drop": {arm: round(r1(arm, "keep") - r1(arm, "remove"), 2) for arm in ARMS},
        "gaps": gaps,  # debias - longclip, t2i R@1 points
        "checks": checks,
        "judged": judged,
        "target_met": judged and all(checks.values()),
        "queries": len(ranks[ARMS[0]][GAP_VARIANTS[0]]),
    }


def _gap_text(gap: dict[str, float]) -> str:
    return f"{gap['gap']:+.1f} [{gap['lo']:+.1f}, {gap['hi']:+.1f}]"


def gap_rows(summary: dict[str, Any]) -> list[list[str]]:
    """[variant, debias - longclip with its interval] rows, for the terminal and the report."""
    return [[v, _gap_text(summary["gaps"][v])] for v in GAP_VARIANTS]


def verdict(summary: dict[str, Any], preset_name: str = "full") -> str:
    """This seed's part of the target, or why it cannot be judged from this run."""
    checks = "; ".join(f"{name}: {'yes' if ok else 'no'}" for name, ok in summary["checks"].items())
    if not summary.get("judged", True):  # results written before `judged` existed were judged
        remove = summary["gaps"]["remove"]
        why = f"the remove gap's interval [{remove['lo']:+.1f}, {remove['hi']:+.1f}] reaches zero"
        if preset_name == "quick":
            why += "; the quick preset is a smoke run, too small to judge the target (run the full preset)"
        return f"{checks} -> target on this seed not judged: {why}"
    return f"{checks} -> target on this seed {'met' if summary['target_met'] else 'not met'}"


def terminal_table(results: dict[str, Any]) -> str:
    """The recall table as text (rich renders it; plain text when captured)."""
    from rich.console import Console
    from rich.table import Table

    summary = results["summary"]
    table = Table(title="text-to-image R@1 on the test world (hard-negative groups in the gallery)")
    table.add_column("model")
    for v in VARIANTS:
        table.add_column(v, justify="right")
    table.add_column("keep - remove", justify="right")
    for model, row in summary["t2i_r1"].items():
        drop = row["keep"] - row["remove"]
        table.add_row(model, *(f"{row[v]:.1f}" for v in VARIANTS), f"{drop:.1f}")
    gaps = Table(title="debias - longclip, t2i R@1 points [paired bootstrap 95% interval]")
    gaps.add_column("captions")
    gaps.add_column("gap", justify="right")
    for row in gap_rows(summary):
        gaps.add_row(*row)
    buf = io.StringIO()
    console = Console(file=buf, width=100, color_system=None)
    console.print(table)
    console.print(gaps)
    console.print(f"{verdict(summary, results['config']['preset'])}; total {results['total_s']:.0f} s")
    return buf.getvalue()


def _loss_curves_png(curves: dict[str, list[dict[str, Any]]]) -> bytes:
    """Each arm's long-caption loss (the one term both recipes share), labelled at its end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from caption_debias.plotting import legend_outside

    fig, ax = plt.subplots(figsize=(8, 3.4), dpi=100)
    for name in ARMS:
        points = [(r["step"], r["loss_long"]) for r in curves.get(name, []) if r.get("loss_long") is not None]
        if points:
            ax.plot(*zip(*points), label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("long-caption loss")
    ax.grid(True, alpha=0.3)
    legend_outside(ax)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _grounding_html(grounding: dict[str, Any] | None, world: Path) -> str:
    """The grounding section: AUROC per model, then a few hallucinated captions, each sentence
    shaded by every model's grounding, the swapped-in sentence outlined."""
    import base64

    if not grounding:
        return ""
    esc = html_report.esc
    rows = [
        [name, f"{auroc:.3f}", grounding["counts"][name]["hallucinated"], grounding["counts"][name]["clean_detail"]]
        for name, auroc in grounding["auroc"].items()
    ]
    planted = grounding["planted"]
    blocks = []
    for example in grounding["examples"]:
        png = (world / example["image"]).read_bytes() if (world / example["image"]).is_file() else b""
        thumb = (
            f'<img alt="{esc(example["key"])}" style="width:128px;image-rendering:pixelated;margin:0" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
        )
        lines = "".join(
            f"<p style='margin:4px 0'><b>{esc(name)}</b>: "
            f"{html_report.shaded_sentences(example['sentences'], scores, marked=example['sentence'])}</p>"
            for name, scores in example["grounding"].items()
        )
        blocks.append(
            f"<div style='display:flex;gap:14px;align-items:flex-start;background:#fff;border:1px solid #e3e6ea;"
            f"border-radius:10px;padding:10px;margin:0 0 10px'>{thumb}<div><code>{esc(example['key'])}</code>"
            f"{lines}</div></div>"
        )
    return f"""<h2>Sentence grounding on planted hallucinations</h2>
<p>A held-out world of {grounding["rows"]} scenes (<code>synth --plant</code>, its own random stream): {planted["hallucinated"]}
captions have one detail sentence swapped for a detail sentence of a scene of another group (it names objects
the picture lacks), {planted["mismatched"]} rows carry another image's caption, {planted["redrawn"]} are re-drawn copies.
Each model scores it (<code>caption-debias score</code>); AUROC of low <code>sentence_grounding</code> for the
swapped sentences against the clean detail sentences (0.5 is chance, 1 finds every one).</p>
{html_report.table(["model", "AUROC", "swapped sentences", "clean detail sentences"], rows)}
<h3>Hallucinated captions, each sentence shaded by its grounding</h3>
{html_report.note("Green: the sentence fits its own picture better than other pictures; red: worse (grounding is the z-score of its similarity to its image against a seeded sample of other images; full colour at +-3, the value in each tooltip). The swapped-in sentence is outlined.")}
{"".join(blocks)}"""


def write_report(results: dict[str, Any], path: Path, probe_dir: Path) -> None:
    """One self-contained HTML page: the recall table and gaps, loss curves, the probe's plots,
    the dataset statistics as the `stats` report shows them."""
    from caption_debias.stats.report import html_body, report_figures

    summary = results["summary"]
    cfg = results["config"]
    rows = [
        [m] + [f"{r[v]:.1f}" for v in VARIANTS] + [f"{r['keep'] - r['remove']:.1f}"]
        for m, r in summary["t2i_r1"].items()
    ]
    titles = {"attention": "Attention by token position", "filler": "Filler prefix probe"}
    plots = "".join(
        f"<h3>{html_report.esc(titles.get(p.stem, p.stem))}</h3>{html_report.figure(p.read_bytes(), p.stem, wide=True)}"
        for p in sorted(probe_dir.glob("*.png"))
    )
    loss_curves = html_report.figure(_loss_curves_png(results["curves"]), "long-caption loss", wide=True)
    stats = results["stats"]
    # the stats report's own sections, one heading level down inside this page
    sections = html_body(stats, report_figures(stats), title="").replace("<h2>", "<h3>").replace("</h2>", "</h3>")
    stats_html = f"<h2>Dataset statistics</h2>{sections}"
    grounding_html = _grounding_html(results.get("grounding"), path.parent / "planted" / "world")
    start_note = (
        "the shipped <code>demo-start</code> (short captions at context 77, docs/demo.md)"
        if cfg["start"] == SHIPPED_START
        else f"a stage-1 <code>short</code> run of {html_report.esc(cfg['model'])} ({cfg['stage1_steps']} steps)"
    )
    body = f"""<h1>caption-debias demo (seed {cfg["seed"]}, preset {html_report.esc(cfg["preset"])})</h1>
<p class="sub">world <code>{html_report.esc(cfg["world"])}</code>, {cfg["train_images"]} train / {cfg["test_images"]}
test images in groups of {cfg["group_size"]}; both arms start from {start_note} and fine-tune
{cfg["finetune_steps"]} steps; {results["total_s"]:.0f} s in all</p>
<h2>Retrieval, text-to-image R@1 (%)</h2>
{html_report.table(["model", *VARIANTS, "keep - remove"], rows)}
<h3>debias minus longclip (t2i R@1 points, paired bootstrap 95% interval over {summary["queries"]} test queries)</h3>
{html_report.table(["captions", "gap"], gap_rows(summary))}
<p>{html_report.esc(verdict(summary, cfg["preset"]))}.</p>
<h2>Long-caption loss</h2>{loss_curves}
{html_report.note("The long-caption term is the one both recipes minimise (the full caption against the image); their totals add different second terms and are not comparable.")}
{grounding_html}
<h2>Probe (start and both arms)</h2>{plots or "<p>(the probe wrote no plots)</p>"}
{stats_html}
<h2>Full results</h2>
<p>Every figure of this run (recall tables, gaps and intervals, probe, loss curves, timings, config) is in
<a href="results.json"><code>results.json</code></a> beside this page.</p>"""
    path.write_text(html_report.page("caption-debias demo", body), "utf-8")
