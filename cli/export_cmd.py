"""`caption-debias export`: a training run -> a folder plain open_clip loads (local-dir:).

Every option's default and help text come from its ExportOptions field (model/options.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params, out_option
from caption_debias.model.options import ExportOptions


def export(
    ctx: typer.Context,
    run: str = typer.Argument(
        ...,
        help="Run folder (its latest checkpoint is exported), or any --model spec (demo-start: the shipped small model).",
    ),
    out: Path = out_option("Folder to write open_clip_config.json and open_clip_model.safetensors into."),
    pretrained: Optional[str] = from_field(ExportOptions, "pretrained"),
    interpolate: Optional[float] = from_field(ExportOptions, "interpolate"),
    overwrite: bool = from_field(ExportOptions, "overwrite"),
    quiet: bool = from_field(ExportOptions, "quiet"),
    config: Optional[Path] = config_option(),
) -> None:
    """Write an open_clip local-dir: folder (context 248 after stretching; see docs/training.md to push it to the hub)."""
    from caption_debias.model.export import export as do_export

    options = options_from_params(ExportOptions, ctx).validate()
    path = do_export(
        run,
        out,
        pretrained=options.pretrained,
        overwrite=options.overwrite,
        quiet=options.quiet,
        interpolate=options.interpolate,
    )
    if not options.quiet:
        typer.echo(str(path))
