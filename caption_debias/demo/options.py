"""Options of `caption-debias demo` (the CLI's flags): defaults and help in one place."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from caption_debias.demo.config import DemoConfig, preset
from caption_debias.errors import UserError
from caption_debias.options import LOG_INTERVAL_HELP, option
from caption_debias.progress import DEFAULT_INTERVAL


@dataclass
class DemoOptions:
    """Every option of `caption-debias demo` (the CLI reads defaults and --help from here);
    `config(out)` is the run's DemoConfig, from its preset."""

    seed: int = option(0, "Seed of the worlds and of every training run.")
    quick: bool = option(
        False, "Smaller worlds and budgets (same as --preset quick): a smoke run of every stage, not a result."
    )
    preset: str = option(
        "full", "full (the measured demo) | quick | v1 (the first demo: layouts world, its own stage 1; docs/demo.md)."
    )
    quiet: bool = option(False, "No progress display and no summary (results.json and report.html are written).")
    log_interval: float = option(DEFAULT_INTERVAL, LOG_INTERVAL_HELP)

    def validate(self) -> "DemoOptions":
        if self.quick and self.preset not in ("full", "quick"):
            raise UserError(f"--quick is --preset quick; it cannot go with --preset {self.preset}")
        return self

    def config(self, out: Path) -> DemoConfig:
        self.validate()
        return preset("quick" if self.quick else self.preset, out, self.seed)
