"""`caption-debias stats`: figures, plots and reports of one or more prepared folders."""

from __future__ import annotations

from typing import Optional

from caption_debias.cli.common import Command, argument, out_param
from caption_debias.stats.options import StatsOptions


def _stats(options: StatsOptions, folders: list[str], out: Optional[str]) -> None:
    """Caption lengths against CLIP's 77 and Long-CLIP's 248 tokens, sentences per caption,
    where summaries sit and how captions open."""
    from caption_debias.stats.api import stats

    stats(folders, out, options=options)


stats = Command(
    StatsOptions,
    _stats,
    args=(
        argument(
            "folders",
            list[str],
            "Prepared folders (output of `caption-debias prepare`); several are compared side by side.",
        ),
    ),
    out=out_param(
        "Folder to write stats.json, report.md, report.html and plots/ into (created if missing; rewritten each run).",
        None,
        Optional[str],
    ),
    renamed={"--report": "--out", "-r": "--out"},
)
