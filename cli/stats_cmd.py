"""`caption-debias stats`: figures, plots and reports of one or more prepared folders."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option, from_field, out_option
from caption_debias.stats.options import StatsOptions


class By(str, Enum):
    source = "source"
    split = "split"


def stats(
    folders: List[str] = typer.Argument(
        ..., help="Prepared folders (output of `caption-debias prepare`); several are compared side by side."
    ),
    out: Optional[str] = out_option(
        "Folder to write stats.json, report.md, report.html and plots/ into (created if missing; rewritten each run).",
        None,
    ),
    by: Optional[By] = from_field(StatsOptions, "by"),
    top: int = from_field(StatsOptions, "top_phrases", "--top", min=1),
    phrase_words: int = from_field(StatsOptions, "phrase_words", min=1),
    quiet: bool = from_field(StatsOptions, "quiet", "--quiet", "-q"),
    log_interval: float = from_field(StatsOptions, "log_interval", min=0.0),
    image_root: Optional[Path] = from_field(StatsOptions, "image_root"),
    config: Optional[Path] = config_option(),
) -> None:
    """Caption lengths against CLIP's 77 and Long-CLIP's 248 tokens, sentences per caption,
    where summaries sit and how captions open."""
    from caption_debias.stats.run import run_stats

    options = StatsOptions(
        by=by.value if by else None,
        top_phrases=top,
        phrase_words=phrase_words,
        quiet=quiet,
        log_interval=log_interval,
        image_root=None if image_root is None else str(image_root),
    )
    _, files = run_stats(folders, options, out)
    if files and not quiet:
        typer.echo(f"report: {files['html']}")
