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
"""

from __future__ import annotations

import sys
import time
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
