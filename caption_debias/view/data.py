"""What the viewer reads, as one object: `ViewData` over the folders it was given.

The parts, each in its own module of caption_debias/folder_rows/ (stats' Samples reads them too):

- folders.py: opening a folder (manifest, Parquet footers, removed.jsonl), what it may read besides itself
- index.py: the index of the narrow columns; filters, sorts and text searches as row addresses
- rows.py: rows by address, by row group, with small caches and the next page read ahead
- cards.py: rows as the page shows them (sentences by role, scores, links)
- removed.py: removed rows, their whole captions and the kept rows they matched
- images.py: where a row's picture comes from (the one image-source seam)
- reading.py: `Reading`, one reading of the folders through the parts above

A `Generation` is one reading of the folders: everything a request uses comes from one. When a
folder is rewritten while view serves it (curate --overwrite removes its files, then writes
shards, removed.jsonl and the manifest last), the next request notices (folders.folder_stamp: four stats
a folder), waits until the folder stops changing and reads it again; while it is not whole,
requests get one FolderChanged line. `consistent` runs a request again on the new reading when
the folder changed under it, so no answer mixes two.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, TypeVar

from caption_debias.dataset import dataset_names
from caption_debias.errors import UserError
from caption_debias.folder_rows import cards
from caption_debias.folder_rows.folders import Folder, filled_columns, folder_stamp
from caption_debias.folder_rows.images import ImageBytes
from caption_debias.folder_rows.query import Query
from caption_debias.folder_rows.reading import Reading
from caption_debias.folder_rows.rows import Address
from caption_debias.image_source import resolve_root
from caption_debias.view import embedding_map
from caption_debias.view.embedding_map import EmbeddingMap
from caption_debias.view.neighbours import Neighbours
from caption_debias.view.thresholds import ThresholdPreview

__all__ = ["FolderChanged", "Generation", "Query", "ViewData"]

T = TypeVar("T")
ATTEMPTS = 3  # readings of a request when its folder keeps changing under it
SETTLE_S = 0.25  # a changed folder is read again once it has not changed for this long ...
SETTLE_MAX_S = 3.0  # ... waiting at most this long (a run removes and writes several files in a row)


class FolderChanged(UserError):
    """A folder was rewritten while view served it and cannot be read whole yet (the app's 503)."""


class Generation(Reading):
    """One reading of the folders (folder_rows/reading.py) with the page's map, thresholds and neighbours."""

    def __init__(self, paths: list[str], names: list[str], image_root: str | None, number: int = 0):
        super().__init__(paths, names, image_root)
        self.number = number
        self.maps = {by: EmbeddingMap(self.folders, self.removals, c) for by, c in embedding_map.COLUMNS.items()}
        self.map = self.maps["image"]
        self.index.embedding_maps = self.maps
        self.neighbours = Neighbours(self.folders)
        self.thresholds = ThresholdPreview(self.folders, self.neighbours)

    def stale(self) -> bool:
        """Whether a folder was rewritten (or is being rewritten) since this reading."""
        return any(folder_stamp(f.path) != f.opened_stamp for f in self.folders)

    def removed_table(self):
        """Every folder's removed.jsonl table together (None when no folder has one)."""
        import polars as pl

        frames = [f.removed for f in self.folders if f.removed is not None]
        return pl.concat(frames, how="vertical_relaxed") if frames else None

    def embedding_map(self, by: str) -> EmbeddingMap:
        if by not in self.maps:
            raise ValueError(f"a map is by one of {', '.join(self.maps)} (got {by[:40]!r})")
        return self.maps[by]

    def map_page(self, by: str = "image") -> dict[str, Any]:
        """A map's points (view/embedding_map.py), computed on first need."""
        emap = self.embedding_map(by)
        return embedding_map.page_map(emap, self.index.index(), self.removed_table(), list(self.index.reasons()))

    def map_values(self, column: str, by: str = "image") -> dict[str, Any]:
        emap = self.embedding_map(by)
        return {
            "column": column,
            "values": embedding_map.point_values(emap, self.index.index(), self.removed_table(), column),
        }

    def caption_map_note(self) -> str | None:
        """One line when some folder here has no caption embeddings (the page shows it by the maps)."""
        emap = self.maps["caption"]
        lacking = [f.name for f in self.folders if f not in emap.with_embeddings]
        if not lacking:
            return None
        if not emap.available:
            return "no caption map: no folder here holds caption_embedding (caption-debias score --keep-embeddings)"
        return f"no caption embeddings in {', '.join(lacking)}: its rows are not on the caption map"

    def keys(self, q: Query) -> dict[str, Any]:
        """The keys of every row a query selects (the page's "select all matching")."""
        keys = self.index.keys(q)
        return {"keys": keys, "total": len(keys)}

    def meta(self) -> dict[str, Any]:
        return {
            "folders": [
                {
                    "name": f.name,
                    "path": str(f.path),
                    "kind": f.kind,
                    "rows": f.ds.rows,
                    "removed": f.removed_count,
                    "image_root": str(f.image_root) if f.image_root else None,
                }
                for f in self.folders
            ],
            "rows": self.total_rows,
            "removed": sum(f.removed_count for f in self.folders),
            "sources": self.index.sources(),
            "reasons": self.index.reasons(),
            "numeric": self.index.numeric_columns,
            "columns": sorted({c for f in self.folders for c in filled_columns(f)}),
            "ranges": self.index.ranges(),
            "generation": self.number,
            "map": self.map.available,
            "caption_map": self.maps["caption"].available,
            "caption_map_note": self.caption_map_note(),
            "thresholds": self.thresholds.available,
            "neighbours": self.neighbours.available(),
        }


class ViewData:
    """The folders a `view` serves: index, pages, single rows, removed rows and their matches."""

    def __init__(self, folders: list[str], image_root: str | None = None):
        if not folders:
            raise UserError("give at least one folder")
        if image_root is not None:
            resolve_root(image_root)  # a folder here or on a store, or one line naming it
        self._paths, self._names, self._image_root = list(folders), dataset_names(folders), image_root
        self._generation = Generation(self._paths, self._names, image_root)
        self._reload = threading.Lock()
        self._unreadable: tuple[Any, str] | None = None  # (stamps, why) of the last failed reading

    @property
    def image_root_given(self) -> bool:
        return self._image_root is not None

    # ---- one reading ---------------------------------------------------------------------------
    def _stamps(self) -> tuple:
        return tuple(folder_stamp(f.path) for f in self._generation.folders)

    def _settled(self) -> tuple | None:
        """The folders' stamps once they stay the same for SETTLE_S; None while they keep changing."""
        deadline = time.monotonic() + SETTLE_MAX_S
        now = self._stamps()
        while time.monotonic() < deadline:
            time.sleep(SETTLE_S)
            again = self._stamps()
            if again == now:
                return now
            now = again
        return None

    def current(self) -> Generation:
        """The reading of the folders as they are now: read again when one was rewritten;
        FolderChanged while a rewritten folder is not whole."""
        gen = self._generation
        if not gen.stale():
            return gen
        with self._reload:
            gen = self._generation
            if not gen.stale():
                return gen
            if self._unreadable is not None and self._unreadable[0] == self._stamps():
                raise FolderChanged(self._unreadable[1])
            now = self._settled()
            if now is None:
                raise FolderChanged("a folder changed on disk while view served it and is still being written")
            try:
                fresh = Generation(self._paths, self._names, self._image_root, gen.number + 1)
            except Exception as exc:  # noqa: BLE001  UserError, or a file cut short while it is written
                why = f"a folder changed on disk while view served it and is not whole now ({exc})"
                self._unreadable = (now, why)
                raise FolderChanged(why) from None
            self._unreadable = None
            self._generation = fresh
            gen.close()
            return fresh

    def consistent(self, fn: Callable[[Generation], T]) -> T:
        """fn on one reading of the folders; again on the next reading when a folder changed while fn
        ran (fn failed on files that changed under it, or its answer may mix two versions)."""
        for _ in range(ATTEMPTS):
            gen = self.current()
            try:
                result = fn(gen)
            except Exception:
                if gen.stale():
                    continue
                raise
            if not gen.stale():
                return result
        raise FolderChanged("a folder keeps changing on disk while view reads it; try again once it is written")

    # ---- the same, as calls on the current reading ----------------------------------------------
    @property
    def folders(self) -> list[Folder]:
        return self.current().folders

    @property
    def numeric_columns(self) -> list[str]:
        return self.current().index.numeric_columns

    @property
    def total_rows(self) -> int:
        return self.current().total_rows

    def index(self):
        return self.current().index.index()

    def sources(self) -> list[str]:
        return self.current().index.sources()

    def reasons(self) -> dict[str, int]:
        return self.current().index.reasons()

    def meta(self) -> dict[str, Any]:
        return self.consistent(lambda g: g.meta())

    def page(self, q: Query) -> dict[str, Any]:
        return self.consistent(lambda g: g.page(q))

    def rows(self, addresses: list[Address]) -> list[dict[str, Any]]:
        return self.consistent(lambda g: g.cards([(int(f), int(s), int(r)) for f, s, r in addresses]))

    def detail(self, folder: int, shard: int, row: int) -> dict[str, Any]:
        return self.consistent(lambda g: cards.detail(g.store, folder, shard, row))

    def removed_rows(self, items: list[tuple[int, int]]) -> list[dict[str, Any]]:
        return self.consistent(lambda g: g.removals.rows(items))

    def removed_row(self, folder: int, i: int) -> dict[str, Any]:
        return self.consistent(lambda g: g.removals.row(folder, i))

    def pair(self, folder: int, i: int) -> dict[str, Any]:
        return self.consistent(lambda g: g.removals.pair(folder, i))

    def find_key(self, key: str, folder: int | None = None) -> tuple[int, int, int] | None:
        return self.current().index.find_key(key, folder)

    def first_per_source(self, n: int) -> dict[str, list[Address]]:
        return self.current().index.first_per_source(n)

    def image_source(self, folder: int, shard: int | None, row: int | None, removed: int | None) -> ImageBytes:
        return self.consistent(lambda g: g.image_source(folder, shard, row, removed))
