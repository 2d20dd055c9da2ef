"""ExportOptions: every option of `caption-debias export`, the one source of defaults and help.

The CLI (cli/export_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's; model/export.py writes the folder.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from caption_debias.options import QUIET_HELP, option


@dataclass
class ExportOptions:
    """Every option of `caption-debias export` (the CLI reads defaults and --help from here)."""

    pretrained: str | None = option(None, "Architecture name when RUN is a bare checkpoint file.")
    overwrite: bool = option(False, "Replace a non-empty --out folder.")
    quiet: bool = option(False, QUIET_HELP)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
