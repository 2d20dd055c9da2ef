"""Helpers shared by the readers: field checks that turn bad values into reasons."""

from __future__ import annotations

import csv
import math
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from caption_debias import storage
from caption_debias.image_files import control_character, path_problem
from caption_debias.records import Reject


def image_problem(image: Any) -> str | None:
    """Why an image reference cannot be used, or None when it is a safe relative path or a URL.

    A relative path must pass image_files.path_problem (no control character, not absolute, no
    climb out of the root), the rule every later stage applies again when it opens the file.
    """
    if not isinstance(image, str):
        return "missing image" if image is None else "non-string image"
    if not image.strip():
        return "missing image"
    if storage.is_url(image):
        where = control_character(image)
        return None if where is None else f"control character in image URL: {where}"
    return path_problem(image)


def caption_problem(caption: Any) -> str | None:
    """Why a caption cannot be used, or None."""
    if caption is None:
        return "missing caption"
    if not isinstance(caption, str):
        return "non-string caption"
    if not caption.strip():
        return "empty caption"
    try:
        caption.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: bytes that were not valid UTF-8
        return "undecodable bytes"
    return None


# The longest caption prepare takes: hundreds of times the longest real one, and still
# segmented in linear time (text/segment/base.py's pieces); a longer one is a reject.
MAX_CAPTION_CHARS = 2_000_000
# Any character that shows: not whitespace, not a zero-width or other format character.
_VISIBLE = re.compile(
    "[^\\s\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0]"
)


def caption_text_problem(caption: str) -> str | None:
    """Why a caption's text cannot be prepared (too long, nothing visible in it), or None."""
    if len(caption) > MAX_CAPTION_CHARS:
        return f"caption too long: {len(caption):,} characters (at most {MAX_CAPTION_CHARS:,})"
    if _VISIBLE.search(caption) is None:
        return "empty caption: only invisible characters (zero-width, format or whitespace)"
    return None


def id_problem(value: Any) -> str | None:
    """Why a record's id cannot be its key, or None (no id: the key is the record's position).

    Only text and finite numbers are ids: a list or an object (as some dumps hold), a boolean
    (`str(True)` would make the key `sharegpt4v/True`) or a NaN / infinite number is a reject.
    """
    if value is None or isinstance(value, str):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"id is not a string or number: {type(value).__name__}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"id is not a finite number: {value}"
    return None


def input_stem(path: str | Path) -> str:
    p = storage.as_path(path)
    return p.stem if p.is_file() else p.name


def _is_text_type(arrow_type, integers: bool = False) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if integers and pa.types.is_integer(arrow_type):
        return True
    is_view = getattr(pa.types, "is_string_view", lambda t: False)
    return (
        pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or is_view(arrow_type)
        or pa.types.is_null(arrow_type)  # all values missing: each row is a reject with its reason
    )


def check_column_types(name: str, schema, text: dict[str, str], key: str | None = None) -> None:
    """One clear error when a typed table's column cannot hold what it is named for.

    `text` maps a column that must hold text (an image path or URL, a caption) to the flag that
    names it; `key`, when the table has it, must hold text or integers. Checked once from the
    schema, so a wrong column is one line, not one reject per row.
    """
    from caption_debias.errors import UserError

    for column, flag in text.items():
        if column in schema.names and not _is_text_type(schema.field(column).type):
            raise UserError(
                f"{name}: column {column!r} holds {schema.field(column).type} values, not text; "
                f"name a text column with {flag}"
            )
    if key is not None and key in schema.names and not _is_text_type(schema.field(key).type, integers=True):
        raise UserError(
            f"{name}: column {key!r} holds {schema.field(key).type} values; record ids must be text or integers "
            "(name another column with --key-column)"
        )


@contextmanager
def open_csv(path: Any) -> Iterator[TextIO]:
    """A delimited text file as the csv module reads it: long fields allowed, a byte-order mark dropped."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # long captions exceed the 128 KiB default
    # utf-8-sig: spreadsheet exports start with a byte-order mark that would hide the first column name.
    with storage.open_file(path, "r", encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
        yield fh


def csv_rows(
    reader: Iterator[Any], name: str, location: Callable[[int], Any] = int
) -> Iterator[tuple[int, Any] | Reject]:
    """(number from 1, row) of a strict csv reader; a csv error (a quote left open at the end of a
    cut-off download) is one fatal reject at the next row's `location(number)`, and the end."""
    number = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield Reject(name, location(number + 1), f"truncated input: {exc}", "", fatal=True)
            return
        number += 1
        yield number, row
