"""Stats of scored folders (`caption-debias score`): the clip_score histogram and grounding by sentence position.

`score_stats(ds)` is the stats.json part of one folder (None when it holds no scores), and
the rows of the report's tables; `plots.score_figures` draws them and `report.scores_html_section` /
`scores_markdown_section` lay out the "Model scores" section (numbers, figures, report: each
module imports only the ones before it, as for curation). Grounding by position is the mean `sentence_grounding` of every caption's
k-th sentence: the DeBias-CLIP paper's bias seen in a dataset (a model that reads the summary
and skims the rest grounds the opening sentence and little after it). Everything comes from
one lazy polars pass per folder over the score columns only.
"""

from __future__ import annotations

from typing import Any

from caption_debias import storage
from caption_debias.dataset import PreparedDataset

CLIP_BIN = 0.02  # clip_score histogram bin width (cosine)
GROUNDING_BIN = 0.5  # sentence_grounding histogram bin width
MAX_POSITION = 16  # 0-based: the 17th sentence and later share the last position bucket ("17+")
FIGURE_TITLES = {
    "clip_score": "clip_score (image vs whole caption)",
    "grounding_by_position": "Mean sentence grounding by sentence position",
    "grounding": "sentence_grounding (all sentences)",
}


def _binned(series, width: float) -> dict[str, int]:
    import polars as pl

    counts = (
        series.drop_nulls()
        .to_frame("v")
        .select(((pl.col("v") / width).floor() * width).round(4).alias("bin"))
        .group_by("bin")
        .len()
        .sort("bin")
    )
    return {f"{b:.4g}": int(n) for b, n in counts.iter_rows()}


def _describe(series) -> dict[str, Any]:
    s = series.drop_nulls()
    if len(s) == 0:
        return {"count": 0}
    q = {f"p{int(p * 100)}": round(float(s.quantile(p, "linear")), 4) for p in (0.05, 0.25, 0.5, 0.75, 0.95)}
    return {"count": len(s), "mean": round(float(s.mean()), 4), **q}


def score_stats(ds: PreparedDataset) -> dict[str, Any] | None:
    """clip_score and sentence_grounding summaries of one folder; None when it is not scored."""
    import polars as pl

    if "clip_score" not in ds.columns() or not ds.shard_paths:
        return None
    cols = ["clip_score", "sentence_grounding", "summary_mask"] + (
        ["sentence_keep"] if "sentence_keep" in ds.columns() else []
    )
    with storage.reading(ds.shard_paths):  # a damaged shard: one line naming it
        frame = ds.scan().select(cols).collect()
    clip = frame["clip_score"].cast(pl.Float64)
    if clip.null_count() == len(clip):
        return None
    sentences = (
        frame.filter(pl.col("sentence_grounding").list.len() == pl.col("summary_mask").list.len())
        .select(
            pl.col("sentence_grounding").alias("g"),
            pl.col("summary_mask").alias("summary"),
            pl.int_ranges(pl.col("sentence_grounding").list.len()).alias("position"),
        )
        .explode(["g", "summary", "position"])
        .drop_nulls("g")
        .with_columns(pl.col("position").clip(upper_bound=MAX_POSITION))
    )
    by_position = (
        sentences.group_by("position")
        .agg(
            pl.col("g").mean().alias("mean"),
            pl.col("g").median().alias("median"),
            pl.len().alias("sentences"),
            pl.col("summary").mean().alias("summary_share"),
        )
        .sort("position")
    )
    out: dict[str, Any] = {
        "rows": len(clip),
        "scored_rows": len(clip) - clip.null_count(),
        "clip_score": {**_describe(clip), "histogram": {"bin_width": CLIP_BIN, "counts": _binned(clip, CLIP_BIN)}},
        "grounding": {
            **_describe(sentences["g"].cast(pl.Float64)),
            "histogram": {"bin_width": GROUNDING_BIN, "counts": _binned(sentences["g"], GROUNDING_BIN)},
            "summary_mean": _mean(sentences.filter(pl.col("summary"))["g"]),
            "detail_mean": _mean(sentences.filter(~pl.col("summary"))["g"]),
        },
        "grounding_by_position": [
            {
                "position": f"{p + 1}+" if p == MAX_POSITION else str(p + 1),
                "mean": round(float(m), 4),
                "median": round(float(md), 4),
                "sentences": int(n),
                "summary_share": round(float(s), 4),
            }
            for p, m, md, n, s in by_position.iter_rows()
        ],
        "model": scoring.get("model") if (scoring := ds.manifest.get("scoring")) else None,
    }
    if "sentence_keep" in cols:
        out["sentences_dropped"] = int(frame["sentence_keep"].list.eval(~pl.element()).list.sum().fill_null(0).sum())
    return out


