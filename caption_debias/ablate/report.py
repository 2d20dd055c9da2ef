"""What an ablation says: per arm, rows and sentences kept, recall@1 both ways per eval set and
variant, each delta against the reference arm with a paired bootstrap 95% interval (the demo's,
evaluate.metrics.paired_bootstrap), fault recall and precision against a planted key; then
ablation.json (schemas/ablation.schema.json), a terminal table and report.html."""

from __future__ import annotations

import io
import platform
from pathlib import Path
from typing import Any

from caption_debias import html_report
from caption_debias.ablate.plan import REFERENCE, Plan

NO_EFFECT = "no measurable effect"
BOOTSTRAP_SEED = 0
DIRECTIONS = ("t2i", "i2t")


def effect(delta: dict[str, float] | None) -> str | None:
    """better / worse when the interval lies wholly above / below 0; else no measurable effect."""
    if delta is None or delta.get("lo") is None:
        return None
    if delta["lo"] > 0:
        return "better"
    if delta["hi"] < 0:
        return "worse"
    return NO_EFFECT


def seed_mean_hits(per_seed: list[list[int]]) -> list[float]:
    """Each query's hit averaged over the seeds (the same queries in every seed)."""
    n = len(per_seed)
    return [sum(column) / n for column in zip(*per_seed)]


def delta(reference: list[list[int]], arm: list[list[int]], resamples: int) -> dict[str, float]:
    """arm - reference in recall points, paired over the same queries, seeds averaged per query."""
    from caption_debias.evaluate.metrics import paired_bootstrap

    gap = paired_bootstrap(seed_mean_hits(reference), seed_mean_hits(arm), resamples=resamples, seed=BOOTSTRAP_SEED)
    return {k: round(v, 4) for k, v in gap.items()}


def _faults(key: dict[str, Any] | None, base_keys: set[str], kept: set[str]) -> dict[str, Any] | None:
    """Rows of the base an arm does not train on, against the planted key: recall per kind, precision."""
    if key is None:
        return None
    removed = base_keys - kept
    by_kind = {}
    faulty: set[str] = set()
    for kind, entries in key.items():
        if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict) or "key" not in entries[0]:
            continue
        keys = {str(e["key"]) for e in entries} & base_keys
        faulty |= keys
        found = len(keys & removed)
        by_kind[kind] = {
            "planted": len(keys),
            "removed": found,
            "recall": round(found / len(keys), 4) if keys else None,
        }
    hit = len(removed & faulty)
    return {
        "removed": len(removed),
        "faulty": len(faulty),
        "recall": round(hit / len(faulty), 4) if faulty else None,
        "precision": round(hit / len(removed), 4) if removed else None,
        "clean_removed": len(removed - faulty),
        "by_kind": by_kind,
    }


def sentence_faults(key: dict[str, Any] | None, kept: set[str], masked: dict[str, list[int]]) -> dict[str, Any] | None:
    """Sentences an arm masks (curate --drop-ungrounded) against the key's hallucinated sentences, among
    the rows it trains on: recall of the swapped-in sentences, precision of the masking."""
    if key is None or "hallucinated" not in key:
        return None
    swapped = {(str(e["key"]), int(e["sentence"])) for e in key["hallucinated"] if e["key"] in kept}
    hidden = {(k, i) for k, indices in masked.items() if k in kept for i in indices}
    hit = len(swapped & hidden)
    return {
        "hallucinated": len(swapped),
        "masked": len(hidden),
        "found": hit,
        "recall": round(hit / len(swapped), 4) if swapped else None,
        "precision": round(hit / len(hidden), 4) if hidden else None,
    }


def _at(results: dict[str, dict[str, Any]], arm: str, seed: int, alpha: str, where: tuple[str, ...]) -> Any:
    """One unit's figures at an alpha, at `where` (("sets", SET, VARIANT) or ("short",))."""
    node: Any = results[f"{arm}/seed-{seed}"]["alphas"][alpha]
    for step in where:
        node = node[step]
    return node


