"""What `curate --min-clip-score T --drop-ungrounded G` would do to the rows a view shows, before it runs.

The counts come from curate's own rules, not a copy of them: `curate.signals.score_signals` (each row's
clip_score, its best detail-sentence grounding and why a value cannot be used), `curate.dedup.low_alignment`
and `curate.writer.sentence_keep`. The funnel order is curate's: invalid_signal, then low_alignment, then
ungrounded_caption; sentences are masked only in the rows that stay. The score columns of every folder are
read once (clip_score, sentence_grounding, summary_mask; sentence_tokens for its length only) and what
curate's rules need is kept for the generation; each preview is then a few vector operations over all rows.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from caption_debias import storage
from caption_debias.folder_rows.folders import Folder, filled_columns

# what curate's rules read: sentence_tokens only for its length (a grounding list of another length is invalid)
COLUMNS = ("clip_score", "sentence_grounding", "summary_mask", "sentence_keep", "sentence_tokens")
KEPT_COLUMNS = ("sentence_grounding", "summary_mask", "sentence_keep")


@dataclass
class _Signals:
    keys: list[str]
    clip: np.ndarray  # float32, NaN where none
    best: np.ndarray  # detail_grounding_max, NaN where none
    table: pa.Table  # sentence_grounding, summary_mask (curate.writer.sentence_keep reads them), sentence_keep
    clip_problem: np.ndarray  # bool
    grounding_problem: np.ndarray  # bool
    ranges: dict[str, list[float] | None]  # each threshold's useful span: clip_score, detail sentences' grounding


def _span(values: np.ndarray) -> list[float] | None:
    finite = values[np.isfinite(values)]
    return [float(finite.min()), float(finite.max())] if finite.size else None


def _detail_span(table: pa.Table) -> list[float] | None:
    """min and max grounding of the detail (non-summary) sentences: where a --drop-ungrounded cut can fall."""
    import pyarrow.compute as pc

    g = table.column("sentence_grounding").combine_chunks()
    m = table.column("summary_mask").combine_chunks()
    scored = pc.and_(g.is_valid(), m.is_valid())
    g, m = g.filter(scored), m.filter(scored)
    if len(g) == 0 or pc.any(pc.not_equal(pc.list_value_length(g), pc.list_value_length(m))).as_py():
        return None
    values = pc.list_flatten(g).to_numpy(zero_copy_only=False).astype(np.float64)
    detail = ~pc.list_flatten(m).to_numpy(zero_copy_only=False).astype(bool)
    return _span(values[detail])


class ThresholdPreview:
    """The folders' score signals, read on first use, and the preview of a pair of thresholds."""

    def __init__(self, folders: list[Folder]):
        self.folders = folders
        self._signals: _Signals | None = None
        self._lock = threading.Lock()

    @cached_property
    def available(self) -> dict[str, bool]:
        names = {
            c for f in self.folders for c in filled_columns(f)
        }  # a curated folder's null score columns do not count
        return {
            "min_clip_score": "clip_score" in names,
            "drop_ungrounded": {"sentence_grounding", "summary_mask"} <= names,
        }

    def _read(self) -> _Signals:
        from caption_debias.curate.rules import problem_column, score_signals

        with self._lock:
            if self._signals is not None:
                return self._signals
            parts, keys, clip, best, clip_bad, ground_bad = [], [], [], [], [], []
            for f in self.folders:
                for path in f.ds.shard_paths:
                    names = storage.parquet_file(path).schema_arrow.names
                    table = storage.read_table(path, columns=["key", *[c for c in COLUMNS if c in names]])
                    n = table.num_rows
                    sig = score_signals(table, n)  # reads what the shard has: no column, no problem
                    for c, t in (
                        ("sentence_grounding", pa.list_(pa.float32())),
                        ("summary_mask", pa.list_(pa.bool_())),
                        ("sentence_keep", pa.list_(pa.bool_())),
                    ):
                        if c not in table.column_names:
                            table = table.append_column(c, pa.nulls(n, t))
                    keys += table.column("key").to_pylist()
                    clip.append(sig["clip_score"].to_numpy(zero_copy_only=False).astype(np.float32))
                    best.append(sig["detail_grounding_max"].to_numpy(zero_copy_only=False).astype(np.float32))
                    clip_bad.append(sig[problem_column("clip_score")].is_valid().to_numpy(zero_copy_only=False))
                    ground_bad.append(
                        sig[problem_column("sentence_grounding")].is_valid().to_numpy(zero_copy_only=False)
                    )
                    parts.append(table.select(list(KEPT_COLUMNS)))

            def cat(arrays: list[np.ndarray], dtype) -> np.ndarray:
                return np.concatenate(arrays) if arrays else np.zeros(0, dtype)

            table = pa.concat_tables(parts) if parts else pa.table({c: [] for c in KEPT_COLUMNS})
            self._signals = _Signals(
                keys=keys,
                clip=cat(clip, np.float32),
                best=cat(best, np.float32),
                table=table,
                clip_problem=cat(clip_bad, bool),
                grounding_problem=cat(ground_bad, bool),
                ranges={"min_clip_score": _span(cat(clip, np.float32)), "drop_ungrounded": _detail_span(table)},
            )
            return self._signals

    def decide(self, min_clip_score: float | None, drop_ungrounded: float | None) -> tuple[np.ndarray, dict[str, Any]]:
        """(per row: "" kept, else the reason; the preview's counts and the config that does it)."""
        from caption_debias.curate.rules import low_alignment, mask_counts, sentence_keep

        s = self._read()
        n = len(s.keys)
        reason = np.full(n, "", dtype=object)
        invalid = np.zeros(n, bool)
        if min_clip_score is not None:
            invalid |= s.clip_problem
        if drop_ungrounded is not None:
            invalid |= s.grounding_problem
        reason[invalid] = "invalid_signal"
        if min_clip_score is not None:
            low, _ = low_alignment(s.clip, min_clip_score, None, ~s.clip_problem)
            reason[low & (reason == "")] = "low_alignment"
        if drop_ungrounded is not None:
            reason[(s.best < drop_ungrounded) & (reason == "")] = "ungrounded_caption"  # NaN: kept, as curate
        # the kept rows' masks as curate writes them: made anew with --drop-ungrounded, else carried
        kept = s.table.filter(pa.array(reason == ""))
        keep = kept.column("sentence_keep") if drop_ungrounded is None else sentence_keep(kept, drop_ungrounded)
        masks = mask_counts(pa.table({"sentence_keep": keep})) or {"rows_masked": 0, "sentences_masked": 0}
        counts = {r: int((reason == r).sum()) for r in ("invalid_signal", "low_alignment", "ungrounded_caption")}
        config = {
            k: v for k, v in (("min_clip_score", min_clip_score), ("drop_ungrounded", drop_ungrounded)) if v is not None
        }
        return reason, {
            "rows": n,
            "removed": {k: v for k, v in counts.items() if v},
            "removed_total": int((reason != "").sum()),
            "masked_rows": masks["rows_masked"],
            "masked_sentences": masks["sentences_masked"],
            "config": config,
            "ranges": s.ranges,
        }

    def preview(self, min_clip_score: float | None, drop_ungrounded: float | None) -> dict[str, Any]:
        for name, value in (("min_clip_score", min_clip_score), ("drop_ungrounded", drop_ungrounded)):
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number")
            if value is not None and not self.available[name]:
                raise ValueError(f"{name}: no folder here holds the column it reads")
        return self.decide(min_clip_score, drop_ungrounded)[1]
