"""Options of a pack run (the CLI's flags), and which of them shape the output."""

from __future__ import annotations

from dataclasses import dataclass

from caption_debias.errors import UserError
from caption_debias.options import MissingImagesOptions, StageOptions, option

# img2dataset's resize modes (img2dataset.resizer.ResizeMode), named as its --resize_mode.
RESIZE_MODES = ("keep_ratio", "center_crop", "border", "keep_ratio_largest", "no")


@dataclass
class PackOptions(MissingImagesOptions, StageOptions):
    """Every option of `caption-debias pack` (the CLI reads defaults and --help from here)."""

    # img2dataset's default; >= the model's input (224 for B/16) so its transform still crops
    image_size: int = option(
        256, "Target size for img2dataset's resizer (keep it >= the model's input, 224 for B/16).", min=1
    )
    resize_mode: str = option(
        "keep_ratio",
        "img2dataset resize mode: keep_ratio (shorter side to --image-size), center_crop, border, "
        "keep_ratio_largest, no.",
        choices=RESIZE_MODES,
    )
    encode_quality: int = option(
        95, "JPEG quality of the re-encoded images (0-100).", min=0, max=100
    )  # img2dataset's default
    samples_per_shard: int = option(
        10_000, "Prepared rows per tar (a row whose image fails leaves a gap).", min=1
    )  # img2dataset's default --number_sample_per_shard
    split: str | None = option(None, "Pack only rows of this split.")
    max_in_flight: int = option(2, "Tars queued or in work at once per worker (bounds memory).", min=1, runtime=True)

    def check(self) -> None:
        if not self.image_root:
            raise UserError(
                "--image-root is required: the input's manifest records none "
                "(the folder the prepared rows' `image` paths are relative to)"
            )
        self.check_image_root(urls=True)  # read through image_source: a folder here or an fsspec URL
