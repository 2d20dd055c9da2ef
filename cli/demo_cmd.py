"""`caption-debias demo`: the whole method on the built-in synthetic world.

Every option's default and help text come from its DemoOptions field (caption_debias/demo.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import config_option, from_field, out_option
from caption_debias.demo import DemoOptions


def demo(
    out: Path = out_option("Folder for worlds, shards, runs, results.json and report.html.", Path("demo-out")),
    seed: int = from_field(DemoOptions, "seed"),
    quick: bool = from_field(DemoOptions, "quick"),
    preset_name: str = from_field(DemoOptions, "preset", "--preset"),
    quiet: bool = from_field(DemoOptions, "quiet", "--quiet", "-q"),
    log_interval: float = from_field(DemoOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """Synth -> prepare -> stats -> the shipped start -> stretch -> longclip vs debias -> eval + probe -> report."""
    from caption_debias.demo import run_demo

    options = DemoOptions(seed=seed, quick=quick, preset=preset_name, quiet=quiet, log_interval=log_interval)
    cfg = options.config(out)
    results = run_demo(cfg, quiet=quiet, on_table=None if quiet else typer.echo, log_interval=log_interval)
    if not quiet:
        typer.echo(f"report: {out / 'report.html'}  results: {out / 'results.json'}  ({results['total_s']:.0f} s)")
