"""The shared HTML page pieces: escaped cells, embedded PNGs, one stylesheet, nothing fetched."""

from __future__ import annotations

import base64
import re

from caption_debias import html_report

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16  # only the bytes matter here: they must come back as given


def test_table_escapes_cells_and_breaks_lines():
    out = html_report.table(["model\nT2I", "a<b"], [["<script>x</script>", "1 & 2"], ["m", 3]], row_headers=True)
    assert "<script>" not in out and "&lt;script&gt;x&lt;/script&gt;" in out
    assert "<th>model<br>T2I</th>" in out and "<th>a&lt;b</th>" in out and "<td>1 &amp; 2</td>" in out
    assert out.count("<tr>") == 3 and "<th>m</th><td>3</td>" in out  # header row + 2; first cell a row header
    assert "<table>" in out and '<table class="left">' in html_report.table(["a"], [], align_left=True)


def test_figures_carry_their_bytes_and_pages_fetch_nothing():
    fig = html_report.figure(PNG, 'a "quoted" alt', wide=True)
    data = re.search(r'src="data:image/png;base64,([^"]+)"', fig).group(1)
    assert base64.b64decode(data) == PNG and 'alt="a &quot;quoted&quot; alt"' in fig and 'class="wide"' in fig
    doc = html_report.page("t <1>", html_report.figures([fig]) + html_report.pre("{<json>}"))
    assert doc.startswith("<!DOCTYPE html>") and "<title>t &lt;1&gt;</title>" in doc
    assert html_report.CSS in doc and "<pre>{&lt;json&gt;}</pre>" in doc
    assert not re.search(r'(src|href)="(https?:)?//', doc) and "@import" not in doc and "url(" not in doc
