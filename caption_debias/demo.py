"""`caption-debias demo`: the whole method on the built-in synthetic world, minutes on a CPU.

synth (train + test worlds) -> prepare -> stats -> stage 1 `short` pretraining of the tiny model
at context 77 -> stretch to 248 -> `longclip` and `debias` fine-tunes from the same start and
budget -> eval + probe on the test world -> DIR/results.json, DIR/report.html, a terminal table.
Every stage calls the library's public API; this module only wires them and writes the report.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import platform
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from caption_debias import html_report
from caption_debias.errors import UserError

ARMS = ("longclip", "debias")
VARIANTS = ("keep", "remove", "move", "filler:3")
STAGES = ("synth", "prepare", "stats", "stage1", "stretch", "longclip", "debias", "evaluate", "report")


@dataclass
class DemoConfig:
    """Sizes and budgets of one demo run (`preset` picks them; tests shrink them further)."""

    out: Path
    seed: int = 0
    model: str = "demo-small"  # shipped config: `tiny` learns this world too slowly (docs/demo.md)
    image_size: int = 64
    train_images: int = 2000
    test_images: int = 800
    group_size: int = 4
    batch_size: int = 64
    stage1_steps: int = 600
    finetune_steps: int = 300
    stage1_lr: float = 5e-4
    finetune_lr: float = 2e-3
    # Stage 1 batches are whole hard-negative groups; fine-tune batches are random, as on a real
    # dump, where the summary alone separates a batch: that is how the shortcut is learned.
    stage1_groups: bool = True
    finetune_groups: bool = False
    lambda_s: float = 0.1
    context_length: int = 248
    eval_batch_size: int = 256
    workers: int = 1
    preset: str = "full"
    extra_train: dict[str, Any] = field(default_factory=dict)


def preset(name: str, out: Path, seed: int = 0) -> DemoConfig:
    """`full`: the measured demo (docs/demo.md); `quick`: the same pipeline on the `tiny` model
    with a budget too small to learn much: a smoke run of every stage, not a result."""
    if name == "full":
        return DemoConfig(out=Path(out), seed=seed, preset=name)
    if name == "quick":
        return DemoConfig(
            out=Path(out),
            seed=seed,
            preset=name,
            model="tiny",
            train_images=800,
            test_images=200,
            stage1_steps=100,
            finetune_steps=50,
            batch_size=32,
        )
    raise UserError(f"unknown demo preset {name!r} (full or quick)")


class _Progress:
    """A rich progress display, one line per stage; a no-op sink when quiet."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.timings: dict[str, float] = {}
        self._progress = None

    def __enter__(self) -> "_Progress":
        if not self.quiet:
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                SpinnerColumn(), TextColumn("{task.description:<48}"), BarColumn(), TimeElapsedColumn()
            )
            self._progress.__enter__()
            self._overall = self._progress.add_task("demo", total=len(STAGES))
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def stage(self, name: str, what: str) -> "_Stage":
        return _Stage(self, name, what)


class _Stage:
    def __init__(self, owner: _Progress, name: str, what: str) -> None:
        self.owner, self.name, self.what = owner, name, what

    def __enter__(self) -> "_Stage":
        self.t0 = time.perf_counter()
        if self.owner._progress is not None:
            self.owner._progress.update(self.owner._overall, description=f"{self.name}: {self.what}")
        return self

    def __exit__(self, exc_type, *exc) -> None:
        seconds = time.perf_counter() - self.t0
        self.owner.timings[self.name] = round(seconds, 2)
        if exc_type is None and self.owner._progress is not None:
            self.owner._progress.console.print(f"[green]done[/] {self.name:<9} {self.what} ({seconds:.1f} s)")
            self.owner._progress.advance(self.owner._overall)


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


