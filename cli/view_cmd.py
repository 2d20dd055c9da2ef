"""`caption-debias view`: look at folders in a local web page, or write a static snapshot of them."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option


def view(
    folders: List[str] = typer.Argument(
        ..., help="Prepared or curated folders (scored columns are shown when present)."
    ),
    image_root: Optional[Path] = typer.Option(
        None,
        "--image-root",
        help="Folder the `image` paths are relative to (default: the one curate used, when it is there).",
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to listen on (loopback by default: only this machine)."
    ),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port to listen on (0: any free port)."),
    static: Optional[str] = typer.Option(
        None, "--static", help="Write a self-contained snapshot to this .html file (or folder/index.html) and exit."
    ),
    sample: int = typer.Option(200, "--sample", min=0, help="--static: how many kept rows to sample."),
    per_reason: int = typer.Option(6, "--per-reason", min=0, help="--static: removed rows per removal reason."),
    seed: int = typer.Option(0, "--seed", help="--static: seed of the sample."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the address (or the snapshot's path)."),
    config: Optional[Path] = config_option(),
) -> None:
    """Samples, sentences by role, removals beside what they matched, scores: a local web page
    (read-only; serves until Ctrl-C) or, with --static, one HTML file that opens without a server."""
    from caption_debias.view.app import describe, serve
    from caption_debias.view.data import ViewData

    data = ViewData(folders, None if image_root is None else str(image_root))
    if not quiet:
        for line in describe(data):
            typer.echo(line)
    if static is not None:
        from caption_debias.view.static import write_static

        path = write_static(data, static, sample=sample, per_reason=per_reason, seed=seed)
        typer.echo(f"snapshot: {path}")
        return
    serve(data, host=host, port=port, announce=typer.echo)
