"""The folders a view reads, opened from their manifests and Parquet footers, and nothing else.

`open_folder` reads a folder's manifest (through PreparedDataset: shards whole and as listed), the
row-group layout from the footers and a curated folder's `removed.jsonl` into a small table (key,
reason, the 200-character caption, the input it came from and what it matched; a line's whole
text is read back by offset when shown). A packed folder is read through the folder it was packed
from. `folder_stamp` tells whether a folder was rewritten since it was opened (curate --overwrite).

What else a folder may make the viewer read (`Folder.inputs`): only the inputs its manifest records,
each with the digest of the input's manifest as curate read it; a `removed.jsonl` line naming any
other folder is shown from its own 200 characters.
"""

from __future__ import annotations

import io
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa

from caption_debias import storage, trust
from caption_debias.dataset import MANIFEST, PreparedDataset, folder_file
from caption_debias.errors import UserError

REMOVED = "removed.jsonl"
SHARDS = "shards"  # where prepare and curate write a folder's shards
PACKED_KIND = "caption-debias packed"  # pack/state.py KIND: a packed folder's manifest says so


def is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


@dataclass
class Folder:
    """One opened folder: its dataset, row-group layout, removals and image root."""

    index: int
    name: str
    ds: PreparedDataset
    image_root: Path | str | None  # a local folder, or the URL of one on a store (s3://...)
    kind: str  # prepared | curated
    schema: pa.Schema
    # per shard: row-group start offsets (the last entry is the shard's row count)
    row_groups: list[list[int]] = field(default_factory=list)
    removed: Any = None  # polars DataFrame of removed.jsonl, or None
    inputs: dict[str, str] = field(default_factory=dict)  # input folder -> sha256 of its manifest, as recorded
    opened_stamp: tuple = ()  # `folder_stamp(path)` when opened
    _images: Any = None  # the ImageLookup over image_root, made on first need (`images`)
    _images_lock: Any = field(default_factory=threading.Lock)

    def images(self):
        """The rows' images under the image root (image_source.lookup.ImageLookup: tar members,
        parquet samples, URL rows' downloads, files on a store); UserError when the root cannot be listed."""
        from caption_debias.image_source import ImageSource
        from caption_debias.image_source.lookup import ImageLookup

        with self._images_lock:
            if self._images is None:
                self._images = ImageLookup(ImageSource(str(self.image_root)))
            return self._images

    @property
    def path(self) -> Path:
        return self.ds.folder

    @property
    def removed_count(self) -> int:
        return 0 if self.removed is None else self.removed.height


def _file_stamp(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _object_stamp(path: Any) -> tuple | None:
    """An object's size and ETag (or modification time) on a store, asked again each time (no cached listing)."""
    try:
        path.fs.invalidate_cache(path.path)
        info = path.fs.info(path.path)
    except (OSError, ValueError):
        return None
    return (info.get("size"), str(info.get("ETag") or info.get("LastModified") or info.get("mtime")))


def folder_stamp(folder: Any) -> tuple:
    """What changes when a folder is rewritten: the inode, size and mtime of the folder itself and its
    shards/ folder (a file added, removed or renamed in them), of its manifest and of removed.jsonl.
    Four stats a request. On a store (no folders there): the manifest and removed.jsonl, two HEADs."""
    if storage.is_remote(folder):
        folder = storage.as_path(folder)
        return tuple(_object_stamp(folder / name) for name in (MANIFEST, REMOVED))
    folder = Path(folder)
    return tuple(_file_stamp(p) for p in (folder, folder / SHARDS, folder / MANIFEST, folder / REMOVED))


def _image_root(ds: PreparedDataset, given: Any) -> Path | str | None:
    """The folder's image root by the one rule (image_source.roots.folder_root): a Path, or a URL."""
    from caption_debias.image_source.roots import folder_root

    root = folder_root(ds.folder, given, ds.manifest)
    return None if root is None else root.place


def _recorded_inputs(manifest: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for entry in manifest.get("inputs") or []:
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("path"), str)
            and isinstance(entry.get("manifest_sha256"), str)
        ):
            out[entry["path"]] = entry["manifest_sha256"]
    return out


def _line_starts(path: Path) -> Any:
    """Byte offset of every non-empty line (numpy int64), read in chunks: a removed row's whole line
    (its full detail) is read back by offset when it is shown, not kept in memory."""
    import numpy as np

    starts, ends, base, chunk_size = [np.zeros(1, np.int64)], [], 0, 16 << 20
    with storage.open_file(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            nl = np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10).astype(np.int64) + base
            ends.append(nl)
            starts.append(nl + 1)
            base += len(chunk)
    ends.append(np.array([base], np.int64))
    s, e = np.concatenate(starts), np.concatenate(ends)
    return s[e > s]


