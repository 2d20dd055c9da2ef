"""ExportOptions: every option of `caption-debias export`, the one source of defaults and help.

The CLI (cli/export_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's; model/export.py writes the folder.
"""

from __future__ import annotations

from dataclasses import dataclass

from caption_debias.options import OverwriteOptions, QuietOptions, option


@dataclass
class ExportOptions(OverwriteOptions, QuietOptions):
    """Every option of `caption-debias export` (the CLI reads defaults and --help from here)."""

    pretrained: str | None = option(None, "Architecture name when RUN is a bare checkpoint file.")
    interpolate: float | None = option(
        None,
        "WiSE-FT: write (1 - ALPHA) x the run's start + ALPHA x the run (RUN a run folder; 0 = the start "
        "stretched as train stretched it, 1 = the run).",
        min=0.0,
        max=1.0,
    )
