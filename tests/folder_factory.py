"""Prepared folders written by hand: shard-schema rows as Parquet shards plus the manifest that lists them (with each
shard's sha256), for tests that need exact token ids or counts that `prepare` would not produce."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    shards = []
    for n, lo in enumerate(range(0, len(records), size)):
        chunk = records[lo : lo + size]
        path = folder / f"shard-{n:05d}.parquet"
        pq.write_table(pa.Table.from_pylist(chunk, schema=shard_arrow_schema()), path, compression="zstd")
        shards.append({"path": path.name, "rows": len(chunk), "sha256": sha256_file(path)})
    rejected = sum((rejects_by_reason or {}).values())
    counts: dict[str, Any] = {"read": len(records) + rejected, "written": len(records), "rejected": rejected}
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
        "toolkit_version": "test",
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder
