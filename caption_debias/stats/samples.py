"""The report's "Samples" section: a few rows per source with their sentences marked by role and, for
curated folders, two removed rows per reason with their images, read through caption_debias/folder_rows
(the same rows, roles and thumbnails `caption-debias view` shows, without the web app).
"""

from __future__ import annotations

import base64
import shlex
from typing import Any

from caption_debias import html_report
from caption_debias import md_text as md
from caption_debias.dataset import dataset_names
from caption_debias.errors import UserError
from caption_debias.lineage import stage_of

PER_SOURCE = 3
PER_REASON = 2
STAGE_WORDS = {"prepare": "prepared", "curate": "curated", "score": "scored", "pack": "packed"}

STYLE = """
.samples { display:grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr)); gap:12px; margin: 0 0 14px; }
.sample { background:#fff; border:1px solid var(--line); border-radius:10px; padding:10px 12px; font-size:13px; }
.sample img { width:100%; height:140px; object-fit:contain; background:#eef0f3; border-radius:6px; margin:0 0 6px; }
.sample .k { font-family: ui-monospace, monospace; font-size:12px; font-weight:600; word-break:break-all; }
.sample .m { color: var(--muted); font-size:12px; }
.sample .c { max-height: 10.5em; overflow:auto; }
.sample .why { background:#fdecea; color:#c0392b; border-radius:8px; padding:0 6px; font-size:11.5px; font-weight:600; }
.s-open, .s-close, .s-mid { font-weight:600; border-bottom:3px solid #2f6fd6; }
.s-close { border-color:#8a3ffc; } .s-mid { border-color:#d97706; }
.s-drop { text-decoration: line-through; opacity:.55; }
"""
ROLE_CLASS = {"opening summary": "s-open", "closing summary": "s-close", "summary": "s-mid", "detail": ""}
MD_MARK = {"opening summary": "**", "closing summary": "**", "summary": "**", "detail": ""}


def _thumb(data, thumbs, card: dict[str, Any], removed: int | None) -> str:
    from caption_debias.folder_rows.files import Refused
    from caption_debias.folder_rows.thumbs import placeholder_svg

    folder = card["folder"]
    try:
        if removed is None:
            f, s, r = (int(x) for x in card["id"].split(":"))
            source = data.image_source(f, s, r, None)
        else:
            source = data.image_source(folder, None, None, removed)
        jpeg = thumbs.for_source(source)
        return (
            f'<img alt="{html_report.esc(card["key"])}" src="data:image/jpeg;base64,{base64.b64encode(jpeg).decode()}">'
        )
    except Refused as why:
        svg = base64.b64encode(placeholder_svg(str(why))).decode()
        return f'<img alt="{html_report.esc(why)}" src="data:image/svg+xml;base64,{svg}">'


def collect(folders: list[str], image_root: str | None = None, thumbs_dir=None) -> list[dict[str, Any]]:
    """Per folder: {name, path, kind, sources: {source: [card]}, reasons: {reason: [card]}}; each card
    carries an `img` (an <img> with the thumbnail inline, or a placeholder saying why there is none)."""
    from caption_debias.folder_rows.query import Query
    from caption_debias.folder_rows.reading import Reading
    from caption_debias.folder_rows.thumbs import ThumbCache
    from caption_debias.image_source import resolve_root

    if image_root is not None:
        resolve_root(image_root)  # a folder here or on a store, or one line naming it

    thumbs = ThumbCache(thumbs_dir)
    out = []
    for folder in folders:
        try:
            data = Reading([folder], dataset_names([folder]), image_root)
        except UserError as exc:  # one line in the report, not a report lost (nor a section dropped unsaid)
            out.append({"name": str(folder), "path": str(folder), "why": str(exc)})
            continue
        f = data.folders[0]
        stage = stage_of(f.ds.manifest)
        entry: dict[str, Any] = {
            "name": f.name,
            "path": str(f.path),
            "kind": STAGE_WORDS.get(stage, stage),
            "stage": stage,
            "sources": {},
            "reasons": {},
        }
        for source, addresses in data.index.first_per_source(PER_SOURCE).items():
            cards = data.cards([(int(a), int(b), int(c)) for a, b, c in addresses])
            for c in cards:
                c["img"] = _thumb(data, thumbs, c, None)
            entry["sources"][source] = cards
        for reason in data.index.reasons():
            cards = data.page(Query(view="removed", reason=reason, limit=PER_REASON))["rows"]
            for c in cards:
                removed = int(c["id"].split("r")[1])
                c["img"] = _thumb(data, thumbs, c, removed)
                if c.get("match"):  # the row it matched, beside it, when that row is in this view's folders
                    match = data.removals.pair(c["folder"], removed).get("match")
                    if isinstance(match, dict) and match.get("id"):
                        c["match_img"] = _thumb(data, thumbs, match, None)
            entry["reasons"][reason] = cards
        data.close()
        out.append(entry)
    return out


