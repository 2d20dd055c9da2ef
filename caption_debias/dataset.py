"""Read a prepared folder (manifest.json + Parquet shards): the input of stats, train and eval.

The folder may be an fsspec URL (caption_debias.storage): shards are then read by ranges
through fsspec, the same checks apply.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence, cast

import pyarrow as pa

from caption_debias import shard_digests, storage
from caption_debias.errors import UserError
from caption_debias.schema_types import Manifest

MANIFEST = "manifest.json"
REJECTS = "rejects.jsonl"
STATE_DIR = ".prepare"  # prepare's resume state: there while a run is unfinished
# The resume-state folder of each folder-writing command (prepare's above, curate/run.py's and
# pack/tars.py's STATE_DIR): with no manifest beside it, that command was stopped before the end.
RUN_STATE_DIRS = {STATE_DIR: "prepare", ".curate": "curate", ".pack": "pack"}


def unfinished_by(folder: Any) -> str | None:
    """The command ("prepare", "curate", "pack") that started `folder` and has not finished it, or None."""
    if (folder / MANIFEST).is_file():
        return None
    for name, command in RUN_STATE_DIRS.items():
        if (folder / name).is_dir():
            return command
    return None


def unfinished_message(folder: Any, command: str) -> str:
    return (
        f"{folder}: {command} has not finished this folder (no {MANIFEST} yet: it is still running, or it "
        f"stopped); rerun the same `caption-debias {command}` command to finish it"
    )


class IncompleteFolder(UserError):
    """A prepared folder that is unfinished or does not match its manifest."""


class ShardChanged(IncompleteFolder):
    """A shard whose bytes are not the ones its manifest's digest was taken of."""


def read_manifest(folder: Any) -> tuple[Path, Manifest]:
    """(folder as a path, its manifest), or one line saying why `folder` is not a prepared folder:
    not there, a file, unfinished (naming the command), no manifest, or one that is not ours.
    Cheap (no shard is opened): a command calls it before anything else needs the folder. `folder`: a
    path or URL; the path returned is a UPath for a remote folder."""
    folder = storage.as_path(folder)
    if not folder.is_dir():
        if folder.exists():  # a dump file given where its prepared folder belongs
            raise UserError(
                f"{folder}: a file, not a prepared folder; run `caption-debias prepare {folder} --out DIR` first"
            )
        raise UserError(f"{folder}: no such folder")
    path = folder_file(folder, MANIFEST)
    if not path.is_file():
        command = unfinished_by(folder)
        if command is not None:
            raise IncompleteFolder(unfinished_message(folder, command))
        raise UserError(f"{folder}: not a prepared folder (no {MANIFEST}; run `caption-debias prepare` first)")
    try:
        manifest = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable manifest ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("shards"), list):
        raise UserError(f"{path}: not a caption-debias manifest")
    return folder, cast(Manifest, manifest)  # its keys: schemas/manifest.schema.json


def inside(folder: Any, rel: Any, what: str) -> Any:
    """`folder / rel` for a file a manifest lists (a shard, a tar), refused in one line unless it stays
    inside the folder: a relative path with no control character and no `..` that climbs out, and
    (local folders) no symlink on the way that leads out, as the image root rule (image_files.ImageRoot).
    A manifest is data: one edited to list `../other/part.parquet` must not make a reader read another folder."""
    from caption_debias.image_files import path_problem

    if not isinstance(rel, str) or not rel.strip():
        raise UserError(f"{folder}: {MANIFEST} lists a {what} whose path is not a file name ({rel!r:.80})")
    problem = path_problem(rel)
    if problem is not None:
        problem = problem.replace("image path", f"{what} path").replace("the image root", "the folder")
        raise UserError(f"{folder}: {MANIFEST} lists a {what} outside the folder ({problem}); it is not read")
    path = folder / rel
    if _leaves(folder, path):
        raise UserError(
            f"{folder}: {MANIFEST} lists {what} {rel}, a symlink that leads outside the folder; it is not read"
        )
    return path


def _leaves(folder: Any, path: Any) -> bool:
    """Whether a local `path` under `folder` is a symlink (or under one) that leads outside it."""
    if storage.is_remote(folder):
        return False
    real, base = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([real, base]) != base


def folder_file(folder: Any, name: str) -> Any:
    """A folder's own file (its manifest, rejects.jsonl, removed.jsonl, a key or sidecar), confined as
    its shards are (`inside`): one that is a symlink out of the folder is one line, never read."""
    path = storage.as_path(folder) / name
    if _leaves(folder, path):
        raise UserError(f"{folder}: {name} is a symlink that leads outside the folder; it is not read")
    return path


@dataclass
class PreparedDataset:
    folder: Path  # a UPath for a remote folder
    manifest: Manifest

    @classmethod
    def open(cls, folder: str | Path, *, allow_incomplete: bool = False) -> "PreparedDataset":
        """Open a prepared folder, refusing one that is not whole.

        Refused always: no manifest yet (prepare unfinished), a listed shard missing, unreadable
        or holding another row count than the manifest says (read from its Parquet footer).
        Refused also: a shard whose sha256 is not the manifest's (local folders; see
        shard_digests), named in the one line.
        Refused unless `allow_incomplete`: a manifest saying complete: false (an input was cut
        off; the rows before the cut are all there).
        """
        folder, manifest = read_manifest(folder)
        if manifest.get("complete") is False and not allow_incomplete:
            cut = [str(i.get("path")) for i in manifest.get("inputs") or [] if i.get("complete") is False]
            raise IncompleteFolder(
                f"{folder}: incomplete: {', '.join(cut) or 'an input'} was cut off or broken mid-way "
                f"({MANIFEST} says complete: false); restore the input and rerun the same "
                "`caption-debias prepare` command to finish it (finished shards are kept)"
            )
        for shard in manifest["shards"]:  # before any file is opened: a listed path never leads out of the folder
            if isinstance(shard, dict) and "path" in shard:
                inside(folder, shard["path"], "shard")
        problem = _shard_problem(folder, manifest["shards"])
        if problem:
            raise IncompleteFolder(
                f"{folder}: {problem}; rerun the same `caption-debias prepare` command to rewrite it "
                "(or copy the folder again)"
            )
        changed = shard_digests.mismatch(folder, manifest["shards"])
        if changed:
            command = "curate" if "curation" in manifest else "prepare"
            raise ShardChanged(
                f"{folder}: {changed}: it was replaced or edited after `caption-debias {command}` wrote it; "
                f"rerun the same `caption-debias {command}` command to rewrite it (or copy the folder again)"
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
        path = folder_file(self.folder, REJECTS)
        if path.is_file():
            with storage.open_file(path, "r", encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        yield json.loads(line)


def _shard_problem(folder: Path, shards: Sequence[Mapping[str, Any]]) -> str | None:
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


def dataset_names(folders: Sequence[str | Path]) -> list[str]:
    """Short, unique display names: the folder name, its parent prefixed on a clash."""
    paths = [storage.as_path(f) if storage.is_remote(f) else Path(f).resolve() for f in folders]
    names = [p.name or str(p) for p in paths]
    for i, name in enumerate(names):
        if names.count(name) > 1:
            names[i] = f"{paths[i].parent.name}/{name}"
    seen: Counter = Counter()
    for i, name in enumerate(names):  # identical paths given twice: number them
        seen[name] += 1
        if seen[name] > 1:
            names[i] = f"{name}#{seen[name]}"
    return names
