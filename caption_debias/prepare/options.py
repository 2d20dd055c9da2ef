"""Options of a prepare run (the CLI's flags), and which of them shape the output."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

DEFAULT_SHARD_ROWS = 20_000
# Options that change nothing in the output: a resumed run may change them freely.
RUNTIME_ONLY = frozenset({"workers", "overwrite", "quiet", "max_in_flight", "engine", "ray_address", "log_interval"})
ENGINES = ("local", "ray")


@dataclass
class PrepareOptions:
    format: str = "auto"
    image_root: str | None = None
    image_column: str = "image"
    caption_column: str = "caption"
    key_column: str = "key"
    split: str | None = None
    shard_rows: int = DEFAULT_SHARD_ROWS
    workers: int = 1
    overwrite: bool = False
    quiet: bool = False
    segmenter: str = "fast"
    summary: str = "detect"
    # reader options
    dci_caption: str = "short+extra"
    # chunks queued or in work at once per worker (bounds memory); runtime only
    max_in_flight: int = 2
    # where chunks run (output is identical either way; see prepare/ray_engine.py); runtime only
    engine: str = "local"
    ray_address: str | None = None
    # only the first N records read (over all inputs, rejects included); the manifest records it
    limit: int | None = None
    # without a terminal: one plain progress line every this many seconds; runtime only
    log_interval: float = 30.0

    def validate(self) -> None:
        from caption_debias.errors import UserError
        from caption_debias.readers import FORMATS
        from caption_debias.readers.dci import CAPTION_MODES
        from caption_debias.text.segment import SEGMENTERS
        from caption_debias.text.summary import SUMMARY_MODES

        if self.format not in FORMATS:
            raise UserError(f"unknown format {self.format!r} (choose from {', '.join(FORMATS)})")
        if self.segmenter not in SEGMENTERS:
            raise UserError(f"unknown segmenter {self.segmenter!r} (choose from {', '.join(SEGMENTERS)})")
        if self.summary not in SUMMARY_MODES:
            raise UserError(f"unknown summary mode {self.summary!r} (choose from {', '.join(SUMMARY_MODES)})")
        if self.dci_caption not in CAPTION_MODES:
            raise UserError(f"unknown DCI caption mode {self.dci_caption!r} (choose from {', '.join(CAPTION_MODES)})")
        if self.engine not in ENGINES:
            raise UserError(f"unknown engine {self.engine!r} (choose from {', '.join(ENGINES)})")
        if self.shard_rows < 1:
            raise UserError(f"--shard-rows must be at least 1 (got {self.shard_rows})")
        if self.workers < 1:
            raise UserError(f"--workers must be at least 1 (got {self.workers})")
        if self.limit is not None and self.limit < 1:
            raise UserError(f"--limit must be at least 1 (got {self.limit})")
        if self.log_interval <= 0:
            raise UserError(f"--log-interval must be > 0 seconds (got {self.log_interval})")
        if self.image_root is not None and not Path(self.image_root).is_dir():
            raise UserError(f"--image-root {self.image_root}: no such folder")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def output_shaping(self) -> dict[str, Any]:
        """The options a resumed run must share with the run it continues."""
        shaping = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in RUNTIME_ONLY}
        if shaping["limit"] is None:  # folders prepared before --limit existed resume as they were
            del shaping["limit"]
        return shaping
