"""One stats run as `caption-debias stats` and `caption_debias.stats(...)` both make it: the rows
counted on the shared progress while the folders are read, the terminal table, the report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

from caption_debias.progress import Progress, say
from caption_debias.stats.options import StatsOptions


def run_stats(
    folders: Sequence[str | Path], options: StatsOptions, out: str | Path | None = None
) -> tuple[dict[str, Any], dict[str, Path]]:
    """(the stats dict, the report's files: empty without `out`)."""
    from caption_debias.stats.compute import compute_stats
    from caption_debias.stats.report import print_table, write_report

    names = [str(f) for f in folders]
    with Progress("stats", "rows", quiet=options.quiet, interval=options.log_interval) as progress:

        def on_rows(done: int, total: int) -> None:
            if progress.total is None:  # the folders are open: say what is read, once
                named = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
                progress.note(f"reading {total:,} rows of {len(names)} folder{'s' * (len(names) > 1)}: {named}")
            progress.update(done, total=total)

        # counted only where it shows: without a display the folders are read in one lazy pass
        result = compute_stats(names, options, on_rows=None if progress.quiet else on_rows)
    for line in result.get("invalid", []):  # one line per manifest field that is not a number, even with -q
        print(f"caption-debias stats: warning: {line}", file=sys.stderr)
    if not options.quiet:
        print_table(result)
    if out is None:
        return result, {}
    say(f"writing report {out} (plots, samples, report.md, report.html)", options.quiet)
    return result, dict(write_report(result, out, image_root=options.image_root))
