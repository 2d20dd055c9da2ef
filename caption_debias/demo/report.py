"""What a demo run shows: the gaps between the arms with their intervals and the verdict, the
terminal table, and report.html (a plain-language headline first, then the tables and plots)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from caption_debias import html_report
from caption_debias.demo.config import ARMS, GAP_VARIANTS, KEEP_GAP_MIN, REMOVE_GAP_MIN, SHIPPED_START, VARIANTS


def summarise(
    scores: dict[str, Any], ranks: dict[str, dict[str, Any]], resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """t2i R@1 per model and variant; debias - longclip on keep, remove and move, each with a
    paired bootstrap 95% interval over the test queries; this seed's part of the target."""
    from caption_debias.evaluate.metrics import paired_bootstrap

    def r1(model: str, variant: str) -> float:
        return float(scores[model][variant]["t2i"]["r1"])

    gaps = {}
    for variant in GAP_VARIANTS:
        hits = {arm: (ranks[arm][variant] < 1).tolist() for arm in ARMS}
        gap = paired_bootstrap(hits["longclip"], hits["debias"], resamples=resamples, seed=seed)
        gaps[variant] = {k: round(v, 2) for k, v in gap.items()}
    checks = {
        f"remove gap >= {REMOVE_GAP_MIN:g}": gaps["remove"]["gap"] >= REMOVE_GAP_MIN,
        f"keep gap >= {KEEP_GAP_MIN:g}": gaps["keep"]["gap"] >= KEEP_GAP_MIN,
    }
    # The target says debias reads past the summary where longclip does not: a remove gap whose
    # interval reaches zero or below cannot say that either way (a small world, a short run).
    judged = gaps["remove"]["lo"] > 0
    return {
        "t2i_r1": {m: {v: r1(m, v) for v in VARIANTS} for m in scores},
        "remove_drop": {arm: round(r1(arm, "keep") - r1(arm, "remove"), 2) for arm in ARMS},
        "gaps": gaps,  # debias - longclip, t2i R@1 points
        "checks": checks,
        "judged": judged,
        "target_met": judged and all(checks.values()),
        "queries": len(ranks[ARMS[0]][GAP_VARIANTS[0]]),
    }


def _gap_text(gap: dict[str, float]) -> str:
    return f"{gap['gap']:+.1f} [{gap['lo']:+.1f}, {gap['hi']:+.1f}]"


def gap_rows(summary: dict[str, Any]) -> list[list[str]]:
    """[variant, debias - longclip with its interval] rows, for the terminal and the report."""
    return [[v, _gap_text(summary["gaps"][v])] for v in GAP_VARIANTS]


def verdict(summary: dict[str, Any], preset_name: str = "full") -> str:
    """This seed's part of the target, or why it cannot be judged from this run."""
    checks = "; ".join(f"{name}: {'yes' if ok else 'no'}" for name, ok in summary["checks"].items())
    if not summary.get("judged", True):  # results written before `judged` existed were judged
        remove = summary["gaps"]["remove"]
        why = f"the remove gap's interval [{remove['lo']:+.1f}, {remove['hi']:+.1f}] reaches zero"
        if preset_name == "quick":
            why += "; the quick preset's test world is half the full one's, its intervals wider (run the full preset)"
        return f"{checks} -> target on this seed not judged: {why}"
    return f"{checks} -> target on this seed {'met' if summary['target_met'] else 'not met'}"


def terminal_table(results: dict[str, Any]) -> str:
    """The recall table as text (rich renders it; plain text when captured)."""
    from rich.console import Console
    from rich.table import Table

    summary = results["summary"]
    table = Table(title="text-to-image R@1 on the test world (hard-negative groups in the gallery)")
    table.add_column("model")
    for v in VARIANTS:
        table.add_column(v, justify="right")
    table.add_column("keep - remove", justify="right")
    for model, row in summary["t2i_r1"].items():
        drop = row["keep"] - row["remove"]
        table.add_row(model, *(f"{row[v]:.1f}" for v in VARIANTS), f"{drop:.1f}")
    gaps = Table(title="debias - longclip, t2i R@1 points [paired bootstrap 95% interval]")
    gaps.add_column("captions")
    gaps.add_column("gap", justify="right")
    for row in gap_rows(summary):
        gaps.add_row(*row)
    buf = io.StringIO()
    console = Console(file=buf, width=100, color_system=None)
    console.print(table)
    console.print(gaps)
    console.print(f"{verdict(summary, results['config']['preset'])}; total {results['total_s']:.0f} s")
    return buf.getvalue()


