"""`caption-debias view`: look at folders in a local web page, or write a static snapshot of them.

Every option's default and help text come from its ViewOptions field (view/options.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params
from caption_debias.view.options import ViewOptions


def view(
    ctx: typer.Context,
    folders: List[str] = typer.Argument(
        ..., help="Prepared or curated folders (scored columns are shown when present)."
    ),
    image_root: Optional[str] = from_field(ViewOptions, "image_root"),
    host: str = from_field(ViewOptions, "host"),
    port: int = from_field(ViewOptions, "port"),
    allowed_host: List[str] = from_field(ViewOptions, "allowed_host"),
    static: Optional[str] = from_field(ViewOptions, "static"),
    sample: int = from_field(ViewOptions, "sample"),
    per_reason: int = from_field(ViewOptions, "per_reason"),
    seed: int = from_field(ViewOptions, "seed"),
    tags: Optional[str] = from_field(ViewOptions, "tags", metavar="FILE"),
    model: Optional[str] = from_field(ViewOptions, "model", metavar="SPEC"),
    pretrained: Optional[str] = from_field(ViewOptions, "pretrained"),
    quiet: bool = from_field(ViewOptions, "quiet"),
    config: Optional[Path] = config_option(),
) -> None:
    """Samples, sentences by role, removals beside what they matched, scores: a local web page
    (the data folders read-only; serves until Ctrl-C) or, with --static, one HTML file that opens without a server."""
    from caption_debias.view.server import run_view

    run_view(list(folders), options_from_params(ViewOptions, ctx), announce=typer.echo)
