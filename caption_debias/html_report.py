"""Self-contained HTML pages: one shared stylesheet inline, PNG figures embedded as base64, escaped tables.

A page opens offline from a single file (nothing is fetched). The stats report
(stats/report.py), the eval/probe report (evaluate/report.py) and the demo report (demo.py)
build their pages from these pieces; each report keeps its own words and sections.

    body = f"<h1>{esc(title)}</h1>" + table(["model", "R@1"], rows) + figures([figure(png, "loss")])
    path.write_text(page(title, body), "utf-8")
"""

from __future__ import annotations

import base64
import html
from typing import Any, Iterable, Sequence

CSS = """
:root { --ink:#222831; --muted:#5b6470; --line:#e3e6ea; --accent:#3b6ea8; --bg:#f6f7f9; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 28px 28px 60px; }
h1 { font-size: 28px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 34px 0 12px; border-bottom: 2px solid var(--line); padding-bottom: 6px; }
h3 { font-size: 16px; margin: 20px 0 8px; }
.sub { color: var(--muted); margin: 0 0 20px; font-size: 14px; }
code { background:#eceff3; padding:1px 5px; border-radius:4px; font-size: 13px; }
pre { background:#fff; border:1px solid var(--line); border-radius:10px; padding:12px 14px; overflow:auto;
  font-size: 12px; line-height: 1.4; }
.cards { display:grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap:14px; }
.card { background:#fff; border:1px solid var(--line); border-radius:10px; padding:14px 16px; }
.card .v { font-size: 26px; font-weight: 700; color: var(--accent); }
.card .k { color: var(--muted); font-size: 13px; }
.plots { display:grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap:16px; margin: 0 0 12px; }
figure { display:inline-block; vertical-align:top; max-width:100%; margin:0 0 12px; background:#fff;
  border:1px solid var(--line); border-radius:10px; padding:12px; }
.plots figure { margin:0; }
figure.wide { grid-column: 1 / -1; }
img { max-width:100%; height:auto; display:block; margin:0 auto; }
table { border-collapse: collapse; background:#fff; border:1px solid var(--line); border-radius:10px;
  overflow:hidden; width:100%; font-size: 14px; margin: 0 0 12px; }
th, td { padding: 7px 12px; border-bottom: 1px solid var(--line); text-align: right; }
th:first-child, td:first-child { text-align: left; }
table.left th, table.left td { text-align: left; }
thead th { background:#eef2f7; font-weight:600; }
tbody th { font-weight:600; }
tbody tr:nth-child(even) { background:#fafbfc; }
.note { color: var(--muted); font-size: 13px; }
.warn { background:#fff6e0; border:1px solid #f0d58a; border-radius:8px; padding:8px 12px; margin: 0 0 14px; }
"""


def esc(value: Any) -> str:
    """Text as HTML (quotes escaped too, so it is safe in attributes)."""
    return html.escape(str(value))


def _cell(value: Any) -> str:
    return esc(value).replace("\n", "<br>")  # a line break inside a header or cell


def table(
    header: Sequence[Any], rows: Iterable[Sequence[Any]], *, align_left: bool = False, row_headers: bool = False
) -> str:
    """A table of escaped cells (a newline in a cell becomes a line break). Numbers align right and the
    first column left, unless `align_left`; `row_headers` makes each row's first cell a header cell."""
    head = "".join(f"<th>{_cell(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = [
            f"<th>{_cell(c)}</th>" if row_headers and i == 0 else f"<td>{_cell(c)}</td>" for i, c in enumerate(row)
        ]
        body.append(f"<tr>{''.join(cells)}</tr>")
    cls = ' class="left"' if align_left else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def image(png: bytes, alt: str) -> str:
    """A PNG as an <img> carrying its bytes (base64 data URL)."""
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def figure(png: bytes, alt: str, *, wide: bool = False) -> str:
    """A PNG in a framed figure, never wider than the page; `wide` spans every column of a `figures` grid."""
    cls = ' class="wide"' if wide else ""
    return f"<figure{cls}>{image(png, alt)}</figure>"


def figures(items: Iterable[str]) -> str:
    """Figures side by side in columns at least 540 px wide, each image scaled down to its column."""
    return f'<div class="plots">{"".join(items)}</div>'


def cards(items: Iterable[tuple[str, str]]) -> str:
    """Headline numbers: (value, what it is) per card."""
    inner = "".join(
        f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>' for v, k in items
    )
    return f'<div class="cards">{inner}</div>'


def note(text_html: str) -> str:
    """A muted paragraph under a table or figure (HTML: escape what is not markup)."""
    return f'<p class="note">{text_html}</p>'


def warn(text: str) -> str:
    """A highlighted caveat (plain text)."""
    return f'<p class="warn">{esc(text)}</p>'


def pre(text: str) -> str:
    """Preformatted text (JSON dumps, logs), escaped."""
    return f"<pre>{esc(text)}</pre>"


def page(title: str, body: str) -> str:
    """The whole document: the shared stylesheet inline, `body` (HTML) in the page's column."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{CSS}</style></head>
<body><main>
{body}
</main></body></html>
"""


def grounding_colour(score: float | None, span: float = 3.0) -> str:
    """A sentence's background by its grounding: red below 0 (names what the picture lacks), green
    above, white at 0, full colour at +-span; grey when there is no score."""
    if score is None or score != score:
        return "#e9ecef"
    t = max(-1.0, min(1.0, score / span))
    r, g, b = (220, 70, 60) if t < 0 else (60, 170, 90)
    mix = abs(t)
    return "#%02x%02x%02x" % tuple(round(255 + (c - 255) * mix) for c in (r, g, b))


def shaded_sentences(sentences: Sequence[str], scores: Sequence[float | None], marked: int | None = None) -> str:
    """A caption with each sentence shaded by its score (grounding_colour; the score in its
    tooltip); sentence `marked` is outlined (a planted one, for instance)."""
    spans = []
    for i, (sentence, score) in enumerate(zip(sentences, scores)):
        title = "no score" if score is None or score != score else f"{score:+.2f}"
        outline = "outline:2px dashed #222831;" if i == marked else ""
        spans.append(
            f'<span title="{esc(title)}" style="background:{grounding_colour(score)};{outline}'
            f'padding:1px 3px;border-radius:3px;line-height:1.9">{esc(sentence)}</span>'
        )
    return " ".join(spans)
