"""`caption-debias demo`: the whole method on the built-in synthetic world."""

from __future__ import annotations

from pathlib import Path

import typer


def demo(
    out: Path = typer.Option(
        Path("demo-out"), "--out", help="Folder for worlds, shards, runs, results.json and report.html."
    ),
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
    quiet: bool = typer.Option(False, "--quiet", help="No progress display (the final table is still printed)."),
) -> None:
    """Synth -> prepare -> stats -> the shipped start -> stretch -> longclip vs debias -> eval + probe -> report."""
    from caption_debias.demo import preset, run_demo
    from caption_debias.errors import UserError

    if quick and preset_name not in ("full", "quick"):
        raise UserError(f"--quick is --preset quick; it cannot go with --preset {preset_name}")
    cfg = preset("quick" if quick else preset_name, out, seed)
    results = run_demo(cfg, quiet=quiet, on_table=typer.echo)
    typer.echo(f"report: {out / 'report.html'}  results: {out / 'results.json'}  ({results['total_s']:.0f} s)")
