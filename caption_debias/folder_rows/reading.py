"""One reading of prepared folders as rows the page and the report show: `Reading`.

view's `Generation` (view/data.py) is a Reading with the page's extras (map, thresholds,
neighbours); stats' Samples section reads a Reading as it is, without the web app.
"""

from __future__ import annotations

from typing import Any

from caption_debias.folder_rows import cards
from caption_debias.folder_rows.folders import open_folder
from caption_debias.folder_rows.images import ImageBytes, source_for
from caption_debias.folder_rows.index import RowIndex
from caption_debias.folder_rows.query import PAGE_MAX, Query
from caption_debias.folder_rows.removed import Removals
from caption_debias.folder_rows.rows import Address, RowStore


class Reading:
    """The folders as opened, their index, rows and removals."""

    def __init__(self, paths: list[str], names: list[str], image_root: str | None):
        self.folders = [open_folder(i, f, image_root, n) for i, (f, n) in enumerate(zip(paths, names))]
        self.store = RowStore(self.folders)
        self.index = RowIndex(self.folders)
        self.removals = Removals(self.folders, self.index, self.store)

    def close(self) -> None:
        self.store.close()

    @property
    def total_rows(self) -> int:
        return self.index.total_rows

    def cards(self, addresses: list[Address]) -> list[dict[str, Any]]:
        raws = self.store.rows(addresses)
        return [cards.card(self.folders[int(f)], raw, int(s), int(r)) for (f, s, r), raw in zip(addresses, raws)]

    def page(self, q: Query) -> dict[str, Any]:
        """One page: {total (None while a text search has not reached the end), searched, offset, rows}."""
        limit = max(1, min(q.limit, PAGE_MAX))
        if q.plain:  # file order: no index needed, rows straight from their row groups
            addresses = self.index.plain_addresses(q.offset, limit)
            return {"total": self.total_rows, "offset": q.offset, "rows": self.cards(addresses)}
        df, complete, searched = self.index.select(q, rows_wanted=q.offset + limit + 1)
        part = df.slice(q.offset, limit)
        out: dict[str, Any] = {"total": df.height if complete else None, "offset": q.offset}
        if not complete:
            out.update(at_least=df.height, searched=searched, of=self.total_rows)
        if q.view == "removed":
            out["rows"] = self.removals.rows(list(zip(part["_folder"], part["_removed"])))
        else:
            out["rows"] = self.cards(list(zip(part["_folder"], part["_shard"], part["_row"])))
            following = df.slice(q.offset + limit, limit)
            if following.height:
                self.store.prefetch(list(zip(following["_folder"], following["_shard"], following["_row"])))
        return out

    def image_source(self, folder: int, shard: int | None, row: int | None, removed: int | None) -> ImageBytes:
        """Where one row's picture comes from (folder_rows/images.py); KeyError when there is no such row."""
        f = self.store.folder(folder)
        if removed is not None:
            line = self.removals.line(folder, removed)
            return source_for(f.image_root, line["image"], None, f.images, line["key"])
        assert shard is not None and row is not None  # a kept row is named by its shard and row
        raw = self.store.raw_row(folder, shard, row)
        embedded = self.store.cell(folder, shard, row, "image_bytes") if "image_bytes" in f.schema.names else None
        return source_for(f.image_root, raw.get("image"), embedded, f.images, raw.get("key"))
