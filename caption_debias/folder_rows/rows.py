"""Rows by address (folder, shard, row): read by row group, only the display columns, with small caches.

A page reads only the row groups its rows sit in, several at a time (pyarrow decodes without the
GIL), never `image_bytes`, token ids or embeddings; for a row group that gives one or two rows, only
its pages up to the last row wanted. Recent rows and whole row groups are kept in small caches, and
the next page of a selection is read in the background (`prefetch`) while this one is looked at.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from caption_debias import storage
from caption_debias.folder_rows.folders import Folder, is_numeric

# display columns read for a page (those present); per-sentence score columns come from the scorers
# (sentences come from caption + sentence_spans: half the bytes of reading both texts)
ROW_COLUMNS = ("key", "source", "split", "image", "caption", "sentence_spans", "summary_mask", "num_tokens")
SENTENCE_COLUMNS = ("summary_scores", "sentence_scores", "sentence_grounding", "sentence_keep")
HEAVY = ("image_bytes", "sentence_tokens", "image_embedding", "caption_embedding")
CACHED_ROW_GROUPS = 4  # whole row groups kept (file-order paging); about 10 MB each at 8,192 long captions
CACHED_ROWS = 4096  # single rows kept (sorted and filtered pages, thumbnails, the prefetched next page)
READ_THREADS = 4
FEW_ROWS = 4  # rows of one row group on a page below which its pages are streamed, not read whole
HEAD_BATCH = 512

Address = tuple[int, int, int]


class RowStore:
    """Reads rows of the folders by address; thread-safe (pages are served from a thread pool)."""

    def __init__(self, folders: list[Folder]):
        self.folders = folders
        self._lock = threading.Lock()
        self._row_groups: OrderedDict[tuple, pa.Table] = OrderedDict()
        self._rows: OrderedDict[Address, dict[str, Any]] = OrderedDict()
        self._cells: dict[str, tuple[Any, Any]] = {}  # column -> (row group key, that group's column)
        self._prefetcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="view-prefetch")
        self._prefetching: tuple[Future | None, set] = (None, set())

    # ---- addresses ---------------------------------------------------------------------------
    def folder(self, folder: int) -> Folder:
        """The folder of that number (KeyError for any other, negative ones too)."""
        if not 0 <= folder < len(self.folders):
            raise KeyError(folder)
        return self.folders[folder]

    def locate(self, f: Folder, shard: int, row: int) -> tuple[int, int]:
        """(row group, row within it) of a row (KeyError when there is no such row)."""
        if not 0 <= shard < len(f.row_groups):
            raise KeyError(shard)
        starts = f.row_groups[shard]
        if not 0 <= row < starts[-1]:
            raise KeyError(row)
        g = bisect.bisect_right(starts, row) - 1
        return g, row - starts[g]

    def check(self, folder: int, shard: int, row: int) -> None:
        self.locate(self.folder(folder), shard, row)

    # ---- reading -----------------------------------------------------------------------------
    def columns(self, f: Folder, detail: bool) -> list[str]:
        names = f.schema.names
        if detail:
            return [c for c in names if c not in HEAVY]
        want = list(ROW_COLUMNS) + list(SENTENCE_COLUMNS) + [c.name for c in f.schema if is_numeric(c.type)]
        return [c for c in dict.fromkeys(want) if c in names]

    def _read_group(self, f: Folder, shard: int, group: int, detail: bool) -> pa.Table:
        return storage.parquet_file(f.ds.shard_paths[shard]).read_row_group(
            group, columns=self.columns(f, detail), use_threads=False
        )

    def _read_head(self, f: Folder, shard: int, group: int, rows: int) -> pa.Table:
        """The first `rows` rows of a row group, decoding its pages only that far (half the work on average)."""
        pf = storage.parquet_file(f.ds.shard_paths[shard], pre_buffer=False, buffer_size=1 << 16)
        batches, got = [], 0
        for batch in pf.iter_batches(
            batch_size=HEAD_BATCH, row_groups=[group], columns=self.columns(f, False), use_threads=False
        ):
            batches.append(batch)
            got += batch.num_rows
            if got >= rows:
                break
        return pa.Table.from_batches(batches)

    def _keep_group(self, key: tuple, table: pa.Table) -> None:
        with self._lock:
            self._row_groups[key] = table
            while len(self._row_groups) > CACHED_ROW_GROUPS:
                self._row_groups.popitem(last=False)

    def _row_group(self, f: Folder, shard: int, group: int, detail: bool) -> pa.Table:
        """A row group's display columns; the last few are kept (the next page in file order is in them)."""
        key = (f.index, shard, group, detail)
        with self._lock:
            if key in self._row_groups:
                self._row_groups.move_to_end(key)
                return self._row_groups[key]
        table = self._read_group(f, shard, group, detail)
        self._keep_group(key, table)
        return table

    def raw_row(self, folder: int, shard: int, row: int, detail: bool = False) -> dict[str, Any]:
        """A row's display columns (`detail`: every column but the heavy ones) as Python values."""
        f = self.folder(folder)
        g, r = self.locate(f, shard, row)
        if not detail:
            with self._lock:
                hit = self._rows.get((folder, shard, row))
            if hit is not None:
                return hit
        table = self._row_group(f, shard, g, detail)
        return {c: table.column(c)[r].as_py() for c in table.column_names}

    def cell(self, folder: int, shard: int, row: int, column: str) -> Any:
        """One value of a column the pages never read (image bytes, token ids); the row group's column
        is kept for the next row (a page's thumbnails ask for one group's images together)."""
        f = self.folder(folder)
        g, r = self.locate(f, shard, row)
        key = (folder, shard, g)
        with self._lock:
            kept, col = self._cells.get(column, (None, None))
        if kept != key:
            col = storage.parquet_file(f.ds.shard_paths[shard]).read_row_group(g, columns=[column]).column(0)
            with self._lock:
                self._cells[column] = (key, col)
        return col[r].as_py()

    def _load_group(self, item) -> list[tuple[Address, dict[str, Any]]]:
        (f, s, g), wanted = item
        key = (f, s, g, False)
        with self._lock:
            table = self._row_groups.get(key)
        if table is None and len(wanted) <= FEW_ROWS:
            # a few rows (sorted pages): stream the group's pages and stop after the last one wanted
            table = self._read_head(self.folders[f], s, g, max(i for _, i in wanted) + 1)
        elif table is None:
            table = self._read_group(self.folders[f], s, g, False)
            if len(wanted) > 1:  # a run of rows (file order, a narrow filter): the next page is likely here too
                self._keep_group(key, table)
        part = [table.slice(i, 1).to_pylist()[0] for _, i in wanted]  # not Table.take: it imports pandas
        return [((f, s, r), row) for (r, _), row in zip(wanted, part)]

    def load(self, addresses: list[Address]) -> None:
        """Put the display columns of these rows into the row cache: each row group they sit in read
        once, several at a time (pyarrow decodes without the GIL), only the wanted rows kept."""
        groups: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        with self._lock:
            for f, s, r in addresses:
                if (f, s, r) not in self._rows:
                    g, i = self.locate(self.folder(f), s, r)
                    groups.setdefault((f, s, g), []).append((r, i))
        if not groups:
            return
        with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(groups))) as pool:
            loaded = [x for chunk in pool.map(self._load_group, groups.items()) for x in chunk]
        with self._lock:
            for address, row in loaded:
                self._rows[address] = row
            while len(self._rows) > CACHED_ROWS:
                self._rows.popitem(last=False)
        pa.default_memory_pool().release_unused()  # the row groups read are gone: give their pages back

    def rows(self, addresses: list[Address]) -> list[dict[str, Any]]:
        """The display columns of these rows, in order."""
        addresses = [(int(f), int(s), int(r)) for f, s, r in addresses]
        future, wanted = self._prefetching
        if future is not None and wanted.intersection(addresses):
            # the rows are being read already: wait for them rather than read them twice (a failed
            # prefetch only means they are read here)
            future.exception()
        self.load(addresses)
        return [self.raw_row(f, s, r) for f, s, r in addresses]

    def prefetch(self, addresses: list[Address]) -> None:
        """Read the next page's rows in the background (a user's next click is most often "next")."""
        addresses = [(int(f), int(s), int(r)) for f, s, r in addresses]
        try:
            self._prefetching = (self._prefetcher.submit(self.load, addresses), set(addresses))
        except RuntimeError:  # closed: these folders were reopened (view.data), nobody asks for these rows
            pass

    def close(self) -> None:
        self._prefetcher.shutdown(wait=False, cancel_futures=True)
