"""Read a prepared folder (manifest.json + Parquet shards): the input of stats, train and eval.

The folder may be an fsspec URL (caption_debias.storage): shards are then read by ranges
through fsspec, the same checks apply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import pyarrow as pa

from caption_debias import storage
from caption_debias.errors import UserError

MANIFEST = "manifest.json"
REJECTS = "rejects.jsonl"
STATE_DIR = ".prepare"  # prepare's resume state: there while a run is unfinished


class IncompleteFolder(UserError):
    """A prepared folder that is unfinished or does not match its manifest."""


@dataclass
class PreparedDataset:
    folder: Path  # a UPath for a remote folder
    manifest: dict[str, Any]

    @classmethod
    def open(cls, folder: str | Path, *, allow_incomplete: bool = False) -> "PreparedDataset":
        """Open a prepared folder, refusing one that is not whole.

        Refused always: no manifest yet (prepare unfinished), a listed shard missing, unreadable
        or holding another row count than the manifest says (read from its Parquet footer).
        Refused unless `allow_incomplete`: a manifest saying complete: false (an input was cut
        off; the rows before the cut are all there).
        """
        folder = storage.as_path(folder)
        path = folder / MANIFEST
        if not folder.is_dir():
            raise UserError(f"{folder}: no such folder")
        if not path.is_file():
            if (folder / STATE_DIR).is_dir():
                raise IncompleteFolder(
                    f"{folder}: prepare has not finished this folder (no {MANIFEST} yet: it is still running, "
                    "or it stopped); rerun the same `caption-debias prepare` command to finish it"
                )
            raise UserError(f"{folder}: not a prepared folder (no {MANIFEST}; run `caption-debias prepare` first)")
        try:
            manifest = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(f"{path}: unreadable manifest ({exc})") from None
        if not isinstance(manifest, dict) or not isinstance(manifest.get("shards"), list):
            raise UserError(f"{path}: not a caption-debias manifest")
        if manifest.get("complete") is False and not allow_incomplete:
            cut = [str(i.get("path")) for i in manifest.get("inputs") or [] if i.get("complete") is False]
            raise IncompleteFolder(
                f"{folder}: incomplete: {', '.join(cut) or 'an input'} was cut off or broken mid-way "
                f"({MANIFEST} says complete: false); restore the input and rerun the same "
                "`caption-debias prepare` command to finish it (finished shards are kept)"
            )
        problem = _shard_problem(folder, manifest["shards"])
        if problem:
            raise IncompleteFolder(
                f"{folder}: {problem}; rerun the same `caption-debias prepare` command to rewrite it "
                "(or copy the folder again)"
            )
        return cls(folder, manifest)

    @property
    def shard_paths(self) -> list[Path]:
        return [self.folder / s["path"] for s in self.manifest["shards"]]

    @property
    def rows(self) -> int:
        return sum(int(s["rows"]) for s in self.manifest["shards"])

    def columns(self) -> list[str]:
        """The shards' column names (a folder written before a column existed lacks it)."""
        from caption_debias.schema import shard_columns

        if not self.shard_paths:
            return shard_columns()
        return list(storage.read_schema(self.shard_paths[0]).names)

    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        """All shards as one Arrow table (only the columns asked for)."""
        from caption_debias.schema import shard_arrow_schema

        if not self.shard_paths:
            schema = shard_arrow_schema()
            return schema.empty_table() if columns is None else schema.empty_table().select(list(columns))
        tables = [storage.read_table(p, columns=list(columns) if columns else None) for p in self.shard_paths]
        return pa.concat_tables(tables)

    def iter_batches(self, columns: Sequence[str] | None = None, batch_size: int = 4096) -> Iterator[pa.RecordBatch]:
        for path in self.shard_paths:
            yield from storage.parquet_file(path).iter_batches(
                batch_size=batch_size, columns=list(columns) if columns else None
            )

    def scan(self):
        """A polars LazyFrame over every shard (lazy: memory stays bounded for large sets)."""
        import polars as pl

        from caption_debias.schema import shard_arrow_schema

        if not self.shard_paths:
            return pl.from_arrow(shard_arrow_schema().empty_table()).lazy()
        return storage.scan_parquet(self.shard_paths)

    def rejects(self) -> Iterator[dict[str, Any]]:
        path = self.folder / REJECTS
        if path.is_file():
            with storage.open_file(path, "r", encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        yield json.loads(line)


def _shard_problem(folder: Path, shards: list[dict[str, Any]]) -> str | None:
    """What is wrong with the first listed shard that does not match the manifest, or None."""
    for shard in shards:
        try:
            rel, rows = shard["path"], int(shard["rows"])
        except (KeyError, TypeError, ValueError):
            return f"{MANIFEST} lists a shard without a path or row count ({shard!r:.80})"
        path = folder / rel
        if not path.is_file():
            return f"shard {rel} listed in {MANIFEST} is missing"
        try:
            found = storage.read_metadata(path).num_rows  # the footer only: cheap whatever the shard's size
        except (OSError, pa.ArrowException) as exc:
            return f"shard {rel} is unreadable ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        if found != rows:
            return f"shard {rel} holds {found} rows, {MANIFEST} says {rows}"
    return None
