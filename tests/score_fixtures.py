"""A scored folder without a model: a prepared folder with the columns `caption-debias score` writes set by hand.

The shards are rewritten as real Parquet (the shard schema, zstd) and the manifest's sha256s
follow, so every reader treats the copy as the scored folder `score` would make.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from caption_debias.prepare.writer import write_shard
from caption_debias.schema import shard_arrow_schema


def with_scores(src: Path, dst: Path, columns: dict[str, list[Any]]) -> Path:
    """Copy prepared/curated folder SRC to DST with per-row `columns` (global row order) replaced."""
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text("utf-8"))
    schema = shard_arrow_schema()
    start = 0
    for entry in manifest["shards"]:
        path = dst / entry["path"]
        table = pq.read_table(path)
        n = table.num_rows
        for name, values in columns.items():
            field = schema.field(name)
            array = pa.array(values[start : start + n], field.type)
            table = table.set_column(table.schema.get_field_index(name), field, array)
        entry["sha256"] = write_shard(table, path)
        start += n
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")
    return dst


def read_rows(folder: Path, columns: list[str]) -> dict[str, list[Any]]:
    manifest = json.loads((folder / "manifest.json").read_text("utf-8"))
    tables = [pq.read_table(folder / s["path"], columns=columns) for s in manifest["shards"]]
    if not tables:
        return {c: [] for c in columns}
    return pa.concat_tables(tables).to_pydict()


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)
