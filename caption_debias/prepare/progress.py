"""Progress bar on a terminal (silent in pipes, CI and with --quiet) and the end-of-run summary."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """Counts records and shards as chunks finish; draws a rich bar only on a TTY."""

    def __init__(self, quiet: bool) -> None:
        self.bar = None
        self.read = 0
        if not quiet and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                SpinnerColumn(),
                TextColumn("[bold]prepare[/]"),
                BarColumn(bar_width=None, pulse_style="cyan"),
                TextColumn(
                    "{task.fields[read]:,} read · {task.fields[records]:,} done · {task.fields[rejects]:,} rejects · {task.fields[shards]} shards"
                ),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.task = self.bar.add_task("prepare", total=None, read=0, records=0, rejects=0, shards=0)
            self.bar.start()

    def update(self, records: int, rejects: int, shards: int) -> None:
        if self.bar is not None:
            self.read = max(self.read, records)
            self.bar.update(self.task, read=self.read, records=records, rejects=rejects, shards=shards)

    def reading(self, read: int) -> None:
        """Records read from the inputs so far (ahead of `update`, which counts finished chunks)."""
        if self.bar is not None:
            self.read = read
            self.bar.update(self.task, read=read)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def print_summary(manifest: dict[str, Any], out: str, resumed_shards: int = 0) -> None:
    """One screen: records, rejects by reason, shards, time and rate."""
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True, highlight=False)
    c = manifest["counts"]
    elapsed = manifest.get("elapsed_s") or 0.0
    rate = c["read"] / elapsed if elapsed > 0 else 0.0
    status = "[green]complete[/]" if manifest["complete"] else "[red]INCOMPLETE (an input was cut off)[/]"
    console.print(f"[bold]prepare[/] -> {out}: {status}")
    console.print(
        f"  records read {c['read']:,}, written {c['written']:,}, rejected {c['rejected']:,}, "
        f"duplicate keys {c.get('duplicate_keys', 0):,}"
    )
    shards = manifest["shards"]
    reused = f" ({resumed_shards} reused from an earlier run)" if resumed_shards else ""
    console.print(f"  shards {len(shards)}{reused}, {elapsed:.1f} s, {rate:,.0f} records/s")
    reasons = c.get("rejects_by_reason") or {}
    if reasons:
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
        table.add_column("reject reason")
        table.add_column("count", justify="right")
        items = list(reasons.items())
        for reason, n in items[:12]:
            table.add_row(reason, f"{n:,}")
        if len(items) > 12:
            table.add_row(f"... {len(items) - 12} more reasons", f"{sum(n for _, n in items[12:]):,}")
        console.print(table)
        console.print(f"  details: {out}/rejects.jsonl")
