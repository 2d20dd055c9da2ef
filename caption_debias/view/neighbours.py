"""Rows like this one: a kept row's nearest kept rows by image or caption embedding (cosine).

The embeddings are the folders' own (`score --keep-embeddings`: `image_embedding`, `caption_embedding`,
unit length as score writes them). The rows with a valid one (curate's rule for a usable embedding,
`curate.signals.embedding_valid`, and the length most rows have) are read once per column and reading of
the folders, kept as float16 (what the shards store: 1 KB a row at 512 dimensions), and searched by one
matrix product in blocks, so a request costs one pass over them and bounded scratch memory.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import numpy as np

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.view.folders import Folder, filled_columns

COLUMNS = {"image": "image_embedding", "caption": "caption_embedding"}
BLOCK = 65_536  # rows scored per step: 256 KB of scores, a float32 copy of 64 MB at 512 dimensions
MAX_K = 48


class Neighbours:
    """Per embedding column: every kept row with a usable vector, and the nearest rows to one of them."""

    def __init__(self, folders: list[Folder]):
        self.folders = folders
        self._tables: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    def available(self) -> list[str]:
        filled = {c for f in self.folders for c in filled_columns(f)}
        return [by for by, col in COLUMNS.items() if col in filled]

    def table(self, by: str) -> tuple[np.ndarray, np.ndarray]:
        """(addresses: n x 3 int64 folder, shard, row; vectors: n x dim float16)."""
        import pyarrow.compute as pc

        from caption_debias.curate.signals import embedding_usable

        with self._lock:
            if by in self._tables:
                return self._tables[by]
            column = COLUMNS[by]
            shards = []
            for f in self.folders:
                for s, path in enumerate(f.ds.shard_paths):
                    if column in storage.parquet_file(path).schema_arrow.names:
                        e = storage.read_table(path, columns=[column]).column(0).combine_chunks()
                        lengths = pc.fill_null(pc.list_value_length(e), 0).to_numpy(zero_copy_only=False)
                        shards.append((f.index, s, e, lengths, embedding_usable(e) & (lengths > 0)))
            dims = Counter(
                {
                    int(d): int(n)
                    for *_, lengths, ok in shards
                    for d, n in zip(*np.unique(lengths[ok], return_counts=True))
                }
            )
            if not dims:
                raise UserError(f"no row here holds a usable {column} (caption-debias score --keep-embeddings)")
            dim = max(sorted(dims), key=dims.__getitem__)  # one length: a row of another is not comparable
            addresses, matrix = [], []
            for folder, shard, e, lengths, ok in shards:
                rows = np.flatnonzero(ok & (lengths == dim))
                if not len(rows):
                    continue
                starts = e.offsets.to_numpy(zero_copy_only=False)[rows] - e.offsets[0].as_py()
                flat = pc.list_flatten(e).to_numpy(zero_copy_only=False)
                matrix.append(flat[starts[:, None] + np.arange(dim)].astype(np.float16))
                addresses.append(np.column_stack([np.full(len(rows), folder), np.full(len(rows), shard), rows]))
            table = (np.concatenate(addresses).astype(np.int64), np.concatenate(matrix))
            self._tables[by] = table
            return table

    def nearest(self, by: str, address: tuple[int, int, int], k: int) -> list[tuple[tuple[int, int, int], float]]:
        """The k rows most like the row at `address` (itself left out), most similar first; ties by address."""
        if by not in COLUMNS:
            raise ValueError(f"by must be one of {', '.join(COLUMNS)}")
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k must be in 1..{MAX_K}")
        addresses, matrix = self.table(by)
        at = np.flatnonzero((addresses == np.array(address, np.int64)).all(axis=1))
        if not len(at):
            raise UserError(f"this row has no usable {COLUMNS[by]}")
        return nearest_to(addresses, matrix, matrix[int(at[0])].astype(np.float32), k, leave_out=int(at[0]))

    def page(self, cards_of, by: str, address: tuple[int, int, int], k: int) -> dict[str, Any]:
        found = self.nearest(by, address, k)
        rows = cards_of([a for a, _ in found])
        for card, (_, sim) in zip(rows, found):
            card["similarity"] = sim
        return {"by": by, "column": COLUMNS[by], "rows": rows}


def nearest_to(
    addresses: np.ndarray, matrix: np.ndarray, query: np.ndarray, k: int, leave_out: int | None = None
) -> list[tuple[tuple[int, int, int], float]]:
    """The k rows of `matrix` with the highest dot product with `query` (unit vectors: cosine), most
    similar first, ties in file order; one block of rows at a time, so scratch memory stays bounded."""
    scores = np.empty(len(matrix), np.float32)
    for start in range(0, len(matrix), BLOCK):
        scores[start : start + BLOCK] = matrix[start : start + BLOCK].astype(np.float32) @ query
    if leave_out is not None:
        scores[leave_out] = -np.inf
    take = min(k, len(matrix) - (leave_out is not None))
    if take <= 0:
        return []
    best = np.argpartition(-scores, take - 1)[:take]
    order = best[np.lexsort((best, -scores[best].astype(np.float64)))]
    return [
        ((int(addresses[i][0]), int(addresses[i][1]), int(addresses[i][2])), round(float(scores[i]), 6)) for i in order
    ]
