"""Progress: the shared `caption_debias.progress.Progress` over bytes read of the inputs' size
where every input is a local file (a rich bar on a terminal, a plain line every --log-interval
seconds off it), records read elsewhere; nothing with --quiet. And the end-of-run summary."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from caption_debias import storage
from caption_debias.progress import DEFAULT_INTERVAL, Progress, format_bytes


class InputPosition:
    """Bytes read so far of the inputs' total size, when every input is a local file: the inputs
    before the one open now, plus the open one's file position as the OS reports it (psutil, so
    no reader has to count; where the OS gives no positions, whole inputs only)."""

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
            position = open_now.get(path)
            if position is not None:
                self.done = max(self.done, sum(self.sizes[:i]) + min(position, self.sizes[i]))
                break
        return self.done


def input_position(inputs: list[Path], limit: int | None) -> InputPosition | None:
    """Bytes as the measure of progress where every input is a local file and the run reads them
    whole; None (count records) for folders (DCI, DOCCI), object-store inputs (the OS knows no
    position of them) and --limit."""
    if not inputs or limit is not None:
        return None
    if any(storage.is_remote(p) or not Path(p).is_file() for p in inputs):
        return None
    return InputPosition([Path(p) for p in inputs])


class PrepareProgress:
    """Records read, done and rejected and shards written, as chunks finish, on the shared Progress."""

    def __init__(
        self,
        quiet: bool,
        inputs: list[Path] | None = None,
        interval: float = DEFAULT_INTERVAL,
        limit: int | None = None,
    ) -> None:
        self.read = 0
        self.counts = (0, 0, 0)
        self.position = None if quiet else input_position(inputs or [], limit)
        total: int | None
        if self.position is not None:
            unit, total = "bytes", self.position.total
        else:
            unit, total = "records", limit
        self.progress = Progress("prepare", unit, total, quiet=quiet, interval=interval, extra=self._extra)
        if inputs:
            size = f" ({format_bytes(self.position.total)})" if self.position is not None else ""
            names = ", ".join(Path(str(p)).name for p in inputs[:3]) + (", ..." if len(inputs) > 3 else "")
            self.progress.note(f"reading {len(inputs)} input{'s' if len(inputs) > 1 else ''}{size}: {names}")

    def update(self, records: int, rejects: int, shards: int) -> None:
        self.read = max(self.read, records)
        self.counts = (records, rejects, shards)
        self._show()

    def reading(self, read: int) -> None:
        """Records read from the inputs so far (ahead of `update`, which counts finished chunks)."""
        self.read = max(self.read, read)
        self._show()

    def _extra(self) -> str:
        records, rejects, shards = self.counts
        return f"{self.read:,} records read, {records:,} done, {rejects:,} rejects, {shards} shards"

    def _show(self) -> None:
        if self.progress.due():  # the position costs a system call: taken only when it shows
            self.progress.update(self.position() if self.position is not None else self.read)

    def close(self, finished: bool = False) -> None:
        # finished: every input read to its end (or, cut off, as far as it went)
        self.progress.close(finished, done=self.position.total if self.position is not None else self.read)


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
