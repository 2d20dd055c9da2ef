"""Progress for long commands, on a terminal and off it.

On a terminal each command keeps its rich display. Without one (a pipe, a SLURM log, CI)
a rich bar would print nothing useful, so `PlainProgress` prints one plain line every
`--log-interval` seconds instead:

    caption-debias prepare: 412.3 MB / 1.49 GB (27.7%), 8.1 MB/s, ETA 2m13s, 301,220 records read

Use from any command (prepare, stats, train, curate, pack):

    from caption_debias.progress import PlainProgress, on_terminal

    if not quiet and not on_terminal():
        plain = PlainProgress("pack", unit="images", total=n, interval=options.log_interval)
    ...
    plain.update(done, extra="3 tars")  # cheap; prints only when the interval has passed
    plain.finish(done)                  # one last line, whatever the interval

`total=None` (unknown) gives "done, rate" without percent or ETA; `unit="bytes"` prints
sizes (KB, MB, GB) and rates per second of them.

`Progress` is the whole thing for a command's main loop: a rich bar on a terminal, a
`PlainProgress` off it, nothing with --quiet:

    with Progress("pack", "rows", total=n, quiet=options.quiet, interval=options.log_interval) as progress:
        for ...:
            progress.update(rows_done, extra=f"{tars} tars")
"""

from __future__ import annotations

import sys
import time
from contextvars import ContextVar
from typing import Callable, TextIO

DEFAULT_INTERVAL = 30.0


def on_terminal() -> bool:
    """Whether stderr is a terminal, as rich decides it (FORCE_TERMINAL / TTY_COMPATIBLE respected)."""
    from rich.console import Console

    return Console(stderr=True).is_terminal


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}" if n < 100 else f"{n:.0f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


class PlainProgress:
    """One plain line every `interval` seconds: done / total (percent), rate, ETA, and extra text."""

    def __init__(
        self,
        label: str,
        unit: str,
        total: float | None = None,
        interval: float = DEFAULT_INTERVAL,
        start: float = 0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.unit, self.total, self.interval = label, unit, total, interval
        self.start, self.stream, self.clock = start, stream, clock
        self.t0 = self.last = clock()
        self.done = start

    def _amount(self, n: float) -> str:
        return format_bytes(n) if self.unit == "bytes" else f"{int(n):,}"

    def line(self, done: float, extra: str = "") -> str:
        """The progress line for `done` now (no trailing newline)."""
        elapsed = self.clock() - self.t0
        rate = (done - self.start) / elapsed if elapsed > 0 else 0.0
        unit = "" if self.unit == "bytes" else f" {self.unit}"
        parts = []
        if self.total:
            pct = 100.0 * done / self.total
            parts.append(f"{self._amount(done)} / {self._amount(self.total)}{unit} ({pct:.1f}%)")
        else:
            parts.append(f"{self._amount(done)}{unit}")
        per = f"{format_bytes(rate)}/s" if self.unit == "bytes" else f"{rate:,.2f} {self.unit}/s"
        parts.append(per)
        if self.total and rate > 0 and done < self.total:
            parts.append(f"ETA {format_duration((self.total - done) / rate)}")
        if extra:
            parts.append(extra)
        return f"caption-debias {self.label}: " + ", ".join(parts)

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stderr, flush=True)

    def due(self) -> bool:
        """Whether the next `update` prints (for callers whose `done` costs something to measure)."""
        return self.clock() - self.last >= self.interval

    def update(self, done: float, extra: str = "", total: float | None = None) -> None:
        """Record progress; print a line when `interval` seconds have passed since the last one."""
        self.done = done
        if total is not None:
            self.total = total
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self._print(self.line(done, extra))

    def finish(self, done: float | None = None, extra: str = "") -> None:
        """The last line, printed whatever the interval."""
        self._print(self.line(self.done if done is None else done, extra))


class Progress:
    """A command's progress: a rich bar on a terminal, plain lines every `interval` seconds off it
    (PlainProgress, with a last line at the end), nothing when `quiet`."""

    def __init__(
        self, label: str, unit: str, total: float | None = None, quiet: bool = False, interval: float = DEFAULT_INTERVAL
    ) -> None:
        self.label, self.unit, self.total = label, unit, total
        self.bar = self.plain = None
        self.done: float = 0
        self.extra = ""
        if quiet:
            return
        if not on_terminal():
            self.plain = PlainProgress(label, unit, total=total, interval=interval)
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import (
            Progress as RichProgress,
        )

        self.bar = RichProgress(
            TextColumn(f"[bold]{label}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(f"{unit} {{task.fields[extra]}}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.bar.add_task(label, total=total, extra="")

    def __enter__(self) -> "Progress":
        self._token = _ACTIVE.set(self)
        if self.bar is not None:
            self.bar.start()
        return self

    def update(self, done: float, extra: str = "", total: float | None = None) -> None:
        self.done, self.extra = done, extra
        if total is not None:
            self.total = total
        if self.bar is not None:
            self.bar.update(self.task, completed=done, extra=extra, total=self.total)
        elif self.plain is not None:
            self.plain.update(done, extra=extra, total=total)

    def __exit__(self, exc_type, *exc) -> None:
        _ACTIVE.reset(self._token)
        if self.bar is not None:
            self.bar.stop()
        elif self.plain is not None and exc_type is None:
            self.plain.finish(self.done, extra=self.extra)


# The Progress a command's loop runs under, for library code many calls deep (the encoders of
# eval and probe) to report work to without each caller passing it down.
_ACTIVE: ContextVar[Progress | None] = ContextVar("caption_debias_progress", default=None)


def add_work(n: float) -> None:
    """More work found (e.g. a model's images and texts about to be encoded): the total grows by n."""
    progress = _ACTIVE.get()
    if progress is not None:
        progress.update(progress.done, progress.extra, total=(progress.total or 0) + n)


def advance(n: float, extra: str | None = None) -> None:
    """n more units done, in whatever Progress is active (none: nothing)."""
    progress = _ACTIVE.get()
    if progress is not None:
        progress.update(progress.done + n, progress.extra if extra is None else extra)
