"""Removed rows: their cards, their whole captions, and the kept rows they matched.

A removed row's card comes from its removed.jsonl line (reason, detail, the 200-character
caption). Its whole caption is read by key from the input folder curate read it from, and only from one of the
folders view was given or one the folder's own manifest records as its input, with that input's
manifest digest (folders.Folder.inputs): a line naming any other folder is shown from its own
200 characters.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from caption_debias import storage
from caption_debias.dataset import MANIFEST, PreparedDataset, folder_file
from caption_debias.errors import UserError
from caption_debias.folder_rows import cards, reasons
from caption_debias.folder_rows.folders import REMOVED, Folder, removed_line
from caption_debias.folder_rows.index import RowIndex
from caption_debias.folder_rows.rows import ROW_COLUMNS, SENTENCE_COLUMNS, RowStore
from caption_debias.folder_rows.word_diff import word_diff

# reasons whose pair is told apart by its captions: shown as a word diff side by side
CAPTION_REASONS = ("near_duplicate_caption", "duplicate_caption", "semantic_duplicate", "eval_overlap")


def _thresholds(f: Folder) -> dict[str, Any]:
    """The thresholds the folder's curate used (the rule a removal broke), from its manifest."""
    curation = f.ds.manifest.get("curation")
    return (curation.get("thresholds") if isinstance(curation, dict) else None) or {}


class Removals:
    """Removed rows of the folders, looked up by (folder, line number)."""

    def __init__(self, folders: list[Folder], index: RowIndex, store: RowStore):
        self.folders, self.index, self.store = folders, index, store
        self._inputs: dict[str, PreparedDataset | None] = {}
        self._lock = threading.Lock()

    def line(self, folder: int, i: int) -> dict[str, Any]:
        """The removed.jsonl table row `i` of a folder (KeyError when there is none: negative ones too)."""
        f = self.store.folder(folder)
        if f.removed is None or not 0 <= i < f.removed.height:
            raise KeyError(i)
        return f.removed.row(i, named=True)

    def _input(self, f: Folder, path: str) -> PreparedDataset | None:
        """The input folder `path`: one of the folders view was given, or one `f`'s manifest records
        whose manifest is still the one recorded; None for any other."""
        given = any(storage.same_place(g.path, path) for g in self.folders)
        digest = f.inputs.get(path)
        if digest is None and not given:
            return None
        with self._lock:
            if path in self._inputs:
                return self._inputs[path]
        ds: PreparedDataset | None
        try:
            ds = PreparedDataset.open(path, allow_incomplete=True)
            if not given and hashlib.sha256((ds.folder / MANIFEST).read_bytes()).hexdigest() != digest:
                ds = None  # another folder now, or that one prepared again: its rows are not these
        except (UserError, OSError):
            ds = None
        with self._lock:
            self._inputs[path] = ds
        return ds

    def input_folder(self, f: Folder, path: str) -> PreparedDataset | None:
        """The input folder `path` of `f`'s removed rows, when view may read it (see `_input`); None otherwise."""
        return self._input(f, path)

    def _input_rows(self, f: Folder, input_path: str, keys: list[str]) -> dict[str, dict[str, Any]]:
        """Removed rows' whole rows by key from the input they were read from (none when it is not
        one `f` records, or gone): one lazy scan that reads the key column and the matching rows."""
        import polars as pl

        ds = self._input(f, input_path)
        if ds is None or not ds.shard_paths or not keys:
            return {}
        cols = [c for c in ROW_COLUMNS + SENTENCE_COLUMNS if c in storage.read_schema(ds.shard_paths[0]).names]
        with storage.reading(ds.shard_paths):  # a damaged shard: one line naming it
            df = storage.scan_parquet(ds.shard_paths).filter(pl.col("key").is_in(keys)).select(cols).collect()
        return {r["key"]: r for r in df.iter_rows(named=True)}

    def rows(self, items: list[tuple[int, int]]) -> list[dict[str, Any]]:
        """The cards of these removed rows, whole captions read once per input folder."""
        wanted: dict[tuple[int, str], list[str]] = {}
        for folder, i in items:
            r = self.line(int(folder), int(i))
            if r["input"]:
                wanted.setdefault((int(folder), r["input"]), []).append(r["key"])
        found = {
            (folder, path): self._input_rows(self.folders[folder], path, keys)
            for (folder, path), keys in wanted.items()
        }
        return [self.row(int(f), int(i), found) for f, i in items]

    def row(self, folder: int, i: int, found: dict | None = None) -> dict[str, Any]:
        """The card of one removed row: its reason, detail and match, and its whole caption when its input is there."""
        f = self.store.folder(folder)
        r = self.line(folder, i)
        line = removed_line(folder_file(f.path, REMOVED), r["_offset"])
        if found is None:
            found = {(folder, r["input"]): self._input_rows(f, r["input"], [r["key"]])} if r["input"] else {}
        full = found.get((folder, r["input"]), {}).get(r["key"])
        base = full or {"key": r["key"], "source": r["source"], "image": r["image"], "caption": r["caption"]}
        card = cards.card(f, {**base, "image": r["image"]}, -1, -1)
        card.update(
            id=f"{folder}:r{i}",
            thumb=f"api/thumb?f={folder}&removed={i}",
            reason=r["reason"],
            detail=line.get("detail") or {},
            similarity=r["similarity"],
            match=r["match"],
            by=r["by"],
            input=r["input"],
            full_caption=full is not None,
            why=reasons.describe(r["reason"], line.get("detail"), _thresholds(f), r["image"]),
        )
        return card

    def pair(self, folder: int, i: int) -> dict[str, Any]:
        """A removed duplicate or overlap and the kept row it matched (None when not in these folders)."""
        removed = self.row(folder, i)
        match = None
        key = removed.get("match")
        if isinstance(key, str):
            at = self.index.find_key(key, folder) or self.index.find_key(key)
            if at is not None:
                match = cards.detail(self.store, *at)
        out = {"removed": removed, "match": match, "similarity": removed.get("similarity"), "by": removed.get("by")}
        if match is not None and removed.get("reason") in CAPTION_REASONS:
            out["diff"] = word_diff(removed.get("caption") or "", match.get("caption") or "")
        return out
