"""What the viewer reads: folders opened lazily, a small in-memory index, pages of rows by row group.

Opening a folder reads its manifest and Parquet footers only. The index (key, source and every
numeric column, one row per kept row: tens of bytes a row) is built once from those narrow
columns; filters and sorts run on it with polars and give row addresses (folder, shard, row).
A page then reads only the row groups its rows sit in, with the display columns (never
`image_bytes`, token ids or embeddings), through a small cache of recent row groups.
A curated folder's `removed.jsonl` is read into a second small table (its rows with reason,
detail and the 200-character caption); a removed row's whole caption is looked up by key in the
input folder it came from when that folder is still there.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from caption_debias import lineage, storage
from caption_debias.dataset import PreparedDataset, dataset_names
from caption_debias.errors import UserError

PAGE_MAX = 200
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


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def sentence_roles(mask: list[bool] | None, n: int) -> list[str]:
    """Each sentence's role from prepare's summary_mask: opening / closing summary, summary (in the middle), detail."""
    mask = list(mask or [])[:n] + [False] * max(0, n - len(mask or []))
    roles = []
    for i, flagged in enumerate(mask):
        if not flagged:
            roles.append("detail")
        elif i == 0:
            roles.append("opening summary")
        elif i == n - 1:
            roles.append("closing summary")
        else:
            roles.append("summary")
    return roles


@dataclass
class Folder:
    """One opened folder: its dataset, row-group layout, removals and image root."""

    index: int
    name: str
    ds: PreparedDataset
    image_root: Path | None
    kind: str  # prepared | curated
    schema: pa.Schema
    # per shard: row-group start offsets (the last entry is the shard's row count)
    row_groups: list[list[int]] = field(default_factory=list)
    removed: Any = None  # polars DataFrame of removed.jsonl, or None

    @property
    def path(self) -> Path:
        return self.ds.folder


def _image_root(ds: PreparedDataset, given: str | None) -> Path | None:
    if given is not None:
        return Path(given)
    return lineage.image_root(ds.folder, ds.manifest)  # the one the manifests record, back through the lineage


def _line_starts(path: Path) -> Any:
    """Byte offset of every non-empty line (numpy int64), read in chunks: a removed row's whole line
    (its full detail) is read back by offset when it is shown, not kept in memory."""
    import numpy as np

    starts, ends, base, chunk_size = [np.zeros(1, np.int64)], [], 0, 16 << 20
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            nl = np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10).astype(np.int64) + base
            ends.append(nl)
            starts.append(nl + 1)
            base += len(chunk)
    ends.append(np.array([base], np.int64))
    s, e = np.concatenate(starts), np.concatenate(ends)
    return s[e > s]


def _read_removed(path: Path, folder_index: int):
    """removed.jsonl as a small table (key, reason, image, 200-character caption, input, match, by,
    similarity), read by polars' NDJSON reader; line offsets for the whole line."""
    import polars as pl

    schema = {
        "key": pl.String,
        "reason": pl.String,
        "image": pl.String,
        "caption": pl.String,
        "input": pl.String,
        "detail": pl.Struct({"match": pl.String, "by": pl.String, "similarity": pl.Float64}),
    }
    try:
        df = pl.read_ndjson(path, schema=schema) if path.stat().st_size else pl.DataFrame(schema=schema)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise UserError(f"{path}: not curate's removal lines ({str(exc).splitlines()[0][:200]})") from None
    starts = _line_starts(path)
    if len(starts) != df.height:
        raise UserError(f"{path}: {len(starts)} lines but {df.height} removal records")
    if df["key"].null_count() or df["reason"].null_count():
        raise UserError(f"{path}: a removal line without key or reason")
    return (
        df.unnest("detail")
        .with_columns(
            pl.int_range(0, df.height, dtype=pl.Int64).alias("_removed"),
            pl.col("key").str.split_exact("/", 1).struct.field("field_0").alias("source"),
            pl.col("image", "caption", "input").fill_null(""),
            pl.lit(folder_index, pl.Int32).alias("_folder"),
        )
        .with_columns(pl.Series("_offset", starts))
    )


def _removed_line(path: Path, offset: int) -> dict[str, Any]:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return json.loads(fh.readline())


