"""Progress for long commands, on a terminal and off it: one `Progress` for every command.

On a terminal a command shows a rich bar. Without one (a pipe, a SLURM log, CI) a bar would
print nothing useful, so it prints one plain line as soon as work moves (once the first two
seconds have passed: a quick command, or one that fails at once, prints only its end) and then
one every `--log-interval` seconds:

    caption-debias prepare: 412.3 MB / 1.49 GB (27.7%), 8.1 MB/s, ETA 2m13s, 301,220 records read

With --quiet, nothing. The same object is all three:

    with Progress("pack", "rows", total=n, quiet=options.quiet, interval=options.log_interval) as progress:
        for ...:
            progress.update(rows_done, extra=f"{tars} tars")  # cheap: prints only when a line is due
    # leaving the block without an error prints the last line, whatever the interval

or without the block: `progress.update(...)` then `progress.close(finished=True)`.

- `total=None`: unknown (no percent, no ETA); `unit="bytes"` prints sizes (KB, MB, GB).
- `extra`: a callback for the text after the counts, called only when a line is printed
  (prepare's records and rejects); `update(done, extra="...")` gives it as text instead.
- `progress.due()`: whether the next `update` shows, for callers whose count costs something.
- `progress.note("loading model ...")`: one line now saying what the command is doing
  (`caption-debias: loading model ...`, as every note); `say(text, quiet)` is the same before
  any Progress exists (and before heavy imports).
- `below="steps"`: work reported from code many calls below the command's loop
  (`add_work`/`advance`, e.g. a fine-tune's steps in the demo) counts apart from the main count
  and shows after it. Without `below` that work is the main count (probe's encodings).
- `phases=True`: the main count is the rows a user counts in (score, eval); a task of them is
  worked through in named phases (`begin(rows, phases)`, `phase("encoding images")`, `end()`),
  each an equal share of its rows filled by the work below, so the rows move batch by batch and
  never back; the rate counts from the first task's start.
- `each(done)`: a piece the user counts is done (pack's tar): its line now, at most once a second.
  The last line is printed once: not again at the close when the line before said the same.
  `rate=False` (the demo's stage count, whose stages differ in length by minutes): the line
  shows no rate or ETA of the stages; the work below (an arm's steps) gives them instead.
- `heartbeat=True`: a thread prints the line every interval (at most once a second) even when
  the caller cannot update (a demo stage, a long shard in a worker process).
- `clock`: injectable, so tests drive the times without sleeping.

A Progress entered as a block is the active one: `add_work(n)` and `advance(n)` from library
code below reach it without it being passed down. A quiet Progress is never active, so work
reported under it reaches the one outside it (a quiet `train` inside the demo counts its steps
in the demo's line).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextvars import ContextVar, Token
from typing import Any, Callable, TextIO

DEFAULT_INTERVAL = 30.0
BAR_REFRESH = 0.1  # seconds between bar updates a caller's `due()` asks for
HEARTBEAT_MIN = 1.0  # a heartbeat prints at most once a second, whatever --log-interval says
# Work that moves in a progress's first seconds needs no line yet: a quick command (or one that
# fails at once) prints only its end; after that, the first move prints at once.
FIRST_LINE_AFTER = 2.0


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


def say(text: str, quiet: bool = False, stream: TextIO | None = None) -> None:
    """`caption-debias: TEXT` on stderr now (what the command is about to do); nothing when quiet.
    Imports nothing heavy, so a command can say what it loads before it imports torch. A width the
    environment states (COLUMNS, as rich reads it) is kept: a long path wraps, indented."""
    if quiet:
        return
    print(fit(f"caption-debias: {text}"), file=stream or sys.stderr, flush=True)


def fit(line: str) -> str:
    """`line` wrapped, indented, at a width the environment states (COLUMNS, as rich reads it)."""
    width = os.environ.get("COLUMNS", "")
    if width.isdigit() and len(line) > int(width) > 20:
        import textwrap

        line = "\n".join(textwrap.wrap(line, int(width), subsequent_indent="    ", break_on_hyphens=False))
    return line


class Count:
    """done of total units, with the rate since the work started (the clock's `t0`)."""

    def __init__(self, unit: str, total: float | None, start: float, t0: float) -> None:
        self.unit, self.total, self.start, self.t0 = unit, total, start, t0
        self.done = start
        self.text = ""
        self.timed = False  # the work below: whether its clock restarted at its first unit done

    def amount(self, n: float) -> str:
        return format_bytes(n) if self.unit == "bytes" else f"{int(n):,}"

    def describe(self, now: float, rate: bool = True) -> list[str]:
        """["5 / 10 rows (50.0%)", "2.00 rows/s", "ETA 3s"]: the counts, then rate and ETA when asked."""
        unit = "" if self.unit == "bytes" else f" {self.unit}"
        if self.total:
            pct = 100.0 * self.done / self.total
            parts = [f"{self.amount(self.done)} / {self.amount(self.total)}{unit} ({pct:.1f}%)"]
        else:
            parts = [f"{self.amount(self.done)}{unit}"]
        if not rate:
            return parts
        elapsed = now - self.t0
        per_s = (self.done - self.start) / elapsed if elapsed > 0 else 0.0
        parts.append(f"{format_bytes(per_s)}/s" if self.unit == "bytes" else f"{per_s:,.2f} {self.unit}/s")
        if self.total and per_s > 0 and self.done < self.total:
            parts.append(f"ETA {format_duration((self.total - self.done) / per_s)}")
        return parts


class Span:
    """`units` of the main count worked through in named phases (score's shard: its rows, images
    then texts): each phase counts an equal share of the units, in proportion to its own work done
    (`add_work`/`advance` from below), so the main count moves within a task and never back."""

    def __init__(self, base: float, units: float, phases: list[str]) -> None:
        self.base, self.units, self.phases = base, units, phases
        self.k, self.done, self.total = -1, 0.0, 0.0

    def start(self, name: str) -> None:
        k = self.phases.index(name) if name in self.phases else self.k
        if k > self.k:
            self.k, self.done, self.total = k, 0.0, 0.0

    def reached(self) -> float:
        if self.k < 0 or not self.phases:
            return self.base
        share = min(1.0, self.done / self.total) if self.total else 0.0
        return self.base + self.units * (self.k + share) / len(self.phases)


class Progress:
    """A command's progress: a rich bar on a terminal, plain lines off it, nothing when `quiet`."""

    def __init__(
        self,
        label: str,
        unit: str = "rows",
        total: float | None = None,
        *,
        quiet: bool = False,
        interval: float = DEFAULT_INTERVAL,
        extra: Callable[[], str] | None = None,
        start: float = 0,
        rate: bool = True,
        below: str | None = None,
        heartbeat: bool = False,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        terminal: bool | None = None,
        phases: bool = False,
    ) -> None:
        self.label, self.interval, self.clock, self.stream = label, interval, clock, stream
        self.extra_fn, self.rate = extra, rate
        now = clock()
        self.count = Count(unit, total, start, now)
        self.below = Count(below, None, 0, now) if below else None
        self.started = self.last = now  # when it started; when the last plain line was printed
        self.moved = False  # whether any work has moved since the start
        self.printed = False  # whether a plain line was printed yet
        self.phases = phases  # whether work below moves the count through `begin` spans (score, eval)
        self.span: Span | None = None  # the task being worked through in phases (`begin`)
        self.phase = ""  # what the work is now ("encoding images"), shown after the counts
        self._said = ""  # the extra text of the last line made
        self.shown: tuple | None = None  # what the last plain line showed: the last one is not printed twice
        self.quiet = quiet
        self.mode = "quiet" if quiet else ("bar" if (on_terminal() if terminal is None else terminal) else "plain")
        self.lock = threading.RLock()  # a heartbeat thread and the caller print through one place
        self.bar: Any = None
        self.closed = False
        self._token: Token[Progress | None] | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.mode == "bar":
            self._start_bar()
        if heartbeat and self.mode == "plain":
            self._ticker = threading.Thread(target=self._beat, daemon=True)
            self._ticker.start()

    # -- what the caller reads -------------------------------------------------------------

    @property
    def done(self) -> float:
        return self.count.done

    @property
    def total(self) -> float | None:
        return self.count.total

    @property
    def unit(self) -> str:
        return self.count.unit

    def line(self) -> str:
        """The plain line for the counts now (no trailing newline)."""
        now = self.clock()
        parts = self.count.describe(now, self.rate)
        if self.phase:
            parts.append(self.phase)
        text = self._said = self._extra_text()
        if text:
            parts.append(text)
        if self.below is not None and (self.below.total or self.below.done):
            parts.extend(self.below.describe(now, rate=not self.rate and self.below.done > self.below.start))
            if self.below.text:
                parts.append(self.below.text)
        return f"caption-debias {self.label}: " + ", ".join(parts)

    def _extra_text(self) -> str:
        if self.count.text:
            return self.count.text
        return self.extra_fn() if self.extra_fn is not None else ""

    def due(self) -> bool:
        """Whether the next `update` shows (a plain line, or a bar refresh)."""
        if self.mode == "quiet":
            return False
        if self.mode == "bar":
            return not self.moved or self.clock() - self.last >= BAR_REFRESH
        return self._line_due(self.clock()) or not self.moved

    def _line_due(self, now: float) -> bool:
        """A plain line is due: an interval after the last one, or, before the first, as soon as
        work has moved once FIRST_LINE_AFTER seconds have passed."""
        if now - self.last >= self.interval:
            return True
        return not self.printed and self.moved and now - self.started >= FIRST_LINE_AFTER

    # -- what the caller tells it ----------------------------------------------------------

    def update(self, done: float | None = None, extra: str | None = None, total: float | None = None) -> None:
        """Record progress (done so far, the text after the counts, a new total); show it when due."""
        with self.lock:
            if total is not None:
                self.count.total = total
            if extra is not None:
                self.count.text = extra
            if done is not None:
                self.moved = self.moved or done != self.count.start
                self.count.done = done
                self.span, self.phase = None, ""  # a task finished: its phases are over
            self._show()

    def begin(self, units: float, phases: tuple[str, ...] | list[str]) -> None:
        """The next `units` of the count are worked through in `phases` (named in the line as each
        starts, `set_phase`); work below moves the count within them. The next `update(done)` ends it."""
        with self.lock:
            if self.phases:
                self.span = Span(self.count.done, units, list(phases))
                if not self.moved:  # the rate counts from the first work, not the imports and loads before it
                    self.count.t0 = self.clock()

    def end(self) -> None:
        """The `begin` span's work is done: the count stands at its end."""
        with self.lock:
            if self.span is not None:
                self._reach(self.span.base + self.span.units)
                self.span, self.phase = None, ""
                self._show()

    def set_phase(self, name: str) -> None:
        """The work is now `name` ("encoding texts"): shown after the counts; within a `begin` span,
        its phase's share of the units fills as the work below is done."""
        if not self.phases:
            return
        with self.lock:
            self.phase = name
            if self.span is not None:
                self.span.start(name)
            self._show()

    def _reach(self, done: float) -> None:
        """The count moved to `done` from below, never back."""
        if done > self.count.done:
            self.count.done = done
            self.moved = True

    def each(self, done: float, extra: str | None = None) -> None:
        """A piece the user counts is finished (pack's tar): its line now, whatever the interval,
        at most once a second (many small pieces stay readable)."""
        with self.lock:
            if self.mode == "plain" and self.clock() - self.last >= HEARTBEAT_MIN:
                self.tick(done, extra)
            else:
                self.update(done, extra)

    def advance(self, n: float = 1, extra: str | None = None) -> None:
        self.update(self.count.done + n, extra)

    def add_work(self, n: float) -> None:
        """More work found: the total grows by n."""
        self.update(total=(self.count.total or 0) + n)

    def reset_below(self, unit: str) -> None:
        """Count the work below afresh in `unit` (the demo, at each stage); its first unit done prints at once."""
        with self.lock:
            self.below = Count(unit, None, 0, self.clock())

    def note(self, text: str) -> None:
        """One line now, `caption-debias: TEXT` (above the bar on a terminal); nothing when quiet."""
        if self.mode == "bar":
            self.bar.console.print(f"caption-debias: {text}", markup=False, highlight=False)
        elif self.mode == "plain":
            with self.lock:
                say(text, stream=self.stream)

    def tick(self, done: float | None = None, extra: str | None = None) -> None:
        """Record `done` and `extra` and print the plain line now, whatever the interval (a stage
        started or ended)."""
        with self.lock:
            if extra is not None:
                self.count.text = extra
            if done is not None:
                self.moved = self.moved or done != self.count.start
                self.count.done = done
            if self.mode == "plain":
                self.last = self.clock()
                self._print(self.line())
            elif self.mode == "bar":
                self._refresh_bar()

    def beat(self) -> None:
        """What the heartbeat prints: the line, when none was printed for an interval."""
        with self.lock:
            if self.mode == "plain" and self.clock() - self.last >= self.interval:
                self.tick()

    def close(self, finished: bool = False, done: float | None = None) -> None:
        """Stop the bar and the heartbeat; `finished`: print the last plain line (a failed run prints
        none), at `done` when given."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if done is not None:
                self.count.done = done
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self.bar is not None:
            self.bar.stop()
        if self.mode == "plain" and finished and self.shown != self._state():
            self._print(self.line())

    def __enter__(self) -> "Progress":
        if self.mode != "quiet":
            self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self._token is not None:
            _ACTIVE.reset(self._token)
            self._token = None
        self.close(finished=exc_type is None)

    # -- showing it ------------------------------------------------------------------------

    def _state(self, extra: str | None = None) -> tuple:
        """What a line shows but its rate: two lines of the same state say the same."""
        below = (self.below.done, self.below.total, self.below.text) if self.below is not None else None
        extra = self._extra_text() if extra is None else extra
        return (self.count.done, self.count.total, self.phase, extra, below)

    def _print(self, text: str) -> None:
        self.printed = True
        self.shown = self._state(self._said)  # the extra text just shown: its callback not called again
        print(fit(text), file=self.stream or sys.stderr, flush=True)

    def _show(self) -> None:
        if self.mode == "plain":
            now = self.clock()
            if self._line_due(now):
                self.last = now
                self._print(self.line())
        elif self.mode == "bar" and self.due():
            self.last = self.clock()
            self._refresh_bar()

    def _beat(self) -> None:
        """Wake when the next line is due (at most once a second), print it if nothing did."""
        while not self._stop.wait(max(HEARTBEAT_MIN, self.interval - (self.clock() - self.last))):
            self.beat()

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        count, remaining = _bar_columns()
        self.bar = RichProgress(
            TextColumn("[bold]{task.description}[/]"),
            BarColumn(),
            count,
            TextColumn("{task.fields[extra]}"),
            TimeElapsedColumn(),
            remaining,
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.bar.add_task(
            self.label, total=self.count.total, completed=self.count.done, extra="", count=self.count, eta=self.rate
        )
        self.bar.start()

    def _refresh_bar(self) -> None:
        parts = [self.phase, self._extra_text()]
        if self.below is not None and (self.below.total or self.below.done):
            timed = not self.rate and self.below.done > self.below.start
            parts += [*self.below.describe(self.clock(), rate=timed), self.below.text]
        text = ", ".join(p for p in parts if p)
        self.bar.update(self.task, completed=self.count.done, total=self.count.total, extra=text)


def _bar_columns() -> tuple[Any, Any]:
    """rich columns for a Count: done / total in its unit (sizes for bytes), and rich's time
    remaining, left out where the count's rate says nothing (stages)."""
    from rich.progress import ProgressColumn, TimeRemainingColumn
    from rich.text import Text

    class CountColumn(ProgressColumn):
        def render(self, task) -> Text:
            count: Count = task.fields["count"]
            unit = "" if count.unit == "bytes" else f" {count.unit}"
            total = f" / {count.amount(count.total)}" if count.total else ""
            return Text(f"{count.amount(count.done)}{total}{unit}")

    class RemainingColumn(TimeRemainingColumn):
        def render(self, task) -> Text:
            return super().render(task) if task.fields.get("eta", True) else Text("")

    return CountColumn(), RemainingColumn()


# The Progress a command's loop runs under, for library code many calls deep (the encoders of
# eval, probe and score, a quiet training run's steps) to report work to without each caller
# passing it down.
_ACTIVE: ContextVar[Progress | None] = ContextVar("caption_debias_progress", default=None)


def active() -> Progress | None:
    return _ACTIVE.get()


def begin(units: float, phases: tuple[str, ...] | list[str]) -> None:
    """`Progress.begin` on the active Progress (none: nothing)."""
    progress = _ACTIVE.get()
    if progress is not None:
        progress.begin(units, phases)


def end() -> None:
    """`Progress.end` on the active Progress (none: nothing)."""
    progress = _ACTIVE.get()
    if progress is not None:
        progress.end()


def phase(name: str) -> None:
    """`Progress.set_phase` on the active Progress (none: nothing)."""
    progress = _ACTIVE.get()
    if progress is not None:
        progress.set_phase(name)


def note(text: str) -> None:
    """A note through the active Progress (`Progress.note`); nothing when none is active (quiet)."""
    progress = _ACTIVE.get()
    if progress is not None:
        progress.note(text)


def add_work(n: float) -> None:
    """More work found (e.g. a model's images and texts about to be encoded): the total grows by n."""
    progress = _ACTIVE.get()
    if progress is None:
        return
    if progress.span is not None and progress.span.k >= 0:  # the current phase's work
        with progress.lock:
            progress.span.total += n
            progress._show()
        return
    if progress.below is None:
        progress.add_work(n)
        return
    with progress.lock:
        below = progress.below
        if not below.total and not below.done:  # the work's clock starts when it is first known
            below.t0 = progress.clock()
        below.total = (below.total or 0) + n
        progress._show()


def advance(n: float, extra: str | None = None) -> None:
    """n more units done, in whatever Progress is active (none: nothing)."""
    progress = _ACTIVE.get()
    if progress is None:
        return
    span = progress.span
    if span is not None and span.k >= 0:
        with progress.lock:
            span.done += n
            progress._reach(span.reached())
            progress._show()
        return
    if progress.below is None:
        progress.advance(n, extra)
        return
    with progress.lock:
        below = progress.below
        below.done += n
        if extra is not None:
            below.text = extra
        if not below.timed and n:
            # the rate counts from its first unit done, without that unit's one-time costs (a data
            # cache filled, lazy set-up); that unit prints at once (an arm's first step) unless the
            # progress itself is in its first seconds
            now = progress.clock()
            below.timed, below.start, below.t0 = True, below.done, now
            progress.moved = True
            if now - progress.started >= FIRST_LINE_AFTER:
                progress.last = float("-inf")
        progress._show()
