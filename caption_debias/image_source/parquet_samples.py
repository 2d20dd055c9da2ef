"""Samples of img2dataset's `parquet` output: image bytes in a column of NNNNN.parquet, by key.

img2dataset writes one row per input sample (`key`, `status`, `error_message`, the metadata,
and the image in a binary column named after its encode format: `jpg`, `png` or `webp`; null
when the download failed), in row groups of about a hundred rows. A row's image is
`NNNNN.parquet#KEY` (as the img2dataset reader records it). One pass per file reads the `key`
column, then only the row groups holding asked-for keys, in file order: memory is one row
group's images.
"""

from __future__ import annotations

from typing import Iterator

from caption_debias.image_files import MISSING, UNREADABLE, ImageProblem, check_size

IMAGE_COLUMNS = ("jpg", "png", "webp", "jpeg")  # img2dataset's --encode_format values


def image_column(schema) -> str | None:
    import pyarrow as pa

    for name in IMAGE_COLUMNS:
        i = schema.get_field_index(name)
        if i >= 0 and (pa.types.is_binary(schema.field(i).type) or pa.types.is_large_binary(schema.field(i).type)):
            return name
    return None


def _open(fh, name: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(fh)
    except (pa.ArrowException, OSError) as exc:
        raise ImageProblem(UNREADABLE, f"{name}: not a readable Parquet file ({exc})") from None
    column = image_column(pf.schema_arrow)
    if column is None or "key" not in pf.schema_arrow.names:
        raise ImageProblem(UNREADABLE, f"{name}: no key and jpg/png/webp columns (not img2dataset's parquet output)")
    return pf, column


def _rows_of(pf, keys: list[str]) -> dict[str, int]:
    """key -> its first row in the file, for the keys asked for that are there."""
    asked = set(keys)
    rows: dict[str, int] = {}
    for i, key in enumerate(pf.read(columns=["key"]).column("key").to_pylist()):
        key = str(key)
        if key in asked and key not in rows:
            rows[key] = i
    return rows


def _sample(table, at: int, column: str, name: str, key: str) -> bytes | ImageProblem:
    data = table.column(column)[at].as_py()
    if data is None:
        status = table.column("status")[at].as_py() if "status" in table.column_names else None
        error = table.column("error_message")[at].as_py() if "error_message" in table.column_names else None
        why = f" ({status}{': ' + error if error else ''})" if status else ""
        return ImageProblem(MISSING, f"{name}#{key}: no image stored{why}")
    try:
        check_size(len(data), f"{name}#{key}")
    except ImageProblem as exc:
        return exc
    return data


def _groups(pf, by_row: list[tuple[int, str]]) -> Iterator[tuple[int, int, list[tuple[int, str]]]]:
    """(row group, its first row, the asked (row, key) in it) for the groups holding any, in file order."""
    start, i = 0, 0
    for group in range(pf.metadata.num_row_groups):
        end = start + pf.metadata.row_group(group).num_rows
        here = []
        while i < len(by_row) and by_row[i][0] < end:
            here.append(by_row[i])
            i += 1
        if here:
            yield group, start, here
        if i == len(by_row):
            return
        start = end


def stream(fh, name: str, keys: list[str]) -> Iterator[tuple[str, bytes | ImageProblem]]:
    """(key, its image bytes or ImageProblem) for every key in `keys`: found ones in file order, then the others."""
    import pyarrow as pa

    left = dict.fromkeys(keys)
    problem: ImageProblem | None
    try:
        pf, column = _open(fh, name)
        rows = _rows_of(pf, list(left))
        columns = [c for c in (column, "status", "error_message") if c in pf.schema_arrow.names]
        for group, start, here in _groups(pf, sorted((row, key) for key, row in rows.items())):
            table = pf.read_row_group(group, columns=columns)
            for row, key in here:
                del left[key]
                yield key, _sample(table, row - start, column, name, key)
    except ImageProblem as exc:
        problem = exc
    except (pa.ArrowException, OSError) as exc:
        problem = ImageProblem(UNREADABLE, f"{name}: unreadable ({exc})")
    else:
        problem = None
    for key in left:
        yield key, problem or ImageProblem(MISSING, f"no sample {key} in {name}")


def read_one(fh, name: str, key: str) -> bytes:
    """Specification: one sample's bytes (the first row with its key), or ImageProblem; the file read for it alone."""
    pf, column = _open(fh, name)
    rows = pf.read(columns=["key"]).column("key").to_pylist()
    keys = [str(k) for k in rows]
    if key not in keys:
        raise ImageProblem(MISSING, f"no sample {key} in {name}")
    at = keys.index(key)
    columns = [c for c in (column, "status", "error_message") if c in pf.schema_arrow.names]
    found = _sample(pf.read(columns=columns).slice(at, 1), 0, column, name, key)
    if isinstance(found, ImageProblem):
        raise found
    return found
