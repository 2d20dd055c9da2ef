"""What `curate --config FILE` would do to the rows a view shows, before it runs: the page's sliders.

The cuts are curate's own flags: --min-clip-score, --drop-ungrounded, --semantic-duplicate-threshold,
--repetition-max and --repeated-sentences-max (checked with curate's own limits). The decisions come
from curate's rules, not a copy of them (curate/rules.py): each row's text-quality signals
(`signals_batch`, `is_repetitive`; repetitive_caption and truncated_caption apply at curate's defaults
when no slider is set, as in a run), the score signals (`score_signals`, `low_alignment`), SemDeDup
over the rows still kept (`centred`, `clusters_of`, `semantic_duplicates`: which row of a pair stays
is curate's answer) and the masks of the rows that stay (`sentence_keep`). The funnel order is
curate's: repetitive_caption, truncated_caption, invalid_signal, low_alignment, ungrounded_caption,
semantic_duplicate. Duplicate and image reasons are not previewed: a folder curate has passed has none
left, so on such a folder the preview is exactly what curate does (tests/test_view_thresholds.py).

Cost: the signal columns are read once per reading of the folders (then each preview is vector
operations over all rows); the image embeddings once, shared with neighbours (view/neighbours.py).
SemDeDup's clusters are kept for the last set of rows it ran on, so moving only its slider costs one
pass over the candidate pairs; it runs on at most SEMANTIC_MAX_ROWS rows (beyond: one line, run curate).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.folder_rows.folders import Folder, filled_columns

# what curate's rules read: sentence_tokens for the text signals and the grounding's length, caption for truncation
COLUMNS = ("caption", "clip_score", "sentence_grounding", "summary_mask", "sentence_keep", "sentence_tokens")
KEPT_COLUMNS = ("sentence_grounding", "summary_mask", "sentence_keep")
CUTS = ("min_clip_score", "drop_ungrounded", "semantic_duplicate_threshold", "repetition_max", "repeated_sentences_max")
REASONS = (
    "repetitive_caption",
    "truncated_caption",
    "invalid_signal",
    "low_alignment",
    "ungrounded_caption",
    "semantic_duplicate",
)
SEMANTIC_MAX_ROWS = (
    100_000  # rows SemDeDup previews at once (about 23 CPU s the first time at 512-d: docs/benchmarks.md)
)
MARKS_MAX = 500  # card ids one preview marks (a page holds at most query.PAGE_MAX)


@dataclass
class _Signals:
    keys: list[str]
    starts: dict[tuple[int, int], int]  # (folder, shard) -> the order of its first row (curate's input order)
    sizes: dict[tuple[int, int], int]  # (folder, shard) -> its rows
    clip: np.ndarray  # float32, NaN where none
    best: np.ndarray  # detail_grounding_max, NaN where none
    table: pa.Table  # sentence_grounding, summary_mask (curate.writer.sentence_keep reads them), sentence_keep
    clip_problem: np.ndarray  # bool
    grounding_problem: np.ndarray  # bool
    repetition: np.ndarray  # caption_repetition, float32
    repeated: np.ndarray  # caption_repeated_sentences, int32
    tail_loop: np.ndarray  # caption_tail_loop, int32
    truncated: np.ndarray  # caption_truncated, bool
    ranges: dict[str, list[float] | None]  # each cut's useful span


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


def _text_signals(table: pa.Table) -> dict[str, np.ndarray]:
    """curate's text-quality signals of a shard's rows, in curate's batches (each row's values are its own)."""
    from caption_debias.curate.rules import TEXT_BATCH, signals_batch

    parts = [
        signals_batch(part.column("sentence_tokens").combine_chunks(), part.column("caption").to_pylist())
        for part in (table.slice(i, TEXT_BATCH) for i in range(0, max(table.num_rows, 1), TEXT_BATCH))
    ]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _shard_signals(table: pa.Table) -> tuple[dict[str, np.ndarray], pa.Table]:
    """One shard: every per-row signal the cuts read, and the columns sentence_keep reads (nulls where none)."""
    from caption_debias.curate.rules import problem_column, score_signals

    n = table.num_rows
    sig = score_signals(table, n)  # reads what the shard has: no column, no problem
    for c, t in (
        ("sentence_grounding", pa.list_(pa.float32())),
        ("summary_mask", pa.list_(pa.bool_())),
        ("sentence_keep", pa.list_(pa.bool_())),
    ):
        if c not in table.column_names:
            table = table.append_column(c, pa.nulls(n, t))
    out = {
        "clip": sig["clip_score"].to_numpy(zero_copy_only=False).astype(np.float32),
        "best": sig["detail_grounding_max"].to_numpy(zero_copy_only=False).astype(np.float32),
        "clip_problem": sig[problem_column("clip_score")].is_valid().to_numpy(zero_copy_only=False),
        "grounding_problem": sig[problem_column("sentence_grounding")].is_valid().to_numpy(zero_copy_only=False),
    }
    text = _text_signals(table)
    out.update(
        repetition=text["caption_repetition"].astype(np.float32),
        repeated=text["caption_repeated_sentences"].astype(np.int32),
        tail_loop=text["caption_tail_loop"].astype(np.int32),
        truncated=text["caption_truncated"].astype(bool),
    )
    return out, table.select(list(KEPT_COLUMNS))


def check_cuts(values: dict[str, Any]) -> dict[str, Any]:
    """The cuts given, checked and converted by curate's own limits (the line curate's flag would say)."""
    from caption_debias.curate.options import CurateOptions
    from caption_debias.options import check_value

    unknown = set(values) - set(CUTS)
    if unknown:
        raise ValueError(f"unknown cut {sorted(unknown)[0]!r} (choose from {', '.join(CUTS)})")
    out = {}
    for name in CUTS:
        if values.get(name) is not None:
            out[name] = check_value(CurateOptions, name, values[name])
    return out


class ThresholdPreview:
    """The folders' signals, read on first use, and the preview of a set of cuts."""

    def __init__(self, folders: list[Folder], neighbours=None):
        self.folders = folders
        self.neighbours = neighbours  # view/neighbours.py: the image embeddings, read once for both
        self._signals: _Signals | None = None
        self._lock = threading.Lock()
        self._semantic_lock = threading.Lock()
        self._semantic: tuple[bytes, np.ndarray, np.ndarray, np.ndarray] | None = (
            None  # kept set, orders, emb, clusters
        )
        self._last: tuple[tuple, Any] | None = None  # the last cuts and their answer

    @cached_property
    def available(self) -> dict[str, bool]:
        filled = [filled_columns(f) for f in self.folders]  # a curated folder's null score columns do not count
        names = set().union(*filled) if filled else set()
        with_rows = [c for c, f in zip(filled, self.folders) if f.ds.rows]
        return {
            "min_clip_score": "clip_score" in names,
            "drop_ungrounded": {"sentence_grounding", "summary_mask"} <= names,
            # curate refuses --semantic-duplicate-threshold unless every input holds embeddings
            "semantic_duplicate_threshold": bool(with_rows) and all("image_embedding" in c for c in with_rows),
            "repetition_max": True,  # from the token ids every folder holds
            "repeated_sentences_max": True,
        }

    def _read(self) -> _Signals:
        with self._lock:
            if self._signals is None:
                self._signals = self._read_all()
            return self._signals

    def _read_all(self) -> _Signals:
        parts: dict[str, list[np.ndarray]] = {}
        keys: list[str] = []
        tables: list[pa.Table] = []
        starts: dict[tuple[int, int], int] = {}
        sizes: dict[tuple[int, int], int] = {}
        for f in self.folders:
            for s, path in enumerate(f.ds.shard_paths):
                names = storage.parquet_file(path).schema_arrow.names
                table = storage.read_table(path, columns=["key", *[c for c in COLUMNS if c in names]])
                starts[(f.index, s)] = len(keys)
                sizes[(f.index, s)] = table.num_rows
                keys += table.column("key").to_pylist()
                signals, kept = _shard_signals(table)
                for name, values in signals.items():
                    parts.setdefault(name, []).append(values)
                tables.append(kept)
        dtypes = {"clip": np.float32, "best": np.float32, "repetition": np.float32, "repeated": np.int32}
        cat = {
            name: np.concatenate(parts[name]) if parts.get(name) else np.zeros(0, dtypes.get(name, bool))
            for name in ("clip", "best", "clip_problem", "grounding_problem", "repetition", "repeated")
        }
        loop = np.concatenate(parts["tail_loop"]) if parts.get("tail_loop") else np.zeros(0, np.int32)
        trunc = np.concatenate(parts["truncated"]) if parts.get("truncated") else np.zeros(0, bool)
        table = pa.concat_tables(tables) if tables else pa.table({c: [] for c in KEPT_COLUMNS})
        repeated = cat["repeated"]
        return _Signals(
            keys=keys,
            starts=starts,
            sizes=sizes,
            table=table,
            tail_loop=loop,
            truncated=trunc,
            **cat,
            ranges={
                "min_clip_score": _span(cat["clip"]),
                "drop_ungrounded": _detail_span(table),
                "semantic_duplicate_threshold": [0.5, 1.0],  # a cosine; below about 0.5 nearly every pair is "alike"
                "repetition_max": _span(cat["repetition"][cat["repetition"] > 0]),
                "repeated_sentences_max": [0.0, float(repeated.max())] if len(repeated) else None,
            },
        )

    def _semantic_duplicates(self, s: _Signals, kept: np.ndarray, threshold: float) -> dict[int, tuple[int, float]]:
        """curate's SemDeDup over the rows still kept: order -> (order of the row it matched, cosine)."""
        from caption_debias.curate.rules import centred, clusters_of, default_of, semantic_duplicates

        if self.neighbours is None:
            raise ValueError("no image embeddings here")
        addresses, matrix = self.neighbours.table("image")  # curate's usable rows, float16 as curate reads them
        starts = np.array([s.starts[(int(f), int(sh))] for f, sh in addresses[:, :2]], np.int64)
        orders = starts + addresses[:, 2] if len(addresses) else np.zeros(0, np.int64)
        pick = kept[orders]
        if int(pick.sum()) > SEMANTIC_MAX_ROWS:
            raise UserError(
                f"the semantic-duplicate preview runs on at most {SEMANTIC_MAX_ROWS:,} rows ({int(pick.sum()):,} "
                "here): run curate --semantic-duplicate-threshold to see its answer"
            )
        digest = hashlib.sha256(np.packbits(kept).tobytes()).digest()
        with self._semantic_lock:
            if self._semantic is None or self._semantic[0] != digest:
                emb = matrix[pick]  # a copy: centred in place, as curate centres its own copy
                if default_of("semantic_duplicate_center"):
                    emb = centred(emb, out=emb)
                self._semantic = (digest, orders[pick], emb, clusters_of(emb))
            _, o, emb, clusters = self._semantic
            return semantic_duplicates(emb, o, threshold, clusters)

    def _embedding_problems(self, s: _Signals) -> np.ndarray:
        """Per row: an image embedding curate cannot use (invalid_signal when SemDeDup runs)."""
        bad = np.zeros(len(s.keys), bool)
        if self.neighbours is None:
            return bad
        for f, sh, r in self.neighbours.unusable("image").tolist():
            bad[s.starts[(f, sh)] + r] = True
        return bad

    def decide(
        self,
        min_clip_score: float | None = None,
        drop_ungrounded: float | None = None,
        semantic_duplicate_threshold: float | None = None,
        repetition_max: float | None = None,
        repeated_sentences_max: int | None = None,
    ) -> tuple[np.ndarray, dict[int, tuple[int, float]], dict[str, Any]]:
        """(per row: "" kept, else the reason; semantic duplicates: order -> (matched order, cosine); the
        preview's counts and the config that does it), in curate's funnel order."""
        from caption_debias.curate.rules import is_repetitive, low_alignment, mask_counts, sentence_keep

        s = self._read()
        n = len(s.keys)
        reason = np.full(n, "", dtype=object)

        def remove(mask: np.ndarray, name: str) -> None:
            reason[mask & (reason == "")] = name

        remove(is_repetitive(s.repetition, s.repeated, s.tail_loop, repetition_max, repeated_sentences_max), REASONS[0])
        remove(s.truncated, "truncated_caption")
        invalid = np.zeros(n, bool)
        if min_clip_score is not None:
            invalid |= s.clip_problem
        if drop_ungrounded is not None:
            invalid |= s.grounding_problem
        if semantic_duplicate_threshold is not None:
            invalid |= self._embedding_problems(s)
        remove(invalid, "invalid_signal")
        if min_clip_score is not None:
            low, _ = low_alignment(s.clip, min_clip_score, None, ~s.clip_problem)
            remove(low, "low_alignment")
        if drop_ungrounded is not None:
            remove(s.best < drop_ungrounded, "ungrounded_caption")  # NaN: kept, as curate
        matches: dict[int, tuple[int, float]] = {}
        if semantic_duplicate_threshold is not None:
            matches = self._semantic_duplicates(s, reason == "", semantic_duplicate_threshold)
            reason[np.fromiter(matches, np.int64, len(matches))] = "semantic_duplicate"
        # the kept rows' masks as curate writes them: made anew with --drop-ungrounded, else carried
        kept = s.table.filter(pa.array(reason == ""))
        keep = kept.column("sentence_keep") if drop_ungrounded is None else sentence_keep(kept, drop_ungrounded)
        masks = mask_counts(pa.table({"sentence_keep": keep})) or {"rows_masked": 0, "sentences_masked": 0}
        counts = {r: int((reason == r).sum()) for r in REASONS}
        given = dict(zip(CUTS, (min_clip_score, drop_ungrounded, semantic_duplicate_threshold, repetition_max)))
        given["repeated_sentences_max"] = repeated_sentences_max
        return (
            reason,
            matches,
            {
                "rows": n,
                "removed": {k: v for k, v in counts.items() if v},
                "removed_total": int((reason != "").sum()),
                "masked_rows": masks["rows_masked"],
                "masked_sentences": masks["sentences_masked"],
                "config": {k: v for k, v in given.items() if v is not None},
                "ranges": s.ranges,
            },
        )

    def marks(self, reason: np.ndarray, matches: dict[int, tuple[int, float]], ids: list[str]) -> dict[str, Any]:
        """What the preview does to these cards (ids "folder:shard:row"): {id: {reason, match, similarity}}."""
        s = self._read()
        out: dict[str, Any] = {}
        for card in ids[:MARKS_MAX]:
            try:
                f, sh, r = (int(x) for x in card.split(":"))
                order = s.starts[(f, sh)] + r
            except (ValueError, KeyError):
                continue  # a removed row's card ("f:rN") or one not here: nothing to mark
            if not 0 <= r < s.sizes[(f, sh)] or not reason[order]:
                continue
            mark: dict[str, Any] = {"reason": reason[order]}
            if order in matches:
                ref, cos = matches[order]
                mark.update(match=s.keys[ref], similarity=round(cos, 4))
            out[card] = mark
        return out

    def preview(self, values: dict[str, Any], ids: list[str] | None = None) -> dict[str, Any]:
        cuts = check_cuts(values)
        for name in cuts:
            if not self.available[name]:
                raise ValueError(f"{name}: no folder here holds the column it reads")
        key = tuple(sorted(cuts.items()))
        last = self._last
        if last is None or last[0] != key:  # a page turned under the same cuts asks only for its marks
            last = self._last = (key, self.decide(**cuts))
        reason, matches, body = last[1]
        body = dict(body)
        if ids:
            body["marks"] = self.marks(reason, matches, ids)
        return body
