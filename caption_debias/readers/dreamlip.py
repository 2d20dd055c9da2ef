"""DreamLIP reader: CSV with `Image Path` (URL), `raw_caption` and long/short captions per captioner.

Values hold newlines inside quotes, so rows are parsed with the csv module, never line by line.
Each row yields one record per chosen caption column (--caption-column, comma-separated).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterator

from caption_debias.errors import UserError
from caption_debias.readers._url_table import chosen_caption_columns
from caption_debias.readers.common import caption_problem, csv_rows, image_problem, open_csv
from caption_debias.records import Record, Reject, excerpt

NAME = "dreamlip"
URL_COLUMN = "Image Path"
DEFAULT_CAPTION_COLUMNS = ("longSV_captions",)


def read(path: Path, name: str, options: Any) -> Iterator[Record | Reject]:
    """Records in row order, then caption-column order; location is 'ROW:COLUMN' (ROW counts data rows from 1)."""
    columns = chosen_caption_columns(options, DEFAULT_CAPTION_COLUMNS)
    with open_csv(path) as fh:
        # strict=True turns a quote left open at end of file (a cut-off download) into an error.
        reader = csv.reader(fh, strict=True)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise UserError(f"{name}: empty file (no header row)") from None
        except csv.Error as exc:
            raise UserError(f"{name}: unreadable CSV header ({exc})") from None
        missing = [c for c in (URL_COLUMN, *columns) if c not in header]
        if missing:
            raise UserError(f"{name}: no column {missing[0]!r} (columns: {', '.join(header)}); use --caption-column")
        at = {col: i for i, col in enumerate(header)}
        for item in csv_rows(reader, name, location=str):
            if isinstance(item, Reject):
                yield item
                continue
            row_number, row = item
            for col in columns:
                location = f"{row_number}:{col}"
                if len(row) != len(header):
                    yield Reject(name, location, "wrong number of fields", excerpt(row))
                    continue
                url, caption = row[at[URL_COLUMN]], row[at[col]]
                problem = image_problem(url) or caption_problem(caption)
                if problem:
                    yield Reject(name, location, problem, excerpt(row))
                else:
                    yield Record(
                        NAME,
                        name,
                        location,
                        None,
                        url.strip(),
                        caption,
                        getattr(options, "split", None),
                        {"caption_column": col},
                    )
