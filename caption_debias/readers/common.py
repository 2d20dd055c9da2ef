"""Helpers shared by the readers: field checks that turn bad values into reasons."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from caption_debias import storage

_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


def image_problem(image: Any) -> str | None:
    """Why an image reference cannot be used, or None when it is a safe relative path or a URL."""
    if not isinstance(image, str):
        return "missing image" if image is None else "non-string image"
    if not image.strip():
        return "missing image"
    if storage.is_url(image):
        return None
    if image.startswith(("/", "\\")) or _DRIVE.match(image):
        return f"absolute image path: {image}"
    if ".." not in image:  # only a '..' part can climb out (normpath costs more than the rest together)
        return None
    norm = posixpath.normpath(image.replace("\\", "/"))
    if norm == ".." or norm.startswith("../"):
        return f"image path escapes the image root: {image}"
    return None


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
