"""Options of a prepare run (the CLI's flags), and which of them shape the output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caption_debias.options import StageOptions, option

DEFAULT_SHARD_ROWS = 20_000
# The choices of --format, --segmenter, --dci-caption and --summary live with the code that reads
# them (readers/, text/): cheap modules, imported here so -h lists them. text.summary's modes are
# named here instead (that module loads numpy and pyarrow); tests/test_options.py keeps them equal.
SUMMARY_MODES = ("detect", "first", "none")


def _choices() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    from caption_debias.readers import FORMATS
    from caption_debias.readers.dci import CAPTION_MODES
    from caption_debias.text.segment import SEGMENTERS

    return FORMATS, SEGMENTERS, CAPTION_MODES


FORMATS, SEGMENTERS, CAPTION_MODES = _choices()


@dataclass
class PrepareOptions(StageOptions):
    """Every option of `caption-debias prepare` (the CLI reads defaults and --help from here)."""

    format: str = option(
        "auto",
        "Input format: auto (from path and first bytes), sharegpt4v, dci, docci, urban1k, coco, table, "
        "img2dataset, dreamlip, recap-datacomp, pixelprose (docs/formats.md).",
        flags=("--format", "-f"),
        choices=FORMATS,
    )
    image_column: str = option("image", "Table/img2dataset column holding the image path or URL.")
    caption_column: str = option(
        "caption",
        "Table/img2dataset column holding the caption; dreamlip: comma-separated columns, one record each "
        "(default longSV_captions); recap-datacomp: re_caption (default) or org_caption; pixelprose: vlm_caption.",
    )
    key_column: str = option("key", "Table column holding a record id (keys are derived when absent).")
    split: str | None = option(None, "Split name for records whose input names none.")
    shard_rows: int = option(DEFAULT_SHARD_ROWS, "Records per shard (shard boundaries depend only on this).", min=1)
    segmenter: str = option("fast", "Sentence splitter: fast, pysbd or spacy.", choices=SEGMENTERS)
    summary: str = option("detect", "Summary-sentence rule: detect, first or none.", choices=SUMMARY_MODES)
    # reader options
    dci_caption: str = option(
        "short+extra",
        "DCI caption: short+extra (joined by a newline), extra (Long-DCI), short+extra+masks.",
        choices=CAPTION_MODES,
    )
    max_in_flight: int = option(2, "Chunks queued or in work at once per worker (bounds memory).", min=1, runtime=True)
    limit: int | None = option(
        None, "Only the first N records (to try a large dump in seconds); the manifest says so.", min=1
    )

    def check(self) -> None:
        self.check_image_root()

    def output_shaping(self) -> dict[str, Any]:
        """The options a resumed run must share with the run it continues."""
        shaping = super().output_shaping()
        if shaping["limit"] is None:  # folders prepared before --limit existed resume as they were
            del shaping["limit"]
        return shaping
