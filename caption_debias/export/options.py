"""UrlsOptions and ExportCaptionsOptions: every option of `urls` and `export-captions`, the one source of defaults and help.

The CLI (cli/urls_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's. The checks live here too, so the keyword functions
(urls.write_url_list, captions.export_captions) and the options objects refuse the same values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from caption_debias.errors import UserError
from caption_debias.options import LOG_INTERVAL_HELP, QUIET_HELP, option

FORMATS = ("open_clip-csv", "jsonl", "parquet")
STRIPS = ("summary", "opening", "none")
AUGMENTS = ("none", "debias")


def check_strip(strip: str) -> None:
    if strip not in STRIPS:
        raise UserError(f"unknown --strip {strip!r} (choose from {', '.join(STRIPS)})")


def check_augment(augment: str, copies: int) -> None:
    if augment not in AUGMENTS:
        raise UserError(f"unknown --augment {augment!r} (choose from {', '.join(AUGMENTS)})")
    if copies < 1:
        raise UserError(f"--copies must be at least 1, not {copies}")
    if augment == "none" and copies != 1:
        raise UserError("--copies needs --augment debias")


@dataclass
class UrlsOptions:
    """Every option of `caption-debias urls` (the CLI reads defaults and --help from here)."""

    images: str | None = option(
        None, "Folder img2dataset should download into (for the printed command; default LIST_images)."
    )
    image_size: int = option(256, "--image_size for img2dataset (keep_ratio resize).")
    processes: int = option(8, "--processes_count for img2dataset.")
    threads: int = option(64, "--thread_count for img2dataset.")
    strip: str = option(
        "none",
        "Caption img2dataset stores as KEY.txt: none (as prepared), summary or opening (sentences dropped as in "
        "export-captions).",
    )
    overwrite: bool = option(False, "Replace LIST if it exists.")
    quiet: bool = option(False, QUIET_HELP)
    log_interval: float = option(30.0, LOG_INTERVAL_HELP)

    def validate(self) -> "UrlsOptions":
        check_strip(self.strip)
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ExportCaptionsOptions:
    """Every option of `caption-debias export-captions` (the CLI reads defaults and --help from here)."""

    format: str | None = option(
        None, "open_clip-csv (tab-separated filepath/title), jsonl or parquet; default from --out's suffix."
    )
    strip: str = option(
        "summary", "Sentences to drop: summary (flagged by prepare's --summary rule), opening (the first), none."
    )
    augment: str = option(
        "none", "none, or debias: K sub-sampled variants per image of the sentences left after --strip."
    )
    copies: int = option(1, "Variants per image with --augment debias (K).")
    seed: int = option(0, "Seed of --augment debias; each row's draw depends only on (seed, key).")
    image_root: str | None = option(
        None, "Prefix for image paths that are not URLs (open_clip reads filepath as given)."
    )
    overwrite: bool = option(False, "Replace FILE if it exists.")
    quiet: bool = option(False, QUIET_HELP)
    log_interval: float = option(30.0, LOG_INTERVAL_HELP)

    def validate(self) -> "ExportCaptionsOptions":
        if self.format is not None and self.format not in FORMATS:
            raise UserError(f"unknown --format {self.format!r} (choose from {', '.join(FORMATS)})")
        check_strip(self.strip)
        check_augment(self.augment, self.copies)
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
