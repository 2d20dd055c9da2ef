"""`caption-debias view`: look at folders in a local web page, or write a static snapshot of them."""

from __future__ import annotations

import typer

from caption_debias.cli.common import Command, argument
from caption_debias.view.options import ViewOptions


def _view(options: ViewOptions, folders: list[str]) -> None:
    """Samples, sentences by role, removals beside what they matched, scores: a local web page
    (the data folders read-only; serves until Ctrl-C) or, with --static, one HTML file that opens without a server."""
    from caption_debias.view.server import run_view

    run_view(list(folders), options, announce=typer.echo)


view = Command(
    ViewOptions,
    _view,
    args=(argument("folders", list[str], "Prepared or curated folders (scored columns are shown when present)."),),
)
