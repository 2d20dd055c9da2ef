"""Atomic file writing: a shard or sidecar is written to a temp name, synced, then renamed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def _replace(tmp: Path, path: Path) -> None:
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_shard(table: pa.Table, path: Path) -> str:
    """Write a zstd Parquet shard atomically; returns its sha256."""
    tmp = _tmp(path)
    pq.write_table(table, tmp, compression="zstd", row_group_size=min(max(len(table), 1), 8192))
    digest = sha256_file(tmp)
    _replace(tmp, path)
    return digest


def write_json(data: Any, path: Path) -> None:
    tmp = _tmp(path)
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1, default=str) + "\n", encoding="utf-8")
    _replace(tmp, path)


def write_text(text_lines, path: Path) -> None:
    """Write lines (an iterable of str) atomically."""
    tmp = _tmp(path)
    with open(tmp, "w", encoding="utf-8") as fh:
        for line in text_lines:
            fh.write(line)
    _replace(tmp, path)
