"""`caption-debias stats`: figures, plots and reports of one or more prepared folders."""

from __future__ import annotations

from enum import Enum
from typing import List, Optional

import typer


class By(str, Enum):
    source = "source"
    split = "split"


def stats(
    folders: List[str] = typer.Argument(
        ..., help="Prepared folders (output of `caption-debias prepare`); several are compared side by side."
    ),
    report: Optional[str] = typer.Option(
        None,
        "--report",
        "-r",
        help="Folder to write stats.json, report.md, report.html and plots/ into (created if missing).",
    ),
    by: Optional[By] = typer.Option(None, "--by", help="Also give every figure per source reader or per split."),
    top: int = typer.Option(15, "--top", min=1, help="How many of the most common opening phrases to keep per group."),
    phrase_words: int = typer.Option(
        3, "--phrase-words", min=1, help="Opening phrase = this many lowercased words of the first sentence."
    ),
    image_root: Optional[str] = typer.Option(
        None,
        "--image-root",
        help="--report: images of the Samples section are read under this folder (default: the one curate used).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not print the table on the terminal."),
    log_interval: float = typer.Option(
        30.0, "--log-interval", min=0.0, help="Without a terminal: one plain progress line every this many seconds."
    ),
) -> None:
    """Caption lengths against CLIP's 77 and Long-CLIP's 248 tokens, sentences per caption,
    where summaries sit and how captions open."""
    from caption_debias.progress import PlainProgress, on_terminal
    from caption_debias.stats.compute import StatsOptions, compute_stats
    from caption_debias.stats.report import print_table, write_report

    options = StatsOptions(by=by.value if by else None, top_phrases=top, phrase_words=phrase_words)
    plain = None if quiet or on_terminal() else PlainProgress("stats", "rows", interval=log_interval)
    result = compute_stats(
        folders, options, on_rows=(lambda done, total: plain.update(done, total=total)) if plain else None
    )
    if plain is not None:
        plain.finish()
    if not quiet:
        print_table(result)
    if report is not None:
        files = write_report(result, report, image_root=image_root)
        if not quiet:
            typer.echo(f"report: {files['html']}")
