"""Samples of img2dataset's `parquet` output: image bytes in a column of NNNNN.parquet, by key.

img2dataset writes one row per input sample (`key`, `status`, `error_message`, the metadata,
and the image in a binary column named after its encode format: `jpg`, `png` or `webp`; null
when the download failed), in row groups of about a hundred rows. A row's image is
`NNNNN.parquet#KEY` (as the img2dataset reader records it). One pass per file reads the `key`
column, then only the row groups holding asked-for keys, in file order: memory is one row
group's images.

A sample table from elsewhere may be hostile (a few KB whose pages decompress to gigabytes, or
one dictionary value that every row repeats), so nothing is read whole and every size is
checked before it is materialised:
- each row group is read alone, and only when its column chunks (dictionary and data pages,
  uncompressed, from the footer) fit MAX_FILE_BYTES, the cap on an image file; a group over it
  costs its rows (`image_unreadable`, saying so), the other groups still read;
- columns are read as dictionaries (pyarrow's read_dictionary): a value many rows share is held
  once, not once per row; a cell is copied out only after its size is checked.
"""

from __future__ import annotations

from typing import Iterator

from caption_debias.image_files import MAX_FILE_BYTES, MISSING, UNREADABLE, ImageProblem, check_size

IMAGE_COLUMNS = ("jpg", "png", "webp", "jpeg")  # img2dataset's --encode_format values
MAX_TEXT = 200  # characters of a row's status or error_message quoted in its reason


def image_column(schema) -> str | None:
    import pyarrow as pa

    for name in IMAGE_COLUMNS:
        i = schema.get_field_index(name)
        kind = schema.field(i).type if i >= 0 else None
        if kind is not None and pa.types.is_dictionary(kind):  # read as a dictionary (open_bounded)
            kind = kind.value_type
        if kind is not None and (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            return name
    return None


def open_bounded(fh, name: str, columns):
    """pq.ParquetFile over `fh` with the `columns` there read as dictionaries (see the module docs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(fh)
        schema = pf.schema_arrow
        text = [c for c in columns if c in schema.names and _is_text(schema.field(c).type)]
        return pq.ParquetFile(fh, metadata=pf.metadata, read_dictionary=text) if text else pf
    except (pa.ArrowException, OSError) as exc:
        raise ImageProblem(UNREADABLE, f"{name}: not a readable Parquet file ({exc})") from None


def _is_text(kind) -> bool:
    import pyarrow as pa

    return any(
        f(kind) for f in (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_string, pa.types.is_large_string)
    )


def _open(fh, name: str):
    pf = open_bounded(fh, name, [*IMAGE_COLUMNS, "key", "status", "error_message"])
    column = image_column(pf.schema_arrow)
    if column is None or "key" not in pf.schema_arrow.names:
        raise ImageProblem(UNREADABLE, f"{name}: no key and jpg/png/webp columns (not img2dataset's parquet output)")
    return pf, column


def read_group(pf, group: int, columns: list[str], name: str):
    """Row group `group`'s `columns`, once its uncompressed size (the footer's) is checked against
    the image cap; ImageProblem(UNREADABLE) for a group over it or one pyarrow cannot read."""
    import pyarrow as pa

    meta = pf.metadata.row_group(group)
    sizes = [meta.column(i).total_uncompressed_size for i in range(meta.num_columns)]
    size = sum(n for i, n in enumerate(sizes) if meta.column(i).path_in_schema in columns)
    if size > MAX_FILE_BYTES or min(sizes, default=0) < 0:
        raise ImageProblem(
            UNREADABLE,
            f"{name}: row group {group} ({', '.join(columns)}) is {size:,} bytes uncompressed, "
            f"more than the maximum {MAX_FILE_BYTES:,} for an image",
        )
    try:
        return pf.read_row_group(group, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise ImageProblem(UNREADABLE, f"{name}: row group {group} unreadable ({exc})") from None


def cell(table, column: str, at: int):
    """Row `at`'s value in `column` as a pyarrow Buffer (no copy; a dictionary column's shared value), or None."""
    scalar = table.column(column)[at]
    if not scalar.is_valid:
        return None
    if hasattr(scalar, "dictionary"):  # pyarrow's DictionaryScalar
        scalar = scalar.value
    return scalar.as_buffer() if hasattr(scalar, "as_buffer") else None


def text(table, column: str, at: int, limit: int = MAX_TEXT) -> str | None:
    """Row `at`'s text in `column`, at most `limit` characters (None when null or no such column)."""
    if column not in table.column_names:
        return None
    scalar = table.column(column)[at]
    if not scalar.is_valid:
        return None
    buf = cell(table, column, at)
    if buf is None:  # not a text column: a number, say
        return str(scalar.as_py())[:limit]
    return buf[: 4 * limit].to_pybytes().decode("utf-8", "replace")[:limit]


