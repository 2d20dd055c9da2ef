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


def curation_stats(ds: PreparedDataset) -> dict[str, Any] | None:
    cur = ds.manifest.get("curation")
    if not isinstance(cur, dict):
        return None
    counts = ds.manifest.get("counts") or {}
    return {
        "read": counts.get("read"),
        "written": counts.get("written"),
        "removed": counts.get("removed"),
        "removed_by_reason": counts.get("removed_by_reason") or {},
        "funnel": cur.get("funnel") or [],
        "image_coverage": cur.get("image_coverage"),
        "image_sizes": image_sizes(ds),
        **({"sentence_keep": cur["sentence_keep"]} if cur.get("sentence_keep") else {}),
    }


def lineage_funnel(passes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The funnel over every pass of a lineage: each pass's rows read, then each reason that removed
    rows in it (rows removed, rows left), then the rows the last pass wrote."""
    steps: list[dict[str, Any]] = []
    for i, p in enumerate(passes, 1):
        left = p.get("read") or 0
        steps.append({"step": f"{i} {p['stage']} {p['folder']}: read", "rows": left, "pass": i})
        for reason, n in p["steps"].items():
            left -= n
            steps.append({"step": reason, "removed": n, "left": left, "pass": i})
    if passes:
        steps.append({"step": "written", "rows": passes[-1].get("written") or 0, "pass": len(passes)})
    return steps


def lineage_groups(stats: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(folder name, lineage) of every folder made by more than one pass, or curated."""
    return [
        (d["name"], d["lineage"])
        for d in stats.get("datasets", [])
        if len(d.get("lineage") or []) > 1 or (d.get("lineage") and d.get("curation"))
    ]


def curated_groups(stats: dict[str, Any]) -> list[tuple[str, dict]]:
    return [(d["name"], d["curation"]) for d in stats.get("datasets", []) if d.get("curation")]
