"""The index and selections: which rows a query names, in which order.

The index (key, source and every numeric column, one row per kept row: tens of bytes a row) is
built once from the narrow columns; filters and sorts run on it with polars and give row
addresses (folder, shard, row). A text search reads the caption column row group by row group
in file order and stops once a page is filled; removed rows are selected from the small
removed.jsonl tables. Selections are kept as row addresses (12 bytes a row), a few at a time.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.folder_rows import sentence_signals as signals
from caption_debias.folder_rows.folders import Folder, is_numeric
from caption_debias.folder_rows.query import Query

CACHED_SELECTIONS = 6
CACHED_SEARCHES = 4


class MapCoords(Protocol):
    """Rows placed on the viewer's 2-D map (view/embedding_map.py's EmbeddingMap): the box and lasso filters' input."""

    @property
    def available(self) -> bool:
        """Whether any row is on the map."""

    def coords(self, removed: bool) -> Any:
        """A polars frame of the row addresses with their x and y."""


class RowIndex:
    """The folders' index (built once, on first need) and the selections made on it."""

    def __init__(self, folders: list[Folder]):
        self.folders = folders
        self._index: Any = None  # a polars frame, built on first need
        self._index_ready = threading.Event()
        self._index_error: BaseException | None = None
        self._index_lock = threading.Lock()
        self._lock = threading.Lock()
        self._selections: OrderedDict[tuple, Any] = OrderedDict()
        self._searches: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.numeric_columns = self._numeric_columns()
        self.embedding_maps: Mapping[str, MapCoords] = {}  # by image / caption: set by view's Generation (box, lasso)

    # ---- the index ---------------------------------------------------------------------------
    def _numeric_columns(self) -> list[str]:
        cols = ["num_tokens", "num_sentences"]
        for f in self.folders:
            for name in [fld.name for fld in f.schema if is_numeric(fld.type)] + signals.columns_for(f.schema.names):
                if name not in cols:
                    cols.append(name)
        return cols

    def _shard_index(self, f: Folder, s: int, path, cols: list[str]):
        import polars as pl

        t = storage.parquet_file(path).read(columns=cols)  # not read_table: it imports pyarrow.dataset (a second)
        lengths = pc.list_value_length(t.column("summary_mask")).cast(pa.int32())
        t = t.append_column("num_sentences", lengths)
        df = pl.from_arrow(t)
        have = signals.columns_for(t.column_names)
        if have:  # the weakest detail sentence and the mask, as numbers (folder_rows/sentence_signals.py)
            df = signals.batch_signals(df, have)
        return df.drop("summary_mask").with_columns(
            pl.lit(f.index, pl.Int32).alias("_folder"),
            pl.lit(s, pl.Int32).alias("_shard"),
            pl.int_range(0, t.num_rows, dtype=pl.Int32).alias("_row"),
            pl.col("source").cast(pl.Categorical),
        )

    def build(self) -> None:
        """Read the narrow columns of every shard once (call from a thread; pages wait on it)."""
        import polars as pl

        try:
            parts = []
            for f in self.folders:
                numeric = [c.name for c in f.schema if is_numeric(c.type)]
                lists = [c for c in ("sentence_grounding", "sentence_keep") if c in f.schema.names]
                cols = ["key", "source", "summary_mask"] + lists + [c for c in numeric if c not in ("key", "source")]
                parts += [self._shard_index(f, s, path, cols) for s, path in enumerate(f.ds.shard_paths)]
            if parts:
                index = pl.concat(parts, how="diagonal_relaxed")
            else:
                index = pl.DataFrame(
                    schema={
                        "key": pl.String,
                        "source": pl.Categorical,
                        "_folder": pl.Int32,
                        "_shard": pl.Int32,
                        "_row": pl.Int32,
                    }
                )
            for c in self.numeric_columns:
                if c not in index.columns:
                    index = index.with_columns(pl.lit(None, pl.Float64).alias(c))
            self._index = index
        except BaseException as exc:  # reported by the page that waits on it
            self._index_error = exc
        finally:
            self._index_ready.set()

    def index(self):
        if not self._index_ready.is_set():
            with self._index_lock:
                if not self._index_ready.is_set():
                    self.build()
        if self._index_error is not None:
            raise UserError(f"could not index the folders: {self._index_error}")
        return self._index

    @property
    def ready(self) -> bool:
        return self._index_ready.is_set() and self._index is not None

    @property
    def total_rows(self) -> int:
        return sum(f.ds.rows for f in self.folders)

    # ---- what the filters offer ----------------------------------------------------------------
    def sources(self) -> list[str]:
        names = {str(s) for s in self.index()["source"].unique().to_list() if s is not None}
        for f in self.folders:
            if f.removed is not None:
                names.update(f.removed["source"].unique().to_list())
        return sorted(names)

    def reasons(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for f in self.folders:
            if f.removed is not None:
                for reason, n in f.removed.group_by("reason").len().iter_rows():
                    counts[reason] = counts.get(reason, 0) + n
        from caption_debias.schema import removed_schema

        # the schema lists curate's reasons in funnel order; others (a scorer's) follow by name
        order = {r: i for i, r in enumerate(removed_schema()["properties"]["reason"]["enum"])}
        return dict(sorted(counts.items(), key=lambda kv: (order.get(kv[0], 99), kv[0])))

    def ranges(self) -> dict[str, list]:
        """[min, max] of every numeric column, once the index is there (empty before)."""
        import polars as pl

        if not self.ready:
            return {}
        out = {}
        for c in self.numeric_columns:
            s = self._index[c]
            if s.dtype == pl.Boolean:
                s = s.cast(int)
            out[c] = [s.min(), s.max()]
        return out

    # ---- selections ---------------------------------------------------------------------------
    def _groups(self) -> list[tuple[int, int, int, int]]:
        """(folder, shard, row group, rows) of every row group, in index order."""
        return [
            (f.index, s, g, starts[g + 1] - starts[g])
            for f in self.folders
            for s, starts in enumerate(f.row_groups)
            for g in range(len(starts) - 1)
        ]

    def _search_state(self, needle: str) -> dict[str, Any]:
        with self._lock:
            state = self._searches.get(needle)
            if state is None:
                state = self._searches[needle] = {"parts": [], "groups": 0, "rows": 0, "lock": threading.Lock()}
            self._searches.move_to_end(needle)
            while len(self._searches) > CACHED_SEARCHES:
                self._searches.popitem(last=False)
        return state

    def _text_scan(
        self, text: str, rows_wanted: int | None, match_filter, regex: bool = False
    ) -> tuple[Any, bool, int]:
        """Kept rows whose caption or key holds `text` (any case), scanning those columns row group by
        row group in file order and stopping once `rows_wanted` rows pass `match_filter` (None: scan all).

        The scan's progress is kept per search text, so the next page goes on where this one stopped.
        Returns (matching index rows so far, whether every row was searched, rows searched).
        """
        import polars as pl

        needle = search_pattern(text, regex)
        state = self._search_state(needle)
        index, groups = self.index(), self._groups()
        with state["lock"]:
            step = 2
            while True:
                mask = pl.Series("m", np.concatenate(state["parts"]) if state["parts"] else np.zeros(0, bool))
                found = match_filter(index.head(state["rows"]).filter(mask))
                done = state["groups"] == len(groups)
                if done or (rows_wanted is not None and found.height >= rows_wanted):
                    return found, done, state["rows"]
                for f, s, g, n in groups[state["groups"] : state["groups"] + step]:
                    part = storage.parquet_file(self.folders[f].ds.shard_paths[s]).read_row_group(
                        g, columns=["caption", "key"]
                    )
                    hit = pl.Series(part.column(0)).str.contains(needle).fill_null(False)
                    hit = hit | pl.Series(part.column(1)).str.contains(needle).fill_null(False)
                    state["parts"].append(hit.to_numpy())
                    state["groups"] += 1
                    state["rows"] += n
                step *= 2

    def filters(self, df, q: Query):
        import polars as pl

        if q.sources:
            df = df.filter(pl.col("source").cast(pl.String).is_in(list(q.sources)))
        if q.folder is not None:
            df = df.filter(pl.col("_folder") == q.folder)
        if q.where:
            df = where_filter(df, q.where)
        if q.tagged is not None:
            df = df.filter(pl.col("key").is_in(pl.Series("k", list(q.tagged), pl.String).implode()))
        for col, lo, hi in q.ranges:
            if col not in df.columns:
                raise UserError(f"no column {col!r} to filter on")
            c = pl.col(col).cast(pl.Float64)
            if lo is not None:
                df = df.filter(c >= lo)
            if hi is not None:
                df = df.filter(c <= hi)
        if q.box is not None:
            df = self._in_box(df, q.box, q.map_by)
        if q.lasso is not None:
            df = self._in_lasso(df, q.lasso, q.map_by)
        return df

    def _map(self, by: str) -> MapCoords:
        emap = self.embedding_maps.get(by)
        if emap is None or not emap.available:
            raise UserError(f"no map: no folder here holds {by}_embedding")
        return emap

    def _in_box(self, df, box: tuple[float, float, float, float], by: str = "image"):
        """The rows of `df` whose map coordinates lie in the box (rows without an embedding are not on the map)."""
        import polars as pl

        removed = "_removed" in df.columns
        x0, y0, x1, y1 = box
        inside = self._map(by).coords(removed).filter(pl.col("x").is_between(x0, x1) & pl.col("y").is_between(y0, y1))
        on = ["_folder", "_removed"] if removed else ["_folder", "_shard", "_row"]
        return df.join(inside.select(on), on=on, how="semi", maintain_order="left")

    def _in_lasso(self, df, polygon: tuple[tuple[float, float], ...], by: str = "image"):
        """The rows of `df` whose map point lies inside the polygon (even-odd rule, vectorised ray casting)."""
        removed = "_removed" in df.columns
        coords = self._map(by).coords(removed)
        inside = coords.filter(inside_polygon(coords["x"].to_numpy(), coords["y"].to_numpy(), polygon))
        on = ["_folder", "_removed"] if removed else ["_folder", "_shard", "_row"]
        return df.join(inside.select(on), on=on, how="semi", maintain_order="left")

    def _removed_selection(self, q: Query):
        import polars as pl

        frames = [f.removed for f in self.folders if f.removed is not None]
        if not frames:  # no curated folder: no removed rows
            return pl.DataFrame(schema={"_folder": pl.Int32, "_removed": pl.Int64, "similarity": pl.Float64})
        df = pl.concat(frames, how="vertical_relaxed")
        if q.reason:
            df = df.filter(pl.col("reason") == q.reason)
        if q.text:
            needle = search_pattern(q.text, q.regex)
            df = df.filter(pl.col("caption").str.contains(needle) | pl.col("key").str.contains(needle))
        return self.filters(df, q)

    def select(self, q: Query, rows_wanted: int | None = None) -> tuple[Any, bool, int | None]:
        """The filtered, sorted rows of a query (index rows, or removed rows), cached per selection;
        whether they are all there (a text search in file order stops once a page is filled), and
        how many rows that search has read (None when not a search)."""
        key = q.selection()
        with self._lock:  # pages are served from a thread pool
            if key in self._selections:
                self._selections.move_to_end(key)
                return self._selections[key], True, None
        if q.sort and q.sort not in (self.numeric_columns if q.view == "kept" else ["similarity"]):
            raise UserError(f"no column {q.sort!r} to sort by")
        searched = None
        if q.view == "removed":
            df, complete = self._removed_selection(q), True
        elif q.text:
            df, complete, searched = self._text_scan(
                q.text, None if q.sort else rows_wanted, lambda part: self.filters(part, q), q.regex
            )
        else:
            df, complete = self.filters(self.index(), q), True
        if q.sort and df.height:
            df = df.sort(q.sort, descending=q.descending, nulls_last=True, maintain_order=True)
        # only the row addresses are kept: 12 bytes a row, not a copy of the index
        df = df.select([c for c in ("_folder", "_shard", "_row", "_removed") if c in df.columns])
        if complete:
            with self._lock:
                self._selections[key] = df
                while len(self._selections) > CACHED_SELECTIONS:
                    self._selections.popitem(last=False)
        return df, complete, searched

    def keys(self, q: Query) -> list[str]:
        """The key of every row a query selects, in its order (a text search reads every row group)."""
        import polars as pl

        df, _, _ = self.select(q, rows_wanted=None)
        if q.view == "removed":
            table = pl.concat([f.removed for f in self.folders if f.removed is not None], how="vertical_relaxed")
            on = ["_folder", "_removed"]
        else:
            table, on = self.index(), ["_folder", "_shard", "_row"]
        return df.join(table.select(*on, "key"), on=on, how="left", maintain_order="left")["key"].to_list()

    def plain_addresses(self, offset: int, limit: int) -> list[tuple[int, int, int]]:
        """Rows offset .. offset+limit in file order (no index needed)."""
        out: list[tuple[int, int, int]] = []
        for f in self.folders:
            for s, starts in enumerate(f.row_groups):
                n = starts[-1]
                if offset >= n:
                    offset -= n
                    continue
                take = min(n - offset, limit - len(out))
                out.extend((f.index, s, r) for r in range(offset, offset + take))
                offset = 0
                if len(out) >= limit:
                    return out
        return out

    def first_per_source(self, n: int) -> dict[str, list[tuple[int, int, int]]]:
        """The first `n` rows of every source in file order, from the `source` column alone (no index)."""
        found: dict[str, list[tuple[int, int, int]]] = {}
        for f in self.folders:
            for s, path in enumerate(f.ds.shard_paths):
                sources = storage.parquet_file(path).read(columns=["source"]).column(0).to_pylist()
                for r, source in enumerate(sources):
                    rows = found.setdefault(source, [])
                    if len(rows) < n:
                        rows.append((f.index, s, r))
        return dict(sorted(found.items()))

    def find_key(self, key: str, folder: int | None = None) -> tuple[int, int, int] | None:
        import polars as pl

        hit = self.index().filter(pl.col("key") == key)
        if folder is not None:
            hit = hit.filter(pl.col("_folder") == folder)
        if hit.height == 0:
            return None
        return int(hit["_folder"][0]), int(hit["_shard"][0]), int(hit["_row"][0])


def search_pattern(text: str, regex: bool) -> str:
    """The search as one case-blind regular expression (polars: Rust's regex, linear in the text);
    a malformed one is a ValueError (the app's one-line 400)."""
    import polars as pl

    pattern = "(?i)" + (text if regex else re.escape(text))
    if regex:
        try:
            pl.Series([""], dtype=pl.String).str.contains(pattern)
        except Exception as exc:  # noqa: BLE001  polars' ComputeError: the regex does not parse
            raise ValueError(f"not a regular expression: {str(exc).strip().splitlines()[0][:200]}") from None
    return pattern


def where_filter(df, where: str):
    """The rows of `df` a SQL expression over its columns keeps (`clip_score > 0.3 AND source = 'coco'`).
    polars' sql_expr parses one expression: no statement, no table function (read_parquet and its kind
    are refused), so a field query can only filter the index the page already holds."""
    import polars as pl

    try:
        return df.filter(pl.sql_expr(where))
    except Exception as exc:  # noqa: BLE001  polars' SQL and column errors: one line for the page
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"where: {first[:300]}") from None


def inside_polygon(x: np.ndarray, y: np.ndarray, polygon: tuple[tuple[float, float], ...]) -> np.ndarray:
    """Which points (x, y) lie inside the polygon, by the even-odd rule: a ray to the right crosses its
    edges an odd number of times. One pass per edge over all points (a lasso has a few hundred)."""
    inside = np.zeros(len(x), bool)
    px = np.array([p[0] for p in polygon], np.float64)
    py = np.array([p[1] for p in polygon], np.float64)
    for i in range(len(polygon)):
        x0, y0, x1, y1 = px[i - 1], py[i - 1], px[i], py[i]
        crosses = (y0 > y) != (y1 > y)
        with np.errstate(divide="ignore", invalid="ignore"):
            at = x0 + (y - y0) * (x1 - x0) / (y1 - y0)
        inside ^= crosses & (x < at)
    return inside
