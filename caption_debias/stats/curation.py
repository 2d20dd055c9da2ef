"""Stats of curated folders: the removal funnel, image coverage per image folder, image sizes.

`curation_stats(ds)` is the stats.json part of one curated folder (None for a prepared one).
The funnel and coverage come from the manifest curate wrote, the image sizes from the
shards' image_width / image_height columns (one lazy polars pass). Their pictures are
plots.curation_figures, the report's "Curation" section report.curation_html_section /
curation_markdown_section (numbers, figures, report: each module imports only the ones before it).
"""

from __future__ import annotations

from typing import Any

from caption_debias import storage
from caption_debias.dataset import PreparedDataset
from caption_debias.lineage import Fields, shown

SIDE_BINS = [0, 32, 64, 128, 224, 336, 512, 768, 1024, 1536, 2048, 4096]  # shorter-side histogram edges (px)
FIGURE_TITLES = {
    "curation_funnel": "Removal funnel: rows left after each pass and reason",
    "image_coverage": "Image coverage per image folder",
    "image_sizes": "Shorter image side (kept rows)",
}


def _side_bin(side: int) -> str:
    for lo, hi in zip(SIDE_BINS, SIDE_BINS[1:]):
        if side < hi:
            return f"{lo}-{hi - 1}"
    return f"{SIDE_BINS[-1]}+"


def image_sizes(ds: PreparedDataset) -> dict[str, Any] | None:
    """Size distribution of the kept rows' images (None when the shards carry no sizes)."""
    import polars as pl

    if not ds.shard_paths:
        return None
    lf = ds.scan()
    if "image_width" not in lf.collect_schema().names():
        return None
    with storage.reading(ds.shard_paths):  # a damaged shard: one line naming it
        sides = (
            lf.select(
                pl.min_horizontal("image_width", "image_height").alias("short"),
                pl.max_horizontal("image_width", "image_height").alias("long"),
            )
            .drop_nulls()
            .collect()
        )
    if sides.height == 0:
        return None

    def summary(s: pl.Series) -> dict[str, int]:
        q = [s.quantile(x, "nearest") for x in (0.05, 0.5, 0.95)]
        return {"min": int(s.min()), "p5": int(q[0]), "median": int(q[1]), "p95": int(q[2]), "max": int(s.max())}

    hist = {f"{lo}-{hi - 1}": 0 for lo, hi in zip(SIDE_BINS, SIDE_BINS[1:])} | {f"{SIDE_BINS[-1]}+": 0}
    for side, n in sides["short"].value_counts().iter_rows():
        hist[_side_bin(int(side))] += int(n)
    return {
        "images": sides.height,
        "shorter_side": summary(sides["short"]),
        "longer_side": summary(sides["long"]),
        "shorter_side_histogram": hist,
    }


def curation_stats(ds: PreparedDataset, fields: Fields | None = None) -> dict[str, Any] | None:
    """The curation part of stats.json; a manifest number that is not one is None, said in `fields`."""
    cur = ds.manifest.get("curation")
    if not isinstance(cur, dict):
        return None
    fields = fields or Fields(shown(ds.folder))
    counts = fields.mapping(ds.manifest.get("counts"), "counts")
    out: dict[str, Any] = {k: fields.count(counts.get(k), f"counts.{k}") for k in ("read", "written", "removed")}
    out["removed_by_reason"] = fields.counts_by(counts.get("removed_by_reason"), "counts.removed_by_reason")
    out["funnel"] = _funnel(cur.get("funnel"), fields)
    out["image_coverage"] = _coverage(cur.get("image_coverage"), fields)
    out["image_sizes"] = image_sizes(ds)
    keep = fields.mapping(cur.get("sentence_keep"), "curation.sentence_keep")
    if keep:
        at = "curation.sentence_keep."
        out["sentence_keep"] = {
            "threshold": fields.number(keep.get("threshold"), at + "threshold"),
            **{k: fields.count(keep.get(k), at + k) for k in SENTENCE_KEEP_COUNTS},
        }
    return out


SENTENCE_KEEP_COUNTS = ("sentences_masked", "sentences", "rows_masked", "rows", "rows_removed")
COVERAGE_COUNTS = ("present", "missing", "unreadable", "not_checked")


def _funnel(value: Any, fields: Fields) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        if value is not None:
            fields.mapping(value, "curation.funnel")  # says it is not a list of steps
        return []
    steps = []
    for i, step in enumerate(value):
        if not isinstance(step, dict):
            fields.mapping(step, f"curation.funnel[{i}]")
            continue
        at = f"curation.funnel[{i}]."
        steps.append(
            {"step": str(step.get("step"))}
            | {k: fields.count(step[k], at + k) for k in ("rows", "removed", "left") if k in step}
        )
    return steps


def _coverage(value: Any, fields: Fields) -> dict[str, Any] | None:
    if value is None:
        return None
    out = {}
    for folder, g in fields.mapping(value, "curation.image_coverage").items():
        g = fields.mapping(g, f"curation.image_coverage.{folder}")
        at = f"curation.image_coverage.{folder}."
        examples = fields.mapping(g.get("examples"), at + "examples")
        out[str(folder)] = {k: fields.count(g.get(k), at + k) for k in COVERAGE_COUNTS} | {
            "examples": {str(k): [str(p) for p in v[:10]] for k, v in examples.items() if isinstance(v, list)}
        }
    return out


def lineage_funnel(passes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The funnel over every pass of a lineage: each pass's rows read, then each reason that removed
    rows in it (rows removed, rows left), then the rows the last pass wrote."""
    steps: list[dict[str, Any]] = []
    for i, p in enumerate(passes, 1):
        left = p.get("read") or 0  # not available: counted from 0
        steps.append({"step": f"{i} {p['stage']} {p['folder']}: read", "rows": left, "pass": i})
        for reason, n in p["steps"].items():
            left -= n
            steps.append({"step": reason, "removed": n, "left": left, "pass": i})
    if passes:
        steps.append({"step": "written", "rows": passes[-1].get("written") or 0, "pass": len(passes)})
    return steps


def lineage_groups(stats: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(folder name, lineage) of every folder made by more than one pass, or curated; a folder that a
    later pass given beside it reads is in that one's funnel already, so it gets none of its own."""
    return [
        (d["name"], d["lineage"])
        for d in stats.get("datasets", [])
        if (len(d.get("lineage") or []) > 1 or (d.get("lineage") and d.get("curation"))) and "later_pass" not in d
    ]


def curated_groups(stats: dict[str, Any]) -> list[tuple[str, dict]]:
    return [(d["name"], d["curation"]) for d in stats.get("datasets", []) if d.get("curation")]
