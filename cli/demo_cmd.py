"""`caption-debias demo`: the whole method on the built-in synthetic world."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import config_option, log_interval_option, out_option


def demo(
    out: Path = out_option("Folder for worlds, shards, runs, results.json and report.html.", Path("demo-out")),
    seed: int = typer.Option(0, "--seed", help="Seed of the worlds and of every training run."),
    quick: bool = typer.Option(
        False,
        "--quick",
        help="Smaller worlds and budgets (same as --preset quick): a smoke run of every stage, not a result.",
    ),
    preset_name: str = typer.Option(
        "full",
        "--preset",
        help="full (the measured demo) | quick | v1 (the first demo: layouts world, its own stage 1; docs/demo.md).",
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="No progress display and no summary (results.json and report.html are written)."
    ),
    log_interval: float = log_interval_option(),
    config: Optional[Path] = config_option(),
) -> None:
    """Synth -> prepare -> stats -> the shipped start -> stretch -> longclip vs debias -> eval + probe -> report."""
    from caption_debias.demo import preset, run_demo
    from caption_debias.errors import UserError

    if quick and preset_name not in ("full", "quick"):
        raise UserError(f"--quick is --preset quick; it cannot go with --preset {preset_name}")
    cfg = preset("quick" if quick else preset_name, out, seed)
    results = run_demo(cfg, quiet=quiet, on_table=None if quiet else typer.echo, log_interval=log_interval)
    if not quiet:
        typer.echo(f"report: {out / 'report.html'}  results: {out / 'results.json'}  ({results['total_s']:.0f} s)")
