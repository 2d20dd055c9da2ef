"""PixelProse reader: Parquet with `url`, `vlm_caption`, `key`, ...; captions often open "This image displays:"."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

from caption_debias.errors import UserError
from caption_debias.readers._url_table import chosen_caption_columns, url_records
from caption_debias.records import Record, Reject

NAME = "pixelprose"
# The captioner's echo of its prompt, not a sentence about the image: moved to meta, out of the caption.
PREFIX = re.compile(r"^\s*This image displays\s*:\s*", re.IGNORECASE)


def strip_prefix(caption: str, meta: dict[str, Any]) -> str:
    """Remove the prompt echo and keep it in meta["caption_prefix"]; other captions pass unchanged."""
    match = PREFIX.match(caption)
    if not match:
        return caption
    meta["caption_prefix"] = match.group(0).strip()
    return caption[match.end() :]


def read(path: Path, name: str, options: Any) -> Iterator[Record | Reject]:
    """One record per row of `vlm_caption` (or --caption-column), prefix stripped into meta."""
    columns = chosen_caption_columns(options, ("vlm_caption",))
    if len(columns) != 1:
        raise UserError("pixelprose: name one --caption-column")
    yield from url_records(
        path, name, options, source=NAME, caption_column=columns[0], meta_columns=("uid", "sha256"), clean=strip_prefix
    )
