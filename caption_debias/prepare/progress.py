"""Progress: a rich bar on a terminal; without one (pipes, SLURM logs, CI) a plain line every
--log-interval seconds (caption_debias/progress.py) with bytes read of the inputs' size; nothing
with --quiet. And the end-of-run summary."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from caption_debias.progress import DEFAULT_INTERVAL, PlainProgress, on_terminal


class InputPosition:
    """Bytes read so far of the inputs' total size, when every input is a file: the inputs before
    the one open now, plus the open one's file position as the OS reports it (psutil, so no
    reader has to count; where the OS gives no positions, whole inputs only)."""

    def __init__(self, inputs: list[Path]) -> None:
        self.files = [os.path.realpath(p) for p in inputs]
        self.sizes = [os.path.getsize(p) for p in self.files]
        self.total = sum(self.sizes)
        self.done = 0

    def __call__(self) -> int:
        import psutil

        try:
            open_now = {f.path: getattr(f, "position", None) for f in psutil.Process().open_files()}
        except (psutil.Error, OSError):
            return self.done
        for i, path in enumerate(self.files):
            if path in open_now and open_now[path] is not None:
                self.done = max(self.done, sum(self.sizes[:i]) + min(open_now[path], self.sizes[i]))
                break
        return self.done


class Progress:
    """Counts records and shards as chunks finish; a rich bar on a TTY, plain lines elsewhere."""

    def __init__(
        self,
        quiet: bool,
        inputs: list[Path] | None = None,
        interval: float = DEFAULT_INTERVAL,
        limit: int | None = None,
    ) -> None:
        self.bar = None
        self.read = 0
        self.plain = None
        self.position = None
        self.counts = (0, 0, 0)
        if not quiet and not on_terminal():
            inputs = inputs or []
            if inputs and all(Path(p).is_file() for p in inputs) and limit is None:
                self.position = InputPosition(inputs)
                self.plain = PlainProgress("prepare", "bytes", total=self.position.total, interval=interval)
            else:  # folders (DCI, DOCCI), or --limit: records, out of the limit when there is one
                self.plain = PlainProgress("prepare", "records", total=limit, interval=interval)
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
        self.read = max(self.read, records)
        self.counts = (records, rejects, shards)
        if self.bar is not None:
            self.bar.update(self.task, read=self.read, records=records, rejects=rejects, shards=shards)
        self._plain_line()

    def reading(self, read: int) -> None:
        """Records read from the inputs so far (ahead of `update`, which counts finished chunks)."""
        self.read = max(self.read, read)
        if self.bar is not None:
            self.bar.update(self.task, read=read)
        self._plain_line()

    def _extra(self) -> str:
        records, rejects, shards = self.counts
        return f"{self.read:,} records read, {records:,} done, {rejects:,} rejects, {shards} shards"

    def _plain_line(self) -> None:
        if self.plain is not None and self.plain.due():
            done = self.position() if self.position is not None else self.read
            self.plain.update(done, extra=self._extra())

    def close(self, finished: bool = False) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        if self.plain is not None and finished:
            if self.position is None:
                done = self.read
            else:  # every input read to its end (or, cut off, as far as it went)
                done = self.position.total
            self.plain.finish(done, self._extra())
            self.plain = None


def print_summary(manifest: dict[str, Any], out: str, resumed_shards: int = 0) -> None:
    """One screen: records, rejects by reason, shards, time and rate."""
    from caption_debias.runner import Summary

    c = manifest["counts"]
    Summary(
        "prepare",
        out,
        {
            "read": c["read"],
            "written": c["written"],
            "rejected": c["rejected"],
            "duplicate_keys": c.get("duplicate_keys", 0),
        },
        unit="records",
        outputs=len(manifest["shards"]),
        reused=resumed_shards,
        elapsed_s=manifest.get("elapsed_s") or 0.0,
        status="[green]complete[/]" if manifest["complete"] else "[red]INCOMPLETE (an input was cut off)[/]",
        reasons=c.get("rejects_by_reason") or {},
        reason_title="reject reason",
        details=f"{out}/rejects.jsonl" if c.get("rejects_by_reason") else None,
    ).print()
