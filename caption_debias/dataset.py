"""Read a prepared folder (manifest.json + Parquet shards): the input of stats, train and eval."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from caption_debias.errors import UserError

MANIFEST = "manifest.json"
REJECTS = "rejects.jsonl"


@dataclass
class PreparedDataset:
    folder: Path
    manifest: dict[str, Any]

    @classmethod
    def open(cls, folder: str | Path) -> "PreparedDataset":
        folder = Path(folder)
        path = folder / MANIFEST
        if not folder.is_dir():
            raise UserError(f"{folder}: no such folder")
        if not path.is_file():
            raise UserError(f"{folder}: not a prepared folder (no {MANIFEST}; run `caption-debias prepare` first)")
        try:
            manifest = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: unreadable manifest ({exc})") from None
        if not isinstance(manifest, dict) or "shards" not in manifest:
            raise UserError(f"{path}: not a caption-debias manifest")
        return cls(folder, manifest)

    @property
    def shard_paths(self) -> list[Path]:
        return [self.folder / s["path"] for s in self.manifest["shards"]]

    @property
    def rows(self) -> int:
        return sum(int(s["rows"]) for s in self.manifest["shards"])

    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        """All shards as one Arrow table (only the columns asked for)."""
        from caption_debias.schema import shard_arrow_schema

        if not self.shard_paths:
            schema = shard_arrow_schema()
            return schema.empty_table() if columns is None else schema.empty_table().select(list(columns))
        tables = [pq.read_table(p, columns=list(columns) if columns else None) for p in self.shard_paths]
        return pa.concat_tables(tables)

    def iter_batches(self, columns: Sequence[str] | None = None, batch_size: int = 4096) -> Iterator[pa.RecordBatch]:
        for path in self.shard_paths:
            yield from pq.ParquetFile(path).iter_batches(
                batch_size=batch_size, columns=list(columns) if columns else None
            )

    def scan(self):
        """A polars LazyFrame over every shard (lazy: memory stays bounded for large sets)."""
        import polars as pl

        from caption_debias.schema import shard_arrow_schema

        if not self.shard_paths:
            return pl.from_arrow(shard_arrow_schema().empty_table()).lazy()
        return pl.scan_parquet([str(p) for p in self.shard_paths])

    def rejects(self) -> Iterator[dict[str, Any]]:
        path = self.folder / REJECTS
        if path.is_file():
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        yield json.loads(line)
