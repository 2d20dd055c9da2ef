"""Recap-DataComp-1B reader: Parquet with `url`, `re_caption` (LLaVA recaption), `org_caption`, `key`, `sha256`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from caption_debias.errors import UserError
from caption_debias.readers._url_table import chosen_caption_columns, url_records
from caption_debias.records import Record, Reject

NAME = "recap-datacomp"
CAPTION_COLUMNS = ("re_caption", "org_caption")


def read(path: Path, name: str, options: Any) -> Iterator[Record | Reject]:
    """One record per row: `re_caption` by default, `org_caption` (the alt text) with --caption-column."""
    columns = chosen_caption_columns(options, CAPTION_COLUMNS[:1])
    if len(columns) != 1 or columns[0] not in CAPTION_COLUMNS:
        raise UserError(
            f"recap-datacomp: --caption-column must be one of {', '.join(CAPTION_COLUMNS)}, not {','.join(columns)!r}"
        )
    yield from url_records(path, name, options, source=NAME, caption_column=columns[0], meta_columns=("sha256",))