THRESHOLD_KEYS = ("min_clip_score", "keep_top_alignment", "keep_top_alignment_cutoff", "drop_ungrounded")


def threshold_marks(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """{"thresholds": {...}} of the last curate pass in a folder's lineage that set a model-score
    threshold (where the histograms mark them), with the folder it curated; {} when none did."""
    for p in reversed(passes):
        given = {k: v for k, v in (p.get("thresholds") or {}).items() if k in THRESHOLD_KEYS and v is not None}
        if given:
            return {"thresholds": {**given, "curated": p["folder"]}}
    return {}


def thresholds_line(t: dict[str, Any]) -> str:
    """Which thresholds the histograms mark (red lines), and which curate used them."""
    given = []
    if t.get("min_clip_score") is not None:
        given.append(f"--min-clip-score {t['min_clip_score']:g}")
    if t.get("keep_top_alignment") is not None:
        cut = t.get("keep_top_alignment_cutoff")
        given.append(
            f"--keep-top-alignment {t['keep_top_alignment']:g}" + (f" (cut at {cut:.3f})" if cut is not None else "")
        )
    if t.get("drop_ungrounded") is not None:
        given.append(f"--drop-ungrounded {t['drop_ungrounded']:g}")
    return f"Red lines in the histograms: {', '.join(given)}, as curate used them for {t['curated']}."


def _mean(series) -> float | None:
    return None if len(series) == 0 else round(float(series.mean()), 4)


def model_line(model: Any) -> str:
    """The scoring model as one line (the manifest's scoring.model: name, weights sha256, context)."""
    if not isinstance(model, dict):
        return str(model)
    return ", ".join(
        f"{k} {str(v)[:16] if 'sha' in k else v}" for k, v in model.items() if not isinstance(v, (dict, list))
    )


def scored_groups(stats: dict[str, Any]) -> list[tuple[str, dict]]:
    return [(d["name"], d["scores"]) for d in stats.get("datasets", []) if d.get("scores")]


# ---------------------------------------------------------------- report rows (stats/report.py lays them out)

POSITION_HEADER = ["position", "mean grounding", "median", "sentences", "summary share"]
DESCRIBE_HEADER = ["", "rows", "mean", "5%", "25%", "median", "75%", "95%"]


def describe_rows(name: str, s: dict) -> list[list[str]]:
    def row(label: str, d: dict) -> list[str]:
        if not d.get("count"):
            return [label, "0", "", "", "", "", "", ""]
        keys = ("mean", "p5", "p25", "p50", "p75", "p95")
        return [label, f"{d['count']:,}", *[f"{d[k]:.3f}" for k in keys]]

    return [row(f"{name}: clip_score", s["clip_score"]), row(f"{name}: sentence_grounding", s["grounding"])]


def position_rows(s: dict) -> list[list[str]]:
    return [
        [r["position"], f"{r['mean']:.3f}", f"{r['median']:.3f}", f"{r['sentences']:,}", f"{r['summary_share']:.0%}"]
        for r in s["grounding_by_position"]
    ]


NOTE = (
    "How to read it (docs/curation.md): --min-clip-score or --keep-top-alignment cuts the left tail of the "
    "clip_score histogram; --drop-ungrounded T marks sentences left of T in the grounding histogram. "
    "Grounding falling with position is the summary bias of the model that scored the folder, seen in the data."
)
