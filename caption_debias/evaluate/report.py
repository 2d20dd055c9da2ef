"""Presenting results: rich tables for the terminal, and the probe report (JSON, PNG, HTML)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from caption_debias import html_report
from caption_debias.plotting import legend_outside

PROBE_JSON = "probe.json"
ATTENTION_PNG = "attention.png"
FILLER_PNG = "filler.png"
PROBE_HTML = "index.html"


def _triple(d: dict[str, float]) -> str:
    return " / ".join(f"{d[k]:.1f}" for k in ("r1", "r5", "r10"))


def _retrieval_rows(results: dict[str, dict[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for per_bench in results.values():
        for bench, per_variant in per_bench.items():
            for variant in per_variant:
                if (bench, variant) not in rows:
                    rows.append((bench, variant))
    return rows


def _cells(per_bench: dict[str, dict[str, Any]], bench: str, variant: str) -> list[str]:
    r = per_bench.get(bench, {}).get(variant)
    return [_triple(r["t2i"]), _triple(r["i2t"])] if r else ["-", "-"]


def _wrapped(name: str, width: int) -> str:
    """A model label cut into lines of the figures' width: a long run path never widens its column."""
    return "\n".join(name[i : i + width] for i in range(0, len(name), width)) or name


def _side_by_side(results: dict[str, dict[str, dict[str, Any]]], title: str):
    from rich.table import Table

    rows = _retrieval_rows(results)
    width = max([len("T2I R@1/5/10")] + [len(c) for m in results.values() for b, v in rows for c in _cells(m, b, v)])
    table = Table(title=title)
    table.add_column("benchmark", no_wrap=True)
    table.add_column("variant", no_wrap=True)
    for model in results:
        table.add_column(f"{_wrapped(model, width)}\nT2I R@1/5/10", justify="right", no_wrap=True)
        table.add_column(f"{_wrapped(model, width)}\nI2T R@1/5/10", justify="right", no_wrap=True)
    for bench, variant in rows:
        table.add_row(bench, variant, *[c for per_bench in results.values() for c in _cells(per_bench, bench, variant)])
    return table


def _one_per_model(results: dict[str, dict[str, dict[str, Any]]], title: str):
    """One table per model, in the same row order, its label in the title: as wide as one model's
    figures, whatever the model is called."""
    from rich.console import Group
    from rich.table import Table

    rows = _retrieval_rows(results)
    tables = []
    for model, per_bench in results.items():
        table = Table(title=f"{title}: {model}", title_justify="left")
        table.add_column("benchmark", overflow="fold")
        table.add_column("variant", overflow="fold")
        table.add_column("T2I R@1/5/10", justify="right", no_wrap=True)
        table.add_column("I2T R@1/5/10", justify="right", no_wrap=True)
        for bench, variant in rows:
            table.add_row(bench, variant, *_cells(per_bench, bench, variant))
        tables.append(table)
    return Group(*tables)


class RetrievalTable:
    """The models side by side when that fits the terminal's width, else one table per model: a
    rich table made wider than the terminal squeezes its columns to nothing."""

    def __init__(self, results: dict[str, dict[str, dict[str, Any]]], title: str) -> None:
        self.results, self.title = results, title

    def __rich_console__(self, console, options):
        from rich.measure import Measurement

        wide = _side_by_side(self.results, self.title)
        natural = Measurement.get(console, options.update_width(1 << 16), wide).maximum  # unclamped
        if natural <= options.max_width:
            yield wide
        else:
            yield _one_per_model(self.results, self.title)


def retrieval_table(results: dict[str, dict[str, dict[str, Any]]], title: str = "Retrieval recall@1/5/10 (%)"):
    """results: {model: {benchmark: {variant: {t2i, i2t}}}} -> a rich renderable (RetrievalTable)."""
    return RetrievalTable(results, title)


def zeroshot_table(results: dict[str, dict[str, dict[str, float]]]):
    from rich.table import Table

    table = Table(title="Zero-shot classification accuracy (%)")
    for col in ("model", "data", "top-1", "top-5", "classes", "images"):
        table.add_column(col, justify="right" if col not in ("model", "data") else "left")
    for model, per_data in results.items():
        for name, r in per_data.items():
            table.add_row(model, name, f"{r['top1']:.1f}", f"{r['top5']:.1f}", str(r["classes"]), str(r["images"]))
    return table


