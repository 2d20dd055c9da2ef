"""`caption-debias stats`: figures, plots and reports of one or more prepared folders."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params, out_option
from caption_debias.stats.options import StatsOptions


def stats(
    ctx: typer.Context,
    folders: List[str] = typer.Argument(
        ..., help="Prepared folders (output of `caption-debias prepare`); several are compared side by side."
    ),
    out: Optional[str] = out_option(
        "Folder to write stats.json, report.md, report.html and plots/ into (created if missing; rewritten each run).",
        None,
    ),
    by: Optional[str] = from_field(StatsOptions, "by", choices_metavar=True),
    top_phrases: int = from_field(StatsOptions, "top_phrases"),
    phrase_words: int = from_field(StatsOptions, "phrase_words"),
    quiet: bool = from_field(StatsOptions, "quiet"),
    log_interval: float = from_field(StatsOptions, "log_interval"),
    image_root: Optional[str] = from_field(StatsOptions, "image_root"),
    config: Optional[Path] = config_option(),
) -> None:
    """Caption lengths against CLIP's 77 and Long-CLIP's 248 tokens, sentences per caption,
    where summaries sit and how captions open."""
    from caption_debias.stats.api import stats as run_stats

    run_stats(folders, out, options=options_from_params(StatsOptions, ctx))
