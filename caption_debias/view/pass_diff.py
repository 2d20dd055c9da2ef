"""Two passes of one dataset side by side: which rows of folder A folder B removed, by reason, which
it kept, and whose sentence masks it changed. Rows are matched by key (a key names one row in a
folder: prepare makes them unique). The reason of a removed row is B's removed.jsonl line for it; a
row missing from B without one (a pass between A and B removed it, or B is no later pass of A) is
counted as "not in B, no removal recorded". Whether B descends from A is said from the manifests
(caption_debias/lineage.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from caption_debias import lineage, storage
from caption_debias.folder_rows.folders import Folder
from caption_debias.folder_rows.index import RowIndex

UNRECORDED = "not in B, no removal recorded"


def descends(b: Folder, a: Folder) -> bool:
    """Whether A is one of the passes B's lineage reaches (B's own pass, the last, left out)."""
    try:
        steps = lineage.passes(b.path)[:-1]
    except Exception:  # noqa: BLE001  a lineage that cannot be read reaches nothing: said as such
        return False

    def place(folder: Any) -> str:
        return str(folder) if storage.is_url(str(folder)) else str(Path(folder).resolve())

    return any(place(step["folder"]) == place(a.path) for step in steps)


def diff(folders: list[Folder], index: RowIndex, a: int, b: int) -> dict[str, Any]:
    import polars as pl

    if a == b:
        raise ValueError("choose two different folders")
    fa, fb = folders[a], folders[b]  # IndexError: the app's 404
    rows = index.index()
    masked = "masked_sentences" if "masked_sentences" in rows.columns else None
    cols = ["key"] + ([masked] if masked else [])
    in_a = rows.filter(pl.col("_folder") == a).select(cols)
    in_b = rows.filter(pl.col("_folder") == b).select(cols)
    gone = in_a.join(in_b, on="key", how="anti")
    reasons = (
        fb.removed.select("key", "reason").unique(subset="key", keep="first")
        if fb.removed is not None
        else pl.DataFrame(schema={"key": pl.String, "reason": pl.String})
    )
    by_reason = (
        gone.join(reasons, on="key", how="left")
        .with_columns(pl.col("reason").fill_null(UNRECORDED))
        .group_by("reason")
        .len()
        .sort(["len", "reason"], descending=[True, False])
    )
    both = in_a.join(in_b, on="key", how="inner", suffix="_b")
    more_masked = 0
    if masked:
        more_masked = both.filter(pl.col(f"{masked}_b").fill_null(0) > pl.col(masked).fill_null(0)).height
    return {
        "a": {"index": a, "name": fa.name, "rows": in_a.height},
        "b": {"index": b, "name": fb.name, "rows": in_b.height},
        "descends": descends(fb, fa),
        "removed": gone.height,
        "removed_by_reason": dict(zip(by_reason["reason"].to_list(), by_reason["len"].to_list())),
        "kept": both.height,
        "more_masked": more_masked,
        "added": in_b.join(in_a, on="key", how="anti").height,
    }
