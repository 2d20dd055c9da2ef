"""`caption-debias view`: look at folders in a local web page, or write a static snapshot of them.

Every option's default and help text come from its ViewOptions field (view/options.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option, from_field
from caption_debias.view.options import ViewOptions


def view(
    folders: List[str] = typer.Argument(
        ..., help="Prepared or curated folders (scored columns are shown when present)."
    ),
    image_root: Optional[Path] = from_field(ViewOptions, "image_root"),
    host: str = from_field(ViewOptions, "host"),
    port: int = from_field(ViewOptions, "port", min=0, max=65535),
    allowed_host: List[str] = from_field(ViewOptions, "allowed_host"),
    static: Optional[str] = from_field(ViewOptions, "static"),
    sample: int = from_field(ViewOptions, "sample", min=0),
    per_reason: int = from_field(ViewOptions, "per_reason", min=0),
    seed: int = from_field(ViewOptions, "seed"),
    quiet: bool = from_field(ViewOptions, "quiet", "--quiet", "-q"),
    config: Optional[Path] = config_option(),
) -> None:
    """Samples, sentences by role, removals beside what they matched, scores: a local web page
    (read-only; serves until Ctrl-C) or, with --static, one HTML file that opens without a server."""
    from caption_debias.view.server import run_view

    options = ViewOptions(
        image_root=None if image_root is None else str(image_root),
        host=host,
        port=port,
        allowed_host=list(allowed_host),
        static=static,
        sample=sample,
        per_reason=per_reason,
        seed=seed,
        quiet=quiet,
    )
    run_view(list(folders), options, announce=typer.echo)
