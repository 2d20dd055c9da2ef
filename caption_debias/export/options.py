"""UrlsOptions and ExportCaptionsOptions: every option of `urls` and `export-captions`, the one source of defaults and help.

The CLI (cli/urls_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's. The checks live here too, so the keyword functions
(urls.write_url_list, captions.export_captions) and the options objects refuse the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

from caption_debias.errors import UserError
from caption_debias.options import OverwriteOptions, ProgressOptions, check_value, option

FORMATS = ("open_clip-csv", "jsonl", "parquet")
STRIPS = ("summary", "opening", "none")
AUGMENTS = ("none", "debias")


def check_strip(strip: str) -> None:
    """--strip as its field allows (for the keyword functions)."""
    check_value(UrlsOptions, "strip", strip)


def check_augment(augment: str, copies: int) -> None:
    """--augment and --copies as their fields allow, and together (for the keyword functions)."""
    check_value(ExportCaptionsOptions, "augment", augment)
    check_value(ExportCaptionsOptions, "copies", copies)
    if augment == "none" and copies != 1:
        raise UserError("--copies needs --augment debias")


@dataclass
class UrlsOptions(OverwriteOptions, ProgressOptions):
    """Every option of `caption-debias urls` (the CLI reads defaults and --help from here)."""

    images: str | None = option(
        None, "Folder img2dataset should download into (for the printed command; default LIST_images)."
    )
    image_size: int = option(256, "--image_size for img2dataset (keep_ratio resize).", min=1)
    processes: int = option(8, "--processes_count for img2dataset.", min=1)
    threads: int = option(64, "--thread_count for img2dataset.", min=1)
    strip: str = option(
        "none",
        "Caption img2dataset stores as KEY.txt: none (as prepared), summary or opening (sentences dropped as in "
        "export-captions).",
        choices=STRIPS,
    )


@dataclass
class ExportCaptionsOptions(OverwriteOptions, ProgressOptions):
    """Every option of `caption-debias export-captions` (the CLI reads defaults and --help from here)."""

    format: str | None = option(
        None,
        "open_clip-csv (tab-separated filepath/title), jsonl or parquet; default from --out's suffix.",
        choices=FORMATS,
    )
    strip: str = option(
        "summary",
        "Sentences to drop: summary (flagged by prepare's --summary rule), opening (the first), none.",
        choices=STRIPS,
    )
    augment: str = option(
        "none",
        "none, or debias: K sub-sampled variants per image of the sentences left after --strip.",
        choices=AUGMENTS,
    )
    copies: int = option(1, "Variants per image with --augment debias (K).", min=1)
    seed: int = option(0, "Seed of --augment debias; each row's draw depends only on (seed, key).")
    # Not ImageRootOptions' folder to read images from: a text prefix written before each relative
    # path (the folder may exist only on the machine that trains), so it is neither checked nor defaulted.
    image_root: str | None = option(
        None, "Prefix for image paths that are not URLs (open_clip reads filepath as given)."
    )

    def check(self) -> None:
        check_augment(self.augment, self.copies)