def _rows_of(pf, keys: list[str], name: str) -> tuple[dict[str, int], ImageProblem | None]:
    """key -> its first row in the file, for the keys asked for that are there, read row group by
    row group; and the problem of the first group whose keys could not be read (None when all were)."""
    asked = set(keys)
    rows: dict[str, int] = {}
    unread: ImageProblem | None = None
    start = 0
    for group in range(pf.metadata.num_row_groups):
        try:
            found = _keys(read_group(pf, group, ["key"], name))
        except ImageProblem as exc:
            unread = unread or exc
            found = []
        for i, key in enumerate(found):
            if key in asked and key not in rows:
                rows[key] = start + i
        start += pf.metadata.row_group(group).num_rows
    return rows, unread


def _keys(table) -> list[str]:
    """The key column of one row group as text, each dictionary value converted once."""
    import pyarrow as pa

    out: list[str] = []
    for chunk in table.column("key").chunks:
        if isinstance(chunk, pa.DictionaryArray):
            values = [str(v) for v in chunk.dictionary.to_pylist()]
            out += [values[i] if i is not None else "None" for i in chunk.indices.to_pylist()]
        else:
            out += [str(k) for k in chunk.to_pylist()]
    return out


def _sample(table, at: int, column: str, name: str, key: str) -> bytes | ImageProblem:
    data = cell(table, column, at)
    if data is None:
        status, error = text(table, "status", at), text(table, "error_message", at)
        why = f" ({status}{': ' + error if error else ''})" if status else ""
        return ImageProblem(MISSING, f"{name}#{key}: no image stored{why}")
    try:
        check_size(data.size, f"{name}#{key}")
    except ImageProblem as exc:
        return exc
    return data.to_pybytes()


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


def _not_found(key: str, name: str, unread: ImageProblem | None) -> ImageProblem:
    if unread is None:
        return ImageProblem(MISSING, f"no sample {key} in {name}")
    return ImageProblem(UNREADABLE, f"no sample {key} in the readable row groups of {name}; {unread.detail}")


def stream(fh, name: str, keys: list[str]) -> Iterator[tuple[str, bytes | ImageProblem]]:
    """(key, its image bytes or ImageProblem) for every key in `keys`: found ones in file order, then
    the others. A row group that cannot be read costs its own rows only."""
    import pyarrow as pa

    left = dict.fromkeys(keys)
    problem: ImageProblem | None = None
    unread: ImageProblem | None = None
    try:
        pf, column = _open(fh, name)
        rows, unread = _rows_of(pf, list(left), name)
        columns = [c for c in (column, "status", "error_message") if c in pf.schema_arrow.names]
        for group, start, here in _groups(pf, sorted((row, key) for key, row in rows.items())):
            try:
                table = read_group(pf, group, columns, name)
            except ImageProblem as exc:
                table, failed = None, exc
            for row, key in here:
                del left[key]
                yield key, failed if table is None else _sample(table, row - start, column, name, key)
    except ImageProblem as exc:
        problem = exc
    except (pa.ArrowException, OSError) as exc:
        problem = ImageProblem(UNREADABLE, f"{name}: unreadable ({exc})")
    for key in left:
        yield key, problem or _not_found(key, name, unread)


def read_one(fh, name: str, key: str) -> bytes:
    """Specification: one sample's bytes (the first row with its key), or ImageProblem; the file read
    for it alone, the key column group by group, then the one group holding the row."""
    pf, column = _open(fh, name)
    unread: ImageProblem | None = None
    for group in range(pf.metadata.num_row_groups):
        try:
            keys = _keys(read_group(pf, group, ["key"], name))
        except ImageProblem as exc:
            unread, keys = unread or exc, []
        if key in keys:
            columns = [c for c in (column, "status", "error_message") if c in pf.schema_arrow.names]
            found = _sample(read_group(pf, group, columns, name), keys.index(key), column, name, key)
            if isinstance(found, ImageProblem):
                raise found
            return found
    raise _not_found(key, name, unread)
