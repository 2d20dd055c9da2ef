"""`caption-debias ablate`: every arm of a plan curated, trained and evaluated alike, and compared."""

from __future__ import annotations

from pathlib import Path

import typer

from caption_debias.ablate.options import AblateOptions
from caption_debias.cli.common import Command, argument, out_param


def _ablate(options: AblateOptions, plan: Path, out: Path) -> None:
    """Curate the base per arm -> train each arm alike -> evaluate -> deltas with intervals -> report."""
    from caption_debias.ablate.report import terminal_table
    from caption_debias.ablate.run import REPORT, RESULT
    from caption_debias.ablate.run import ablate as run

    summary = run(plan, out, options)
    if not options.quiet:
        typer.echo(terminal_table(summary))
        typer.echo(f"report: {out / REPORT}  results: {out / RESULT}  ({summary['timings']['total_s']:.0f} s)")


ablate = Command(
    AblateOptions,
    _ablate,
    args=(argument("plan", Path, "Plan file (TOML, YAML or JSON): base, arms, train, eval (docs/ablation.md)."),),
    out=out_param("Folder for the arms' data, runs and results, ablation.json and report.html.", annotation=Path),
)
