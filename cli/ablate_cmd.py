"""`caption-debias ablate`: every arm of a plan curated, trained and evaluated alike, and compared.

Every option's default and help text come from its AblateOptions field (caption_debias/ablate/options.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.ablate.options import AblateOptions
from caption_debias.cli.common import config_option, from_field, options_from_params, out_option


def ablate(
    ctx: typer.Context,
    plan: Path = typer.Argument(
        ..., help="Plan file (TOML, YAML or JSON): base, arms, train, eval (docs/ablation.md)."
    ),
    out: Path = out_option("Folder for the arms' data, runs and results, ablation.json and report.html."),
    device: str = from_field(AblateOptions, "device"),
    workers: int = from_field(AblateOptions, "workers"),
    engine: str = from_field(AblateOptions, "engine"),
    ray_address: Optional[str] = from_field(AblateOptions, "ray_address"),
    overwrite: bool = from_field(AblateOptions, "overwrite"),
    quiet: bool = from_field(AblateOptions, "quiet"),
    log_interval: float = from_field(AblateOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """Curate the base per arm -> train each arm alike -> evaluate -> deltas with intervals -> report."""
    from caption_debias.ablate.report import terminal_table
    from caption_debias.ablate.run import REPORT, RESULT
    from caption_debias.ablate.run import ablate as run

    options = options_from_params(AblateOptions, ctx)
    summary = run(plan, out, options)
    if not options.quiet:
        typer.echo(terminal_table(summary))
        typer.echo(f"report: {out / REPORT}  results: {out / RESULT}  ({summary['timings']['total_s']:.0f} s)")
