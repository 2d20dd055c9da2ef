"""`caption-debias export`: a training run -> a folder plain open_clip loads (local-dir:)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def export(
    run: str = typer.Argument(..., help="Run folder (its latest checkpoint is exported), or any --model spec."),
    out: Path = typer.Option(
        ..., "--out", help="Folder to write open_clip_config.json and open_clip_model.safetensors into."
    ),
    pretrained: Optional[str] = typer.Option(
        None, "--pretrained", help="Architecture name when RUN is a bare checkpoint file."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out folder."),
) -> None:
    """Write an open_clip local-dir: folder (context 248 after stretching; see docs/training.md to push it to the hub)."""
    from caption_debias.model.export import export as do_export

    path = do_export(run, out, pretrained=pretrained, overwrite=overwrite)
    typer.echo(str(path))