def _zeroshot_metric(plan: Plan, results: dict[str, dict[str, Any]], arm: str, alpha: str) -> dict[str, Any]:
    """An arm's zero-shot top-1 at an alpha and its delta to the reference: a paired bootstrap over the same
    images like retrieval's (a result written before per-image hits were kept: the gap alone)."""

    def of(name: str) -> list[dict[str, Any]]:
        return [results[f"{name}/seed-{s}"]["alphas"][alpha]["zeroshot"] for s in plan.seeds]

    tops = [z["top1"] for z in of(arm)]
    ref = [z["top1"] for z in of(REFERENCE)]
    mean = sum(tops) / len(tops)
    gap: dict[str, Any] | None = None
    if arm != REFERENCE:
        if all("top1_hits" in z for z in of(arm) + of(REFERENCE)):
            gap = delta([z["top1_hits"] for z in of(REFERENCE)], [z["top1_hits"] for z in of(arm)], plan.resamples)
        else:
            gap = {"gap": round(mean - sum(ref) / len(ref), 4), "lo": None, "hi": None}
    return {
        "arm": arm,
        "alpha": float(alpha),
        "metric": "zeroshot",
        "set": Path(str(plan.zeroshot)).name,
        "variant": "top1",
        "direction": "i2t",
        "r1": round(mean, 4),
        "r1_by_seed": [round(t, 4) for t in tops],
        "delta": gap,
        "effect": effect(gap),
    }


def _metrics(plan: Plan, results: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, dict[str, int]]]:
    """Every arm x alpha x place x direction: recall@1 by seed and its delta to the reference; queries per place."""

    def hits(arm: str, alpha: str, where: tuple[str, ...], direction: str) -> list[list[int]]:
        return [_at(results, arm, seed, alpha, where)[f"{direction}_hits"] for seed in plan.seeds]

    metrics: list[dict[str, Any]] = []
    alphas = [f"{a:g}" for a in plan.alphas]
    places: list[tuple[str, str, str, tuple[str, ...]]] = [
        ("retrieval", s.label, v, ("sets", s.label, v)) for s in plan.eval_sets for v in plan.variants
    ]
    first = results[f"{REFERENCE}/seed-{plan.seeds[0]}"]["alphas"][alphas[0]]
    places.append(("short", first["short"]["set"], first["short"]["variant"], ("short",)))
    queries: dict[str, dict[str, int]] = {}
    for arm in (a.name for a in plan.arms):
        for alpha in alphas:
            for metric, label, variant, where in places:
                for direction in DIRECTIONS:
                    by_seed = [
                        round(float(_at(results, arm, seed, alpha, where)[f"{direction}_r1"]), 4) for seed in plan.seeds
                    ]
                    mine = hits(arm, alpha, where, direction)
                    queries.setdefault(f"{metric}:{label}", {})[direction] = len(mine[0])
                    reference = hits(REFERENCE, alpha, where, direction)
                    d = None if arm == REFERENCE else delta(reference, mine, plan.resamples)
                    metrics.append(
                        {
                            "arm": arm,
                            "alpha": float(alpha),
                            "metric": metric,
                            "set": label,
                            "variant": variant,
                            "direction": direction,
                            "r1": round(sum(by_seed) / len(by_seed), 4),
                            "r1_by_seed": by_seed,
                            "delta": d,
                            "effect": effect(d),
                        }
                    )
            if plan.zeroshot is not None:
                metrics.append(_zeroshot_metric(plan, results, arm, alpha))
                images = _at(results, arm, plan.seeds[0], alpha, ("zeroshot",))["images"]
                queries[f"zeroshot:{Path(str(plan.zeroshot)).name}"] = {"i2t": images}
    return metrics, queries


