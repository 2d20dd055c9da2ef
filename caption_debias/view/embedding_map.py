"""A map of the data: every row's image embedding (`score --keep-embeddings`) projected to 2-D; a second
map of the caption embeddings beside it (the same class over `caption_embedding`).

Projection: scikit-learn's PCA (randomized SVD, seeded), fitted on a seeded sample of at most
FIT_ROWS rows and applied to every row: linear, deterministic and a few seconds at a million rows on
two cores, so every row gets coordinates (a box on the map selects among all of them, not only
among the points drawn) and a link holding a box reopens the same rows. A neighbour-preserving
method (UMAP, t-SNE) separates clusters better but costs minutes per 100k rows here and is not
stable across runs; `project` is the one place to change.

The page draws a seeded sample of at most MAX_POINTS points: kept rows from the shards, removed
rows from the input folder their removed.jsonl line names (when view may read it: removed.py),
coloured by source, removal reason ("kept" for kept rows) or any numeric column of the index.
The map is computed once per reading of the folders, in the background when first asked for.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.folder_rows.folders import Folder, filled_columns

FIT_ROWS = 100_000  # the projection is fitted on a seeded sample of this many rows, then applied to all
MAX_POINTS = 100_000  # points sent to the page (a seeded sample); the box filter sees every row
SEED = 0
DECIMALS = 5  # coordinates as stored and as sent
COLUMN = "image_embedding"
COLUMNS = {"image": "image_embedding", "caption": "caption_embedding"}  # the page's maps, by what they map
KEPT = "kept"


def project(fit: np.ndarray, seed: int = SEED):
    """The 2-D projection fitted on `fit` (rows x dim): an object with .transform(X) -> (n, 2)."""
    from sklearn.decomposition import PCA

    return PCA(n_components=2, svd_solver="randomized", random_state=seed).fit(fit)


def placed(model, matrix: np.ndarray) -> np.ndarray:
    """Map coordinates of these rows, rounded to the 5 decimals the page receives: a box drawn on the
    page's points selects the same rows on the server, even a point on its edge."""
    return np.round(model.transform(matrix).astype(np.float64), DECIMALS)


def validity(column: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray]:
    """(the column as one array, length per row, has an embedding, usable under curate's rule): a
    usable row's values are all finite and of unit length (curate/signals.py bad_embeddings, what
    curate removes as invalid_signal); a null row has no embedding."""
    from caption_debias.curate.rules import bad_embeddings

    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    lengths = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False)
    present = col.is_valid().to_numpy(zero_copy_only=False)
    return col, lengths, present, present & (lengths > 0) & ~bad_embeddings(col)


def matrix_of(col: pa.Array, rows: np.ndarray, width: int) -> np.ndarray:
    """The float32 matrix of these rows' embeddings (each of length `width`)."""
    values = pc.list_flatten(col.take(pa.array(rows, pa.int64()))).to_numpy(zero_copy_only=False)
    return values.astype(np.float32).reshape(len(rows), width)