PACKED_KIND = "caption-debias packed"  # pack/state.py KIND: a packed folder's manifest says so


def _packed_input(path: str) -> tuple[str, str | None] | None:
    """A packed folder's input (the prepared or curated folder it was packed from) and image root, else None."""
    try:
        manifest = json.loads((Path(path) / "manifest.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("kind") != PACKED_KIND:
        return None
    given = str((manifest.get("input") or {}).get("path") or "")
    if not given or not Path(given).is_dir():
        raise UserError(
            f"{path}: a packed folder; view reads the folder it was packed from ({given or 'not recorded'}), "
            "which is not there"
        )
    return given, (manifest.get("options") or {}).get("image_root") or None


def open_folder(index: int, path: str, image_root: str | None, name: str) -> Folder:
    packed = _packed_input(path)
    if packed is not None:  # the rows and captions of a packed folder are those of its input
        path, packed_root = packed
        name = f"{name} (packed from {Path(path).name})"
        if image_root is None and packed_root and Path(packed_root).is_dir():
            image_root = packed_root
    ds = PreparedDataset.open(path, allow_incomplete=True)
    if ds.shard_paths:
        schema = pq.read_schema(ds.shard_paths[0])
    else:
        from caption_debias.schema import shard_arrow_schema

        schema = shard_arrow_schema()
    layout = []
    for shard in ds.shard_paths:
        meta = pq.read_metadata(shard)
        starts = [0]
        for i in range(meta.num_row_groups):
            starts.append(starts[-1] + meta.row_group(i).num_rows)
        layout.append(starts)
    removed_path = ds.folder / "removed.jsonl"
    curated = isinstance(ds.manifest.get("curation"), dict) or removed_path.is_file()
    removed = _read_removed(removed_path, index) if removed_path.is_file() else None
    return Folder(
        index=index,
        name=name,
        ds=ds,
        image_root=_image_root(ds, image_root),
        kind="curated" if curated else "prepared",
        schema=schema,
        row_groups=layout,
        removed=removed,
    )


@dataclass
class Query:
    """One page request: which rows (kept, or removed of a reason), filters, sort and the slice."""

    view: str = "kept"  # kept | removed
    reason: str | None = None  # removed rows of this reason (None: all reasons)
    sources: tuple[str, ...] = ()
    text: str = ""
    ranges: tuple[tuple[str, float | None, float | None], ...] = ()
    sort: str | None = None
    descending: bool = False
    offset: int = 0
    limit: int = 48

    def selection(self) -> tuple:
        """Everything but the slice: pages of one selection share its filtered, sorted index."""
        return (self.view, self.reason, self.sources, self.text.lower(), self.ranges, self.sort, self.descending)


class ViewData:
    """The folders a `view` serves: index, pages, single rows, removed rows and their matches."""

    def __init__(self, folders: list[str], image_root: str | None = None):
        if not folders:
            raise UserError("give at least one folder")
        if image_root is not None and not Path(image_root).is_dir():
            raise UserError(f"--image-root {image_root}: no such folder")
        names = dataset_names(folders)
        self.folders = [open_folder(i, f, image_root, n) for i, (f, n) in enumerate(zip(folders, names))]
        self._index = None
        self._index_ready = threading.Event()
        self._index_error: BaseException | None = None
        self._lock = threading.Lock()  # the row-group cache
        self._index_lock = threading.Lock()
        self._row_groups: OrderedDict[tuple, pa.Table] = OrderedDict()
        self._rows: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
        self._image_column: tuple[Any, Any] = (None, None)
        self._prefetching: tuple[threading.Thread | None, set] = (None, set())
        self._selections: OrderedDict[tuple, Any] = OrderedDict()
        self._text_masks: OrderedDict[str, Any] = OrderedDict()
        self._inputs: dict[str, PreparedDataset | None] = {}
        self.numeric_columns = self._numeric_columns()

    # ---- the index ---------------------------------------------------------------------------
    def _numeric_columns(self) -> list[str]:
        cols = ["num_tokens", "num_sentences"]
        for f in self.folders:
            for fld in f.schema:
                if _numeric(fld.type) and fld.name not in cols:
                    cols.append(fld.name)
        return cols

    def build_index(self) -> None:
        """Read the narrow columns of every shard once (call from a thread; pages wait on it)."""
        import polars as pl

        try:
            parts = []
            for f in self.folders:
                numeric = [c.name for c in f.schema if _numeric(c.type)]
                cols = ["key", "source", "summary_mask"] + [c for c in numeric if c not in ("key", "source")]
                for s, path in enumerate(f.ds.shard_paths):
                    t = storage.parquet_file(path).read(
                        columns=cols
                    )  # not read_table: it imports pyarrow.dataset (a second)
                    lengths = pc.list_value_length(t.column("summary_mask")).cast(pa.int32())
                    t = t.drop_columns(["summary_mask"]).append_column("num_sentences", lengths)
                    df = pl.from_arrow(t).with_columns(
                        pl.lit(f.index, pl.Int32).alias("_folder"),
                        pl.lit(s, pl.Int32).alias("_shard"),
                        pl.int_range(0, t.num_rows, dtype=pl.Int32).alias("_row"),
                        pl.col("source").cast(pl.Categorical),
                    )
                    parts.append(df)
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
        if not self._index_ready.is_set() and self._index is None and self._index_error is None:
            with self._index_lock:
                if not self._index_ready.is_set():
                    self.build_index()
        self._index_ready.wait()
        if self._index_error is not None:
            raise UserError(f"could not index the folders: {self._index_error}")
        return self._index

    @property
    def total_rows(self) -> int:
        return sum(f.ds.rows for f in self.folders)

    def sources(self) -> list[str]:
        names: set[str] = set()
        for f in self.folders:
            for s in (f.ds.manifest.get("counts") or {}).get("by_source", {}) or {}:
                names.add(s)
        if not names:
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

    def meta(self) -> dict[str, Any]:
        ranges = {}
        if self._index_ready.is_set() and self._index is not None:
            idx = self._index
            for c in self.numeric_columns:
                s = idx[c]
                if s.dtype == __import__("polars").Boolean:
                    s = s.cast(int)
                lo, hi = s.min(), s.max()
                ranges[c] = [lo, hi]
        return {
            "folders": [
                {
                    "name": f.name,
                    "path": str(f.path),
                    "kind": f.kind,
                    "rows": f.ds.rows,
                    "removed": 0 if f.removed is None else f.removed.height,
                    "image_root": str(f.image_root) if f.image_root else None,
                }
                for f in self.folders
            ],
            "rows": self.total_rows,
            "removed": sum(0 if f.removed is None else f.removed.height for f in self.folders),
            "sources": self.sources(),
            "reasons": self.reasons(),
            "numeric": self.numeric_columns,
            "columns": sorted({c for f in self.folders for c in filled_columns(f)}),
            "ranges": ranges,
        }

    # ---- selections ---------------------------------------------------------------------------
    def _groups(self) -> list[tuple[int, int, int, int]]:
        """(folder, shard, row group, rows) of every row group, in index order."""
        return [
            (f.index, s, g, starts[g + 1] - starts[g])
            for f in self.folders
            for s, starts in enumerate(f.row_groups)
            for g in range(len(starts) - 1)
        ]

    def _text_scan(self, text: str, rows_wanted: int | None, match_filter) -> tuple[Any, bool]:
        """Kept rows whose caption holds `text` (any case), scanning the caption column row group by
        row group in file order and stopping once `rows_wanted` rows pass `match_filter` (None: scan all).

        The scan's progress is kept per search text, so the next page goes on where this one stopped.
        Returns (matching index rows so far, whether every row was searched).
        """
        import polars as pl

        needle = text.lower()
        with self._lock:
            state = self._text_masks.get(needle)
            if state is None:
                state = self._text_masks[needle] = {"parts": [], "groups": 0, "rows": 0, "lock": threading.Lock()}
            self._text_masks.move_to_end(needle)
            while len(self._text_masks) > 4:
                self._text_masks.popitem(last=False)
        index, groups = self.index(), self._groups()
        with state["lock"]:
            step = 2
            while True:
                mask = pl.Series("m", np.concatenate(state["parts"]) if state["parts"] else np.zeros(0, bool))
                found = match_filter(index.head(state["rows"]).filter(mask))
                done = state["groups"] == len(groups)
                if done or (rows_wanted is not None and found.height >= rows_wanted):
                    return found, done
                for f, s, g, n in groups[state["groups"] : state["groups"] + step]:
                    col = (
                        storage.parquet_file(self.folders[f].ds.shard_paths[s])
                        .read_row_group(g, columns=["caption"])
                        .column(0)
                    )
                    hit = pl.Series(col).str.contains("(?i)" + re.escape(text)).fill_null(False)
                    state["parts"].append(hit.to_numpy())
                    state["groups"] += 1
                    state["rows"] += n
                step *= 2

    def _filters(self, df, q: Query):
        import polars as pl

        if q.sources:
            df = df.filter(pl.col("source").cast(pl.String).is_in(list(q.sources)))
        for col, lo, hi in q.ranges:
            if col not in df.columns:
                raise UserError(f"no column {col!r} to filter on")
            c = pl.col(col).cast(pl.Float64)
            if lo is not None:
                df = df.filter(c >= lo)
            if hi is not None:
                df = df.filter(c <= hi)
        return df

    def select(self, q: Query, rows_wanted: int | None = None) -> tuple[Any, bool]:
        """The filtered, sorted rows of a query (index rows, or removed rows), cached per selection;
        and whether they are all there (a text search in file order stops once a page is filled)."""
        import polars as pl

        key = q.selection()
        with self._lock:  # pages are served from a thread pool
            if key in self._selections:
                self._selections.move_to_end(key)
                return self._selections[key], True
        if q.sort and q.sort not in (self.numeric_columns if q.view == "kept" else ["similarity"]):
            raise UserError(f"no column {q.sort!r} to sort by")
        if q.view == "removed":
            frames = [f.removed for f in self.folders if f.removed is not None]
            if not frames:
                return pl.DataFrame(), True
            df = pl.concat(frames, how="vertical_relaxed")
            if q.reason:
                df = df.filter(pl.col("reason") == q.reason)
            if q.text:
                df = df.filter(pl.col("caption").str.to_lowercase().str.contains(q.text.lower(), literal=True))
            df = self._filters(df, q)
            complete = True
        elif q.text:
            df, complete = self._text_scan(q.text, None if q.sort else rows_wanted, lambda part: self._filters(part, q))
        else:
            df, complete = self._filters(self.index(), q), True
        if q.sort:
            df = df.sort(q.sort, descending=q.descending, nulls_last=True, maintain_order=True)
        # only the row addresses are kept: 12 bytes a row, not a copy of the index
        df = df.select([c for c in ("_folder", "_shard", "_row", "_removed") if c in df.columns])
        if complete:
            with self._lock:
                self._selections[key] = df
                while len(self._selections) > 6:
                    self._selections.popitem(last=False)
        return df, complete

    def page(self, q: Query) -> dict[str, Any]:
        """One page: {total (None while a text search has not reached the end), searched, offset, rows}."""
        limit = max(1, min(q.limit, PAGE_MAX))
        plain = q.view == "kept" and not (q.sources or q.text or q.ranges or q.sort)
        if plain:  # file order: no index needed, rows straight from their row groups
            total = self.total_rows
            addresses = self._plain_addresses(q.offset, limit)
            return {"total": total, "offset": q.offset, "rows": self.rows(addresses)}
        df, complete = self.select(q, rows_wanted=q.offset + limit + 1)
        part = df.slice(q.offset, limit)
        out: dict[str, Any] = {"total": df.height if complete else None, "offset": q.offset}
        if not complete:
            out["at_least"] = df.height
            out["searched"] = self._text_masks[q.text.lower()]["rows"]
            out["of"] = self.total_rows
        if q.view == "removed":
            out["rows"] = self.removed_rows(list(zip(part["_folder"], part["_removed"])))
        else:
            out["rows"] = self.rows(list(zip(part["_folder"], part["_shard"], part["_row"])))
            following = df.slice(q.offset + limit, limit)
            if following.height:
                self.prefetch(list(zip(following["_folder"], following["_shard"], following["_row"])))
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

    def _plain_addresses(self, offset: int, limit: int) -> list[tuple[int, int, int]]:
        out = []
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

    # ---- rows ---------------------------------------------------------------------------------
    def _columns(self, f: Folder, detail: bool) -> list[str]:
        names = f.schema.names
        if detail:
            return [c for c in names if c not in HEAVY]
        want = list(ROW_COLUMNS) + list(SENTENCE_COLUMNS) + [c.name for c in f.schema if _numeric(c.type)]
        return [c for c in dict.fromkeys(want) if c in names]

    def _read_group(self, f: Folder, shard: int, group: int, detail: bool) -> pa.Table:
        return storage.parquet_file(f.ds.shard_paths[shard]).read_row_group(
            group, columns=self._columns(f, detail), use_threads=False
        )

    def _read_head(self, f: Folder, shard: int, group: int, rows: int) -> pa.Table:
        """The first `rows` rows of a row group, decoding its pages only that far (half the work on average)."""
        pf = storage.parquet_file(f.ds.shard_paths[shard], pre_buffer=False, buffer_size=1 << 16)
        batches, got = [], 0
        for batch in pf.iter_batches(
            batch_size=HEAD_BATCH, row_groups=[group], columns=self._columns(f, False), use_threads=False
        ):
            batches.append(batch)
            got += batch.num_rows
            if got >= rows:
                break
        return pa.Table.from_batches(batches)

    def _row_group(self, f: Folder, shard: int, group: int, detail: bool) -> pa.Table:
        """A row group's display columns; the last few are kept (the next page in file order is in them)."""
        key = (f.index, shard, group, detail)
        with self._lock:
            if key in self._row_groups:
                self._row_groups.move_to_end(key)
                return self._row_groups[key]
        table = self._read_group(f, shard, group, detail)
        with self._lock:
            self._row_groups[key] = table
            while len(self._row_groups) > CACHED_ROW_GROUPS:
                self._row_groups.popitem(last=False)
        return table

    def _locate(self, f: Folder, shard: int, row: int) -> tuple[int, int]:
        import bisect

        if not 0 <= shard < len(f.row_groups):
            raise KeyError(shard)
        starts = f.row_groups[shard]
        if not 0 <= row < starts[-1]:
            raise KeyError(row)
        g = bisect.bisect_right(starts, row) - 1
        return g, row - starts[g]

    def raw_row(self, folder: int, shard: int, row: int, detail: bool = False) -> dict[str, Any]:
        f = self.folders[folder]
        g, r = self._locate(f, shard, row)
        if not detail:
            with self._lock:
                hit = self._rows.get((folder, shard, row))
            if hit is not None:
                return hit
        table = self._row_group(f, shard, g, detail)
        return {c: table.column(c)[r].as_py() for c in table.column_names}

    def _load_rows(self, addresses: list[tuple[int, int, int]]) -> None:
        """Put the display columns of these rows into the row cache: each row group they sit in read
        once, several at a time (pyarrow decodes without the GIL), only the wanted rows kept."""
        from concurrent.futures import ThreadPoolExecutor

        groups: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        with self._lock:
            for f, s, r in addresses:
                if (f, s, r) not in self._rows:
                    g, i = self._locate(self.folders[f], s, r)
                    groups.setdefault((f, s, g), []).append((r, i))
        if not groups:
            return

        def load(item):
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
                    with self._lock:
                        self._row_groups[key] = table
                        while len(self._row_groups) > CACHED_ROW_GROUPS:
                            self._row_groups.popitem(last=False)
            part = [table.slice(i, 1).to_pylist()[0] for _, i in wanted]  # not Table.take: it imports pandas
            return [((f, s, r), row) for (r, _), row in zip(wanted, part)]

        with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(groups))) as pool:
            loaded = [x for chunk in pool.map(load, groups.items()) for x in chunk]
        with self._lock:
            for address, row in loaded:
                self._rows[address] = row
            while len(self._rows) > CACHED_ROWS:
                self._rows.popitem(last=False)
        pa.default_memory_pool().release_unused()  # the row groups read are gone: give their pages back

    def rows(self, addresses: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
        addresses = [(int(f), int(s), int(r)) for f, s, r in addresses]
        thread, wanted = self._prefetching
        if thread is not None and wanted.intersection(addresses):
            thread.join()  # the rows are being read already: wait for them rather than read them twice
        self._load_rows(addresses)
        return [self.card(self.raw_row(f, s, r), f, s, r) for f, s, r in addresses]

    def prefetch(self, addresses: list[tuple[int, int, int]]) -> None:
        """Read the next page's rows in the background (a user's next click is most often "next")."""
        addresses = [(int(f), int(s), int(r)) for f, s, r in addresses]
        thread = threading.Thread(target=self._load_rows, args=(addresses,), daemon=True, name="view-prefetch")
        self._prefetching = (thread, set(addresses))
        thread.start()

    def card(self, raw: dict[str, Any], folder: int, shard: int, row: int) -> dict[str, Any]:
        """A row as the page shows it: sentences with roles and scores, counts, scalars."""
        f = self.folders[folder]
        sentences = raw.get("sentences")
        if sentences is None:  # schemas/shard.schema.json: caption[start:end].strip() == sentence
            caption = raw.get("caption") or ""
            sentences = [caption[sp["start"] : sp["end"]].strip() for sp in raw.get("sentence_spans") or []]
        roles = sentence_roles(raw.get("summary_mask"), len(sentences))
        per = {c: raw.get(c) for c in SENTENCE_COLUMNS if raw.get(c) is not None}
        sents = []
        for i, text in enumerate(sentences):
            s = {"text": text, "role": roles[i]}
            for c, values in per.items():
                if i < len(values):
                    s[c] = values[i]
            sents.append(s)
        scalars = {
            c.name: raw.get(c.name)
            for c in f.schema
            if _numeric(c.type) and c.name in raw and c.name not in ("num_tokens",) and raw.get(c.name) is not None
        }
        return {
            "id": f"{folder}:{shard}:{row}",
            "folder": folder,
            "key": raw.get("key"),
            "source": raw.get("source"),
            "split": raw.get("split"),
            "image": raw.get("image"),
            "caption": raw.get("caption"),
            "sentences": sents,
            "num_tokens": raw.get("num_tokens"),
            "scalars": scalars,
            "thumb": f"api/thumb?f={folder}&s={shard}&r={row}",
            "link": self.image_link(folder, raw.get("image")),
        }

    def image_link(self, folder: int, image: str | None) -> str | None:
        f = self.folders[folder]
        if not image or f.image_root is None or storage.is_url(image):
            return image if image and storage.is_url(image) else None
        from urllib.parse import quote

        return f"image/{folder}/{quote(image)}"

    def detail(self, folder: int, shard: int, row: int) -> dict[str, Any]:
        """Every column of one row (heavy ones summarised), and its card."""
        f = self.folders[folder]
        raw = self.raw_row(folder, shard, row, detail=True)
        columns = {}
        for fld in f.schema:
            if fld.name in HEAVY:
                columns[fld.name] = _heavy_summary(f, shard, row, fld, self)
            elif fld.name in raw:
                columns[fld.name] = raw[fld.name]
        card = self.card(raw, folder, shard, row)
        card["columns"] = columns
        card["sentence_tokens"] = columns.get("sentence_tokens")
        card["folder_name"] = f.name
        card["path"] = f"row {row} of {f.path / f.ds.manifest['shards'][shard]['path']}"
        return card

    # ---- lookups by key -----------------------------------------------------------------------
    def find_key(self, key: str, folder: int | None = None) -> tuple[int, int, int] | None:
        import polars as pl

        idx = self.index()
        hit = idx.filter(pl.col("key") == key)
        if folder is not None:
            hit = hit.filter(pl.col("_folder") == folder)
        if hit.height == 0:
            return None
        return int(hit["_folder"][0]), int(hit["_shard"][0]), int(hit["_row"][0])

    def _input_rows(self, input_path: str, keys: list[str]) -> dict[str, dict[str, Any]]:
        """Removed rows' whole rows by key from the folder they were read from (none when that folder is gone):
        one lazy scan that reads the key column and the matching rows."""
        import polars as pl

        if input_path not in self._inputs:
            try:
                self._inputs[input_path] = PreparedDataset.open(input_path, allow_incomplete=True)
            except (UserError, OSError):
                self._inputs[input_path] = None
        ds = self._inputs[input_path]
        if ds is None or not ds.shard_paths or not keys:
            return {}
        cols = [c for c in ROW_COLUMNS + SENTENCE_COLUMNS if c in pq.read_schema(ds.shard_paths[0]).names]
        with storage.reading(ds.shard_paths):  # a damaged shard: one line naming it
            df = (
                pl.scan_parquet([str(p) for p in ds.shard_paths])
                .filter(pl.col("key").is_in(keys))
                .select(cols)
                .collect()
            )
        return {r["key"]: r for r in df.iter_rows(named=True)}

    def removed_rows(self, items: list[tuple[int, int]]) -> list[dict[str, Any]]:
        wanted: dict[str, list[str]] = {}
        for folder, i in items:
            r = self.folders[int(folder)].removed.row(int(i), named=True)
            if r["input"]:
                wanted.setdefault(r["input"], []).append(r["key"])
        found = {path: self._input_rows(path, keys) for path, keys in wanted.items()}
        return [self.removed_row(f, i, found) for f, i in items]

    def removed_row(self, folder: int, i: int, found: dict | None = None) -> dict[str, Any]:
        f = self.folders[int(folder)]
        r = f.removed.row(int(i), named=True)
        line = _removed_line(f.path / "removed.jsonl", r["_offset"])
        if found is None:
            found = {r["input"]: self._input_rows(r["input"], [r["key"]])} if r["input"] else {}
        full = found.get(r["input"], {}).get(r["key"])
        base = full or {"key": r["key"], "source": r["source"], "image": r["image"], "caption": r["caption"]}
        card = self.card({**base, "image": r["image"]}, int(folder), -1, -1)
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
        )
        return card

    def pair(self, folder: int, i: int) -> dict[str, Any]:
        """A removed duplicate or overlap and the kept row it matched (None when not in these folders)."""
        removed = self.removed_row(folder, i)
        match = None
        key = removed.get("match")
        if isinstance(key, str):
            at = self.find_key(key, folder) or self.find_key(key)
            if at is not None:
                match = self.detail(*at)
        return {"removed": removed, "match": match, "similarity": removed.get("similarity"), "by": removed.get("by")}

    # ---- images -------------------------------------------------------------------------------
    def image_source(self, folder: int, shard: int | None, row: int | None, removed: int | None):
        """('bytes', data) or ('file', root, relative) or ('none', why) for one row's picture."""
        f = self.folders[folder]
        if removed is not None:
            image = f.removed["image"][int(removed)]
        else:
            raw = self.raw_row(folder, shard, row)
            image = raw.get("image")
            if "image_bytes" in f.schema.names:
                g, r = self._locate(f, shard, row)
                key = (folder, shard, g)
                with self._lock:
                    col = self._image_column[1] if self._image_column[0] == key else None
                if col is None:  # one row group's images kept: a page's thumbnails ask for them together
                    col = (
                        storage.parquet_file(f.ds.shard_paths[shard])
                        .read_row_group(g, columns=["image_bytes"])
                        .column(0)
                    )
                    with self._lock:
                        self._image_column = (key, col)
                data = col[r].as_py()
                if data:
                    return ("bytes", data)
        if not image:
            return ("none", "no image")
        if storage.is_url(image):
            return ("none", "image is a URL")
        if f.image_root is None:
            return ("none", "no --image-root")
        return ("file", f.image_root, image)


def _heavy_summary(f: Folder, shard: int, row: int, fld: pa.Field, data: ViewData) -> Any:
    """A short description of a column too large to show whole (bytes, token ids, embeddings)."""
    if fld.name == "sentence_tokens":
        g, r = data._locate(f, shard, row)
        col = storage.parquet_file(f.ds.shard_paths[shard]).read_row_group(g, columns=[fld.name]).column(0)
        return col[r].as_py()
    t = fld.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return f"<{fld.name}: bytes, not shown>"
    if pa.types.is_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t):
        return f"<{fld.name}: vector of {t.value_type}, not shown>"
    return f"<{fld.name}: {t}>"


def filled_columns(f: "Folder") -> set[str]:
    """Columns of `f` that hold a value in some row: a curated or packed folder carries every schema
    column, null where its stage did not fill it (no scores, no mask). From the Parquet footers only."""
    filled: set[str] = set()
    for path in f.ds.shard_paths:
        meta = storage.parquet_file(path).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for i in range(group.num_columns):
                col = group.column(i)
                stats = col.statistics
                if stats is None or not stats.has_null_count or stats.null_count < col.num_values:
                    filled.add(col.path_in_schema.split(".")[0])
    return filled
