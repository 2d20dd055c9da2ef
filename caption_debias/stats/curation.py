"""Stats of curated folders: the removal funnel, image coverage per image folder, image sizes.

`curation_stats(ds)` is the stats.json part of one curated folder (None for a prepared one);
`figures(stats)` draws one picture of each; `html_section` / `markdown_section` are the
report's "Curation" section. The funnel and coverage come from the manifest curate wrote,
the image sizes from the shards' image_width / image_height columns (one lazy polars pass).
"""

from __future__ import annotations

from typing import Any

from caption_debias.dataset import PreparedDataset

SIDE_BINS = [0, 32, 64, 128, 224, 336, 512, 768, 1024, 1536, 2048, 4096]  # shorter-side histogram edges (px)
FIGURE_TITLES = {
    "curation_funnel": "Removal funnel: rows left after each reason",
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
    }


# ---------------------------------------------------------------- figures


def _funnel_figure(curated: list[tuple[str, dict]]) -> bytes:
    from caption_debias.stats.plots import _color, _png, _pyplot, legend_outside

    plt = _pyplot()
    steps = [s["step"] for s in curated[0][1]["funnel"]]
    fig, ax = plt.subplots(figsize=(7.5, 0.35 * len(steps) + 1.2))
    height = 0.8 / len(curated)
    for i, (label, c) in enumerate(curated):
        left = [s.get("rows", s.get("left", 0)) for s in c["funnel"]]
        read = max(left[0], 1)
        ys = [j + i * height for j in range(len(steps))]
        ax.barh(ys, [v / read for v in left], height=height, color=_color(i), label=label)
        for y, s in zip(ys, c["funnel"]):
            if s.get("removed"):
                ax.text(0.005, y, f" -{s['removed']:,}", va="center", fontsize=8, color="white")
    ax.set_yticks([j + (len(curated) - 1) * height / 2 for j in range(len(steps))], steps)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    from matplotlib.ticker import PercentFormatter

    ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_xlabel("rows left, share of rows read")
    ax.set_title(FIGURE_TITLES["curation_funnel"])
    if len(curated) > 1:
        legend_outside(ax)
    return _png(fig)


STATUS_COLORS = {"present": "#4f9d69", "missing": "#b5495b", "unreadable": "#e07b39", "not_checked": "#9aa3ad"}


def _coverage_figure(curated: list[tuple[str, dict]]) -> bytes:
    from caption_debias.stats.plots import _png, _pyplot

    plt = _pyplot()
    rows = [
        (f"{label}: {folder}" if len(curated) > 1 else folder, g)
        for label, c in curated
        for folder, g in (c["image_coverage"] or {}).items()
    ]
    fig, ax = plt.subplots(figsize=(7.5, 0.4 * len(rows) + 1.2))
    for j, (_, g) in enumerate(rows):
        total = max(sum(g.get(s, 0) for s in STATUS_COLORS), 1)
        left = 0.0
        for status, color in STATUS_COLORS.items():
            share = g.get(status, 0) / total
            ax.barh(j, share, left=left, color=color, label=status if j == 0 else None)
            left += share
    ax.set_yticks(range(len(rows)), [n for n, _ in rows])
    ax.invert_yaxis()
    from matplotlib.ticker import PercentFormatter

    ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_xlim(0, 1)
    ax.set_title(FIGURE_TITLES["image_coverage"])
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4)
    return _png(fig)


def _sizes_figure(curated: list[tuple[str, dict]]) -> bytes:
    from caption_debias.stats.plots import _color, _png, _pyplot, legend_outside

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    labels = list(curated[0][1]["image_sizes"]["shorter_side_histogram"])
    width = 0.8 / len(curated)
    for i, (label, c) in enumerate(curated):
        s = c["image_sizes"]
        hist = s["shorter_side_histogram"]
        total = max(sum(hist.values()), 1)
        xs = [j + i * width for j in range(len(labels))]
        ax.bar(xs, [hist[k] / total for k in labels], width=width, color=_color(i),
               label=f"{label} (median {s['shorter_side']['median']} px)")  # fmt: skip
    ax.set_xticks([j + (len(curated) - 1) * width / 2 for j in range(len(labels))], labels, rotation=35, ha="right")
    from matplotlib.ticker import PercentFormatter

    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_xlabel("shorter side (px)")
    ax.set_title(FIGURE_TITLES["image_sizes"])
    legend_outside(ax)
    return _png(fig)


