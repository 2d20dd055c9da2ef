"""Write the stats dict out: stats.json, report.md (+ plots/*.png), a self-contained
report.html (built with caption_debias/html_report.py) and a rich terminal table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from caption_debias import html_report
from caption_debias import md_text as md
from caption_debias.errors import UserError
from caption_debias.stats import curation, scores
from caption_debias.stats import samples as sample_rows

MAX_PLOT_GROUPS = 8  # more groups than this make unreadable side-by-side plots

FIGURE_TITLES = {
    "tokens_per_caption": "Tokens per caption",
    "sentences_per_caption": "Sentences per caption",
    "first_sentence_tokens": "First-sentence length",
    "summary_positions": "Where summaries sit",
    "opening_phrases": "Top opening phrases",
}


def comparison_groups(stats: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The groups shown side by side: the folders (split by --by value when given), else the
    --by values, else the single dataset."""
    datasets = stats["datasets"]
    if len(datasets) > 1:
        if "by" in stats:
            return [(f"{d['name']} · {v}", g) for d in datasets for v, g in d["by"].items()]
        return [(d["name"], d) for d in datasets]
    if "by" in stats and stats["by"]["groups"]:
        return list(stats["by"]["groups"].items())
    return [(datasets[0]["name"], stats)]


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, int) or float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.{digits}f}"


# (label, getter, formatter) rows of every summary table
ROWS = [
    ("records", lambda g: g["records"], _num),
    ("sentences / caption, mean", lambda g: g["sentences_per_caption"]["mean"], _num),
    ("sentences / caption, median", lambda g: g["sentences_per_caption"]["median"], _num),
    ("sentences / caption, p95", lambda g: g["sentences_per_caption"]["p95"], _num),
    ("single-sentence captions", lambda g: g["sentences_per_caption"]["single_sentence"], _pct),
    ("tokens / caption, mean", lambda g: g["tokens_per_caption"]["mean"], _num),
    ("tokens / caption, median", lambda g: g["tokens_per_caption"]["median"], _num),
    ("tokens / caption, p95", lambda g: g["tokens_per_caption"]["p95"], _num),
    ("tokens / caption, max", lambda g: g["tokens_per_caption"]["max"], _num),
    ("longer than 77 tokens (CLIP)", lambda g: g["tokens_per_caption"]["over_77"], _pct),
    ("longer than 248 tokens (Long-CLIP)", lambda g: g["tokens_per_caption"]["over_248"], _pct),
    ("first sentence tokens, mean", lambda g: g["first_sentence_tokens"]["mean"], _num),
    ("first sentence tokens, median", lambda g: g["first_sentence_tokens"]["median"], _num),
    ("summary opens the caption", lambda g: g["opening_summary_rate"], _pct),
    ("summary closes the caption", lambda g: g["closing_summary_rate"], _pct),
    ("summary in the middle", lambda g: g["summary_position"]["middle"], _pct),
    ("no summary sentence", lambda g: g["summary_position"]["none"], _pct),
    ("Long-CLIP split('. ')[0] = first sentence", lambda g: g["longclip_split_agreement"], _pct),
]