def _grounding(plan: Plan, results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arm and alpha: the grounding AUROC on the planted world (mean over seeds) and its gap to the
    reference (no interval: a unit keeps the AUROC, not each sentence's score)."""
    if plan.grounding is None:
        return []

    def by_seed(arm: str, alpha: str) -> list[float]:
        return [float(results[f"{arm}/seed-{s}"]["alphas"][alpha]["grounding"]["auroc"]) for s in plan.seeds]

    out = []
    for alpha in (f"{a:g}" for a in plan.alphas):
        ref = by_seed(REFERENCE, alpha)
        for arm in (a.name for a in plan.arms):
            mine = by_seed(arm, alpha)
            mean = sum(mine) / len(mine)
            gap = None if arm == REFERENCE else round(mean - sum(ref) / len(ref), 4)
            out.append(
                {
                    "arm": arm,
                    "alpha": float(alpha),
                    "set": Path(plan.grounding).name,
                    "auroc": round(mean, 4),
                    "auroc_by_seed": mine,
                    "gap": gap,
                }
            )
    return out


def _arms(plan: Plan, arms_data: dict[str, dict[str, Any]], key: Any) -> list[dict[str, Any]]:
    """Per arm: what it kept of the base, and the planted faults it removed (where the base has a key)."""
    base_keys = set(arms_data[REFERENCE]["keys"])
    out = []
    for arm_spec in plan.arms:
        data = arms_data[arm_spec.name]
        out.append(
            {
                "name": arm_spec.name,
                "kind": arm_spec.kind,
                "curate": arm_spec.curate,
                "folder": data["folder"],
                "rows": data["rows"],
                "sentences": data["sentences"],
                "sentences_kept": data["sentences_kept"],
                "rows_removed": len(base_keys - set(data["keys"])),
                "faults": _faults(key, base_keys, set(data["keys"])),
                "sentence_faults": sentence_faults(key, set(data["keys"]), data.get("masked") or {}),
            }
        )
    return out


def summarise(
    plan: Plan,
    arms_data: dict[str, dict[str, Any]],
    results: dict[str, dict[str, Any]],
    reused: int = 0,
    timings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """ablation.json: every figure of the run, the deltas with their intervals."""
    from caption_debias.runner import manifest_stamp

    key = None
    if plan.planted is not None:
        from caption_debias.evaluate.planted import read_key

        key = read_key(plan.planted)
    metrics, queries = _metrics(plan, results)
    return {
        "reference": REFERENCE,
        "plan": {
            "path": plan.path,
            "base": plan.base,
            "planted": plan.planted,
            "train": {**plan.train, "steps": plan.steps, "seeds": plan.seeds},
            "eval": {
                "sets": [s.label for s in plan.eval_sets],
                "variants": plan.variants,
                "short": None if plan.short is None else plan.short.label,
                "zeroshot": plan.zeroshot,
                "grounding": plan.grounding,
                "alphas": plan.alphas,
                "resamples": plan.resamples,
            },
        },
        "arms": _arms(plan, arms_data, key),
        "metrics": metrics,
        "grounding": _grounding(plan, results),
        "queries": queries,
        "reused_units": reused,
        "timings": timings or {},
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        **manifest_stamp((timings or {}).get("total_s", 0.0)),
    }


def _delta_text(d: dict[str, Any] | None) -> str:
    if d is None:
        return "(reference)"
    if d.get("lo") is None:
        return f"{d['gap']:+.1f}"
    return f"{d['gap']:+.1f} [{d['lo']:+.1f}, {d['hi']:+.1f}]"


def _effect_text(t2i: dict[str, Any], i2t: dict[str, Any]) -> str:
    """'better (t2i, i2t)', 'worse (i2t)', both, or no measurable effect; empty for the reference."""
    if t2i["delta"] is None:
        return ""
    said = []
    for word in ("better", "worse"):
        directions = [d for d, m in (("t2i", t2i), ("i2t", i2t)) if m["effect"] == word]
        if directions:
            said.append(f"{word} ({', '.join(directions)})")
    return "; ".join(said) or NO_EFFECT


def _rows(summary: dict[str, Any], alpha: float) -> list[list[str]]:
    """arm x (set, variant) rows: recall@1 both ways with their deltas and what the interval says."""
    rows = []
    by = {}
    for m in summary["metrics"]:
        if m["alpha"] == alpha and m["metric"] != "zeroshot":
            by[(m["arm"], m["metric"], m["set"], m["variant"], m["direction"])] = m
    arms = {a["name"]: a for a in summary["arms"]}
    seen = []
    for (arm, metric, label, variant, _), _m in by.items():
        if (arm, metric, label, variant) not in seen:
            seen.append((arm, metric, label, variant))
    for arm, metric, label, variant in seen:
        if metric == "short" and (arm, "retrieval", label, variant) in seen:
            continue  # the default short-text set is a variant the table already shows
        t2i, i2t = (by[(arm, metric, label, variant, d)] for d in DIRECTIONS)
        what = f"{label} {variant}" + (" (short text)" if metric == "short" else "")
        rows.append(
            [
                arm,
                f"{arms[arm]['rows']:,}",
                f"{arms[arm]['sentences_kept']:,}",
                what,
                f"{t2i['r1']:.1f}",
                _delta_text(t2i["delta"]),
                f"{i2t['r1']:.1f}",
                _delta_text(i2t["delta"]),
                _effect_text(t2i, i2t),
            ]
        )
    return rows


HEADER = [
    "arm",
    "rows",
    "sentences kept",
    "captions",
    "t2i R@1",
    "t2i delta [95%]",
    "i2t R@1",
    "i2t delta [95%]",
    "effect",
]


def terminal_table(summary: dict[str, Any]) -> str:
    """The recall table per alpha, then the grounding and planted-fault tables, as text (rich renders them;
    plain text when captured)."""
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=170, color_system=None)
    alphas = summary["plan"]["eval"]["alphas"]
    seeds = len(summary["plan"]["train"]["seeds"])
    for alpha in alphas:
        title = f"recall@1 (%) and the delta against `{summary['reference']}`, {seeds} seed(s)"
        title += f", WiSE-FT alpha {alpha:g}" if len(alphas) > 1 else ""
        _print_table(console, title, HEADER, _rows(summary, alpha), ("arm", "captions", "effect"))
    grounding_title = "grounding AUROC on the planted world (swapped-in sentences against clean ones)"
    _print_table(console, grounding_title, GROUNDING_HEADER, _grounding_rows(summary), ("arm",))
    _print_table(
        console, "planted faults: rows the arm does not train on", FAULT_HEADER, _fault_rows(summary), ("arm",)
    )
    return buf.getvalue()


def _print_table(console: Any, title: str, header: list[str], rows: list[Any], left: tuple[str, ...]) -> None:
    """One rich table (nothing when it has no rows); the columns named in `left` left-aligned."""
    from rich.table import Table

    if not rows:
        return
    table = Table(title=title)
    for name in header:
        table.add_column(name, justify="left" if name in left else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)


FAULT_HEADER = [
    "arm",
    "rows removed",
    "faulty removed",
    "recall",
    "precision",
    "clean removed",
    "by kind (found / planted)",
    "sentences masked: hallucinated found / planted (recall, precision)",
]


GROUNDING_HEADER = ["arm", "alpha", "AUROC", "by seed", "gap"]


def _grounding_rows(summary: dict[str, Any]) -> list[list[str]]:
    return [
        [
            g["arm"],
            f"{g['alpha']:g}",
            f"{g['auroc']:.3f}",
            ", ".join(f"{a:.3f}" for a in g["auroc_by_seed"]),
            "(reference)" if g["gap"] is None else f"{g['gap']:+.3f}",
        ]
        for g in summary.get("grounding") or []
    ]


def _sentence_text(f: dict[str, Any] | None) -> str:
    if f is None:
        return "-"
    show = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    return f"{f['masked']}: {f['found']} / {f['hallucinated']} ({show(f['recall'])}, {show(f['precision'])})"


def _fault_rows(summary: dict[str, Any]) -> list[list[str]]:
    rows = []
    for arm in summary["arms"]:
        f = arm["faults"]
        if f is None:
            continue
        kinds = ", ".join(f"{k} {v['removed']}/{v['planted']}" for k, v in f["by_kind"].items() if v["planted"])
        show = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        rows.append(
            [
                arm["name"],
                str(f["removed"]),
                str(f["removed"] - f["clean_removed"]),
                show(f["recall"]),
                show(f["precision"]),
                str(f["clean_removed"]),
                kinds,
                _sentence_text(arm.get("sentence_faults")),
            ]
        )
    return rows


PANELS = (
    ("retrieval", "t2i", "text-to-image R@1"),
    ("retrieval", "i2t", "image-to-text R@1"),
    ("short", "t2i", "short-text t2i R@1"),
    ("short", "i2t", "short-text i2t R@1"),
    ("zeroshot", "i2t", "zero-shot top-1"),
)


COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
# An SVG written here, not matplotlib: importing it and drawing cost seconds a run, a bar chart needs none.
PANEL_W, PANEL_H, LEFT, TOP, BOTTOM = 860, 230, 60, 30, 40


def _panel_svg(summary: dict[str, Any], chosen: list[dict[str, Any]], title: str, y0: int) -> str:
    """One metric: the delta per caption set and variant, a bar per arm, its interval as a whisker."""
    esc = html_report.esc
    places = list(dict.fromkeys(f"{m['set']} {m['variant']}" for m in chosen))
    arms = list(dict.fromkeys(m["arm"] for m in chosen))
    deltas = {(m["arm"], f"{m['set']} {m['variant']}"): m["delta"] for m in chosen}
    values = [0.0]
    for d in deltas.values():
        values += [d["gap"], *(v for v in (d.get("lo"), d.get("hi")) if v is not None)]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.1 or 1.0
    lo, hi = lo - pad, hi + pad
    plot_h = PANEL_H - TOP - BOTTOM
    plot_w = PANEL_W - LEFT - 150  # the legend to the right

    def y(v: float) -> float:
        return y0 + TOP + (hi - v) / (hi - lo) * plot_h

    slot = plot_w / len(places)
    width = 0.8 * slot / len(arms)
    out = [
        f'<text x="{LEFT}" y="{y0 + 18}" font-size="14">{esc(title)}: minus {esc(summary["reference"])} (points)</text>',
        f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="#555"/>',
    ]
    for tick in sorted({round(lo + pad, 1), 0.0, round(hi - pad, 1)}):
        out.append(f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" font-size="11" text-anchor="end">{tick:+.1f}</text>')
    for p, place in enumerate(places):
        cx = LEFT + (p + 0.5) * slot
        out.append(
            f'<text x="{cx:.1f}" y="{y0 + PANEL_H - 18}" font-size="11" text-anchor="middle">{esc(place)}</text>'
        )
        for i, arm in enumerate(arms):
            d = deltas.get((arm, place))
            if d is None:
                continue
            x = cx + (i - len(arms) / 2) * width
            top, bottom = sorted((y(d["gap"]), y(0)))
            colour = COLOURS[i % len(COLOURS)]
            out.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{width * 0.95:.1f}" height="{max(bottom - top, 0.5):.1f}" '
                f'fill="{colour}"><title>{esc(arm)} {esc(place)}: {_delta_text(d)}</title></rect>'
            )
            if d.get("lo") is not None:
                mid = x + width * 0.475
                out.append(
                    f'<path d="M{mid:.1f} {y(d["lo"]):.1f}V{y(d["hi"]):.1f}M{mid - 3:.1f} {y(d["lo"]):.1f}h6'
                    f'M{mid - 3:.1f} {y(d["hi"]):.1f}h6" stroke="#222" fill="none"/>'
                )
    for i, arm in enumerate(arms):
        ly = y0 + TOP + 16 * i
        out.append(
            f'<rect x="{LEFT + plot_w + 16}" y="{ly}" width="12" height="12" fill="{COLOURS[i % len(COLOURS)]}"/>'
        )
        out.append(f'<text x="{LEFT + plot_w + 34}" y="{ly + 10}" font-size="12">{esc(arm)}</text>')
    return "".join(out)


def _plots(summary: dict[str, Any], alpha: float) -> str | None:
    """One SVG per alpha, a panel per metric (None when no arm has a delta)."""
    panels = []
    for metric, direction, title in PANELS:
        chosen = [
            m
            for m in summary["metrics"]
            if m["alpha"] == alpha and m["metric"] == metric and m["direction"] == direction and m["delta"] is not None
        ]
        if chosen:
            panels.append((chosen, title))
    if not panels:
        return None
    height = PANEL_H * len(panels)
    body = "".join(_panel_svg(summary, chosen, title, k * PANEL_H) for k, (chosen, title) in enumerate(panels))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {PANEL_W} {height}" width="{PANEL_W}" height="{height}" '
        f'style="max-width:100%;height:auto" role="img" font-family="sans-serif">{body}</svg>'
    )


def headline(summary: dict[str, Any]) -> str:
    """Each arm in one sentence: what it removed, and what the intervals say of the first set's captions."""
    alpha = summary["plan"]["eval"]["alphas"][0]
    lines = []
    for arm in summary["arms"]:
        if arm["name"] == summary["reference"]:
            continue
        ms = [
            m
            for m in summary["metrics"]
            if m["arm"] == arm["name"] and m["alpha"] == alpha and m["metric"] == "retrieval"
        ]
        better = [f"{m['set']} {m['variant']} {m['direction']}" for m in ms if m["effect"] == "better"]
        worse = [f"{m['set']} {m['variant']} {m['direction']}" for m in ms if m["effect"] == "worse"]
        said = []
        if better:
            said.append(f"better on {', '.join(better)}")
        if worse:
            said.append(f"worse on {', '.join(worse)}")
        verdict = "; ".join(said) if said else f"{NO_EFFECT} on any held-out recall@1"
        lines.append(
            f"<li><b>{html_report.esc(arm['name'])}</b> trained on {arm['rows']:,} rows ({arm['rows_removed']:,} "
            f"removed from the base), {arm['sentences_kept']:,} sentences: {html_report.esc(verdict)}.</li>"
        )
    return "<ul>" + "".join(lines) + "</ul>" if lines else ""


def write_report(summary: dict[str, Any], path: Path) -> None:
    """One self-contained page: the headline, a table and a plot per metric per alpha, the faults."""
    esc = html_report.esc
    plan = summary["plan"]
    train = plan["train"]
    parts = [
        f"<h1>caption-debias ablate</h1><p class='sub'>{len(summary['arms'])} arms, {len(train['seeds'])} seed(s), "
        f"{train['steps']} steps each from <code>{esc(train.get('model'))}</code> ({esc(train.get('recipe', 'debias'))}); "
        f"deltas against <code>{esc(summary['reference'])}</code> with paired bootstrap 95% intervals over the same "
        f"queries ({plan['eval']['resamples']} resamples, seeds averaged per query). An interval that crosses 0 is "
        f"{NO_EFFECT}.</p>",
        headline(summary),
    ]
    for alpha in plan["eval"]["alphas"]:
        suffix = f" (WiSE-FT alpha {alpha:g})" if len(plan["eval"]["alphas"]) > 1 else ""
        parts.append(f"<h2>Recall@1{suffix}</h2>{html_report.table(HEADER, _rows(summary, alpha))}")
        svg = _plots(summary, alpha)
        if svg is not None:
            parts.append(f"<h3>Each metric's delta against {esc(summary['reference'])}{suffix}</h3>")
            parts.append(f"<figure class='wide'>{svg}</figure>")
        zs = [m for m in summary["metrics"] if m["metric"] == "zeroshot" and m["alpha"] == alpha]
        if zs:
            rows = [[m["arm"], f"{m['r1']:.1f}", _delta_text(m["delta"]), m["effect"] or ""] for m in zs]
            head = ["arm", "top-1", "delta [95%]", "effect"]
            parts.append(f"<h3>Zero-shot top-1 (%){suffix}</h3>{html_report.table(head, rows)}")
    grounding = _grounding_rows(summary)
    if grounding:
        parts.append(
            "<h2>Grounding AUROC</h2>"
            + html_report.note(
                "Each arm's model scores the planted world's sentences (score's sentence grounding): the chance "
                "that a swapped-in sentence grounds lower than a clean detail sentence. Gaps have no interval."
            )
            + html_report.table(GROUNDING_HEADER, grounding)
        )
    faults = _fault_rows(summary)
    if faults:
        parts.append(
            "<h2>Planted faults</h2>"
            + html_report.note(
                "Rows of the base an arm does not train on, against the world's answer key (planted.json)."
            )
            + html_report.table(FAULT_HEADER, faults)
        )
    parts.append(
        "<h2>Full results</h2><p>Every figure (per seed, per query counts, timings, the plan) is in "
        "<a href='ablation.json'><code>ablation.json</code></a> beside this page.</p>"
    )
    path.write_text(html_report.page("caption-debias ablate", "".join(parts)), "utf-8")