def embedding_rows(column: pa.ChunkedArray | pa.Array, width: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(row numbers the map places, their float32 matrix, how many rows have an embedding it leaves
    out): the rows usable under curate's rule whose length is the inputs' `width` (curate's too)."""
    col, lengths, present, usable = validity(column)
    rows = np.flatnonzero(usable & (lengths == width))
    return rows, matrix_of(col, rows, width), int(present.sum()) - len(rows)


class EmbeddingMap:
    """Coordinates of every row of the folders that has an embedding (`column`), and the points the page draws."""

    def __init__(self, folders: list[Folder], removals, column: str = COLUMN):
        self.folders, self.removals, self.column = folders, removals, column
        self.words = column.replace("_", " ")  # "image embedding": how a line names it
        self.with_embeddings = [f for f in folders if column in f.schema.names and column in filled_columns(f)]
        self._started = False
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self.kept: Any = None  # polars: _folder, _shard, _row, x, y
        self.removed: Any = None  # polars: _folder, _removed, x, y
        self.facts: dict[str, Any] = {}

    @property
    def available(self) -> bool:
        return bool(self.with_embeddings)

    # ---- computing ---------------------------------------------------------------------------
    def start(self) -> None:
        """Compute in the background (once); `wait` blocks until it is there."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._compute_safely, name="view-map", daemon=True).start()

    def wait(self) -> None:
        if not self.available:
            raise UserError(f"no map: no folder here holds {self.column} (caption-debias score --keep-embeddings)")
        self.start()
        self._ready.wait()
        if self._error is not None:
            raise UserError(f"could not compute the map: {self._error}")

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self._error is None

    @property
    def finished(self) -> bool:
        """Computed, or failed (`wait` then says why)."""
        return self._ready.is_set()

    def _compute_safely(self) -> None:
        try:
            self.compute()
        except BaseException as exc:  # reported by the request that waits on it
            self._error = exc
        finally:
            self._ready.set()

    def _shards(self):
        for f in self.with_embeddings:
            for s, path in enumerate(f.ds.shard_paths):
                yield f, s, path

    def _column(self, path) -> pa.ChunkedArray:
        with storage.reading([path]):
            return storage.parquet_file(path).read(columns=[self.column]).column(0)

    def removed_rows(self, column: str) -> list[tuple[int, Any]]:
        """(folder, a polars frame of its removed lines' `_removed` and `column`), read by key from each
        line's input folder where view may read it (removed.py) and the column is there."""
        import polars as pl

        out = []
        for f in self.folders:
            if f.removed is None or not f.removed.height:
                continue
            for (input_path,), lines in f.removed.filter(pl.col("input") != "").group_by("input"):
                ds = self.removals.input_folder(f, input_path)
                if ds is None or not ds.shard_paths:
                    continue
                with storage.reading(ds.shard_paths):
                    if column not in storage.read_schema(ds.shard_paths[0]).names:
                        continue
                    found = (
                        pl.scan_parquet([str(p) for p in ds.shard_paths])
                        .filter(pl.col("key").is_in(lines["key"].implode()))
                        .select("key", column)
                        .unique("key", keep="first", maintain_order=True)
                        .collect()
                    )
                joined = lines.select("key", "_removed").join(found, on="key", how="inner", maintain_order="left")
                if joined.height:
                    out.append((f.index, joined))
        return out

    def _removed_embeddings(self) -> list[tuple[int, np.ndarray, pa.ChunkedArray]]:
        """(folder, removed line numbers, their embeddings) read by key from each line's input folder."""
        return [
            (f, rows["_removed"].to_numpy(), rows[self.column].to_arrow()) for f, rows in self.removed_rows(self.column)
        ]

    def _fit_rows(self, total: int) -> tuple[np.ndarray, int, list, list, list]:
        """Pass 1: every usable row's length (the width is curate's: the most common), the seeded sample's
        embeddings and a tenth as many removed rows': (the rows to fit on, width, removed rows, their parts,
        each shard's (lengths, usable rows, rows with an embedding): pass 2 does not test the rows again)."""
        from caption_debias.curate.rules import embedding_width

        rng = np.random.default_rng(SEED)
        sample = np.sort(rng.choice(total, size=min(total, FIT_ROWS), replace=False)) if total else np.zeros(0, int)
        widths: list[np.ndarray] = []
        sampled: list[tuple[pa.Array, np.ndarray, np.ndarray]] = []
        shards: list[tuple[np.ndarray, np.ndarray, int]] = []
        start = 0
        for _f, _s, path in self._shards():
            col, lengths, present, usable = validity(self._column(path))
            shards.append((lengths, usable, int(present.sum())))
            widths.append(lengths[usable])
            n = len(lengths)
            local = sample[(sample >= start) & (sample < start + n)] - start
            start += n
            local = local[usable[local]]
            if len(local):
                sampled.append((col, local, lengths[local]))
        removed_found = self._removed_embeddings()
        for _, _, column in removed_found:
            _, lengths, _, usable = validity(column)
            widths.append(lengths[usable])
        width = embedding_width(np.concatenate(widths) if widths else np.zeros(0, np.int64))
        if width is None:
            raise UserError(f"no row has a valid {self.words} (finite values of unit length, as curate requires)")
        fit = [matrix_of(col, rows[lengths == width], width) for col, rows, lengths in sampled]
        removed_parts = [embedding_rows(column, width) for _, _, column in removed_found]
        fit += [matrix[: FIT_ROWS // 10] for _, matrix, _ in removed_parts]
        fit_rows = np.concatenate(fit) if fit else np.zeros((0, width), np.float32)
        if len(fit_rows) < 2:
            raise UserError(f"fewer than two rows have a valid {self.words}")
        if not np.ptp(fit_rows, axis=0).any():
            raise UserError(f"every valid {self.words} is the same vector: nothing to map")
        return fit_rows, width, removed_found, removed_parts, shards

    def compute(self) -> None:
        import polars as pl

        total = sum(f.ds.rows for f in self.with_embeddings)
        fit_rows, width, removed_found, removed_parts, shards = self._fit_rows(total)
        model = project(fit_rows)
        kept, invalid = [], 0
        # pass 2: every usable row of the width placed (usable as pass 1 found it: no second test)
        for (f, s, path), (lengths, usable, present) in zip(self._shards(), shards):
            rows = np.flatnonzero(usable & (lengths == width))
            invalid += present - len(rows)
            if len(rows):
                xy = placed(model, matrix_of(self._column(path).combine_chunks(), rows, width))
                kept.append(
                    pl.DataFrame(
                        {
                            "_folder": np.full(len(rows), f.index, np.int32),
                            "_shard": np.full(len(rows), s, np.int32),
                            "_row": rows.astype(np.int32),
                            "x": xy[:, 0],
                            "y": xy[:, 1],
                        }
                    )
                )
        removed = []
        for (folder, lines, _), (rows, matrix, left_out) in zip(removed_found, removed_parts):
            invalid += left_out
            if not len(rows):
                continue
            xy = placed(model, matrix)
            removed.append(
                pl.DataFrame(
                    {
                        "_folder": np.full(len(rows), folder, np.int32),
                        "_removed": lines[rows].astype(np.int64),
                        "x": xy[:, 0],
                        "y": xy[:, 1],
                    }
                )
            )
        empty_kept = {"_folder": pl.Int32, "_shard": pl.Int32, "_row": pl.Int32, "x": pl.Float64, "y": pl.Float64}
        empty_removed = {"_folder": pl.Int32, "_removed": pl.Int64, "x": pl.Float64, "y": pl.Float64}
        self.kept = pl.concat(kept) if kept else pl.DataFrame(schema=empty_kept)
        self.removed = pl.concat(removed) if removed else pl.DataFrame(schema=empty_removed)
        without = total + sum(f.removed_count for f in self.folders) - self.kept.height - self.removed.height
        self.facts = {
            "column": self.column,
            "method": "PCA (scikit-learn), 2 components",
            "fitted_on": int(len(fit_rows)),
            "dim": int(width),
            "explained": [round(float(v), 4) for v in np.nan_to_num(model.explained_variance_ratio_)],
            "rows": self.kept.height + self.removed.height,
            "kept_rows": self.kept.height,
            "removed_rows": self.removed.height,
            "without": without,  # rows the map leaves out, by reason in `left_out`
            "left_out": {f"no {self.words}": without - invalid, "invalid_signal": invalid},
        }

    # ---- what the page and the filters read ------------------------------------------------------
    def coords(self, removed: bool):
        self.wait()
        return self.removed if removed else self.kept

    def points(self):
        """The points drawn: a seeded sample of at most MAX_POINTS of every row with coordinates, kept
        rows first (removed ones are drawn on top), as a polars frame with `id` (the card id) and `kind`."""
        import polars as pl

        self.wait()
        kept = self.kept.select(
            pl.format("{}:{}:{}", "_folder", "_shard", "_row").alias("id"),
            "x",
            "y",
            "_folder",
            "_shard",
            "_row",
            pl.lit(None, pl.Int64).alias("_removed"),
        )
        removed = self.removed.select(
            pl.format("{}:r{}", "_folder", "_removed").alias("id"),
            "x",
            "y",
            "_folder",
            pl.lit(None, pl.Int32).alias("_shard"),
            pl.lit(None, pl.Int32).alias("_row"),
            "_removed",
        )
        both = pl.concat([kept, removed], how="vertical_relaxed")
        if both.height > MAX_POINTS:
            pick = np.sort(np.random.default_rng(SEED + 1).choice(both.height, size=MAX_POINTS, replace=False))
            both = both[pick]
        return both


def _labels(points, index, removed):
    """Per point: source and reason (kept rows: "kept"), as polars columns aligned with `points`."""
    import polars as pl

    kept_info = index.select(
        "_folder", "_shard", "_row", pl.col("source").cast(pl.String).alias("source"), pl.col("key").cast(pl.String)
    )
    out = points.join(kept_info, on=["_folder", "_shard", "_row"], how="left", maintain_order="left")
    if removed is not None:
        info = removed.select(
            "_folder",
            "_removed",
            pl.col("source").alias("_rsource"),
            pl.col("key").cast(pl.String).alias("_rkey"),
            pl.col("reason"),
        )
        out = out.join(info, on=["_folder", "_removed"], how="left", maintain_order="left")
        out = out.with_columns(
            pl.coalesce("source", "_rsource").alias("source"),
            pl.coalesce("key", "_rkey").alias("key"),
            pl.col("reason").fill_null(KEPT),
        )
    else:
        out = out.with_columns(pl.lit(KEPT).alias("reason"))
    return out


def _codes(series) -> tuple[list[int], list[str]]:
    """A string column as small integer codes and the names they stand for (sorted; kept first)."""
    names = sorted({v for v in series.to_list() if v is not None}, key=lambda v: (v != KEPT, v))
    code = {v: i for i, v in enumerate(names)}
    return [code.get(v, -1) for v in series.to_list()], names


def page_map(emap: EmbeddingMap, index, removed, reasons_order: list[str]) -> dict[str, Any]:
    """What the page draws: coordinates, card ids and keys (the hover's label), and source and reason codes of every
    point."""
    points = _labels(emap.points(), index, removed)
    sources, source_names = _codes(points["source"])
    reason_names = [KEPT] + [r for r in reasons_order if r in set(points["reason"].to_list())]
    code = {r: i for i, r in enumerate(reason_names)}
    xs, ys = points["x"].to_numpy(), points["y"].to_numpy()
    return {
        **emap.facts,
        "shown": points.height,
        "bounds": [float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max())] if points.height else None,
        "x": xs.tolist(),
        "y": ys.tolist(),
        "id": points["id"].to_list(),
        "key": points["key"].to_list(),
        "source": sources,
        "sources": source_names,
        "reason": [code[r] for r in points["reason"].to_list()],
        "reasons": reason_names,
    }


def point_values(emap: EmbeddingMap, index, removed, column: str) -> list[float | None]:
    """A numeric column's value at every point, in the order of `page_map`'s points: kept rows' from the
    index; removed rows' their own, read from the input folder their line names (a column the shards
    store), or their similarity for `similarity`."""
    import polars as pl

    points = emap.points()
    if column not in index.columns and column != "similarity":
        raise UserError(f"no column {column!r} to colour by")
    if column in index.columns:
        values = index.select("_folder", "_shard", "_row", pl.col(column).cast(pl.Float64).alias("_v"))
        points = points.join(values, on=["_folder", "_shard", "_row"], how="left", maintain_order="left")
    else:
        points = points.with_columns(pl.lit(None, pl.Float64).alias("_v"))
    own = [
        rows.select(pl.lit(f, pl.Int32).alias("_folder"), pl.col("_removed").cast(pl.Int64), pl.col(column))
        for f, rows in (emap.removed_rows(column) if removed is not None and column != "similarity" else [])
    ]
    if own:  # a removed row is coloured by its own value, not left grey
        mine = pl.concat(own).select("_folder", "_removed", pl.col(column).cast(pl.Float64).alias("_o"))
        points = points.join(mine, on=["_folder", "_removed"], how="left", maintain_order="left")
        points = points.with_columns(pl.coalesce("_v", "_o").alias("_v"))
    if removed is not None and column == "similarity":
        sim = removed.select("_folder", "_removed", pl.col("similarity").cast(pl.Float64).alias("_s"))
        points = points.join(sim, on=["_folder", "_removed"], how="left", maintain_order="left")
        points = points.with_columns(pl.coalesce("_v", "_s").alias("_v"))
    out = points["_v"].fill_nan(None).to_list()
    return [None if v is None else round(v, 6) for v in out]