def _sentences_html(card: dict[str, Any]) -> str:
    parts = []
    for s in card["sentences"] or [{"text": card.get("caption") or "", "role": "detail"}]:
        cls = [ROLE_CLASS.get(s["role"], "")] + (["s-drop"] if s.get("sentence_keep") is False else [])
        cls_attr = f' class="{" ".join(c for c in cls if c)}"' if any(cls) else ""
        parts.append(f'<span{cls_attr} title="{html_report.esc(s["role"])}">{html_report.esc(s["text"])}</span>')
    return " ".join(parts)


def _card_html(card: dict[str, Any]) -> str:
    e = html_report.esc
    why = ""
    if card.get("reason"):
        match = card.get("match")
        sim = card.get("similarity")
        detail = f" · matched <code>{e(match)}</code>" if match else ""
        detail += f" by {e(card.get('by'))}" if card.get("by") else ""
        detail += f", similarity {sim:.3f}" if isinstance(sim, (int, float)) else ""
        why = f'<div><span class="why">{e(card["reason"])}</span><span class="m">{detail}</span></div>'
        if card.get("why"):  # the signal and the rule in words, its value included (a clip_score, a grounding)
            why += f'<div class="m">{e(card["why"])}</div>'
        if card.get("match_img"):
            why += f'<div class="m matched">the row it matched:</div>{card["match_img"]}'
    tokens = card.get("num_tokens")
    counts = (
        f"{tokens} tokens (77: {'over' if tokens > 77 else 'fits'}, 248: {'over' if tokens > 248 else 'fits'})"
        if tokens
        else ""
    )
    return (
        f'<div class="sample">{card["img"]}<div class="k">{e(card["key"])}</div>{why}'
        f'<div class="m">{e(card.get("source"))} · {counts}</div><div class="c">{_sentences_html(card)}</div></div>'
    )


def _view_line(samples: list[dict[str, Any]]) -> str:
    paths = " ".join(shlex.quote(s["path"]) for s in samples)
    return (
        f"Every row, with filters by source, removal reason, text and any numeric column, sorting, and each duplicate "
        f"beside the row it matched: <code>caption-debias view {html_report.esc(paths)}</code> (a local page), or "
        f"<code>caption-debias view {html_report.esc(paths)} --static snapshot.html</code> (one file to share)."
    )


def html_section(samples: list[dict[str, Any]]) -> str:
    if not samples:
        return ""
    e = html_report.esc
    parts = [
        f"<style>{STYLE}</style><h2>Samples</h2>",
        html_report.note(
            f"The first {PER_SOURCE} rows of each source. Sentences as <code>prepare</code> marked them: "
            '<span class="s-open">opening summary</span>, <span class="s-mid">summary in the middle</span>, '
            '<span class="s-close">closing summary</span>, detail (plain).'
        ),
    ]
    for s in samples:
        if "why" in s:
            parts.append(html_report.note(f"Samples of {e(s['name'])} not shown: {e(s['why'])}"))
            continue
        heading = f"{e(s['name'])} <span class='note'>({e(s['kind'])})</span>" if len(samples) > 1 else ""
        if heading:
            parts.append(f"<h3>{heading}</h3>")
        for source, cards in s["sources"].items():
            parts.append(f"<h3>{e(source)}</h3><div class='samples'>{''.join(_card_html(c) for c in cards)}</div>")
        if s["reasons"]:
            parts.append(f"<h3>Removed by {e(s['stage'])}: {PER_REASON} examples per reason</h3>")
            cards = [c for rows in s["reasons"].values() for c in rows]
            parts.append(f"<div class='samples'>{''.join(_card_html(c) for c in cards)}</div>")
    parts.append(html_report.note(_view_line(samples)))
    return "\n".join(parts)


def markdown_section(samples: list[dict[str, Any]]) -> list[str]:
    if not samples:
        return []
    lines = ["## Samples", "", f"The first {PER_SOURCE} rows of each source; summary sentences in **bold**.", ""]

    def caption(card) -> str:  # a caption is data: its text never becomes markup (md.text)
        sents = card["sentences"] or [{"text": card.get("caption") or "", "role": "detail"}]
        return " ".join(f"{MD_MARK.get(x['role'], '')}{md.text(x['text'])}{MD_MARK.get(x['role'], '')}" for x in sents)

    for s in samples:
        if "why" in s:
            lines += [f"Samples of {md.text(s['name'])} not shown: {md.text(s['why'])}", ""]
            continue
        for source, cards in s["sources"].items():
            lines += [f"### {md.text(s['name'])} · {md.text(source)}", ""]
            lines += [f"- {md.code(c['key'])} ({md.text(c.get('num_tokens'))} tokens): {caption(c)}" for c in cards]
            lines += [""]
        for reason, cards in s["reasons"].items():
            lines += [f"### {md.text(s['name'])} · removed: {md.text(reason)}", ""]
            lines += [
                f"- {md.code(c['key'])} (match: {md.text(c.get('match') or '-')}; {md.text(c.get('why') or c['reason'])}): "
                f"{caption(c)}"
                for c in cards
            ]
            lines += [""]
    paths = " ".join(shlex.quote(s["path"]) for s in samples)
    lines += [f"More: {md.code('caption-debias view ' + paths)} (or `--static snapshot.html` for a file to share).", ""]
    return lines
