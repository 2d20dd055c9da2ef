"""Dataset statistics over prepared folders: one lazy polars pass, then plain dicts.

The pass reduces every row to a few small numbers (sentence count, token count, first
sentence length, summary positions, opening phrase, whether Long-CLIP's `split(". ")[0]`
finds the first sentence) and keeps only their value counts per
finest group (dataset x --by value). Every figure in the report is derived from those
counts, so coarser groups are exact sums and memory stays bounded by the number of
distinct values, not rows.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from caption_debias import lineage, storage
from caption_debias.dataset import PreparedDataset, dataset_names
from caption_debias.errors import UserError
from caption_debias.stats.curation import curation_stats
from caption_debias.stats.options import StatsOptions
from caption_debias.stats.scores import score_stats, threshold_marks

CLIP_CONTEXT = 77  # CLIP's text context, start and end tokens included
LONGCLIP_CONTEXT = 248  # Long-CLIP's stretched context
TOKEN_BIN = 8  # width of the stored token-count histogram bins
NO_VALUE = "(none)"  # group label for a null split
SUMMARY_POSITIONS = ("opening", "middle", "closing", "none")


@dataclass
class _Dist:
    """Value counts of the per-row measures of one group (mergeable by addition)."""

    sentences: Counter = field(default_factory=Counter)
    tokens: Counter = field(default_factory=Counter)
    first_tokens: Counter = field(default_factory=Counter)
    positions: Counter = field(default_factory=Counter)  # (opening, middle, closing, longclip agrees) -> rows
    phrases: Counter = field(default_factory=Counter)

    def add(self, other: "_Dist") -> None:
        for name in ("sentences", "tokens", "first_tokens", "positions", "phrases"):
            getattr(self, name).update(getattr(other, name))


def _row_measures(lf, dataset: str, phrase_words: int):
    """Per-row measures, lazily; only the columns needed are read from the shards."""
    import polars as pl

    n_sent = pl.col("sentence_spans").list.len()
    mask = pl.col("summary_mask")
    # The first sentence cut from the caption by its span (schema: caption[start:end].strip()
    # == sentence), so the `sentences` column is never read: the caption is read anyway.
    span = pl.col("sentence_spans").list.first()
    start, end = span.struct.field("start"), span.struct.field("end")
    first_sentence = pl.col("caption").str.slice(start, end - start).str.strip_chars()
    return lf.select(
        pl.lit(dataset).alias("dataset"),
        pl.col("source").cast(pl.String),
        pl.col("split").cast(pl.String).fill_null(NO_VALUE),
        n_sent.cast(pl.Int64).alias("n_sentences"),
        pl.col("num_tokens").cast(pl.Int64).alias("n_tokens"),
        # null when the caption has no sentence: excluded from first-sentence figures
        pl.col("sentence_tokens").list.first().list.len().cast(pl.Int64).alias("first_tokens"),
        mask.list.first().fill_null(False).alias("opening"),
        (mask.list.slice(1, pl.max_horizontal(n_sent - 2, 0)).list.any().fill_null(False)).alias("middle"),
        ((n_sent > 1) & mask.list.last().fill_null(False)).alias("closing"),
        _opening_phrase(first_sentence, phrase_words).alias("phrase"),
        _longclip_agrees(first_sentence).alias("longclip_agrees"),
    )


def _longclip_agrees(first_sentence):
    """Does Long-CLIP's short caption, caption.split(". ")[0], equal the first sentence?
    (Compared without surrounding spaces and trailing periods; null without a sentence.)"""
    import polars as pl

    def norm(text):
        return text.str.strip_chars().str.strip_chars_end(".")

    short = pl.col("caption").str.split_exact(". ", 1).struct.field("field_0")
    return norm(short) == norm(first_sentence)


WORD = r"[\w'’-]+"  # a word keeps its apostrophes and hyphens ("eye-level", "it's")
NON_WORD = r"[^\w'’-]"


def _opening_phrase(sentence, words: int):
    """First `words` words of `sentence`, lowercased, joined by one space ("" if none)."""
    import polars as pl

    # An anchored pattern stops after the prefix; str.extract_all would scan the whole
    # sentence for the same result.
    pattern = f"^{NON_WORD}*({WORD})" + f"(?:{NON_WORD}+({WORD}))?" * (words - 1)
    groups = sentence.str.extract_groups(pattern)
    parts = [groups.struct.field(str(i + 1)) for i in range(words)]
    return pl.concat_str(parts, separator=" ", ignore_nulls=True).str.to_lowercase()


def value_count_queries(rows, keys: list[str]) -> dict:
    """The five value-count tables every figure is derived from, as lazy queries on `rows`."""
    import polars as pl

    return {
        "sentences": rows.group_by(keys + ["n_sentences"]).len(),
        "tokens": rows.group_by(keys + ["n_tokens"]).len(),
        "first_tokens": rows.drop_nulls("first_tokens").group_by(keys + ["first_tokens"]).len(),
        "positions": rows.group_by(keys + ["opening", "middle", "closing", "longclip_agrees"]).len(),
        "phrases": rows.filter(pl.col("phrase").str.len_chars() > 0).group_by(keys + ["phrase"]).len(),
    }


def _collect_dists(
    datasets: list[tuple[str, PreparedDataset]],
    keys: list[str],
    phrase_words: int,
    on_rows: Callable[[int, int], None] | None = None,
):
    """One shared scan, five small value-count tables -> {group key tuple: _Dist}.

    With `on_rows(done, total)` (progress lines), the shards are scanned a few at a time and the
    value counts added up: the same tables, with a point to report between the parts.
    """
    import polars as pl

    if on_rows is None:
        parts = [[(name, ds.scan()) for name, ds in datasets]]
    else:
        step = 4
        parts = [
            [(name, pl.scan_parquet([str(p) for p in ds.shard_paths[i : i + step]]))]
            for name, ds in datasets
            for i in range(0, len(ds.shard_paths), step)
        ]
    total = sum(ds.rows for _, ds in datasets)
    if on_rows is not None:
        on_rows(0, total)  # the folders are open and their rows known: what is about to be read
    done = 0
    dists: dict[tuple, _Dist] = defaultdict(_Dist)
    for part in parts:
        frames = [_row_measures(lf, name, phrase_words) for name, lf in part]
        queries = value_count_queries(pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0], keys)
        try:
            with storage.reading([p for _, ds in datasets for p in ds.shard_paths]):  # a damaged shard: named
                results = pl.collect_all(list(queries.values()), engine="streaming")
        except (
            pl.exceptions.ComputeError,
            pl.exceptions.SchemaError,
            pl.exceptions.ColumnNotFoundError,
            OSError,
        ) as exc:
            raise UserError(f"cannot read shards: {str(exc).splitlines()[0]}") from None
        for (name, _), frame in zip(queries.items(), results):
            value_cols = [c for c in frame.columns if c not in keys and c != "len"]
            for row in frame.iter_rows(named=True):
                group = tuple(row[k] for k in keys)
                value = tuple(row[c] for c in value_cols)
                getattr(dists[group], name)[value if len(value) > 1 else value[0]] += row["len"]
            if name == "sentences":
                done += int(frame["len"].sum())
        if on_rows is not None:
            on_rows(done, total)
    return dists


def _quantile(counts: Counter, q: float) -> float | None:
    """Quantile of a value-count table, linear interpolation (numpy's default method)."""
    # Hand-written: polars and numpy have no weighted quantile over value counts.
    total = sum(counts.values())
    if total == 0:
        return None
    pos = q * (total - 1)  # 0-based rank in the sorted rows
    lo_rank, frac = int(pos), pos - int(pos)
    lo = hi = None
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if lo is None and seen > lo_rank:
            lo = value
        if seen > lo_rank + 1 or (seen > lo_rank and frac == 0):
            hi = value
            break
    assert lo is not None  # total > 0: some value passes lo_rank
    hi = lo if hi is None else hi
    return float(lo + (hi - lo) * frac)


def _mean(counts: Counter) -> float | None:
    total = sum(counts.values())
    return sum(v * n for v, n in counts.items()) / total if total else None


def _describe(counts: Counter) -> dict[str, Any]:
    return {
        "mean": _round(_mean(counts)),
        "median": _quantile(counts, 0.5),
        "p95": _quantile(counts, 0.95),
        "min": min(counts) if counts else None,
        "max": max(counts) if counts else None,
    }


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def _binned(counts: Counter, width: int) -> dict[str, int]:
    bins: Counter = Counter()
    for value, n in counts.items():
        bins[(value // width) * width] += n
    return {str(k): bins[k] for k in sorted(bins)}


def _group_stats(dist: _Dist, top: int) -> dict[str, Any]:
    records = sum(dist.sentences.values())
    frac = (lambda n: _round(n / records, 6)) if records else (lambda n: None)
    over = lambda limit: sum(n for v, n in dist.tokens.items() if v > limit)  # noqa: E731
    where: Counter[str] = Counter()
    agrees: Counter[bool] = Counter()
    for (opening, middle, closing, agree), n in dist.positions.items():
        agrees[agree] += n
        where["opening"] += n if opening else 0
        where["middle"] += n if middle else 0
        where["closing"] += n if closing else 0
        where["none"] += 0 if (opening or middle or closing) else n
    phrases_total = sum(dist.phrases.values())
    return {
        "records": records,
        "sentences_per_caption": {
            **_describe(dist.sentences),
            "single_sentence": frac(dist.sentences.get(1, 0)),
            "histogram": {str(k): dist.sentences[k] for k in sorted(dist.sentences)},
        },
        "tokens_per_caption": {
            **_describe(dist.tokens),
            "over_77": frac(over(CLIP_CONTEXT)),
            "over_248": frac(over(LONGCLIP_CONTEXT)),
            "histogram": {"bin_width": TOKEN_BIN, "counts": _binned(dist.tokens, TOKEN_BIN)},
        },
        "first_sentence_tokens": {
            **_describe(dist.first_tokens),
            "records": sum(dist.first_tokens.values()),
            "histogram": {"bin_width": 4, "counts": _binned(dist.first_tokens, 4)},
        },
        "opening_summary_rate": frac(where["opening"]),
        "closing_summary_rate": frac(where["closing"]),
        "summary_position": {k: frac(where[k]) for k in SUMMARY_POSITIONS},
        # share of captions (with a sentence) whose Long-CLIP short text is the first sentence
        "longclip_split_agreement": (
            _round(agrees[True] / (agrees[True] + agrees[False]), 6) if agrees[True] + agrees[False] else None
        ),
        "opening_phrases": [
            {"phrase": p, "count": n, "fraction": _round(n / phrases_total, 6)}
            for p, n in sorted(dist.phrases.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        ],
    }


def _manifest_counts(ds: PreparedDataset, fields: lineage.Fields) -> dict[str, Any]:
    counts = fields.mapping(ds.manifest.get("counts"), "counts")
    by_reason = fields.counts_by(counts.get("rejects_by_reason"), "counts.rejects_by_reason")
    return {
        **{k: fields.count(counts.get(k), f"counts.{k}") for k in ("read", "written", "rejected")},
        "rejects_by_reason": dict(sorted(by_reason.items(), key=lambda kv: -kv[1])),
    }


def compute_stats(
    folders: Sequence[str | Path],
    options: StatsOptions | None = None,
    on_rows: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Statistics of one or more prepared folders as a JSON-ready dict.

    Top level: the figures over all folders together, the rejects by reason summed over the
    manifests, `datasets` (one entry per folder, always present) and, with `by`, the same
    figures per source or split (`by.groups`, and inside each dataset entry too).
    """
    options = (options or StatsOptions()).validate()
    if not folders:
        raise UserError("give at least one prepared folder")
    names = dataset_names(folders)
    datasets = [(name, PreparedDataset.open(f)) for name, f in zip(names, folders)]

    keys = ["dataset"] + ([options.by] if options.by else [])
    finest = _collect_dists(datasets, keys, options.phrase_words, on_rows)

    def merged(select: Iterable[tuple]) -> _Dist:
        out = _Dist()
        for group in select:
            out.add(finest[group])
        return out

    top = options.top_phrases
    per_dataset = []
    for name, ds in datasets:
        own = [g for g in finest if g[0] == name]
        entry = {"name": name, "folder": str(ds.folder), **_group_stats(merged(own), top)}
        if entry["records"] != ds.rows:  # counts must reconcile with the manifest
            raise UserError(f"{ds.folder}: shards hold {entry['records']} rows but the manifest lists {ds.rows}")
        fields = lineage.Fields(lineage.shown(ds.folder))  # a manifest number that is not one: said once, not shown
        entry["manifest_counts"] = _manifest_counts(ds, fields)
        curation = curation_stats(ds, fields)  # curated folders only: funnel, image coverage, image sizes
        if curation is not None:
            entry["curation"] = curation
        entry["lineage"] = lineage.passes(ds.folder)  # prepare -> curate -> score -> ...: every pass, oldest first
        scores = score_stats(ds)  # scored folders only: clip_score histogram, grounding by sentence position
        if scores is not None:
            entry["scores"] = {**scores, **threshold_marks(entry["lineage"])}
        entry["prepared_with"] = {
            "segmenter": fields.mapping(ds.manifest.get("segmenter"), "segmenter").get("name"),
            "summary": fields.mapping(ds.manifest.get("summary"), "summary").get("mode"),
            "complete": ds.manifest.get("complete"),  # False: an input was cut off mid-way
        }
        invalid = fields.invalid + [line for p in entry["lineage"] for line in p.get("invalid", [])]
        if invalid:
            entry["invalid"] = list(dict.fromkeys(invalid))
        if options.by:
            entry["by"] = {g[1]: _group_stats(finest[g], top) for g in sorted(own, key=lambda g: g[1])}
        per_dataset.append(entry)

    stats = {"folders": [str(ds.folder) for _, ds in datasets], **_group_stats(merged(finest), top)}
    rejects: Counter = Counter()
    for entry in per_dataset:
        rejects.update(entry["manifest_counts"]["rejects_by_reason"])
    stats["rejects_by_reason"] = dict(sorted(rejects.items(), key=lambda kv: (-kv[1], kv[0])))
    stats["rejected"] = sum(e["manifest_counts"]["rejected"] or 0 for e in per_dataset)
    if options.by:
        values = sorted({g[1] for g in finest})
        stats["by"] = {
            "field": options.by,
            "groups": {v: _group_stats(merged(g for g in finest if g[1] == v), top) for v in values},
        }
    stats["datasets"] = per_dataset
    stats.update(_passes_of_one_dataset(per_dataset))
    stats["invalid"] = list(dict.fromkeys(line for e in per_dataset for line in e.get("invalid", [])))
    stats["options"] = {
        "by": options.by,
        "top_phrases": options.top_phrases,
        "phrase_words": options.phrase_words,
        "token_limits": [CLIP_CONTEXT, LONGCLIP_CONTEXT],
    }
    return stats


def _passes_of_one_dataset(per_dataset: list[dict[str, Any]]) -> dict[str, Any]:
    """Marks each folder another given folder's lineage reads (`later_pass`: its funnel is part of that
    one's, its rows that one's before a pass); {"one_dataset": ...} when all are passes of one dataset."""
    _mark_passes(per_dataset)
    tips = [e for e in per_dataset if "later_pass" not in e]
    if len(per_dataset) > 1 and len(tips) == 1:  # its last pass says how many rows the dataset has
        return {
            "one_dataset": {"last_pass": tips[0]["name"], "records": tips[0]["records"], "passes": len(per_dataset)}
        }
    return {}


def _mark_passes(per_dataset: list[dict[str, Any]]) -> None:
    """`later_pass`: the name of another given folder whose lineage reads this one."""

    def place(folder: Any) -> str:
        return str(folder) if storage.is_url(str(folder)) else str(Path(folder).resolve())

    earlier = {e["name"]: {place(p["folder"]) for p in (e.get("lineage") or [])[:-1]} for e in per_dataset}
    for e in per_dataset:
        for other in per_dataset:
            if other is not e and place(e["folder"]) in earlier[other["name"]]:
                e["later_pass"] = other["name"]
                break
