"""Input folders -> one ordered list of shards, with each row's global order and the lineage.

"Earlier" means input order: folder order, then the manifest's shard order, then row order.
A row's `order` is its position in that sequence, so every later step can work on plain
integer arrays and the output cannot depend on how many workers ran.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caption_debias import shard_digests, storage
from caption_debias.dataset import MANIFEST, PreparedDataset
from caption_debias.errors import UserError


@dataclass(frozen=True)
class InputShard:
    index: int  # position over all inputs: the signals, decisions and output shard number
    folder: str  # input folder as given
    path: str  # the shard file
    sha256: str | None  # as the input manifest lists it (checked against the file by PreparedDataset.open)
    rows: int
    start: int  # global order of its first row


@dataclass
class Inputs:
    folders: list[dict[str, Any]]  # lineage entries for the manifest
    shards: list[InputShard]
    manifests: list[dict[str, Any]]

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def open_inputs(folders: list[str | Path], out: Path) -> Inputs:
    if not folders:
        raise UserError("no input folder given")
    names = [str(f) for f in folders]
    if any(storage.same_place(a, b) for i, a in enumerate(names) for b in names[:i]):
        raise UserError("the same input folder is given twice")
    entries, shards, manifests = [], [], []
    start = 0
    for name in names:
        path = storage.as_path(name)
        if storage.same_place(path, out):
            raise UserError(f"{name}: the input folder is also --out")
        ds = PreparedDataset.open(path)
        tok = (ds.manifest.get("tokenizer") or {}).get("name", "clip-bpe")
        if manifests and tok != (manifests[0].get("tokenizer") or {}).get("name", "clip-bpe"):
            raise UserError(f"{name}: made with tokenizer {tok!r}, the first input with another; curate them apart")
        manifests.append(ds.manifest)
        rows = 0
        for s in ds.manifest["shards"]:
            shard = path / s["path"]
            if not shard.is_file():
                raise UserError(f"{shard}: listed in {path / MANIFEST} but missing")
            digest = s.get("sha256") or (None if storage.is_remote(shard) else shard_digests.file_sha256(shard))
            shards.append(InputShard(len(shards), name, str(shard), digest, int(s["rows"]), start))
            start += int(s["rows"])
            rows += int(s["rows"])
        entries.append(
            {
                "path": name,
                "kind": "curated" if "curation" in ds.manifest else "prepared",
                "manifest_sha256": _sha256(path / MANIFEST),
                "rows": rows,
                "complete": bool(ds.manifest.get("complete", True)),
            }
        )
    return Inputs(entries, shards, manifests)