def _loss_curves_png(curves: dict[str, list[dict[str, Any]]]) -> bytes:
    """Each arm's long-caption loss (the one term both recipes share), labelled at its end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from caption_debias.plotting import legend_outside

    fig, ax = plt.subplots(figsize=(8, 3.4), dpi=100)
    for name in ARMS:
        points = [(r["step"], r["loss_long"]) for r in curves.get(name, []) if r.get("loss_long") is not None]
        if points:
            ax.plot(*zip(*points), label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("long-caption loss")
    ax.grid(True, alpha=0.3)
    legend_outside(ax)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _grounding_html(grounding: dict[str, Any] | None, world: Path) -> str:
    """The grounding section: AUROC per model, then a few hallucinated captions, each sentence
    shaded by every model's grounding, the swapped-in sentence outlined."""
    import base64

    if not grounding:
        return ""
    esc = html_report.esc
    rows = [
        [name, f"{auroc:.3f}", grounding["counts"][name]["hallucinated"], grounding["counts"][name]["clean_detail"]]
        for name, auroc in grounding["auroc"].items()
    ]
    planted = grounding["planted"]
    blocks = []
    for example in grounding["examples"]:
        png = (world / example["image"]).read_bytes() if (world / example["image"]).is_file() else b""
        thumb = (
            f'<img alt="{esc(example["key"])}" style="width:128px;image-rendering:pixelated;margin:0" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
        )
        lines = "".join(
            f"<p style='margin:4px 0'><b>{esc(name)}</b>: "
            f"{html_report.shaded_sentences(example['sentences'], scores, marked=example['sentence'])}</p>"
            for name, scores in example["grounding"].items()
        )
        blocks.append(
            f"<div style='display:flex;gap:14px;align-items:flex-start;background:#fff;border:1px solid #e3e6ea;"
            f"border-radius:10px;padding:10px;margin:0 0 10px'>{thumb}<div><code>{esc(example['key'])}</code>"
            f"{lines}</div></div>"
        )
    return f"""<h2>Sentence grounding on planted hallucinations</h2>
<p>A held-out world of {grounding["rows"]} scenes (<code>synth --plant</code>, its own random stream): {planted["hallucinated"]}
captions have one detail sentence swapped for a detail sentence of a scene of another group (it names objects
the picture lacks), {planted["mismatched"]} rows carry another image's caption, {planted["redrawn"]} are re-drawn copies.
Each model scores it (<code>caption-debias score</code>); AUROC of low <code>sentence_grounding</code> for the
swapped sentences against the clean detail sentences (0.5 is chance, 1 finds every one).</p>
{html_report.table(["model", "AUROC", "swapped sentences", "clean detail sentences"], rows)}
<h3>Hallucinated captions, each sentence shaded by its grounding</h3>
{html_report.note("Green: the sentence fits its own picture better than other pictures; red: worse (grounding is the z-score of its similarity to its image against a seeded sample of other images; full colour at +-3, the value in each tooltip). The swapped-in sentence is outlined.")}
{"".join(blocks)}"""


def _result_sentence(summary: dict[str, Any]) -> str:
    """The remove gap in words: what each arm scored, the gap and whether its interval can tell them apart."""
    r1, remove = summary["t2i_r1"], summary["gaps"]["remove"]
    scores = (
        f"With the summary sentence removed, <code>debias</code> finds the right picture for "
        f"{r1['debias']['remove']:.1f}% of the test captions and <code>longclip</code> for "
        f"{r1['longclip']['remove']:.1f}%: a gap of {remove['gap']:+.1f} points (95% interval "
        f"[{remove['lo']:+.1f}, {remove['hi']:+.1f}])."
    )
    if not summary.get("judged", True):
        return f"{scores} The interval reaches zero, so on that this run cannot tell the two arms apart."
    return f"{scores} The interval lies above zero: <code>debias</code> reads the detail sentences where <code>longclip</code> leans on the summary."


