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
