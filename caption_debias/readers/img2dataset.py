"""img2dataset output folder: every <shard>.parquet metadata file; failures become rejects."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from caption_debias import storage
from caption_debias.readers.common import caption_problem, check_column_types, id_problem
from caption_debias.records import Record, Reject, excerpt

NAME = "img2dataset"
SHARD = re.compile(r"^\d+\.parquet$")
IMAGE_EXTS = ("jpg", "png", "webp")
# Metadata columns img2dataset always writes; anything else came from save_additional_columns.
KNOWN = {
    "key",
    "caption",
    "url",
    "status",
    "error_message",
    "width",
    "height",
    "original_width",
    "original_height",
    "exif",
    "sha256",
    "md5",
}


def shard_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if SHARD.match(p.name))


def image_ref(folder: Path, shard: str, key: str) -> str:
    """Where the stored sample lives, relative to the img2dataset folder (see docs/formats.md)."""
    if (folder / shard).is_dir():  # output_format "files"
        for ext in IMAGE_EXTS:
            if (folder / shard / f"{key}.{ext}").is_file():
                return f"{shard}/{key}.{ext}"
        return f"{shard}/{key}.jpg"
    if (folder / f"{shard}.tar").is_file():  # webdataset: member inside the tar
        return f"{shard}.tar#{key}.jpg"
    if (folder / f"{shard}.tfrecord").is_file():
        return f"{shard}.tfrecord#{key}"
    return f"{shard}.parquet#{key}"  # output_format "parquet": bytes in the same file


def read(path: Path, name: str, options) -> Iterator[Record | Reject]:
    import pyarrow as pa

    for shard_path in shard_files(path):
        shard = shard_path.stem
        shard_name = (
            f"{name.rstrip('/')}/{shard_path.name}" if storage.is_remote(name) else str(Path(name) / shard_path.name)
        )
        rows = _rows(shard_path, shard_name, options.caption_column)
        index = 0
        while True:
            try:
                row = next(rows)
            except StopIteration:
                break
            except (OSError, pa.ArrowException) as exc:  # a broken metadata file: keep what came before
                yield Reject(
                    name,
                    f"{shard_path.name}:{index}",
                    f"truncated input: unreadable img2dataset metadata ({exc})",
                    "",
                    fatal=True,
                )
                return
            yield from _row(path, shard, row, f"{shard_path.name}:{index}", name, options)
            index += 1


def _rows(shard_path: Path, name: str, caption_column: str) -> Iterator[dict]:
    import pyarrow as pa

    pf = storage.parquet_file(shard_path, named=False)  # its errors: a fatal reject of the input
    names = pf.schema_arrow.names
    column = caption_column if caption_column in names else "caption"  # as _row picks it
    check_column_types(name, pf.schema_arrow, {column: "--caption-column"})
    # Skip image-bytes columns (output_format "parquet" stores images in this file).
    columns = [
        f.name for f in pf.schema_arrow if not pa.types.is_binary(f.type) and not pa.types.is_large_binary(f.type)
    ]
    for batch in pf.iter_batches(batch_size=4096, columns=columns):
        yield from batch.to_pylist()


def _row(folder: Path, shard: str, row: dict, location: str, name: str, options):
    status = row.get("status")
    key = row.get("key")
    if status != "success":
        yield Reject(
            name,
            location,
            f"{status or 'no status'}: {row.get('error_message') or ''}".rstrip(": ").strip(),
            excerpt({k: row.get(k) for k in ("key", "url", "caption")}),
        )
        return
    caption: Any = (
        row.get(options.caption_column) if options.caption_column in row else row.get("caption")
    )  # any JSON value: caption_problem checks it
    problem = caption_problem(caption)
    if problem is None and key is None:
        problem = "missing field: key"
    problem = problem or id_problem(key)
    if problem:
        yield Reject(name, location, problem, excerpt({k: row.get(k) for k in ("key", "url", "caption")}))
        return
    meta = {
        k: row.get(k)
        for k in ("url", "width", "height", "original_width", "original_height", "sha256")
        if row.get(k) is not None
    }
    meta.update({k: v for k, v in row.items() if k not in KNOWN and k != options.caption_column})
    meta = json.loads(json.dumps(meta, default=str))
    yield Record(
        source=NAME,
        input=name,
        location=location,
        source_id=str(key),
        image=image_ref(folder, shard, str(key)),
        caption=caption,
        split=options.split,
        meta=meta,
    )
