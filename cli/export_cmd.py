"""`caption-debias export`: a training run -> a folder plain open_clip loads (local-dir:)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import config_option, out_option, quiet_option


def export(
    run: str = typer.Argument(..., help="Run folder (its latest checkpoint is exported), or any --model spec."),
    out: Path = out_option("Folder to write open_clip_config.json and open_clip_model.safetensors into."),
    pretrained: Optional[str] = typer.Option(
        None, "--pretrained", help="Architecture name when RUN is a bare checkpoint file."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out folder."),
    quiet: bool = quiet_option(),
    config: Optional[Path] = config_option(),
) -> None:
    """Write an open_clip local-dir: folder (context 248 after stretching; see docs/training.md to push it to the hub)."""
    from caption_debias.model.export import export as do_export

    path = do_export(run, out, pretrained=pretrained, overwrite=overwrite)
    if not quiet:
        typer.echo(str(path))
