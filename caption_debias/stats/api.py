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

    opts = options_from(StatsOptions, kwargs, "stats", options).validate()
    from caption_debias.progress import PlainProgress, on_terminal
    from caption_debias.stats.compute import compute_stats
    from caption_debias.stats.report import print_table, write_report

    plain = None if opts.quiet or on_terminal() else PlainProgress("stats", "rows", interval=opts.log_interval)
    result = compute_stats(
        as_list(folders), opts, on_rows=(lambda done, total: plain.update(done, total=total)) if plain else None
    )
    if plain is not None:
        plain.finish()
    if not opts.quiet:
        print_table(result)
    files = write_report(result, report, image_root=opts.image_root) if report is not None else {}
    if files and not opts.quiet:
        print(f"report: {files['html']}")
    counts = {"records": result["records"]}
    return Result("stats", Path(report) if report is not None else None, counts, dict(files), result)
