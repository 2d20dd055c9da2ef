"""The scored shard: an input shard's rows whose image was encoded, every schema column, the score columns filled.

The text columns are copied from the input untouched (Arrow `take`), so a row's caption,
sentences and token ids stay byte for byte the same; the score columns are replaced (a
scored folder scored again with another model carries only the new scores).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from caption_debias.schema import shard_arrow_schema

SCORE_COLUMNS = ("clip_score", "sentence_scores", "sentence_grounding", "image_embedding", "caption_embedding")


def _lists(values: np.ndarray, offsets: np.ndarray, valid: np.ndarray | None, typ: pa.DataType) -> pa.Array:
    """A list array from flat values and row offsets (null where not valid)."""
    mask = None if valid is None else pa.array(~valid)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, typ), mask=mask)


def _embeddings(emb: np.ndarray) -> pa.Array:
    n, d = emb.shape
    return _lists(emb.astype(np.float16).reshape(-1), np.arange(n + 1, dtype=np.int64) * d, None, pa.float16())


def build_table(
    table: pa.Table,
    keep: np.ndarray,
    clip: np.ndarray,
    scores: np.ndarray,
    grounding: np.ndarray,
    offsets: np.ndarray,
    has_grounding: np.ndarray,
    image_emb: np.ndarray | None,
    caption_emb: np.ndarray | None,
) -> pa.Table:
    """The kept rows (keep [N]) with every schema column. clip [K], scores and grounding flat
    over the kept rows' sentences with offsets [K + 1], has_grounding [K], embeddings [K, D]."""
    schema = shard_arrow_schema()
    kept = table.take(pa.array(np.flatnonzero(keep)))
    score = {
        "clip_score": pa.array(clip.astype(np.float32), pa.float32()),
        "sentence_scores": _lists(scores.astype(np.float32), offsets, None, pa.float32()),
        "sentence_grounding": _lists(grounding.astype(np.float32), offsets, has_grounding, pa.float32()),
        "image_embedding": _embeddings(image_emb) if image_emb is not None else None,
        "caption_embedding": _embeddings(caption_emb) if caption_emb is not None else None,
    }
    columns = []
    for field in schema:
        name = field.name
        if name in score:
            col = score[name] if score[name] is not None else pa.nulls(len(kept), field.type)
        elif name in kept.column_names:
            col = kept.column(name).cast(field.type)
        else:  # a shard of an older schema
            col = pa.nulls(len(kept), field.type)
        columns.append(col if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col], field.type))
    return pa.Table.from_arrays(columns, schema=schema)
