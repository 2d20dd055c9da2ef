"""Shared row loop of the Parquet URL-set readers (recap-datacomp, pixelprose)."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.readers.common import caption_problem, check_column_types, id_problem, image_problem
from caption_debias.records import Record, Reject, excerpt

# Read in record batches so a 1-billion-row URL list never sits in memory at once.
BATCH_ROWS = 8192
DEFAULT_CAPTION_COLUMN = "caption"  # PrepareOptions' default: "not chosen", so the reader's own default applies


def chosen_caption_columns(options: Any, default: Sequence[str]) -> list[str]:
    """--caption-column when the user set it (comma-separated list allowed), else the reader's default."""
    value = getattr(options, "caption_column", None)
    if not value or value == DEFAULT_CAPTION_COLUMN:
        return list(default)
    return [c.strip() for c in str(value).split(",") if c.strip()]


def url_records(
    path: Any,
    name: str,
    options: Any,
    *,
    source: str,
    caption_column: str,
    url_column: str = "url",
    meta_columns: Sequence[str] = (),
    clean: Callable[[str, dict[str, Any]], str] | None = None,
) -> Iterator[Record | Reject]:
    """One record per row of a Parquet URL table (a local path or a URL): image = URL, source id = --key-column when present."""
    import pyarrow as pa

    path = storage.as_path(path)
    key_column = getattr(options, "key_column", "key")
    try:
        pf = storage.parquet_file(path, named=False)
    except (OSError, pa.ArrowException) as exc:
        yield Reject(name, 0, f"truncated input: unreadable Parquet ({exc})", "", fatal=True)
        return
    names = pf.schema_arrow.names
    missing = [c for c in (url_column, caption_column) if c not in names]
    if missing:
        raise UserError(f"{name}: no column {missing[0]!r} (columns: {', '.join(names)})")
    check_column_types(
        name, pf.schema_arrow, {url_column: "a URL column", caption_column: "--caption-column"}, key_column
    )
    wanted = [url_column, caption_column, key_column, *meta_columns]
    columns = [c for c in dict.fromkeys(wanted) if c in names]
    index = 0
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns):
            for row in batch.to_pylist():
                yield from _record(
                    row, index, name, options, source, url_column, caption_column, key_column, meta_columns, clean
                )
                index += 1
    except (OSError, pa.ArrowException) as exc:
        yield Reject(name, index, f"truncated input: Parquet read failed ({exc})", "", fatal=True)


def _record(row, index, name, options, source, url_column, caption_column, key_column, meta_columns, clean):
    url, caption = row.get(url_column), row.get(caption_column)
    problem = image_problem(url) or caption_problem(caption) or id_problem(row.get(key_column))
    if problem:
        yield Reject(name, index, problem, excerpt(row))
        return
    meta: dict[str, Any] = {"caption_column": caption_column}
    meta.update({c: row[c] for c in meta_columns if row.get(c) is not None})
    if clean is not None:
        caption = clean(caption, meta)
        if not caption.strip():
            yield Reject(name, index, "empty caption: nothing after the prefix", excerpt(row))
            return
    key = row.get(key_column)
    source_id = None if key is None or str(key).strip() == "" else str(key)
    yield Record(source, name, index, source_id, url.strip(), caption, getattr(options, "split", None), meta)
