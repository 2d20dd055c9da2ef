"""`caption_debias.stats(...)`: the Python form of `caption-debias stats` (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from caption_debias.api import Result, as_list


def stats(
    folders: str | Path | Iterable[str | Path],
    report: str | Path | None = None,
    *,
    by: str | None = None,
    top: int = 15,
    phrase_words: int = 3,
    quiet: bool = True,
    log_interval: float = 30.0,
) -> Result:
    """Caption statistics of prepared folders; with `report`, stats.json, report.md, report.html and plots/ there.

    `data` is the stats dict (stats.json); counts: records (and rows per folder).
    """
    from caption_debias.stats.options import StatsOptions
    from caption_debias.stats.run import run_stats

    options = StatsOptions(by=by, top_phrases=top, phrase_words=phrase_words, quiet=quiet, log_interval=log_interval)
    result, files = run_stats(as_list(folders), options, report)
    counts = {"records": result["records"]}
    return Result("stats", Path(report) if report is not None else None, counts, dict(files), result)
