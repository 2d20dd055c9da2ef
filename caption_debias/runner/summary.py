"""The end-of-run lines every stage prints: counts, outputs, time and rate, reasons, where the details are."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def rate_text(rate: float) -> str:
    """A rate for the summary: whole numbers from 10 up, two significant digits below (0.33, not 0)."""
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"


@dataclass
class Summary:
    """The end-of-run lines on stderr: counts, outputs, time and rate, reasons, where the details are.

    `counts` prints in order as "<unit> read N, written N, ..." (underscores as spaces);
    `notes` are further lines or rich renderables printed after the outputs line.
    """

    command: str
    out: str
    counts: dict[str, int]
    unit: str = "rows"
    outputs: int = 0
    outputs_noun: str = "shards"
    reused: int = 0
    elapsed_s: float = 0.0
    status: str | None = None
    reasons: dict[str, int] | None = None
    reason_title: str = "reason"
    details: str | None = None
    notes: list[Any] = field(default_factory=list)

    def print(self) -> None:
        from rich.console import Console
        from rich.table import Table

        console = Console(stderr=True, highlight=False)
        status = f": {self.status}" if self.status else ""
        console.print(f"[bold]{self.command}[/] -> {self.out}{status}")
        parts = [f"{k.replace('_', ' ')} {v:,}" for k, v in self.counts.items()]
        console.print(f"  {self.unit} " + ", ".join(parts))
        read = self.counts.get("read", 0)
        rate = read / self.elapsed_s if self.elapsed_s > 0 else 0.0
        again = f" ({self.reused} reused from an earlier run)" if self.reused else ""
        console.print(
            f"  {self.outputs_noun} {self.outputs:,}{again}, {self.elapsed_s:.1f} s, {rate_text(rate)} {self.unit}/s"
        )
        if self.reasons:
            table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
            table.add_column(self.reason_title)
            table.add_column("count", justify="right")
            items = list(self.reasons.items())
            for reason, n in items[:12]:
                table.add_row(reason, f"{n:,}")
            if len(items) > 12:
                table.add_row(f"... {len(items) - 12} more reasons", f"{sum(n for _, n in items[12:]):,}")
            console.print(table)
        for note in self.notes:
            console.print(note, soft_wrap=isinstance(note, str))
        if self.details:
            console.print(f"  details: {self.details}")
