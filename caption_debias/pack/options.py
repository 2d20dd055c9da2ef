"""Options of a pack run (the CLI's flags), and which of them shape the output."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from caption_debias.errors import UserError
from caption_debias.options import LOG_INTERVAL_HELP, QUIET_HELP, option

# img2dataset's resize modes (img2dataset.resizer.ResizeMode), named as its --resize_mode.
RESIZE_MODES = ("keep_ratio", "center_crop", "border", "keep_ratio_largest", "no")
ENGINES = ("local", "ray")
# Options that change nothing in the output: a resumed run may change them freely.
RUNTIME_ONLY = frozenset({"workers", "engine", "ray_address", "overwrite", "quiet", "log_interval", "max_in_flight"})


@dataclass
class PackOptions:
    """Every option of `caption-debias pack` (the CLI reads defaults and --help from here)."""

    image_root: str | None = option(
        None,
        "Folder the rows' `image` paths are relative to (files or img2dataset tars); "
        "default: the one the input was prepared with.",
    )
    # img2dataset's default; >= the model's input (224 for B/16) so its transform still crops
    image_size: int = option(256, "Target size for img2dataset's resizer (keep it >= the model's input, 224 for B/16).")
    resize_mode: str = option(
        "keep_ratio",
        "img2dataset resize mode: keep_ratio (shorter side to --image-size), center_crop, border, "
        "keep_ratio_largest, no.",
    )
    encode_quality: int = option(95, "JPEG quality of the re-encoded images (0-100).")  # img2dataset's default
    samples_per_shard: int = option(
        10_000, "Prepared rows per tar (a row whose image fails leaves a gap)."
    )  # img2dataset's default --number_sample_per_shard
    split: str | None = option(None, "Pack only rows of this split.")
    workers: int = option(1, "Worker processes, one tar each at a time (the tars are identical for any value).")
    engine: str = option("local", "Where tars are made: local (process pool) or ray (same bytes).")
    ray_address: str | None = option(
        None, "Ray cluster to join with --engine ray (default: $RAY_ADDRESS, else a local runtime)."
    )
    overwrite: bool = option(False, "Delete an earlier run in --out and start over (default: resume it).")
    quiet: bool = option(False, QUIET_HELP)
    log_interval: float = option(30.0, LOG_INTERVAL_HELP)
    max_in_flight: int = option(2, "Tars queued or in work at once per worker (bounds memory).")

    def validate(self) -> "PackOptions":
        if not self.image_root:
            raise UserError(
                "--image-root is required: the input's manifest records none "
                "(the folder the prepared rows' `image` paths are relative to)"
            )
        if not Path(self.image_root).is_dir():
            raise UserError(f"--image-root {self.image_root}: no such folder")
        if self.resize_mode not in RESIZE_MODES:
            raise UserError(f"--resize-mode {self.resize_mode!r}: choose from {', '.join(RESIZE_MODES)}")
        if self.engine not in ENGINES:
            raise UserError(f"--engine {self.engine!r}: choose from {', '.join(ENGINES)}")
        if self.image_size < 1:
            raise UserError(f"--image-size must be at least 1 (got {self.image_size})")
        if self.samples_per_shard < 1:
            raise UserError(f"--samples-per-shard must be at least 1 (got {self.samples_per_shard})")
        if not 0 <= self.encode_quality <= 100:
            raise UserError(f"--encode-quality must be in 0..100 (got {self.encode_quality})")
        if self.workers < 1:
            raise UserError(f"--workers must be at least 1 (got {self.workers})")
        if self.log_interval <= 0:
            raise UserError(f"--log-interval must be > 0 seconds (got {self.log_interval})")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def output_shaping(self) -> dict[str, Any]:
        """The options a resumed run must share with the run it continues."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in RUNTIME_ONLY}
