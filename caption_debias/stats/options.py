"""Options of a stats run (the CLI's flags): defaults and help in one place."""

from __future__ import annotations

from dataclasses import dataclass

from caption_debias.options import LOG_INTERVAL_HELP, QUIET_HELP, option


@dataclass
class StatsOptions:
    """Every option of `caption-debias stats` (the CLI reads defaults and --help from here)."""

    by: str | None = option(None, "Also give every figure per source reader or per split.")
    top_phrases: int = option(15, "How many of the most common opening phrases to keep per group.")
    phrase_words: int = option(3, "Opening phrase = this many lowercased words of the first sentence.")
    quiet: bool = option(False, QUIET_HELP)  # display only: the figures do not depend on it
    log_interval: float = option(30.0, LOG_INTERVAL_HELP)
    image_root: str | None = option(
        None, "--out: images of the Samples section are read under this folder (default: the one curate used)."
    )