def _table_groups(stats: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    groups = comparison_groups(stats)
    if len(groups) > 1:
        return [("all", stats)] + groups
    return groups


def summary_table(stats: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the figures table (first column: the figure; then one per group)."""
    groups = _table_groups(stats)
    header = ["figure"] + [label for label, _ in groups]
    rows = [[label] + [fmt(get(g)) for _, g in groups] for label, get, fmt in ROWS]
    return header, rows


# The terminal table: one row per group, a short header per column, each a figure of ROWS (by its label)
_FIGURES = {label: (get, fmt) for label, get, fmt in ROWS}
TERMINAL_COLUMNS = [
    (header, *_FIGURES[label])
    for header, label in [
        ("records", "records"),
        ("tokens\nmedian", "tokens / caption, median"),
        ("tokens\n>77", "longer than 77 tokens (CLIP)"),
        ("tokens\n>248", "longer than 248 tokens (Long-CLIP)"),
        ("sents\nmedian", "sentences / caption, median"),
        ("sum.\nopens", "summary opens the caption"),
        ("sum.\ncloses", "summary closes the caption"),
    ]
]


def print_table(stats: dict[str, Any], console=None) -> None:
    """A short rich table of the headline figures on the terminal, one row per group."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(
        title="caption-debias stats",
        title_style="bold",
        header_style="bold cyan",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
        caption="CLIP tokens with start/end; sum. = summary sentence",
    )
    table.add_column("group", overflow="fold", min_width=10)
    for name, _, _ in TERMINAL_COLUMNS:
        table.add_column(name, justify="right", no_wrap=True)
    groups = _table_groups(stats)
    for i, (label, g) in enumerate(groups):
        table.add_row(label, *[fmt(get(g)) for _, get, fmt in TERMINAL_COLUMNS], end_section=len(groups) > 1 and i == 0)
    console.print(table)
    top = stats["opening_phrases"][:3]
    if top:
        console.print("top opening phrases: " + ", ".join(f'"{p["phrase"]}" {_pct(p["fraction"])}' for p in top))
    for note in notes(stats):
        console.print(f"[yellow]note:[/] {note}")
    if stats["rejects_by_reason"]:
        console.print("rejects: " + ", ".join(f"{r} {n:,}" for r, n in stats["rejects_by_reason"].items()))


def notes(stats: dict[str, Any]) -> list[str]:
    """Caveats a reader of the figures must know."""
    out = []
    for d in stats["datasets"]:
        prepared = d.get("prepared_with", {})
        if d["records"] == 0:
            out.append(f"{d['name']}: no records (see the rejects)")
        if prepared.get("complete") is False:
            out.append(f"{d['name']}: the manifest says an input was cut off; figures cover what was read")
        if prepared.get("summary") == "none":
            out.append(f"{d['name']}: prepared with --summary none, so no sentence is flagged as a summary")
    one = stats.get("one_dataset")
    if one:
        out.append(
            f"these {one['passes']} folders are passes of one dataset ({one['last_pass']} is the last): each column "
            f"counts its own pass's rows, the figures over all folders count a row once per pass it is in, and the "
            f"removal funnel is drawn once, for {one['last_pass']}"
        )
    out += stats.get("invalid", [])  # manifest fields that are not numbers: shown as not available
    if len(comparison_groups(stats)) > MAX_PLOT_GROUPS:
        out.append(
            f"plots show the first {MAX_PLOT_GROUPS} of {len(comparison_groups(stats))} groups; the tables list all"
        )
    return out


def _prepared_line(stats: dict[str, Any]) -> str:
    parts = []
    for d in stats["datasets"]:
        p = d.get("prepared_with", {})
        parts.append(f"{d['name']}: segmenter {p.get('segmenter') or '?'}, summary rule {p.get('summary') or '?'}")
    return "; ".join(parts)


def _phrase_rows(stats: dict[str, Any], groups) -> tuple[list[str], list[list[str]]]:
    depth = max((len(g["opening_phrases"]) for _, g in groups), default=0)
    header = ["#"] + [label for label, _ in groups]
    rows = []
    for i in range(depth):
        row = [str(i + 1)]
        for _, g in groups:
            p = g["opening_phrases"][i] if i < len(g["opening_phrases"]) else None
            row.append(f"{p['phrase']} ({_pct(p['fraction'])})" if p else "")
        rows.append(row)
    return header, rows


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    esc = md.text  # every cell is text (a caption's phrase, a name, a path): never markup
    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(stats: dict[str, Any], figure_files: dict[str, str], samples: list | None = None) -> str:
    header, rows = summary_table(stats)
    groups = _table_groups(stats)
    parts = [
        "# Dataset statistics",
        "",
        "Folders: " + ", ".join(md.code(f) for f in stats["folders"]),
        "",
        "Tokens are CLIP BPE tokens; caption lengths include the start and end tokens, first-sentence lengths do not.",
        "",
        *[f"> **Note:** {md.text(n)}\n" for n in notes(stats)],
        "## Figures",
        "",
        _md_table(header, rows),
        "",
        f"Prepared with {md.text(_prepared_line(stats))}.",
        "",
        "## Top opening phrases",
        "",
        _md_table(*_phrase_rows(stats, groups)),
        "",
        "## Rejects by reason",
        "",
        _md_table(["reason", "records"], [[r, f"{n:,}"] for r, n in stats["rejects_by_reason"].items()])
        if stats["rejects_by_reason"]
        else "No rejects.",
        "",
        "## Plots",
        "",
    ]
    for name, path in figure_files.items():
        if name in FIGURE_TITLES:
            parts += [f"![{FIGURE_TITLES[name]}]({path})", ""]
    parts += curation_markdown_section(stats, {n: p for n, p in figure_files.items() if n in curation.FIGURE_TITLES})
    parts += scores_markdown_section(stats, {n: p for n, p in figure_files.items() if n in scores.FIGURE_TITLES})
    parts += sample_rows.markdown_section(samples or [])
    return "\n".join(parts)


def render_html(stats: dict[str, Any], figures: dict[str, bytes], samples: list | None = None) -> str:
    return html_report.page("caption-debias stats", html_body(stats, figures, samples=samples))


def _records_card(stats: dict[str, Any]) -> tuple[str, str]:
    """The rows the folders hold: passes of one dataset (each read by the next one given) are that
    dataset's rows in its last pass, not a sum that counts the same rows once per pass."""
    one = stats.get("one_dataset")
    if one:
        return _num(one["records"]), f"records in {one['last_pass']}, the last of {one['passes']} passes of one dataset"
    n = len(stats["datasets"])
    return _num(stats["records"]), "records" + (f" in {n} folders" if n > 1 else "")


def html_body(
    stats: dict[str, Any],
    figures: dict[str, bytes],
    title: str = "<h1>Dataset statistics</h1>",
    samples: list | None = None,
) -> str:
    """The report's content without the page around it (the demo report embeds it); `samples`
    (stats/samples.py collect()) adds the Samples section."""
    e = html_report.esc
    groups = _table_groups(stats)
    tp = stats["tokens_per_caption"]
    cards = [_records_card(stats)] + [
        (_num(tp["median"]), "median tokens per caption"),
        (_pct(tp["over_77"]), "longer than CLIP's 77 tokens"),
        (_pct(tp["over_248"]), "longer than Long-CLIP's 248"),
        (_num(stats["sentences_per_caption"]["median"]), "median sentences per caption"),
        (_pct(stats["opening_summary_rate"]), "open with a summary"),
    ]
    wide_phrases = len(comparison_groups(stats)) > 1
    plots = [
        html_report.figure(png, FIGURE_TITLES[name], wide=name == "opening_phrases" and wide_phrases)
        for name, png in figures.items()
        if name in FIGURE_TITLES  # the curation figures have their own section
    ]
    rejects = (
        html_report.table(["reason", "records"], [[r, f"{n:,}"] for r, n in stats["rejects_by_reason"].items()])
        if stats["rejects_by_reason"]
        else html_report.note("No rejects recorded in the manifest.")
    )
    header, rows = summary_table(stats)
    folders = ", ".join(f"<code>{e(f)}</code>" for f in stats["folders"])
    by = f" · grouped by <b>{e(stats['by']['field'])}</b>" if "by" in stats else ""
    figures_note = f"""Tokens are CLIP BPE tokens. Caption lengths include the start and end tokens
(CLIP reads 77, Long-CLIP 248); first-sentence lengths do not. A summary sentence is one the
prepare step flagged in <code>summary_mask</code>; a one-sentence caption counts as opening only.
Prepared with {e(_prepared_line(stats))}."""
    phrases_note = (
        f"The first {stats['options']['phrase_words']} lowercased words of the first sentence, punctuation dropped."
    )
    return f"""{title}
<p class="sub">{folders}{by}</p>
{"".join(html_report.warn(n) for n in notes(stats))}{html_report.cards(cards)}
<h2>Plots</h2>
{html_report.figures(plots)}
<h2>Figures</h2>
{html_report.table(header, rows)}
{html_report.note(figures_note)}
<h2>Top opening phrases</h2>
{html_report.table(*_phrase_rows(stats, groups), align_left=True)}
{html_report.note(phrases_note)}
<h2>Rejects by reason</h2>
{rejects}
{curation_html_section(stats, {n: p for n, p in figures.items() if n in curation.FIGURE_TITLES})}
{scores_html_section(stats, {n: p for n, p in figures.items() if n in scores.FIGURE_TITLES})}
{sample_rows.html_section(samples or [])}"""


def write_report(
    stats: dict[str, Any], report_dir: str | Path, *, samples: bool = True, image_root: str | None = None
) -> dict[str, Path]:
    """Write stats.json, report.md, plots/*.png and report.html into report_dir (locked while written).

    `samples`: add the Samples section (rows per source, removals per reason, thumbnails from
    `image_bytes` or the images under `image_root`, default the root the manifests record), for
    folders here or on a store alike."""
    from caption_debias import storage
    from caption_debias.locking import folder_lock

    out = storage.as_path(report_dir)
    storage.refuse_overlap(stats.get("folders") or [], out)
    with folder_lock(out, "stats"):
        try:
            (out / "plots").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{out}: cannot create the report folder ({exc.strerror})") from None
        rows = _samples(stats, image_root) if samples else None
        return _write_report(stats, out, rows)


def report_figures(stats: dict[str, Any]) -> dict[str, bytes]:
    """{name: PNG} of every plot the report shows."""
    from caption_debias.stats.plots import all_figures, curation_figures, score_figures

    groups = comparison_groups(stats)
    if len(groups) > MAX_PLOT_GROUPS:
        groups = groups[:MAX_PLOT_GROUPS]  # the tables still list every group
    figures = all_figures(groups)
    figures.update(curation_figures(stats))
    figures.update(score_figures(stats))
    return figures


def _samples(stats: dict[str, Any], image_root: str | None) -> list | None:
    return sample_rows.collect(stats["folders"], image_root)


def _write_report(stats: dict[str, Any], out: Path, samples: list | None = None) -> dict[str, Path]:
    figures = report_figures(stats)
    files = {"stats": out / "stats.json", "markdown": out / "report.md", "html": out / "report.html"}
    files["stats"].write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    figure_files = {}
    for name, png in figures.items():
        (out / "plots" / f"{name}.png").write_bytes(png)
        figure_files[name] = f"plots/{name}.png"
    files["markdown"].write_text(render_markdown(stats, figure_files, samples), encoding="utf-8")
    files["html"].write_text(render_html(stats, figures, samples), encoding="utf-8")
    return files


# ---------------------------------------------------------------- curated folders


def _funnel_rows(c: dict) -> list[list[str]]:
    rows = []
    for s in c["funnel"]:
        if "rows" in s:
            rows.append([s["step"], "", _num(s["rows"])])
        else:
            rows.append([s["step"], _num(s.get("removed")), _num(s.get("left"))])
    return rows


def _coverage_rows(c: dict) -> list[list[str]]:
    rows = []
    for folder, g in (c.get("image_coverage") or {}).items():
        examples = "; ".join(p for st in ("missing", "unreadable") for p in (g.get("examples") or {}).get(st, []))
        rows.append(
            [
                folder,
                _num(g.get("present")),
                _num(g.get("missing")),
                _num(g.get("unreadable")),
                _num(g.get("not_checked")),
                examples,
            ]
        )
    return rows


COVERAGE_HEADER = ["image folder", "present", "missing", "unreadable", "not checked", "examples"]
LINEAGE_HEADER = ["pass", "command", "folder", "read", "removed", "written", "what it did"]
FLAGS = {  # a curate pass's thresholds (lineage.curate_thresholds) as the flags that set them
    "min_clip_score": "--min-clip-score",
    "keep_top_alignment": "--keep-top-alignment",
    "drop_ungrounded": "--drop-ungrounded",
    "semantic_duplicate": "--semantic-duplicate-threshold",
}


def _pass_what(p: dict) -> str:
    """A pass's removals by reason, and the model or the model-score thresholds it used."""
    parts = [f"{reason} {n:,}" for reason, n in p["steps"].items()]
    if p.get("model"):
        parts.append(f"model {p['model']}")
    given = (p.get("thresholds") or {}).items()
    parts += [f"{FLAGS[k]} {v:g}" for k, v in given if v is not None and k in FLAGS]
    parts += [f"{n['path']} not followed: {n['why']}" for n in p.get("not_followed") or []]
    return "; ".join(parts) or "nothing removed"


def _lineage_rows(passes: list[dict]) -> list[list[str]]:
    return [
        [str(i), p["stage"], p["folder"], _num(p["read"]), _num(p["removed"]), _num(p["written"]), _pass_what(p)]
        for i, p in enumerate(passes, 1)
    ]


def _mask_note(c: dict) -> str | None:
    m = c.get("sentence_keep")
    if not m:
        return None
    how = f"--drop-ungrounded {m['threshold']:g}" if m.get("threshold") is not None else "the input's mask, kept"
    n = {k: _num(m.get(k)) for k in ("sentences_masked", "sentences", "rows_masked", "rows", "rows_removed")}
    return (
        f"Sentences masked ({how}): {n['sentences_masked']} of {n['sentences']} in {n['rows_masked']} of "
        f"{n['rows']} rows; {n['rows_removed']} rows removed as ungrounded_caption."
    )


def curation_html_section(stats: dict[str, Any], figs: dict[str, bytes]) -> str:
    from caption_debias import html_report as hr

    curated = curation.curated_groups(stats)
    lineages = curation.lineage_groups(stats)
    if not curated and not lineages:
        return ""
    parts = [
        "<h2>Curation</h2>",
        hr.figures(hr.figure(png, curation.FIGURE_TITLES[name]) for name, png in figs.items()),
    ]
    for name, passes in lineages:
        parts.append(f"<h3>{hr.esc(name)}: every pass, oldest first</h3>")
        parts.append(hr.table(LINEAGE_HEADER, _lineage_rows(passes), align_left=True))
    for name, c in curated:
        parts.append(f"<h3>{hr.esc(name)}: removal funnel</h3>")
        parts.append(hr.table(["step", "removed", "rows left"], _funnel_rows(c)))
        if note := _mask_note(c):
            parts.append(hr.note(hr.esc(note)))
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


def curation_markdown_section(stats: dict[str, Any], figure_files: dict[str, str]) -> list[str]:
    curated = curation.curated_groups(stats)
    lineages = curation.lineage_groups(stats)
    if not curated and not lineages:
        return []
    parts = ["## Curation", ""]
    for name, passes in lineages:
        parts += [
            f"### {md.text(name)}: every pass, oldest first",
            "",
            _md_table(LINEAGE_HEADER, _lineage_rows(passes)),
            "",
        ]
    for name, c in curated:
        parts += [
            f"### {md.text(name)}: removal funnel",
            "",
            _md_table(["step", "removed", "rows left"], _funnel_rows(c)),
            "",
        ]
        if note := _mask_note(c):
            parts += [md.text(note), ""]
        if c.get("image_coverage"):
            parts += [f"### {md.text(name)}: image coverage", "", _md_table(COVERAGE_HEADER, _coverage_rows(c)), ""]
    for fig, path in figure_files.items():
        parts += [f"![{curation.FIGURE_TITLES[fig]}]({path})", ""]
    return parts


def scores_html_section(stats: dict[str, Any], figs: dict[str, bytes]) -> str:
    from caption_debias import html_report as hr

    scored = scores.scored_groups(stats)
    if not scored:
        return ""
    parts = [
        "<h2>Model scores</h2>",
        hr.figures(hr.figure(png, scores.FIGURE_TITLES[name]) for name, png in figs.items()),
    ]
    parts.append(hr.table(scores.DESCRIBE_HEADER, [r for name, s in scored for r in scores.describe_rows(name, s)]))
    for name, s in scored:
        parts.append(f"<h3>{hr.esc(name)}: grounding by sentence position</h3>")
        parts.append(hr.table(scores.POSITION_HEADER, scores.position_rows(s)))
        if s.get("sentences_dropped") is not None:
            parts.append(hr.note(f"{s['sentences_dropped']:,} sentences marked not kept (sentence_keep)."))
        if s.get("thresholds"):
            parts.append(hr.note(hr.esc(scores.thresholds_line(s["thresholds"]))))
        if s.get("model"):
            parts.append(hr.note(f"Scored with {hr.esc(scores.model_line(s['model']))}."))
    parts.append(hr.note(scores.NOTE))
    return "\n".join(parts)


def scores_markdown_section(stats: dict[str, Any], figure_files: dict[str, str]) -> list[str]:
    scored = scores.scored_groups(stats)
    if not scored:
        return []
    parts = [
        "## Model scores",
        "",
        _md_table(scores.DESCRIBE_HEADER, [r for n, s in scored for r in scores.describe_rows(n, s)]),
        "",
    ]
    for name, s in scored:
        parts += [
            f"### {md.text(name)}: grounding by sentence position",
            "",
            _md_table(scores.POSITION_HEADER, scores.position_rows(s)),
            "",
        ]
        if s.get("thresholds"):
            parts += [md.text(scores.thresholds_line(s["thresholds"])), ""]
    for fig, path in figure_files.items():
        parts += [f"![{scores.FIGURE_TITLES[fig]}]({path})", ""]
    parts += [scores.NOTE, ""]
    return parts
