"""Options of `caption-debias demo` (the CLI's flags): defaults and help in one place."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from caption_debias.demo.config import PRESETS, DemoConfig, preset
from caption_debias.errors import UserError
from caption_debias.options import ProgressOptions, option


@dataclass
class DemoOptions(ProgressOptions):
    """Every option of `caption-debias demo` (the CLI reads defaults and --help from here);
    `config(out)` is the run's DemoConfig, from its preset. --quiet still writes results.json and report.html."""

    seed: int = option(0, "Seed of the worlds and of every training run.")
    quick: bool = option(
        False,
        "Half the worlds and half the steps (same as --preset quick): about half the time, the effect still shown.",
    )
    preset: str = option(
        "full",
        "full (the measured demo) | quick | v1 (the first demo: layouts world, its own stage 1; docs/demo.md).",
        choices=PRESETS,
    )

    def check(self) -> None:
        if self.quick and self.preset not in ("full", "quick"):
            raise UserError(f"--quick is --preset quick; it cannot go with --preset {self.preset}")

    def config(self, out: Path) -> DemoConfig:
        self.validate()
        return preset("quick" if self.quick else self.preset, out, self.seed)
