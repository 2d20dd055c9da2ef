"""The input side curate and score share: input folders -> one ordered list of shards, the
lineage, and what the per-shard sidecars add up to (rows per folder, removals, output shards).

"Earlier" means input order: folder order, then the manifest's shard order, then row order.
A row's `order` is its position in that sequence, so every later step can work on plain
integer arrays and the output cannot depend on how many workers ran.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from caption_debias import shard_digests, storage
from caption_debias.dataset import MANIFEST, PreparedDataset
from caption_debias.errors import UserError
from caption_debias.image_source.roots import Root, folder_root
from caption_debias.runner import reconcile
from caption_debias.schema import SCHEMA_VERSION
from caption_debias.schema_types import Manifest

DEFAULT_TOKENIZER = "clip-bpe"  # what a manifest without a tokenizer entry was made with


@dataclass(frozen=True)
class InputShard:
    index: int  # position over all inputs: the output shard number (and curate's signals and decisions)
    folder: str  # input folder as given
    path: str  # the shard file
    sha256: str | None  # as the input manifest lists it, else the file's own (None for a remote file)
    rows: int
    start: int  # global order of its first row
    image_root: str | None = None  # with image_roots: --image-root, or the one the folder's manifest records


@dataclass
class Inputs:
    folders: list[dict[str, Any]]  # lineage entries for the manifest
    shards: list[InputShard]
    manifests: list[Manifest]
    roots: dict[str, Root] = field(default_factory=dict)  # with image_roots: each resolved root -> its Root

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def shard_of(self, order: int) -> InputShard:
        starts = [s.start for s in self.shards]
        return self.shards[int(np.searchsorted(starts, order, side="right")) - 1]


TokenizerRule = Callable[[str, str, str], None]  # (folder as given, its tokenizer, the first input's): raise UserError


def open_inputs(
    folders: Sequence[str | Path],
    out: Path,
    *,
    tokenizer_rule: TokenizerRule,
    image_roots: bool = False,
    image_root: str | None = None,
) -> Inputs:
    """Open every input folder (its shards checked against its manifest) in order.

    `tokenizer_rule` is the stage's: which tokenizers it reads. With `image_roots` each folder's
    image root by the one rule (image_source.roots.folder_root: `image_root` when given, else the
    one its manifest or lineage records; None when its rows carry their images and that one is
    gone), resolved, goes on its shards and its lineage entry.
    """
    if not folders:
        raise UserError("no input folder given")
    names = [str(f) for f in folders]
    if any(storage.same_place(a, b) for i, a in enumerate(names) for b in names[:i]):
        raise UserError("the same input folder is given twice")
    entries: list[dict[str, Any]] = []
    shards: list[InputShard] = []
    manifests: list[Manifest] = []
    roots: dict[str, Root] = {}
    start = 0
    for name in names:
        path = storage.as_path(name)
        if storage.same_place(path, out):
            raise UserError(f"{name}: the input folder is also --out")
        ds = PreparedDataset.open(path)
        tok = _tokenizer(ds.manifest)
        tokenizer_rule(name, tok, _tokenizer(manifests[0]) if manifests else tok)
        found = folder_root(name, image_root, ds.manifest) if image_roots else None
        root = None if found is None else roots.setdefault(found.resolved, found).resolved
        manifests.append(ds.manifest)
        rows = 0
        for s in ds.manifest["shards"]:
            shard = path / s["path"]
            if not shard.is_file():
                raise UserError(f"{shard}: listed in {path / MANIFEST} but missing")
            digest = s.get("sha256") or (None if storage.is_remote(shard) else shard_digests.file_sha256(shard))
            shards.append(InputShard(len(shards), name, str(shard), digest, int(s["rows"]), start, root))
            start += int(s["rows"])
            rows += int(s["rows"])
        entries.append(
            {
                "path": name,
                "kind": "curated" if "curation" in ds.manifest else "prepared",
                "manifest_sha256": hashlib.sha256((path / MANIFEST).read_bytes()).hexdigest(),
                "rows": rows,
                "complete": bool(ds.manifest.get("complete", True)),
                **({"image_root": root} if image_roots else {}),
            }
        )
    return Inputs(entries, shards, manifests, roots)


def _tokenizer(manifest: Mapping[str, Any]) -> str:
    return (manifest.get("tokenizer") or {}).get("name", DEFAULT_TOKENIZER)


class Tally:
    """What the output step's sidecars add up to, gathered in input order: rows read, written and
    removed per input folder, removals by reason, the output shards."""

    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.per_folder: dict[str, Counter] = {f["path"]: Counter() for f in inputs.folders}
        self.reasons: Counter = Counter()
        self.shards: list[dict[str, Any]] = []
        self.removed_before = 0  # rows removed ahead of the input folders (curate --score-model's scoring)

    def add(self, shard: InputShard, side: dict[str, Any]) -> None:
        """One input shard's finished output step: its sidecar's counts, removed lines and output shard."""
        counts = self.per_folder[shard.folder]
        counts["read"] += side["read"]
        counts["written"] += side["rows"]
        for line in side["removed"]:
            self.reasons[line["reason"]] += 1
            counts["removed"] += 1
        if side["path"] is not None:
            self.shards.append({"path": side["path"], "rows": side["rows"], "sha256": side["sha256"]})

    def add_removed_before(self, folder: str, lines: Iterable[dict[str, Any]]) -> None:
        """Rows removed before `folder` was made from the inputs the user gave: read and removed."""
        for line in lines:
            self.reasons[line["reason"]] += 1
            self.per_folder[folder]["read"] += 1
            self.per_folder[folder]["removed"] += 1
            self.removed_before += 1

    @property
    def read(self) -> int:
        return sum(c["read"] for c in self.per_folder.values())

    @property
    def written(self) -> int:
        return sum(c["written"] for c in self.per_folder.values())

    @property
    def removed(self) -> int:
        return sum(self.reasons.values())

    def reconcile(self, stage: str) -> None:
        """read == written + removed per input folder, in total, and against the input manifests' rows."""
        for f in self.inputs.folders:
            c = self.per_folder[f["path"]]
            reconcile(f"{stage} {f['path']}", read=c["read"], written=c["written"], removed=c["removed"])
        reconcile(stage, read=self.read, written=self.written, removed=self.removed)
        reconcile(
            f"{stage} (rows of the input manifests)",
            read=self.inputs.rows + self.removed_before,
            written=self.written,
            removed=self.removed,
        )

    def manifest_head(self, reasons: Iterable[str], options: dict[str, Any]) -> dict[str, Any]:
        """The manifest's first keys: schema, completeness, counts, lineage per input, shards, options."""
        folders = self.inputs.folders
        return {
            "schema_version": SCHEMA_VERSION,
            "complete": all(f["complete"] for f in folders),
            "counts": {
                "read": self.read,
                "written": self.written,
                "removed": self.removed,
                "removed_by_reason": {r: self.reasons.get(r, 0) for r in reasons},
            },
            "inputs": [{**f, "format": f["kind"], **self._counts(f["path"])} for f in folders],
            "shards": self.shards,
            "options": {"inputs": [f["path"] for f in folders], **options},
        }

    def _counts(self, folder: str) -> dict[str, int]:
        c = self.per_folder[folder]
        return {"read": c["read"], "written": c["written"], "removed": c["removed"]}


def carried(inputs: Inputs) -> dict[str, Any]:
    """What the output keeps of the first input's manifest: how its ids were made."""
    first: Mapping[str, Any] = inputs.manifests[0] if inputs.manifests else {}
    return {k: first.get(k, {}) for k in ("tokenizer", "segmenter", "summary")}