def plot_attention(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for label, r in result["models"].items():
        mean = r["attention"]["mean"]
        pts = [(p, v) for p, v in enumerate(mean) if v is not None and v > 0]
        if pts:
            ax.plot([p for p, _ in pts], [v for _, v in pts], label=label, lw=1.5)
    ax.set_yscale("log")
    ax.set_xlabel("token position")
    ax.set_ylabel("mean attention from the pooled (EOT) query")
    ax.set_title(f"Attention by token position, {result['data']['name']}")
    ax.grid(True, which="both", alpha=0.3)
    legend_outside(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_filler(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for label, r in result["models"].items():
        curve = r["filler_curve"]
        ax.plot(curve["n"], curve["t2i_r1"], marker="o", label=f"{label} T2I")
        ax.plot(curve["n"], curve["i2t_r1"], marker="s", ls="--", label=f"{label} I2T")
    ax.set_xlabel('N copies of "This is a photo." before the first two sentences')
    ax.set_ylabel("R@1 (%)")
    ax.set_title("Filler prefix probe")
    ax.grid(True, alpha=0.3)
    legend_outside(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _variant_table(result: dict[str, Any], key: str, variants: list[str]) -> str:
    labels = list(result["models"])
    header = ["variant"] + [f"{m}\n{d} R@1/5/10" for m in labels for d in ("T2I", "I2T")]
    rows = [[v] + [_triple(result["models"][m][key][v][d]) for m in labels for d in ("t2i", "i2t")] for v in variants]
    return html_report.table(header, rows, row_headers=True)


def _filler_table(result: dict[str, Any]) -> str:
    labels = list(result["models"])
    ns = result["models"][labels[0]]["filler_curve"]["n"]
    rows = []
    for m in labels:
        c = result["models"][m]["filler_curve"]
        for d in ("t2i_r1", "i2t_r1"):
            rows.append([f"{m} {d.split('_')[0].upper()} R@1"] + [f"{x:.1f}" for x in c[d]])
    return html_report.table([""] + [f"N={n}" for n in ns], rows, row_headers=True)


def write_probe_report(result: dict[str, Any], out: Path) -> dict[str, str]:
    """probe.json, attention.png (log scale), filler.png and a self-contained index.html."""
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "json": out / PROBE_JSON,
        "attention_png": out / ATTENTION_PNG,
        "filler_png": out / FILLER_PNG,
        "html": out / PROBE_HTML,
    }
    plot_attention(result, files["attention_png"])
    plot_filler(result, files["filler_png"])
    d = result["data"]
    e = html_report.esc
    short_notes = "".join(
        f"<li>{e(m)}: captions too short for a variant (they degrade, see docs/evaluation.md): "
        f"{e(json.dumps({k: v for k, v in r['too_short'].items() if v}))}</li>"
        for m, r in result["models"].items()
        if any(r["too_short"].values())
    )
    filler_png = html_report.figure(files["filler_png"].read_bytes(), "filler curve")
    attention_png = html_report.figure(files["attention_png"].read_bytes(), "attention by position")
    body = f"""<h1>Does the model read past the first sentence?</h1>
<p>Data: {e(d["definition"])} ({d["images"]} images, {d["captions"]} captions).
Models: {", ".join(e(m) for m in result["models"])}.</p>
<h2>Keep / move / remove (full captions)</h2>
<p>keep: as is; move: first sentence moved to 4th place; remove: first sentence dropped.
Paper, DOCCI test, T2I R@1 keep/move/remove: Long-CLIP B/16 71.4 / 61.7 / 54.3; DeBias-CLIP B/16 80.0 / 76.5 / 66.7.</p>
{_variant_table(result, "position", ["keep", "move", "remove"])}
<h2>Sentence order</h2>
<p>first2: s1 s2; swap2: s2 s1; first: s1 only. Paper, DOCCI I2T R@1, CLIP: 51.9 / 49.2 / 42.4.</p>
{_variant_table(result, "order", ["first2", "swap2", "first"])}
<h2>Filler prefix</h2>
<p>N copies of "This is a photo." before the first two sentences. Paper, DOCCI test, CLIP B/16 T2I R@1 for
N = 0..5: 51.4 51.4 50.3 50.0 49.2 47.6.</p>
{_filler_table(result)}
{filler_png}
<h2>Attention by token position</h2>
<p>Mean attention weight from the pooled (EOT) query to each position, averaged over heads,
layers and the captions reaching that position (log scale). In the paper, Long-CLIP decays about three
orders of magnitude from the first to the last positions; DeBias-CLIP stays nearly flat after position 40.</p>
{attention_png}
<ul>{short_notes}</ul>"""
    page = html_report.page(f"caption-debias probe: {d['name']}", body)
    files["html"].write_text(page, "utf-8")
    saved = {**result, "files": {k: str(v) for k, v in files.items()}}
    files["json"].write_text(json.dumps(saved, indent=2), "utf-8")
    return {k: str(v) for k, v in files.items()}
