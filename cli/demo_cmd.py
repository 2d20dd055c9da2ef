"""`caption-debias demo`: the whole method on the built-in synthetic world."""

from __future__ import annotations

from pathlib import Path

import typer

from caption_debias.cli.common import Command, out_param
from caption_debias.demo import DemoOptions


def _demo(options: DemoOptions, out: Path) -> None:
    """Synth -> prepare -> stats -> the shipped start -> stretch -> longclip vs debias -> eval + probe -> report."""
    from caption_debias.demo import run_demo

    results = run_demo(
        options.config(out),
        quiet=options.quiet,
        on_table=None if options.quiet else typer.echo,
        log_interval=options.log_interval,
    )
    if not options.quiet:
        typer.echo(f"report: {out / 'report.html'}  results: {out / 'results.json'}  ({results['total_s']:.0f} s)")


demo = Command(
    DemoOptions,
    _demo,
    out=out_param("Folder for worlds, shards, runs, results.json and report.html.", Path("demo-out"), Path),
)