def read_removed(path: Path, folder_index: int):
    """removed.jsonl as a small table (key, reason, image, 200-character caption, input, match, by,
    similarity), read by polars' NDJSON reader; line offsets for the whole line."""
    import polars as pl

    schema = {
        "key": pl.String,
        "reason": pl.String,
        "image": pl.String,
        "caption": pl.String,
        "input": pl.String,
        "detail": pl.Struct({"match": pl.String, "by": pl.String, "similarity": pl.Float64}),
    }
    try:
        source = path if not storage.is_remote(path) else io.BytesIO(path.read_bytes())
        df = pl.read_ndjson(source, schema=schema) if path.stat().st_size else pl.DataFrame(schema=schema)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise UserError(f"{path}: not curate's removal lines ({str(exc).splitlines()[0][:200]})") from None
    starts = _line_starts(path)
    if len(starts) != df.height:
        raise UserError(f"{path}: {len(starts)} lines but {df.height} removal records")
    if df["key"].null_count() or df["reason"].null_count():
        raise UserError(f"{path}: a removal line without key or reason")
    return (
        df.unnest("detail")
        .with_columns(
            pl.int_range(0, df.height, dtype=pl.Int64).alias("_removed"),
            pl.col("key").str.split_exact("/", 1).struct.field("field_0").alias("source"),
            pl.col("image", "caption", "input").fill_null(""),
            pl.lit(folder_index, pl.Int32).alias("_folder"),
        )
        .with_columns(pl.Series("_offset", starts))
    )


def removed_line(path: Path, offset: int) -> dict[str, Any]:
    """The whole removed.jsonl line at `offset` (its full detail)."""
    with storage.open_file(path, "rb") as fh:
        fh.seek(offset)
        line = json.loads(fh.readline())
    return line if isinstance(line, dict) else {}


def _packed_input(path: str) -> tuple[str, dict[str, Any]] | None:
    """A packed folder's input (the prepared or curated folder it was packed from) and its manifest, else None."""
    try:
        manifest = json.loads(folder_file(path, MANIFEST).read_text("utf-8"))
    except (OSError, ValueError, UserError):
        return None
    if not isinstance(manifest, dict) or manifest.get("kind") != PACKED_KIND:
        return None
    given = str((manifest.get("input") or {}).get("path") or "")
    if not given or not Path(given).is_dir():
        raise UserError(
            f"{path}: a packed folder; view reads the folder it was packed from ({given or 'not recorded'}), "
            "which is not there"
        )
    problem = trust.recorded_path_problem(given)
    if problem is not None:
        raise UserError(f"{path}: a packed folder whose manifest names its input {given}, {problem}; it is not read")
    return given, manifest


def _row_group_starts(shard: Path) -> list[int]:
    meta = storage.read_metadata(shard)
    starts = [0]
    for i in range(meta.num_row_groups):
        starts.append(starts[-1] + meta.row_group(i).num_rows)
    return starts


def open_folder(index: int, path: str, image_root: str | None, name: str) -> Folder:
    packed = _packed_input(path)
    given: Any = image_root
    if packed is not None:  # the rows and captions of a packed folder are those of its input
        from caption_debias.image_source.roots import folder_root

        if given is None:  # the root the packed folder records (gone: its input's, as the rule finds it)
            given = folder_root(path, None, packed[1])
        path, name = packed[0], f"{name} (packed from {Path(packed[0]).name})"
    before = folder_stamp(path)
    ds = PreparedDataset.open(path, allow_incomplete=True)
    if ds.shard_paths:
        schema = storage.read_schema(ds.shard_paths[0])
    else:
        from caption_debias.schema import shard_arrow_schema

        schema = shard_arrow_schema()
    removed_path = folder_file(ds.folder, REMOVED)
    curated = isinstance(ds.manifest.get("curation"), dict) or removed_path.is_file()
    return Folder(
        index=index,
        name=name,
        ds=ds,
        image_root=_image_root(ds, given),
        kind="curated" if curated else "prepared",
        schema=schema,
        row_groups=[_row_group_starts(shard) for shard in ds.shard_paths],
        removed=read_removed(removed_path, index) if removed_path.is_file() else None,
        inputs=_recorded_inputs(ds.manifest),
        opened_stamp=before,
    )


def filled_columns(f: Folder) -> set[str]:
    """Columns of `f` that hold a value in some row: a curated or packed folder carries every schema
    column, null where its stage did not fill it (no scores, no mask). From the Parquet footers only."""
    filled: set[str] = set()
    for path in f.ds.shard_paths:
        meta = storage.parquet_file(path).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for i in range(group.num_columns):
                col = group.column(i)
                stats = col.statistics
                if stats is None or not stats.has_null_count or stats.null_count < col.num_values:
                    filled.add(col.path_in_schema.split(".")[0])
    return filled
