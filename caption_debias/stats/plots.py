"""Matplotlib figures of the stats dict, as PNG bytes; several groups are drawn side by side.

Every function takes `groups`: a list of (label, group stats) as made by compute.py, and
reads only that dict, so figures can be redrawn from a saved stats.json.
"""

from __future__ import annotations

import io
from typing import Any, Sequence

from caption_debias.plotting import legend_outside
from caption_debias.stats.compute import CLIP_CONTEXT, LONGCLIP_CONTEXT, SUMMARY_POSITIONS
from caption_debias.stats.curation import FIGURE_TITLES as CURATION_TITLES
from caption_debias.stats.curation import curated_groups, lineage_funnel, lineage_groups
from caption_debias.stats.scores import FIGURE_TITLES as SCORE_TITLES
from caption_debias.stats.scores import scored_groups

Groups = Sequence[tuple[str, dict[str, Any]]]

PALETTE = ["#3b6ea8", "#e07b39", "#4f9d69", "#b5495b", "#7d5ba6", "#c9a227", "#3a9ea5", "#8c6d46"]
INK = "#222831"
GRID = "#e3e6ea"
MAX_SENTENCES = 15  # counts above this share one "16+" bar
MAX_TOKENS = 512  # token axis ends here; longer captions share the last bin


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "font.size": 10,
            "axes.edgecolor": "#9aa3ad",
            "axes.labelcolor": INK,
            "axes.titlesize": 12,
            "axes.titleweight": "bold",
            "axes.titlecolor": INK,
            "xtick.color": "#4a525c",
            "ytick.color": "#4a525c",
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "axes.axisbelow": True,
            "grid.color": GRID,
            "legend.frameon": False,
        }
    )
    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", facecolor="white")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _percent_axis(ax, axis: str = "y") -> None:
    from matplotlib.ticker import PercentFormatter

    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(PercentFormatter(1.0, decimals=0))


def _fractions(hist: dict[str, int]) -> dict[int, float]:
    total = sum(hist.values())
    return {int(k): v / total for k, v in hist.items()} if total else {}


def sentences_per_caption(groups: Groups) -> bytes:
    """Grouped bars: share of captions with 1, 2, ... sentences."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    width = 0.8 / max(len(groups), 1)
    for i, (label, g) in enumerate(groups):
        share: dict[int, float] = {}
        for k, v in _fractions(g["sentences_per_caption"]["histogram"]).items():
            share[min(k, MAX_SENTENCES + 1)] = share.get(min(k, MAX_SENTENCES + 1), 0.0) + v
        xs = sorted(share)
        ax.bar(
            [x + (i - (len(groups) - 1) / 2) * width for x in xs],
            [share[x] for x in xs],
            width,
            color=_color(i),
            label=f"{label} (median {_fmt(g['sentences_per_caption']['median'])})",
        )
    ax.set_title("Sentences per caption")
    ax.set_xlabel("sentences")
    ax.set_ylabel("captions")
    last = max([int(k) for _, g in groups for k in g["sentences_per_caption"]["histogram"]] + [1])
    last = min(max(last, 5), MAX_SENTENCES + 1)  # axis ends at the longest caption seen
    ticks = list(range(1, last + 1))
    ax.set_xticks(ticks, [str(t) if t <= MAX_SENTENCES else f"{MAX_SENTENCES + 1}+" for t in ticks])
    ax.set_xlim(0.4, last + 0.6)
    ax.grid(axis="x", visible=False)
    _percent_axis(ax)
    legend_outside(ax)
    return _png(fig)


def _step_hist(ax, groups: Groups, key: str, limit: int) -> None:
    for i, (label, g) in enumerate(groups):
        hist = g[key]["histogram"]
        width = hist["bin_width"]
        share: dict[int, float] = {}
        for k, v in _fractions(hist["counts"]).items():
            k = min(k, limit)  # overflow bin
            share[k] = share.get(k, 0.0) + v
        if not share:
            continue
        edges = list(range(0, max(share) + width + 1, width))
        values = [share.get(e, 0.0) for e in edges[:-1]]
        ax.stairs(
            values,
            edges,
            color=_color(i),
            linewidth=1.8,
            fill=len(groups) == 1,
            alpha=0.85 if len(groups) > 1 else 0.55,
            label=f"{label} (median {_fmt(g[key]['median'])})",
        )
        if len(groups) == 1:
            ax.stairs(values, edges, color=_color(i), linewidth=1.6)
    _percent_axis(ax)


def tokens_per_caption(groups: Groups) -> bytes:
    """Histogram of CLIP tokens per caption (start and end included), 77 and 248 marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    _step_hist(ax, groups, "tokens_per_caption", MAX_TOKENS)
    top = ax.get_ylim()[1]
    for limit, name in ((CLIP_CONTEXT, "CLIP"), (LONGCLIP_CONTEXT, "Long-CLIP")):
        ax.axvline(limit, color="#b5495b", linestyle="--", linewidth=1.3)
        ax.text(  # left of its line: the right edge of the axes is the legend's
            limit - 4,
            top * 0.97,
            f"{name} {limit}",
            color="#b5495b",
            va="top",
            ha="right",
            fontsize=9,
            fontweight="bold",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.5},
        )
    return _caption_histogram(
        fig, ax, "Tokens per caption", f"CLIP tokens with start and end (last bin: {MAX_TOKENS}+)"
    )


