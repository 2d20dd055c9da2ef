"""`caption-debias export`: a training run -> a folder plain open_clip loads (local-dir:)."""

from __future__ import annotations

from pathlib import Path

import typer

from caption_debias.cli.common import Command, argument, out_param
from caption_debias.model.options import ExportOptions


def _export(options: ExportOptions, run: str, out: Path) -> None:
    """Write an open_clip local-dir: folder (context 248 after stretching; see docs/training.md to push it to the hub)."""
    from caption_debias.model.export import export as do_export

    options.validate()
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


export = Command(
    ExportOptions,
    _export,
    args=(
        argument(
            "run",
            str,
            "Run folder (its latest checkpoint is exported), or any --model spec (demo-start: the shipped small model).",
        ),
    ),
    out=out_param("Folder to write open_clip_config.json and open_clip_model.safetensors into.", annotation=Path),
)
