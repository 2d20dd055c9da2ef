"""Input folders -> one ordered list of shards (each row's global order), lineage, image roots,
and the seeded reference sample every sentence's grounding is measured against.

"Order" is the position in folder order, then the manifest's shard order, then row order, so
the reference sample and every batch are fixed before any parallel work: the output cannot
depend on how many workers ran.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from caption_debias import storage
from caption_debias.dataset import MANIFEST, PreparedDataset
from caption_debias.errors import UserError


@dataclass(frozen=True)
class InputShard:
    index: int  # position over all inputs: the output shard number
    folder: str  # input folder as given
    path: str  # the shard file
    sha256: str  # as the input manifest lists it
    rows: int
    start: int  # global order of its first row
    image_root: str | None  # --image-root, or the one the folder's manifest records


@dataclass
class Inputs:
    folders: list[dict[str, Any]]  # lineage entries for the manifest
    shards: list[InputShard]
    manifests: list[dict[str, Any]]

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def shard_of(self, order: int) -> InputShard:
        starts = [s.start for s in self.shards]
        return self.shards[int(np.searchsorted(starts, order, side="right")) - 1]


def open_inputs(folders: list[str | Path], out: Path, image_root: str | None) -> Inputs:
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
        if tok != "clip-bpe":
            raise UserError(f"{name}: made with tokenizer {tok!r}; score reads CLIP BPE ids (prepare's default)")
        root = image_root or (ds.manifest.get("options") or {}).get("image_root")
        manifests.append(ds.manifest)
        rows = 0
        for s in ds.manifest["shards"]:
            shard = path / s["path"]
            if not shard.is_file():
                raise UserError(f"{shard}: listed in {path / MANIFEST} but missing")
            shards.append(InputShard(len(shards), name, str(shard), s["sha256"], int(s["rows"]), start, root))
            start += int(s["rows"])
            rows += int(s["rows"])
        entries.append(
            {
                "path": name,
                "kind": "curated" if "curation" in ds.manifest else "prepared",
                "manifest_sha256": hashlib.sha256((path / MANIFEST).read_bytes()).hexdigest(),
                "rows": rows,
                "complete": bool(ds.manifest.get("complete", True)),
                "image_root": root,
            }
        )
    return Inputs(entries, shards, manifests)


def reference_candidates(total: int, size: int, seed: int) -> np.ndarray:
    """Global orders to try, in order, for a reference sample of `size` readable images.

    A seeded draw without replacement over every row of the input; twice the size plus a
    margin, so a few unreadable images still leave `size` (fewer only when the input is small
    or mostly unreadable; the manifest records how many were used).
    """
    rng = np.random.default_rng(seed)
    want = min(total, 2 * size + 16)
    return rng.choice(total, size=want, replace=False).astype(np.int64) if want else np.zeros(0, np.int64)