def first_sentence_tokens(groups: Groups) -> bytes:
    """Histogram of the first sentence's length in tokens (without start and end)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    _step_hist(ax, groups, "first_sentence_tokens", 120)
    return _caption_histogram(fig, ax, "First-sentence length", "CLIP tokens without start and end (last bin: 120+)")


def _caption_histogram(fig, ax, title: str, xlabel: str) -> bytes:
    """A histogram of captions finished as every token histogram here is: titles, x from 0, the legend outside."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("captions")
    ax.set_xlim(0, None)
    legend_outside(ax)
    return _png(fig)


def summary_positions(groups: Groups) -> bytes:
    """Grouped bars: share of captions with a summary sentence opening, in the middle, closing, none."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    width = 0.8 / max(len(groups), 1)
    for i, (label, g) in enumerate(groups):
        values = [g["summary_position"][k] or 0.0 for k in SUMMARY_POSITIONS]
        xs = [x + (i - (len(groups) - 1) / 2) * width for x in range(len(SUMMARY_POSITIONS))]
        bars = ax.bar(xs, values, width, color=_color(i), label=label)
        ax.bar_label(bars, labels=[f"{v:.0%}" for v in values], fontsize=8, padding=2, color=INK)
    ax.set_xticks(range(len(SUMMARY_POSITIONS)), ["opening", "middle", "closing", "no summary"])
    ax.set_title("Where summaries sit")
    ax.set_ylabel("captions")
    ax.set_ylim(0, 1.1)
    ax.grid(axis="x", visible=False)
    _percent_axis(ax)
    if len(groups) > 1:
        legend_outside(ax)
    return _png(fig)


def opening_phrases(groups: Groups, top: int = 10) -> bytes:
    """Horizontal bars of the most common opening phrases, one panel per group."""
    plt = _pyplot()
    n = max(len(groups), 1)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    # 14.4 in wide when side by side (two 7.2 in plots), so fonts match the other figures
    width = 7.2 if n == 1 else 14.4
    fig, axes = plt.subplots(rows, cols, figsize=(width, (0.27 * top + 0.9) * rows + 0.4), squeeze=False)
    for i, (label, g) in enumerate(groups):
        ax = axes[i // cols][i % cols]
        items = g["opening_phrases"][:top][::-1]
        ax.barh([p["phrase"] for p in items], [p["fraction"] for p in items], color=_color(i))
        ax.set_title(label if n > 1 else "Top opening phrases", fontsize=11)
        ax.grid(axis="y", visible=False)
        ax.tick_params(axis="y", length=0)
        _percent_axis(ax, "x")
        for y, p in enumerate(items):
            ax.text(p["fraction"], y, f" {p['count']:,}", va="center", fontsize=8, color="#4a525c")
        ax.set_xlim(0, max([p["fraction"] for p in items] + [0.01]) * 1.25)
    for j in range(len(groups), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    if n > 1:
        fig.suptitle("Top opening phrases (share of first sentences)", fontweight="bold", color=INK)
    fig.tight_layout()
    return _png(fig)


def _fmt(x) -> str:
    return "-" if x is None else f"{x:g}"


FIGURES = {
    "sentences_per_caption": sentences_per_caption,
    "tokens_per_caption": tokens_per_caption,
    "first_sentence_tokens": first_sentence_tokens,
    "summary_positions": summary_positions,
    "opening_phrases": opening_phrases,
}


def all_figures(groups: Groups) -> dict[str, bytes]:
    """Every figure of the report, by name, as PNG bytes."""
    return {name: draw(groups) for name, draw in FIGURES.items()}


# ---------------------------------------------------------------- curated folders


def _funnel_panel(ax, steps: list[dict[str, Any]], color: str, title: str) -> None:
    """Rows left after each step of a lineage: a full bar where a pass starts reading (and for the
    rows written), a lighter one after each reason, its removals written on it."""
    left = [(s["rows"] if "rows" in s else s.get("left")) or 0 for s in steps]
    top = max(left + [1])
    for y, s in enumerate(steps):
        boundary = "rows" in s
        ax.barh(y, left[y] / top, color=color, alpha=1.0 if boundary else 0.55, height=0.8)
        text = f" {left[y]:,}" if boundary else f" -{s['removed'] or 0:,} -> {left[y]:,}"
        ax.text(min(left[y] / top, 0.82), y, text, va="center", fontsize=8, color=INK)
    ax.set_yticks(range(len(steps)), [s["step"] if "rows" in s else f"    {s['step']}" for s in steps], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    _percent_axis(ax, "x")
    ax.set_title(title, fontsize=10)


def _funnel_figure(lineages: list[tuple[str, list[dict[str, Any]]]]) -> bytes:
    """One panel per folder: every pass of its lineage (prepare -> curate -> score -> curate ...)."""
    plt = _pyplot()
    funnels = [lineage_funnel(passes) for _, passes in lineages]
    heights = [0.32 * len(f) + 0.7 for f in funnels]
    fig, axes = plt.subplots(len(funnels), 1, figsize=(7.5, sum(heights) + 0.6), squeeze=False,
                             gridspec_kw={"height_ratios": heights})  # fmt: skip
    for i, ((label, _), steps) in enumerate(zip(lineages, funnels)):
        _funnel_panel(axes[i][0], steps, _color(i), label)
    axes[-1][0].set_xlabel("rows left, share of the most rows read")
    fig.suptitle(CURATION_TITLES["curation_funnel"], fontweight="bold", color=INK)
    fig.tight_layout()
    return _png(fig)


STATUS_COLORS = {"present": "#4f9d69", "missing": "#b5495b", "unreadable": "#e07b39", "not_checked": "#9aa3ad"}


def _coverage_figure(curated: list[tuple[str, dict]]) -> bytes:
    plt = _pyplot()
    rows = [
        (f"{label}: {folder}" if len(curated) > 1 else folder, g)
        for label, c in curated
        for folder, g in (c["image_coverage"] or {}).items()
    ]
    fig, ax = plt.subplots(figsize=(7.5, 0.4 * len(rows) + 1.2))
    for j, (_, g) in enumerate(rows):
        total = max(sum(g.get(s) or 0 for s in STATUS_COLORS), 1)  # a count not available: none drawn
        left = 0.0
        for status, color in STATUS_COLORS.items():
            share = (g.get(status) or 0) / total
            ax.barh(j, share, left=left, color=color, label=status if j == 0 else None)
            left += share
    ax.set_yticks(range(len(rows)), [n for n, _ in rows])
    ax.invert_yaxis()
    from matplotlib.ticker import PercentFormatter

    ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_xlim(0, 1)
    ax.set_title(CURATION_TITLES["image_coverage"])
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4)
    return _png(fig)


def _sizes_figure(curated: list[tuple[str, dict]]) -> bytes:
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
    ax.set_title(CURATION_TITLES["image_sizes"])
    legend_outside(ax)
    return _png(fig)


def curation_figures(stats: dict[str, Any]) -> dict[str, bytes]:
    """The curation pictures (only those with data): funnel, coverage, image sizes."""
    curated = curated_groups(stats)
    out: dict[str, bytes] = {}
    lineages = lineage_groups(stats)
    if lineages:
        out["curation_funnel"] = _funnel_figure(lineages)
    with_cov = [(n, c) for n, c in curated if c.get("image_coverage")]
    if with_cov:
        out["image_coverage"] = _coverage_figure(with_cov)
    with_sizes = [(n, c) for n, c in curated if c.get("image_sizes")]
    if with_sizes:
        out["image_sizes"] = _sizes_figure(with_sizes)
    return out


# ---------------------------------------------------------------- scored folders (stats/scores.py)


def _score_hist_figure(scored, key: str, xlabel: str) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    for i, (label, s) in enumerate(scored):
        h = s[key]["histogram"]
        xs = [float(b) for b in h["counts"]]
        total = max(sum(h["counts"].values()), 1)
        ax.bar(
            [x + h["bin_width"] / 2 for x in xs],
            [n / total for n in h["counts"].values()],
            width=h["bin_width"],
            alpha=0.6 if len(scored) > 1 else 0.9,
            color=_color(i),
            label=label,
        )
        for name, style in (("p5", ":"), ("p50", "--"), ("p95", ":")):
            if name in s[key]:
                ax.axvline(s[key][name], color=_color(i), linestyle=style, linewidth=1)
    for label, s in scored:
        _mark_thresholds(ax, key, s.get("thresholds") or {}, label if len(scored) > 1 else None)
    from matplotlib.ticker import PercentFormatter

    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_xlabel(xlabel + " (dashed: median; dotted: 5% and 95%; red: curate's thresholds)")
    ax.set_ylabel("share")
    ax.set_title(SCORE_TITLES[key])
    if len(scored) > 1:
        legend_outside(ax)
    return _png(fig)


THRESHOLD_INK = "#c0392b"
THRESHOLD_LINES = {  # histogram -> (threshold key, line style, how the legend names it)
    "clip_score": [
        ("min_clip_score", "-", "--min-clip-score {v:g}"),
        ("keep_top_alignment_cutoff", "-.", "--keep-top-alignment {top:g}: cut at {v:.3f}"),
    ],
    "grounding": [("drop_ungrounded", "-", "--drop-ungrounded {v:g}")],
}


def _mark_thresholds(ax, key: str, thresholds: dict[str, Any], label: str | None) -> None:
    """The thresholds the last curate of a folder's lineage used: red lines, each named along itself."""
    for name, style, text in THRESHOLD_LINES.get(key, []):
        value = thresholds.get(name)
        if value is None:
            continue
        words = text.format(v=value, top=thresholds.get("keep_top_alignment") or 0)
        ax.axvline(value, color=THRESHOLD_INK, linestyle=style, linewidth=2.0)
        ax.text(value, 0.97, f"{label}: {words}" if label else words, transform=ax.get_xaxis_transform(),
                rotation=90, va="top", ha="right", fontsize=8, color=THRESHOLD_INK,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1.0})  # fmt: skip


def _grounding_position_figure(scored) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    for i, (label, s) in enumerate(scored):
        rows = s["grounding_by_position"]
        xs = list(range(1, len(rows) + 1))
        ax.plot(xs, [r["mean"] for r in rows], marker="o", color=_color(i), label=label)
        ax.set_xticks(xs, [r["position"] for r in rows])
    ax.axhline(0, color="#9aa3ad", linewidth=0.8)
    ax.set_xlabel("sentence position in the caption (1 = first)")
    ax.set_ylabel("mean sentence_grounding")
    ax.set_title(SCORE_TITLES["grounding_by_position"])
    if len(scored) > 1:
        legend_outside(ax)
    return _png(fig)


def score_figures(stats: dict[str, Any]) -> dict[str, bytes]:
    scored = scored_groups(stats)
    if not scored:
        return {}
    out = {"clip_score": _score_hist_figure(scored, "clip_score", "cosine of image and caption")}
    with_g = [(n, s) for n, s in scored if s["grounding"].get("count")]
    if with_g:
        out["grounding_by_position"] = _grounding_position_figure(with_g)
        out["grounding"] = _score_hist_figure(with_g, "grounding", "sentence_grounding")
    return out
