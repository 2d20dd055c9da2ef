"""Options of a prepare run (the CLI's flags), and which of them shape the output."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from caption_debias.options import LOG_INTERVAL_HELP, QUIET_HELP, option

DEFAULT_SHARD_ROWS = 20_000
# Options that change nothing in the output: a resumed run may change them freely.
RUNTIME_ONLY = frozenset({"workers", "overwrite", "quiet", "max_in_flight", "engine", "ray_address", "log_interval"})
ENGINES = ("local", "ray")


@dataclass
class PrepareOptions:
    """Every option of `caption-debias prepare` (the CLI reads defaults and --help from here)."""

    format: str = option(
        "auto",
        "Input format: auto (from path and first bytes), sharegpt4v, dci, docci, urban1k, coco, table, "
        "img2dataset, dreamlip, recap-datacomp, pixelprose (docs/formats.md).",
    )
    image_root: str | None = option(None, "Folder the image paths are relative to (default: the dataset's own root).")
    image_column: str = option("image", "Table/img2dataset column holding the image path or URL.")
    caption_column: str = option(
        "caption",
        "Table/img2dataset column holding the caption; dreamlip: comma-separated columns, one record each "
        "(default longSV_captions); recap-datacomp: re_caption (default) or org_caption; pixelprose: vlm_caption.",
    )
    key_column: str = option("key", "Table column holding a record id (keys are derived when absent).")
    split: str | None = option(None, "Split name for records whose input names none.")
    shard_rows: int = option(DEFAULT_SHARD_ROWS, "Records per shard (shard boundaries depend only on this).")
    workers: int = option(1, "Worker processes for the text steps (output is identical for any value).")
    overwrite: bool = option(False, "Delete an earlier run in --out and start over (default: resume it).")
    quiet: bool = option(False, QUIET_HELP)
    segmenter: str = option("fast", "Sentence splitter: fast, pysbd or spacy.")
    summary: str = option("detect", "Summary-sentence rule: detect, first or none.")
    # reader options
    dci_caption: str = option(
        "short+extra", "DCI caption: short+extra (joined by a newline), extra (Long-DCI), short+extra+masks."
    )
    max_in_flight: int = option(2, "Chunks queued or in work at once per worker (bounds memory).")
    engine: str = option(
        "local",
        "Where the text steps run: local (process pool) or ray (Ray Data tasks; same output). See docs/scale.md.",
    )
    ray_address: str | None = option(
        None,
        "Ray cluster to join with --engine ray (default: $RAY_ADDRESS, else a local Ray runtime with --workers CPUs).",
    )
    limit: int | None = option(None, "Only the first N records (to try a large dump in seconds); the manifest says so.")
    log_interval: float = option(30.0, LOG_INTERVAL_HELP)

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
