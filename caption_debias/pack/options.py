"""Options of a pack run (the CLI's flags), and which of them shape the output."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from caption_debias.errors import UserError

# img2dataset's resize modes (img2dataset.resizer.ResizeMode), named as its --resize_mode.
RESIZE_MODES = ("keep_ratio", "center_crop", "border", "keep_ratio_largest", "no")
ENGINES = ("local", "ray")
# Options that change nothing in the output: a resumed run may change them freely.
RUNTIME_ONLY = frozenset({"workers", "engine", "ray_address", "overwrite", "quiet", "max_in_flight", "log_interval"})


@dataclass
class PackOptions:
    image_root: str = ""
    image_size: int = 256  # img2dataset's default; >= the model's input (224 for B/16) so its transform still crops
    resize_mode: str = "keep_ratio"  # shorter side to image_size, as `caption-debias urls` asks img2dataset for
    encode_quality: int = 95  # img2dataset's default JPEG quality
    samples_per_shard: int = 10_000  # img2dataset's default --number_sample_per_shard
    split: str | None = None  # pack only rows of this split
    workers: int = 1
    engine: str = "local"
    ray_address: str | None = None
    overwrite: bool = False
    quiet: bool = False
    max_in_flight: int = 2  # tars queued or in work at once per worker (bounds memory)
    log_interval: float = 30.0  # seconds between plain progress lines off a terminal

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
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def output_shaping(self) -> dict[str, Any]:
        """The options a resumed run must share with the run it continues."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in RUNTIME_ONLY}