def curated_groups(stats: dict[str, Any]) -> list[tuple[str, dict]]:
    return [(d["name"], d["curation"]) for d in stats.get("datasets", []) if d.get("curation")]


def figures(stats: dict[str, Any]) -> dict[str, bytes]:
    """The curation pictures (only those with data): funnel, coverage, image sizes."""
    curated = curated_groups(stats)
    out: dict[str, bytes] = {}
    if not curated:
        return out
    out["curation_funnel"] = _funnel_figure(curated)
    with_cov = [(n, c) for n, c in curated if c.get("image_coverage")]
    if with_cov:
        out["image_coverage"] = _coverage_figure(with_cov)
    with_sizes = [(n, c) for n, c in curated if c.get("image_sizes")]
    if with_sizes:
        out["image_sizes"] = _sizes_figure(with_sizes)
    return out


# ---------------------------------------------------------------- report sections


def _funnel_rows(c: dict) -> list[list[str]]:
    rows = []
    for s in c["funnel"]:
        if "rows" in s:
            rows.append([s["step"], "", f"{s['rows']:,}"])
        else:
            rows.append([s["step"], f"{s['removed']:,}", f"{s['left']:,}"])
    return rows


def _coverage_rows(c: dict) -> list[list[str]]:
    rows = []
    for folder, g in (c.get("image_coverage") or {}).items():
        examples = "; ".join(p for st in ("missing", "unreadable") for p in (g.get("examples") or {}).get(st, []))
        rows.append(
            [
                folder,
                f"{g['present']:,}",
                f"{g['missing']:,}",
                f"{g['unreadable']:,}",
                f"{g['not_checked']:,}",
                examples,
            ]
        )
    return rows


COVERAGE_HEADER = ["image folder", "present", "missing", "unreadable", "not checked", "examples"]


def html_section(stats: dict[str, Any], figs: dict[str, bytes]) -> str:
    from caption_debias import html_report as hr

    curated = curated_groups(stats)
    if not curated:
        return ""
    parts = ["<h2>Curation</h2>", hr.figures(hr.figure(png, FIGURE_TITLES[name]) for name, png in figs.items())]
    for name, c in curated:
        parts.append(f"<h3>{hr.esc(name)}: removal funnel</h3>")
        parts.append(hr.table(["step", "removed", "rows left"], _funnel_rows(c)))
        if c.get("image_coverage"):
            parts.append(f"<h3>{hr.esc(name)}: image coverage</h3>")
            parts.append(hr.table(COVERAGE_HEADER, _coverage_rows(c)))
        if c.get("image_sizes"):
            s = c["image_sizes"]
            parts.append(
                hr.note(
                    f"{s['images']:,} images; shorter side median {s['shorter_side']['median']} px "
                    f"(5-95%: {s['shorter_side']['p5']}-{s['shorter_side']['p95']}), longer side median "
                    f"{s['longer_side']['median']} px."
                )
            )
    parts.append(
        hr.note("Reasons are explained in docs/curation.md; every removed row is in the folder's removed.jsonl.")
    )
    return "\n".join(parts)


def markdown_section(stats: dict[str, Any], figure_files: dict[str, str]) -> list[str]:
    from caption_debias.stats.report import _md_table

    curated = curated_groups(stats)
    if not curated:
        return []
    parts = ["## Curation", ""]
    for name, c in curated:
        parts += [f"### {name}: removal funnel", "", _md_table(["step", "removed", "rows left"], _funnel_rows(c)), ""]
        if c.get("image_coverage"):
            parts += [f"### {name}: image coverage", "", _md_table(COVERAGE_HEADER, _coverage_rows(c)), ""]
    for fig, path in figure_files.items():
        parts += [f"![{FIGURE_TITLES[fig]}]({path})", ""]
    return parts
