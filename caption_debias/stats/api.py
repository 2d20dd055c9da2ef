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
    from caption_debias.progress import PlainProgress, on_terminal
    from caption_debias.stats.compute import StatsOptions, compute_stats
    from caption_debias.stats.report import print_table, write_report

    options = StatsOptions(by=by, top_phrases=top, phrase_words=phrase_words)
    plain = None if quiet or on_terminal() else PlainProgress("stats", "rows", interval=log_interval)
    result = compute_stats(
        as_list(folders), options, on_rows=(lambda done, total: plain.update(done, total=total)) if plain else None
    )
    if plain is not None:
        plain.finish()
    if not quiet:
        print_table(result)
    files = write_report(result, report) if report is not None else {}
    counts = {"records": result["records"]}
    return Result("stats", Path(report) if report is not None else None, counts, dict(files), result)
