"""A row's sentence signals as numbers to filter and sort on: its weakest detail sentence and its mask.

- `min_detail_grounding`: the lowest `sentence_grounding` of the row's detail (non-summary) sentences,
  the one `curate --drop-ungrounded` would mask first (null: no grounding, or no detail sentence);
- `min_grounding_position`: that sentence's position in the caption, 1 = the first (models tend to make
  things up late in a long caption);
- `masked_sentences`: how many sentences `sentence_keep` drops (null: no mask).

`row_signals` is the specification, one row at a time (cards use it); `batch_signals` computes the same
for a whole shard with polars list kernels (the index uses it); tests/test_view_curator.py holds them equal.
"""

from __future__ import annotations

from typing import Any

GROUNDING = ("min_detail_grounding", "min_grounding_position")
MASK = ("masked_sentences",)
COLUMNS = GROUNDING + MASK


def columns_for(names: list[str] | set[str]) -> list[str]:
    """The signals a folder with these shard columns has."""
    return (list(GROUNDING) if "sentence_grounding" in names else []) + (list(MASK) if "sentence_keep" in names else [])


def row_signals(grounding: list | None, summary: list | None, keep: list | None) -> dict[str, Any]:
    """Specification: the signals of one row (the first lowest sentence on a tie)."""
    out: dict[str, Any] = {c: None for c in COLUMNS}
    summary = list(summary or [])
    if grounding is not None:
        detail = [
            (g, i)
            for i, g in enumerate(grounding)
            if g is not None and g == g and not (summary[i] if i < len(summary) else False)
        ]
        if detail:
            g, i = min(detail)
            out["min_detail_grounding"], out["min_grounding_position"] = float(g), i + 1
    if keep is not None:
        out["masked_sentences"] = sum(1 for k in keep if k is False)
    return out


def batch_signals(df, have: list[str]):
    """`df` (polars: `summary_mask` and the columns in `have`) with the signals as new columns, the
    list columns dropped: the same values as `row_signals` row by row."""
    import polars as pl

    out = df.with_row_index("_sig_row")
    if "min_detail_grounding" in have:
        long = (
            out.select("_sig_row", "sentence_grounding", "summary_mask")
            .filter(pl.col("sentence_grounding").is_not_null())
            .with_columns(pl.int_ranges(1, pl.col("sentence_grounding").list.len() + 1).alias("_pos"))
            .explode(["sentence_grounding", "_pos"])
            .with_columns(
                pl.col("summary_mask").list.get(pl.col("_pos") - 1, null_on_oob=True).fill_null(False).alias("_sum")
            )
            .filter(
                ~pl.col("_sum") & pl.col("sentence_grounding").is_not_null() & ~pl.col("sentence_grounding").is_nan()
            )
            .sort(["_sig_row", "sentence_grounding", "_pos"])
            .group_by("_sig_row", maintain_order=True)
            .first()
            .select(
                "_sig_row",
                pl.col("sentence_grounding").cast(pl.Float64).alias("min_detail_grounding"),
                pl.col("_pos").cast(pl.Int32).alias("min_grounding_position"),
            )
        )
        out = out.join(long, on="_sig_row", how="left", maintain_order="left")
    if "masked_sentences" in have:
        masked = pl.col("sentence_keep").list.eval(pl.element().not_().cast(pl.Int32)).list.sum()
        out = out.with_columns(
            pl.when(pl.col("sentence_keep").is_null())
            .then(None)
            .otherwise(masked)
            .cast(pl.Int32)
            .alias("masked_sentences")
        )
    return out.drop([c for c in ("_sig_row", "sentence_grounding", "sentence_keep") if c in out.columns])
