"""Input readers, one module per format, and `auto` detection from a path and its first bytes.

Each reader is `read(path: Path, name: str, options) -> Iterator[Record | Reject]`, yielding in
a fixed order so keys and shard boundaries are deterministic; a fatal Reject ends the input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.readers import (
    coco,
    dci,
    docci,
    dreamlip,
    img2dataset,
    pixelprose,
    recap_datacomp,
    sharegpt4v,
    table,
    urban1k,
)
from caption_debias.records import Record, Reject

ReadFn = Callable[..., Iterator[Record | Reject]]

READERS: dict[str, ReadFn] = {
    "sharegpt4v": sharegpt4v.read,
    "dci": dci.read,
    "docci": docci.read,
    "urban1k": urban1k.read,
    "coco": coco.read,
    "table": table.read,
    "img2dataset": img2dataset.read,
    # URL sets for img2dataset (docs/scale.md); named with --format, never auto-detected.
    "dreamlip": dreamlip.read,
    "recap-datacomp": recap_datacomp.read,
    "pixelprose": pixelprose.read,
}
FORMATS = ("auto", *READERS)


def _head(path: Path, size: int = 65536) -> bytes:
    with storage.open_file(path, "rb") as fh:
        return fh.read(size)


def detect(path: Path) -> str:
    """Name the format of one input from its path and first bytes, or raise UserError."""
    if path.is_dir():
        if (dci.resolve(path) / "annotations").is_dir():
            return "dci"
        if (urban1k.resolve(path) / "caption").is_dir():
            return "urban1k"
        if (path / docci.FILENAME).is_file():
            return "docci"
        if img2dataset.shard_files(path):
            return "img2dataset"
        raise UserError(f"{path}: cannot tell the format of this folder; pass --format")
    if path.name == docci.FILENAME:
        return "docci"
    head = _head(path).lstrip(b"\xef\xbb\xbf \t\r\n")
    suffix = path.suffix.lower()
    if suffix == ".json" and head.startswith(b"["):
        return "sharegpt4v"
    if (
        suffix == ".json"
        and head.startswith(b"{")
        and b'"annotations"' in _head(path, 1 << 24)
        and b'"images"' in _head(path, 1 << 24)
    ):
        return "coco"
    if suffix in (*table.JSONL_SUFFIXES, ".jsonlines"):
        first = head.split(b"\n", 1)[0]
        try:
            obj = json.loads(first)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and {"example_id", "description", "image_file"} <= obj.keys():
            return "docci"
        return "table"
    if suffix in (*table.CSV_SUFFIXES, *table.TSV_SUFFIXES, *table.PARQUET_SUFFIXES):
        return "table"
    raise UserError(f"{path}: cannot tell the format of this file; pass --format")


def check_layout(path: Path, fmt: str) -> None:
    """One clear line when an explicit --format cannot fit the path (instead of zero records)."""
    folder_needs = {"dci": "annotations/", "urban1k": "caption/", "img2dataset": "NNNNN.parquet files"}
    if fmt == "dci":
        ok = path.is_dir() and (dci.resolve(path) / "annotations").is_dir()
    elif fmt == "urban1k":
        ok = path.is_dir() and (urban1k.resolve(path) / "caption").is_dir()
    elif fmt == "img2dataset":
        ok = path.is_dir() and bool(img2dataset.shard_files(path))
    elif fmt == "docci":
        ok = docci.resolve(path).is_file()
        folder_needs["docci"] = docci.FILENAME
    else:
        ok = path.is_file()
        folder_needs[fmt] = "a file"
    if not ok:
        raise UserError(f"{path}: does not look like {fmt} input (expected {folder_needs[fmt]})")


def get_reader(fmt: str) -> ReadFn:
    try:
        return READERS[fmt]
    except KeyError:
        raise UserError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})") from None
