"""Hostile data in stats' reports (issue 38, section 4): captions, keys and names are text in
report.md and report.html, never markup (a Markdown viewer renders no HTML and fetches nothing);
a curated manifest whose numbers are strings, lists, NaN or huge is shown as not available with
one warning line each, never a traceback."""

from __future__ import annotations

import json
import math
import re
import shutil

import pytest
from cli_process import run_cli

from caption_debias import md_text

REMOTE = "http://198.51.100.7/pixel.png"
HOSTILE = [
    f"<script>alert(1)</script> A cat. ![tracker]({REMOTE}) sits <img src={REMOTE}> on a mat.",
    f"[click](http://198.51.100.7/) **bold** <{REMOTE}> &lt;b&gt; line\n\n# heading\n![x][r]\n\n[r]: {REMOTE}",
    f"`code` ``` <iframe src={REMOTE}></iframe> | a | b |",
]


def _rendered(markdown: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(markdown)


def _assert_inert(html: str) -> None:
    """What a Markdown viewer makes of the report: no element from the data, nothing remote."""
    for tag in ("<script", "<iframe", "<b>"):
        assert tag not in html, tag
    assert "198.51.100.7" not in " ".join(re.findall(r"<(?:img|a)\b[^>]*>", html))
    assert all(src.startswith("plots/") for src in re.findall(r'<img src="([^"]*)"', html))


@pytest.fixture(scope="module")
def hostile_folder(tmp_path_factory):
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path_factory.mktemp("hostile-report")
    rows = [{"key": f"k`{i}<img src={REMOTE}>", "image": f"{i}.jpg", "caption": c} for i, c in enumerate(HOSTILE)]
    rows += [{"key": f"plain{i}", "image": f"p{i}.jpg", "caption": "A dog runs. It is brown."} for i in range(3)]
    (root / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([root / "t.jsonl"], root / "p", PrepareOptions(format="table", quiet=True))
    return root / "p"


def test_report_md_and_html_show_hostile_captions_and_keys_as_text(hostile_folder, tmp_path):
    out = tmp_path / "report"
    proc = run_cli("stats", str(hostile_folder), "--out", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text("utf-8")
    assert "## Samples" in md and "&lt;script&gt;alert(1)" in md  # the caption is there, as text
    _assert_inert(_rendered(md))
    assert "<script" not in md and "<img" not in md  # not even as raw text for a viewer that allows HTML
    page = (out / "report.html").read_text("utf-8")
    assert "<script>alert" not in page and "<img src=http" not in page and "&lt;script&gt;alert(1)" in page


def test_md_text_is_inert_and_shows_the_same_characters():
    """Every text round-trips: rendered by CommonMark, it is the same characters in one paragraph."""
    import html as html_module

    for value in [*HOSTILE, "12.5% of 1,000", "a_b*c~d", "\\`", "&amp;", "x\u2028y"]:
        rendered = _rendered(md_text.text(value))
        _assert_inert(rendered)
        body = re.fullmatch(r"<p>(.*)</p>\n", rendered, re.S)
        assert body, rendered
        expected = re.sub(r"[\r\n\u2028]+", " ", value).strip()
        assert html_module.unescape(body.group(1)) == expected
        code = _rendered(md_text.code(value))
        assert html_module.unescape(re.sub(r"</?(p|code)>", "", code)).strip() == expected.strip()


BAD_VALUES = {"a string": "12", "a list": [1, 2], "NaN": math.nan, "huge": 1e300, "negative": -3, "a bool": True}


@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_stats_shows_invalid_manifest_numbers_as_not_available_with_one_line_each(chain, tmp_path, kind):
    root, manifests = chain
    copy = tmp_path / "w"
    shutil.copytree(root, copy)
    bad = BAD_VALUES[kind]
    path = copy / "c2" / "manifest.json"
    manifest = json.loads(path.read_text("utf-8"))
    manifest["counts"]["read"] = bad
    manifest["counts"]["removed_by_reason"]["image_missing"] = bad
    manifest["curation"]["thresholds"]["min_clip_score"] = bad
    manifest["curation"]["funnel"][0]["rows" if "rows" in manifest["curation"]["funnel"][0] else "removed"] = bad
    manifest["curation"]["low_alignment"]["cutoff"] = bad
    path.write_text(json.dumps(manifest, allow_nan=True), "utf-8")
    out = tmp_path / "report"
    proc = run_cli("stats", str(copy / "c2"), "--out", str(out), "-q", cwd=copy)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("caption-debias stats: warning: ")]
    fields = ["counts.read", "counts.removed_by_reason.image_missing"]
    if kind != "negative":  # a threshold may be below zero (a cosine)
        fields += ["curation.thresholds.min_clip_score", "curation.low_alignment.cutoff"]
    for field in fields:
        said = [w for w in warnings if f"manifest {field} is not" in w]
        assert len(said) == 1, (field, warnings)
        assert said[0].endswith("shown as not available") and len(said[0]) < 300
    stats = json.loads((out / "stats.json").read_text("utf-8"), parse_constant=pytest.fail)  # strict: no NaN
    entry = stats["datasets"][0]
    assert entry["curation"]["read"] is None and entry["lineage"][-1]["read"] is None
    assert entry["lineage"][-1]["thresholds"]["min_clip_score"] == (-3.0 if kind == "negative" else None)
    assert "image_missing" not in entry["curation"]["removed_by_reason"]
    md = (out / "report.md").read_text("utf-8")
    assert "is not a count" in md and "shown as not available" in md
    assert "not available" in (out / "report.html").read_text("utf-8")


# -- the embedding map: its rows are exactly the ones curate finds valid -------------------------


def _embeddings(rng, n: int) -> tuple[list, list[str]]:
    """Embeddings of every kind curate meets, the first row of another width than most, and each row's kind."""
    import numpy as np

    def unit(dim: int) -> list[float]:
        v = rng.standard_normal(dim)
        return (v / np.linalg.norm(v)).tolist()

    kinds = ["short"] + ["ok"] * 30 + ["short"] * 9 + ["zero"] * 5 + ["nan"] * 3 + ["null"] * 2 + ["long"] * 4
    kinds += ["ok"] * (n - len(kinds))
    make = {
        "ok": lambda: unit(8),
        "short": lambda: unit(
            4
        ),  # unit length, another width: curate's invalid_signal ("4 values, the input's others 8")
        "long": lambda: unit(12),
        "zero": lambda: [0.0] * 8,
        "nan": lambda: [math.nan] + unit(8)[1:],
        "null": lambda: None,
    }
    return [make[k]() for k in kinds], kinds


def _map_of(folder):
    from caption_debias.view.data import ViewData

    gen = ViewData([str(folder)]).current()
    gen.map.start()
    gen.map.wait()
    return gen.map_page()


def test_the_map_places_exactly_the_rows_curate_finds_valid(tmp_path):
    import numpy as np
    from score_fixtures import with_scores

    from caption_debias.curate.signals import embedding_problem, embedding_width
    from caption_debias.dataset import PreparedDataset

    prepared = tmp_path / "p"
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    rng = np.random.default_rng(4)
    rows = [{"key": f"m{i:03d}", "image": f"{i}.jpg", "caption": "A cat sits. It is grey."} for i in range(60)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([tmp_path / "t.jsonl"], prepared, PrepareOptions(format="table", quiet=True))
    n = PreparedDataset.open(prepared).rows
    embeddings, kinds = _embeddings(rng, n)
    folder = with_scores(prepared, tmp_path / "scored", {"image_embedding": embeddings})
    # curate's rule, row by row: no problem, and the most common width among those
    usable = [i for i, e in enumerate(embeddings) if e is not None and embedding_problem(e) is None]
    width = embedding_width(np.array([len(embeddings[i]) for i in usable]))
    valid = {f"0:0:{i}" for i in usable if len(embeddings[i]) == width}
    page = _map_of(folder)
    assert set(page["id"]) == valid and page["dim"] == 8 == width
    assert page["without"] == n - len(valid)
    assert page["left_out"] == {"no image embedding": kinds.count("null"), "invalid_signal": n - len(valid) - 2}
    assert all(math.isfinite(v) for v in page["x"] + page["y"] + page["explained"])


def test_a_map_of_all_zero_embeddings_says_so_and_shows_no_nan(tmp_path):
    from score_fixtures import with_scores

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.view.app import create_app
    from caption_debias.view.data import ViewData

    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    rows = [{"key": f"z{i}", "image": f"{i}.jpg", "caption": "A cat sits. It is grey."} for i in range(20)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([tmp_path / "t.jsonl"], tmp_path / "p", PrepareOptions(format="table", quiet=True))
    folder = with_scores(tmp_path / "p", tmp_path / "scored", {"image_embedding": [[0.0] * 8] * 20})
    c = TestClient(create_app(ViewData([str(folder)])), base_url="http://127.0.0.1")
    import time

    t0 = time.monotonic()
    while (res := c.get("/api/map")).json().get("status") == "computing" and time.monotonic() - t0 < 120:
        time.sleep(0.2)
    assert res.status_code == 400 and "no row has a valid image embedding" in res.json()["error"], res.text
    assert "NaN" not in res.text and "nan" not in res.text.lower().replace("finite", "")