def run_demo(cfg: DemoConfig, quiet: bool = False, on_table: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every stage into cfg.out; returns the results dict also written to results.json."""
    notice = _NoWeightsNotice()
    logging.getLogger().addFilter(notice)
    try:
        return _run_demo(cfg, quiet, on_table)
    finally:
        logging.getLogger().removeFilter(notice)


def _run_demo(cfg: DemoConfig, quiet: bool, on_table: Callable[[str], None] | None) -> dict[str, Any]:
    from caption_debias.locking import folder_lock

    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    with folder_lock(out, "demo"):  # one demo per folder; its stages lock their own subfolders too
        return _run_demo_locked(cfg, out, quiet, on_table)


def _run_demo_locked(cfg: DemoConfig, out: Path, quiet: bool, on_table: Callable[[str], None] | None) -> dict[str, Any]:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.stats.compute import compute_stats
    from caption_debias.synth.world import write_world

    for sub in ("world", "prepared", "runs", "probe"):  # the demo's own folders: a rerun starts clean
        shutil.rmtree(out / sub, ignore_errors=True)
    worlds = {split: out / "world" / split for split in ("train", "test")}
    prepared = {split: out / "prepared" / split for split in ("train", "test")}
    runs = {name: out / "runs" / name for name in ("stage1", *ARMS)}
    started = time.perf_counter()
    results: dict[str, Any] = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}
    }

    with _Progress(quiet) as progress:
        with progress.stage("synth", f"{cfg.train_images} train + {cfg.test_images} test scenes"):
            results["worlds"] = {
                split: write_world(
                    worlds[split],
                    n,
                    cfg.seed,
                    image_size=cfg.image_size,
                    split=split,
                    group_size=cfg.group_size,
                    overwrite=True,
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
            cache_images=True,
            precision="fp32",
            tensorboard=False,
            quiet=True,
            workers=0,
            **cfg.extra_train,
        )
        with progress.stage("stage1", f"`short` pretraining of {cfg.model} at 77, {cfg.stage1_steps} steps"):
            stage1 = _train_library(
                recipe="short",
                model=cfg.model,
                out=str(runs["stage1"]),
                context_length=77,
                group_key="group" if cfg.stage1_groups else None,
                **_budget(cfg.stage1_steps, cfg.stage1_lr),
                **common,
            )

        with progress.stage("stretch", f"positions 77 -> {cfg.context_length} (knowledge-preserved)"):
            results["stretch"] = _check_stretch(stage1, cfg.context_length)

        for arm in ARMS:
            with progress.stage(arm, f"`{arm}` fine-tune from stage 1, {cfg.finetune_steps} steps"):
                _train_library(
                    recipe=arm,
                    model=str(stage1),
                    out=str(runs[arm]),
                    context_length=cfg.context_length,
                    group_key="group" if cfg.finetune_groups else None,
                    lambda_short=cfg.lambda_s,
                    **_budget(cfg.finetune_steps, cfg.finetune_lr),
                    **common,
                )

        with progress.stage("evaluate", f"retrieval {', '.join(VARIANTS)} + probe on the test world"):
            results["eval"], results["probe"] = _evaluate(
                cfg, {"stage1": stage1, **{a: runs[a] for a in ARMS}}, prepared["test"], worlds["test"], out / "probe"
            )

        with progress.stage("report", "results.json, report.html"):
            results["curves"] = {name: _read_metrics(run) for name, run in runs.items()}
            results["summary"] = summarise(results["eval"])
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


def _check_stretch(stage1: Path, context_length: int) -> dict[str, Any]:
    """Stretch the stage-1 model's positions as the fine-tunes do, and check the kept head."""
    import torch

    from caption_debias.model.load import load_model
    from caption_debias.model.stretch import merged_state_dict, stretch_positional_embedding

    loaded = load_model(str(stage1))
    before = loaded.model.positional_embedding.detach().clone()
    stretch_positional_embedding(loaded.model, context_length)
    after = merged_state_dict(loaded.model.state_dict())["positional_embedding"]
    keep = 20
    return {
        "from": int(before.shape[0]),
        "to": int(after.shape[0]),
        "head_kept": bool(torch.equal(after[:keep], before[:keep])),
    }


def _evaluate(cfg: DemoConfig, models: dict[str, Path], prepared: Path, image_root: Path, probe_dir: Path):
    from caption_debias.evaluate.probe import probe
    from caption_debias.evaluate.retrieval import as_data, evaluate
    from caption_debias.model.load import load_model

    data = as_data(prepared, image_root)
    loaded = {name: load_model(str(run)) for name, run in models.items()}
    scores = {name: evaluate(m, data, variants=VARIANTS, batch_size=cfg.eval_batch_size) for name, m in loaded.items()}
    return scores, probe(loaded, data, probe_dir, batch_size=cfg.eval_batch_size)


def summarise(scores: dict[str, Any]) -> dict[str, Any]:
    """The issue's target: t2i R@1 cost of removing the summary, per arm, and the gap between arms."""

    def r1(model: str, variant: str) -> float:
        return float(scores[model][variant]["t2i"]["r1"])

    drop = {arm: round(r1(arm, "keep") - r1(arm, "remove"), 2) for arm in ARMS}
    return {
        "t2i_r1": {m: {v: r1(m, v) for v in VARIANTS} for m in scores},
        "remove_drop": drop,
        "drop_gap": round(drop["longclip"] - drop["debias"], 2),  # target >= 5
        "keep_gap": round(r1("debias", "keep") - r1("longclip", "keep"), 2),  # target >= -2
        "target_met": bool(
            drop["longclip"] - drop["debias"] >= 5 and r1("debias", "keep") - r1("longclip", "keep") >= -2
        ),
    }


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
    buf = io.StringIO()
    console = Console(file=buf, width=100, color_system=None)
    console.print(table)
    console.print(
        f"removing the summary costs longclip {summary['remove_drop']['longclip']:.1f} points, "
        f"debias {summary['remove_drop']['debias']:.1f} (gap {summary['drop_gap']:.1f}, target >= 5); "
        f"debias - longclip on keep {summary['keep_gap']:+.1f} (target >= -2); "
        f"total {results['total_s']:.0f} s"
    )
    return buf.getvalue()


def _loss_curves_png(curves: dict[str, list[dict[str, Any]]]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    for name, rows in curves.items():
        points = [(r["step"], r["loss"]) for r in rows if "step" in r and "loss" in r]
        if points:
            ax.plot(*zip(*points), label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def write_report(results: dict[str, Any], path: Path, probe_dir: Path) -> None:
    """One self-contained HTML page: stats, loss curves, the recall table, the probe's plots."""
    summary = results["summary"]
    rows = [
        [m] + [f"{r[v]:.1f}" for v in VARIANTS] + [f"{r['keep'] - r['remove']:.1f}"]
        for m, r in summary["t2i_r1"].items()
    ]
    plots = "".join(
        f"<h3>{html_report.esc(p.stem)}</h3>{html_report.figure(p.read_bytes(), p.stem)}"
        for p in sorted(probe_dir.glob("*.png"))
    )
    verdict = "met" if summary["target_met"] else "not met"
    loss_curves = html_report.figure(_loss_curves_png(results["curves"]), "loss curves")
    full = {k: results[k] for k in ("eval", "timings_s", "total_s", "config")}
    body = f"""<h1>caption-debias demo (seed {results["config"]["seed"]}, preset {html_report.esc(results["config"]["preset"])})</h1>
<h2>Retrieval, text-to-image R@1 (%)</h2>
{html_report.table(["model", *VARIANTS, "keep - remove"], rows)}
<p>Removing the summary costs <b>longclip {summary["remove_drop"]["longclip"]:.1f}</b> and
<b>debias {summary["remove_drop"]["debias"]:.1f}</b> points (gap {summary["drop_gap"]:.1f}; target at least 5);
debias minus longclip on full captions {summary["keep_gap"]:+.1f} (target at least -2): target {verdict} on this seed.</p>
<h2>Loss curves</h2>{loss_curves}
<h2>Probe</h2>{plots or "<p>(the probe wrote no plots)</p>"}
<h2>Dataset statistics</h2>{html_report.pre(json.dumps(results["stats"], indent=1, default=str)[:20000])}
<h2>Full results</h2>{html_report.pre(json.dumps(full, indent=1, default=str))}"""
    path.write_text(html_report.page("caption-debias demo", body), "utf-8")
