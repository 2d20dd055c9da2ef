"""Generic tables: JSON lines, CSV, TSV or Parquet with named image / caption / key columns."""

from __future__ import annotations

import codecs
import csv
import json
from pathlib import Path
from typing import Any, Iterator

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.readers.common import caption_problem, check_column_types, csv_rows, id_problem, open_csv
from caption_debias.records import Record, Reject, excerpt

NAME = "table"
JSONL_SUFFIXES = (".jsonl", ".jsonlines", ".ndjson", ".json")
CSV_SUFFIXES = (".csv",)
TSV_SUFFIXES = (".tsv", ".tab")
PARQUET_SUFFIXES = (".parquet", ".pq")


def kind_of(path: Path) -> str:
    suffix = path.suffix.lower()
    for kind, suffixes in (
        ("jsonl", JSONL_SUFFIXES),
        ("csv", CSV_SUFFIXES),
        ("tsv", TSV_SUFFIXES),
        ("parquet", PARQUET_SUFFIXES),
    ):
        if suffix in suffixes:
            return kind
    raise UserError(f"{path}: unknown table type {suffix!r} (expected .jsonl, .csv, .tsv or .parquet)")


def iter_jsonl(path: Path, name: str) -> Iterator[tuple[int, dict] | Reject]:
    """(line number, object) per line; a broken last line without newline means the file was cut off."""
    with storage.open_file(path, "rb") as fh:
        if fh.read(len(codecs.BOM_UTF8)) != codecs.BOM_UTF8:  # a leading byte-order mark is not part of line 1
            fh.seek(0)
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield Reject(name, lineno, "undecodable bytes", excerpt(raw))
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:  # JSONDecodeError, or an integer past sys.get_int_max_str_digits()
                if not raw.endswith(b"\n"):
                    yield Reject(name, lineno, "truncated input: last line cut off", excerpt(line), fatal=True)
                    return
                detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc).partition(":")[0]
                yield Reject(name, lineno, f"broken JSON line: {detail}", excerpt(line))
                continue
            if not isinstance(value, dict):
                yield Reject(name, lineno, "not an object", excerpt(value))
                continue
            yield lineno, value


def _iter_delimited(path: Path, name: str, delimiter: str) -> Iterator[tuple[int, dict] | Reject]:
    with open_csv(path) as fh:
        reader = csv.DictReader(fh, delimiter=delimiter, strict=True)  # strict: an unclosed quote at EOF is an error
        for item in csv_rows(reader, name):
            if not isinstance(item, Reject) and None in item[1]:  # more fields than the header
                yield Reject(name, item[0], "wrong number of fields", excerpt(item[1]))
                continue
            yield item


def _iter_parquet(path: Path, name: str, columns: list[str]) -> Iterator[tuple[int, dict] | Reject]:
    import pyarrow as pa

    try:
        pf = storage.parquet_file(path, named=False)
    except (OSError, pa.ArrowException) as exc:
        yield Reject(name, 0, f"truncated input: unreadable Parquet ({exc})", "", fatal=True)
        return
    present = [c for c in columns if c in pf.schema_arrow.names]
    index = 0
    try:
        for batch in pf.iter_batches(batch_size=4096, columns=present):
            for row in batch.to_pylist():
                yield index, row
                index += 1
    except (OSError, pa.ArrowException) as exc:
        yield Reject(name, index, f"truncated input: Parquet read failed ({exc})", "", fatal=True)


def columns_of(path: Path, kind: str) -> list[str] | None:
    """Header columns for CSV/TSV/Parquet, so a wrong --caption-column fails early with one line."""
    if kind == "parquet":
        import pyarrow as pa

        try:
            return list(storage.parquet_file(path, named=False).schema_arrow.names)
        except (OSError, pa.ArrowException):  # reported as a truncated input by the reader
            return None
    if kind in ("csv", "tsv"):
        with storage.open_file(path, "r", encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
            header = next(csv.reader(fh, delimiter="," if kind == "csv" else "\t"), None)
        return header
    return None


def read(path: Path, name: str, options) -> Iterator[Record | Reject]:
    kind = kind_of(path)
    image_col, caption_col, key_col = options.image_column, options.caption_column, options.key_column
    header = columns_of(path, kind)
    if header is not None:
        missing = [c for c in (image_col, caption_col) if c not in header]
        if missing:
            raise UserError(
                f"{name}: no column {missing[0]!r} (columns: {', '.join(header)}); use --image-column / --caption-column"
            )
    if kind == "jsonl":
        rows = iter_jsonl(path, name)
    elif kind == "parquet":
        if header is not None:  # readable: its columns' types are known before any row
            check_column_types(
                name, storage.read_schema(path), {image_col: "--image-column", caption_col: "--caption-column"}, key_col
            )
        rows = _iter_parquet(path, name, [image_col, caption_col, key_col])
    else:
        rows = _iter_delimited(path, name, "," if kind == "csv" else "\t")
    # JSON lines and CSV values are JSON already (str, numbers, ...): only Parquet rows need the round trip
    needs_json = kind == "parquet"
    split = options.split
    drop = (image_col, caption_col, key_col)
    for item in rows:
        if isinstance(item, Reject):
            yield item
            if item.fatal:
                return
            continue
        location, row = item
        caption: Any = row.get(caption_col)  # any JSON value: caption_problem checks it
        problem = caption_problem(caption) if caption_col in row else f"missing field: {caption_col}"
        if problem is None and row.get(image_col) is None:
            problem = f"missing field: {image_col}"
        problem = problem or id_problem(row.get(key_col))
        if problem:
            yield Reject(name, location, problem, excerpt(row))
            continue
        key = row.get(key_col)
        key = None if key is None or (isinstance(key, str) and not key.strip()) else str(key)
        meta = {k: v for k, v in row.items() if k not in drop}
        if needs_json and meta:
            meta = json.loads(json.dumps(meta, default=str))  # Parquet rows may hold dates, bytes...
        yield Record(NAME, name, location, key, row[image_col], caption, split, meta)
