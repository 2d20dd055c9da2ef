"""`caption_debias.stats(...)`: the Python form of `caption-debias stats`, and its one front door (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from caption_debias.api import Result, as_list, options_from

if TYPE_CHECKING:
    from caption_debias.stats.options import StatsOptions


def stats(
    folders: str | Path | Iterable[str | Path],
    report: str | Path | None = None,
    *,
    options: StatsOptions | None = None,
    **kwargs: Any,
) -> Result:
    """Caption statistics of prepared folders; with `report`, stats.json, report.md, report.html and plots/ there.

    The options are stats' flags (StatsOptions: by, top, phrase_words, image_root, ...), as keyword
    arguments (`quiet` defaults to True) or as one StatsOptions in `options`; with quiet=False the
    table and the report's path are printed, as the command prints them.
    `data` is the stats dict (stats.json); counts: records (and rows per folder).
    """
    from caption_debias.stats.options import StatsOptions
    from caption_debias.stats.run import run_stats

    opts = options_from(StatsOptions, kwargs, "stats", options).validate()
    result, files = run_stats(as_list(folders), opts, report)
    if files and not opts.quiet:
        print(f"report: {files['html']}")
    counts = {"records": result["records"]}
    return Result("stats", Path(report) if report is not None else None, counts, dict(files), result)