def headline(results: dict[str, Any]) -> str:
    """The report's opening in plain words: the result, what was trained, what keep / remove /
    move mean, what the gap shows; the tables follow."""
    cfg, summary = results["config"], results["summary"]
    start = (
        "the shipped <code>demo-start</code>, a small model trained as CLIP is, on short captions at 77 tokens"
        if cfg["start"] == SHIPPED_START
        else f"a <code>{html_report.esc(cfg['model'])}</code> model trained here on short captions at 77 tokens"
    )
    keep, move = summary["gaps"]["keep"], summary["gaps"]["move"]
    quick_untold = cfg["preset"] == "quick" and not summary.get("judged", True)
    untold = " (the quick preset's smaller test world cannot tell: run the full preset)" if quick_untold else ""
    return f"""<div class="headline" style="background:#fff;border:1px solid #e3e6ea;border-radius:10px;padding:4px 18px;margin:0 0 18px">
<p><b>The result.</b> {_result_sentence(summary)} With the summary moved to the fourth place the gap is
{move["gap"]:+.1f} [{move["lo"]:+.1f}, {move["hi"]:+.1f}]; on full captions, {keep["gap"]:+.1f}
[{keep["lo"]:+.1f}, {keep["hi"]:+.1f}]{untold}.</p>
<p><b>What was trained.</b> Two copies of one start model ({start}) were each fine-tuned for
{cfg["finetune_steps"]} steps on {cfg["train_images"]:,} synthetic scenes whose long captions open with a
one-sentence summary and then give details: <code>longclip</code> with Long-CLIP's recipe (the whole caption,
plus its first sentence as a short text) and <code>debias</code> with DeBias-CLIP's (the whole caption, plus
the caption without its summary, its other sentences sub-sampled and shifted to a random position).</p>
<p><b>How they were tested.</b> Each model is given a caption of a test scene and must find that scene's
picture among {cfg["test_images"]:,}, which come in groups of {cfg["group_size"]} that differ only in what the
detail sentences say. The caption is given three ways: <b>keep</b>, as written; <b>remove</b>, with the
summary sentence dropped, so only the details are left; <b>move</b>, with the summary moved to the fourth
place. The score is text-to-image R@1: the share of captions whose own picture ranks first.</p>
<p><b>What the gap shows.</b> Each gap is <code>debias</code> minus <code>longclip</code> on the same
captions, with a 95% interval over the test captions. A model that leans on the opening summary (the
shortcut Long-CLIP's recipe learns) loses most when the summary is removed or moved; a remove gap whose
interval lies above zero says <code>debias</code> reads the detail sentences where <code>longclip</code> does
not, and the keep gap says whether that cost anything on full captions.</p>
</div>"""


def write_report(results: dict[str, Any], path: Path, probe_dir: Path) -> None:
    """One self-contained HTML page: the recall table and gaps, loss curves, the probe's plots,
    the dataset statistics as the `stats` report shows them."""
    from caption_debias.stats.report import html_body, report_figures

    summary = results["summary"]
    cfg = results["config"]
    rows = [
        [m] + [f"{r[v]:.1f}" for v in VARIANTS] + [f"{r['keep'] - r['remove']:.1f}"]
        for m, r in summary["t2i_r1"].items()
    ]
    titles = {"attention": "Attention by token position", "filler": "Filler prefix probe"}
    plots = "".join(
        f"<h3>{html_report.esc(titles.get(p.stem, p.stem))}</h3>{html_report.figure(p.read_bytes(), p.stem, wide=True)}"
        for p in sorted(probe_dir.glob("*.png"))
    )
    loss_curves = html_report.figure(_loss_curves_png(results["curves"]), "long-caption loss", wide=True)
    stats = results["stats"]
    # the stats report's own sections, one heading level down inside this page
    sections = html_body(stats, report_figures(stats), title="").replace("<h2>", "<h3>").replace("</h2>", "</h3>")
    stats_html = f"<h2>Dataset statistics</h2>{sections}"
    grounding_html = _grounding_html(results.get("grounding"), path.parent / "planted" / "world")
    start_note = (
        "the shipped <code>demo-start</code> (short captions at context 77, docs/demo.md)"
        if cfg["start"] == SHIPPED_START
        else f"a stage-1 <code>short</code> run of {html_report.esc(cfg['model'])} ({cfg['stage1_steps']} steps)"
    )
    body = f"""<h1>caption-debias demo (seed {cfg["seed"]}, preset {html_report.esc(cfg["preset"])})</h1>
<p class="sub">world <code>{html_report.esc(cfg["world"])}</code>, {cfg["train_images"]} train / {cfg["test_images"]}
test images in groups of {cfg["group_size"]}; both arms start from {start_note} and fine-tune
{cfg["finetune_steps"]} steps; {results["total_s"]:.0f} s in all</p>
{headline(results)}
<h2>Retrieval, text-to-image R@1 (%)</h2>
{html_report.table(["model", *VARIANTS, "keep - remove"], rows)}
<h3>debias minus longclip (t2i R@1 points, paired bootstrap 95% interval over {summary["queries"]} test queries)</h3>
{html_report.table(["captions", "gap"], gap_rows(summary))}
<p>{html_report.esc(verdict(summary, cfg["preset"]))}.</p>
<h2>Long-caption loss</h2>{loss_curves}
{html_report.note("The long-caption term is the one both recipes minimise (the full caption against the image); their totals add different second terms and are not comparable.")}
{grounding_html}
<h2>Probe (start and both arms)</h2>{plots or "<p>(the probe wrote no plots)</p>"}
{stats_html}
<h2>Full results</h2>
<p>Every figure of this run (recall tables, gaps and intervals, probe, loss curves, timings, config) is in
<a href="results.json"><code>results.json</code></a> beside this page.</p>"""
    path.write_text(html_report.page("caption-debias demo", body), "utf-8")
