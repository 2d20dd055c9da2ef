"""Options of a stats run (the CLI's flags): defaults and help in one place."""

from __future__ import annotations

from dataclasses import dataclass

from caption_debias.options import ImageRootOptions, ProgressOptions, option

BY_FIELDS = ("source", "split")


@dataclass
class StatsOptions(ImageRootOptions, ProgressOptions):
    """Every option of `caption-debias stats` (the CLI reads defaults and --help from here).
    quiet and log_interval are display only: the figures do not depend on them."""

    by: str | None = option(
        None,
        "Also give every figure per source reader or per split.",
        choices=BY_FIELDS,
        metavar=f"[{'|'.join(BY_FIELDS)}]",  # the choices, short enough for -h's metavar column
    )
    top_phrases: int = option(
        15, "How many of the most common opening phrases to keep per group.", flags=("--top",), min=1
    )
    phrase_words: int = option(3, "Opening phrase = this many lowercased words of the first sentence.", min=1)

    def check(self) -> None:
        self.check_image_root(urls=True)  # the Samples' thumbnails read a root on a store too
