"""Prepared folders written by hand: shard-schema rows as Parquet shards plus the manifest that lists them (with each
shard's sha256), for tests and benchmarks that need exact token ids, counts or sizes that `prepare` would not produce.

`write_folder` takes rows as dicts; `write_shards` + `write_manifest` take Arrow tables one at a time (a large
generated folder never held whole)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from caption_debias.schema import shard_arrow_schema
from caption_debias.shard_digests import sha256_file


def write_folder(
    folder: Path, records: list[dict[str, Any]], rejects_by_reason: dict[str, int] | None = None, shard_rows: int = 0
) -> Path:
    """`records` (dicts of the shard schema's columns) as shard-NNNNN.parquet files of `shard_rows` rows each (all in
    one when 0) and manifest.json; `rejects_by_reason` counted as read and rejected."""
    folder.mkdir(parents=True)
    size = shard_rows or max(1, len(records))
    tables = (
        pa.Table.from_pylist(records[lo : lo + size], schema=shard_arrow_schema())
        for lo in range(0, len(records), size)
    )
    return write_manifest(folder, write_shards(folder, tables), rejects_by_reason)


def write_shards(
    folder: Path, tables: Iterable[pa.Table], name: str = "shard-{:05d}.parquet", **parquet: Any
) -> list[dict[str, Any]]:
    """Each table as the zstd Parquet file `name.format(n)` under `folder` (`parquet`: pq.write_table's options);
    the manifest's entries for them."""
    shards = []
    for n, table in enumerate(tables):
        path = folder / name.format(n)
        pq.write_table(table, path, compression="zstd", **parquet)
        shards.append({"path": name.format(n), "rows": table.num_rows, "sha256": sha256_file(path)})
    return shards


def write_manifest(
    folder: Path,
    shards: list[dict[str, Any]],
    rejects_by_reason: dict[str, int] | None = None,
    toolkit_version: str = "test",
) -> Path:
    """manifest.json of a complete folder over `shards`; `rejects_by_reason` counted as read and rejected."""
    written = sum(s["rows"] for s in shards)
    rejected = sum((rejects_by_reason or {}).values())
    counts: dict[str, Any] = {"read": written + rejected, "written": written, "rejected": rejected}
    if rejects_by_reason is not None:
        counts["rejects_by_reason"] = rejects_by_reason
    manifest = {
        "schema_version": 1,
        "complete": True,
        "counts": counts,
        "inputs": [],
        "shards": shards,
        "options": {},
        "tokenizer": {},
        "segmenter": {},
        "toolkit_version": toolkit_version,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder
