"""Rows like this one: a kept row's nearest kept rows by image or caption embedding (cosine).

The embeddings are the folders' own (`score --keep-embeddings`: `image_embedding`, `caption_embedding`,
unit length as score writes them). The rows with a usable one (curate's rule, as the map applies it:
`embedding_map.validity`, and the width most rows have) are read once per column and reading of
the folders, kept as float16 (what the shards store: 1 KB a row at 512 dimensions), and searched by one
matrix product in blocks, so a request costs one pass over them and bounded scratch memory.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.folder_rows.folders import Folder, filled_columns

COLUMNS = {"image": "image_embedding", "caption": "caption_embedding"}
BLOCK = 65_536  # rows scored per step: 256 KB of scores, a float32 copy of 64 MB at 512 dimensions
MAX_K = 48


class Neighbours:
    """Per embedding column: every kept row with a usable vector, and the nearest rows to one of them."""

    def __init__(self, folders: list[Folder]):
        self.folders = folders
        self._tables: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._unusable: dict[str, np.ndarray] = {}  # rows with an embedding curate would not use (invalid_signal)
        self._lock = threading.Lock()

    def available(self) -> list[str]:
        filled = {c for f in self.folders for c in filled_columns(f)}
        return [by for by, col in COLUMNS.items() if col in filled]

    def table(self, by: str) -> tuple[np.ndarray, np.ndarray]:
        """(addresses: n x 3 int64 folder, shard, row; vectors: n x width float16). The rows are those the
        map places (embedding_map.validity: curate's rule), of the width curate takes (the most common)."""
        from caption_debias.curate.rules import embedding_width
        from caption_debias.view.embedding_map import matrix_of, validity

        with self._lock:
            if by in self._tables:
                return self._tables[by]
            column = COLUMNS[by]
            shards = []
            for f in self.folders:
                for s, path in enumerate(f.ds.shard_paths):
                    if column in storage.parquet_file(path).schema_arrow.names:
                        col, lengths, present, usable = validity(storage.read_table(path, columns=[column]).column(0))
                        shards.append((f.index, s, col, lengths, usable, present))
            width = embedding_width(
                np.concatenate([lengths[ok] for *_, lengths, ok, _ in shards]) if shards else np.zeros(0)
            )
            if width is None:
                raise UserError(f"no row here holds a usable {column} (caption-debias score --keep-embeddings)")
            addresses, matrix, unusable = [], [], []
            for folder, shard, col, lengths, ok, present in shards:
                rows = np.flatnonzero(ok & (lengths == width))
                bad = np.flatnonzero(present & ~(ok & (lengths == width)))
                unusable.append(np.column_stack([np.full(len(bad), folder), np.full(len(bad), shard), bad]))
                if len(rows):
                    matrix.append(matrix_of(col, rows, width).astype(np.float16))
                    addresses.append(np.column_stack([np.full(len(rows), folder), np.full(len(rows), shard), rows]))
            table = (np.concatenate(addresses).astype(np.int64), np.concatenate(matrix))
            self._tables[by] = table
            self._unusable[by] = np.concatenate(unusable).astype(np.int64)
            return table

    def unusable(self, by: str) -> np.ndarray:
        """Addresses (n x 3) of the rows whose embedding curate's rule refuses (not finite, not unit length,
        another width): what curate removes as invalid_signal when it reads that column."""
        self.table(by)
        return self._unusable[by]

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
