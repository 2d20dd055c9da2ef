"""`caption-debias demo`: the whole method on the built-in synthetic world.

Every option's default and help text come from its DemoOptions field (caption_debias/demo.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params, out_option
from caption_debias.demo import DemoOptions


def demo(
    ctx: typer.Context,
    out: Path = out_option("Folder for worlds, shards, runs, results.json and report.html.", Path("demo-out")),
    seed: int = from_field(DemoOptions, "seed"),
    quick: bool = from_field(DemoOptions, "quick"),
    preset: str = from_field(DemoOptions, "preset"),
    quiet: bool = from_field(DemoOptions, "quiet"),
    log_interval: float = from_field(DemoOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """Synth -> prepare -> stats -> the shipped start -> stretch -> longclip vs debias -> eval + probe -> report."""
    from caption_debias.demo import run_demo

    options = options_from_params(DemoOptions, ctx)
    cfg = options.config(out)
    results = run_demo(
        cfg, quiet=options.quiet, on_table=None if options.quiet else typer.echo, log_interval=options.log_interval
    )
    if not options.quiet:
        typer.echo(f"report: {out / 'report.html'}  results: {out / 'results.json'}  ({results['total_s']:.0f} s)")
