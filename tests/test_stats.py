"""`caption-debias stats` on small hand-built prepared folders with hand-computed answers."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from cli_process import run_cli
from folder_factory import write_folder

from caption_debias import html_report
from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.stats.compute import StatsOptions, compute_stats

# (sentences, tokens per sentence without start/end, summary mask, source, split)
# num_tokens = sum(tokens per sentence) + 2 (start and end).
ROWS_A = [
    (["The image shows a cat.", "It is black.", "It sleeps."], [6, 6, 6], [True, False, False], "sharegpt4v", "train"),
    (
        ["The image shows a dog.", "A ball.", "In short, a dog plays."],
        [6, 36, 36],
        [True, False, True],
        "sharegpt4v",
        "train",
    ),
    (["A red car.", "Parked on a street."], [3, 245], [False, True], "coco", None),
    (["Sky."], [1], [True], "coco", None),
    (
        ["This is a photo of a beach.", "Waves.", "Sand.", "Sun."],
        [8, 30, 30, 30],
        [False, True, False, False],
        "sharegpt4v",
        "test",
    ),
    (["THE IMAGE: shows a tree.", "Green."], [7, 21], [False, False], "coco", None),
]
ROWS_B = [
    (["Dr. Who waves."], [8], [True], "docci", "test"),  # Long-CLIP's split('. ') cuts it at "Dr"
    (["A cat on a mat.", "It naps."], [5, 83], [True, False], "docci", "test"),
]


def write_prepared(folder: Path, rows, rejects_by_reason: dict[str, int], shard_rows: int = 4) -> Path:
    """A prepared folder written directly with pyarrow in the shard schema, plus its manifest."""
    records = []
    for i, (sentences, lengths, mask, source, split) in enumerate(rows):
        caption = " ".join(sentences)
        spans, start = [], 0
        for s in sentences:
            spans.append({"start": start, "end": start + len(s)})
            start += len(s) + 1
        records.append(
            {
                "key": f"{source}/{i}",
                "source": source,
                "split": split,
                "image": f"images/{i}.jpg",
                "caption": caption,
                "sentences": sentences,
                "sentence_spans": spans,
                "sentence_tokens": [[320 + j for j in range(n)] for n in lengths],
                "num_tokens": sum(lengths) + 2,
                "summary_mask": mask,
                "summary_scores": [0.9 if m else 0.1 for m in mask],
                "meta": "{}",
            }
        )
    return write_folder(folder, records, rejects_by_reason, shard_rows)


@pytest.fixture
def folder_a(tmp_path):
    return write_prepared(tmp_path / "a" / "set", ROWS_A, {"empty caption": 2, "missing image": 1})


@pytest.fixture
def folder_b(tmp_path):
    return write_prepared(tmp_path / "b" / "other", ROWS_B, {"empty caption": 1})


def test_single_folder_hand_computed(folder_a):
    s = compute_stats([folder_a])
    assert s["records"] == 6
    sp = s["sentences_per_caption"]
    # counts [3, 3, 2, 1, 4, 2] -> sorted [1, 2, 2, 3, 3, 4]
    assert sp["mean"] == 2.5 and sp["median"] == 2.5 and sp["p95"] == pytest.approx(3.75)
    assert sp["histogram"] == {"1": 1, "2": 2, "3": 2, "4": 1}
    assert sp["single_sentence"] == pytest.approx(1 / 6, abs=1e-6)
    tp = s["tokens_per_caption"]
    # tokens [20, 80, 250, 3, 100, 30] -> sorted [3, 20, 30, 80, 100, 250]
    assert tp["mean"] == 80.5 and tp["median"] == 55.0 and tp["max"] == 250
    assert tp["p95"] == pytest.approx(212.5)
    assert tp["over_77"] == 0.5 and tp["over_248"] == pytest.approx(1 / 6, abs=1e-6)
    assert tp["histogram"]["counts"] == {"0": 1, "16": 1, "24": 1, "80": 1, "96": 1, "248": 1}
    ft = s["first_sentence_tokens"]
    # first sentences [6, 6, 3, 1, 8, 7] tokens, without start/end
    assert ft["mean"] == pytest.approx(31 / 6, abs=1e-4) and ft["median"] == 6.0 and ft["max"] == 8
    assert s["opening_summary_rate"] == 0.5  # rows 1, 2, 4 (a lone sentence opens, never closes)
    assert s["closing_summary_rate"] == pytest.approx(1 / 3, abs=1e-6)  # rows 2, 3
    pos = s["summary_position"]
    assert pos["middle"] == pytest.approx(1 / 6, abs=1e-6) and pos["none"] == pytest.approx(1 / 6, abs=1e-6)
    phrases = [(p["phrase"], p["count"]) for p in s["opening_phrases"]]
    # punctuation and case do not split "THE IMAGE: shows" from "The image shows"
    assert phrases == [("the image shows", 3), ("a red car", 1), ("sky", 1), ("this is a", 1)]
    assert s["rejects_by_reason"] == {"empty caption": 2, "missing image": 1}
    assert s["rejected"] == 3
    assert s["datasets"][0]["records"] == 6 and "by" not in s
    assert s["longclip_split_agreement"] == 1.0  # every first sentence ends with ". " or the caption


def test_by_source_and_split(folder_a):
    s = compute_stats([folder_a], StatsOptions(by="source"))
    groups = s["by"]["groups"]
    assert s["by"]["field"] == "source" and set(groups) == {"coco", "sharegpt4v"}
    assert groups["sharegpt4v"]["records"] == 3
    assert groups["sharegpt4v"]["tokens_per_caption"]["median"] == 80.0  # [20, 80, 100]
    assert groups["sharegpt4v"]["tokens_per_caption"]["over_77"] == pytest.approx(2 / 3, abs=1e-6)
    assert groups["coco"]["tokens_per_caption"]["over_248"] == pytest.approx(1 / 3, abs=1e-6)
    assert groups["coco"]["opening_summary_rate"] == pytest.approx(1 / 3, abs=1e-6)  # "Sky."
    s = compute_stats([folder_a], StatsOptions(by="split", top_phrases=1))
    groups = s["by"]["groups"]
    assert {k: g["records"] for k, g in groups.items()} == {"(none)": 3, "test": 1, "train": 2}
    assert groups["train"]["opening_phrases"] == [{"phrase": "the image shows", "count": 2, "fraction": 1.0}]
    assert sum(g["records"] for g in groups.values()) == s["records"]


def test_several_folders_side_by_side(folder_a, folder_b):
    s = compute_stats([folder_a, folder_b], StatsOptions(by="source", phrase_words=2))
    assert s["records"] == 8
    assert s["tokens_per_caption"]["over_77"] == 0.5  # 80, 100, 250, 90 of 8
    assert s["rejects_by_reason"] == {"empty caption": 3, "missing image": 1}
    assert [d["name"] for d in s["datasets"]] == ["set", "other"]
    assert s["datasets"][1]["opening_summary_rate"] == 1.0
    assert set(s["datasets"][1]["by"]) == {"docci"}
    assert s["by"]["groups"]["docci"]["records"] == 2
    assert s["opening_phrases"][0] == {"phrase": "the image", "count": 3, "fraction": 0.375}
    assert s["longclip_split_agreement"] == 0.875 and s["datasets"][1]["longclip_split_agreement"] == 0.5


def test_quantile_matches_numpy():
    np = pytest.importorskip("numpy")
    from collections import Counter

    from caption_debias.stats.compute import _quantile

    rng = np.random.default_rng(0)
    for size in (1, 2, 7, 50):
        values = rng.integers(0, 12, size)
        for q in (0.0, 0.3, 0.5, 0.95, 1.0):
            assert _quantile(Counter(values.tolist()), q) == pytest.approx(float(np.quantile(values, q)))


def test_bad_inputs_are_user_errors(tmp_path, folder_a):
    with pytest.raises(UserError, match="not a prepared folder"):
        compute_stats([tmp_path])
    with pytest.raises(UserError, match="--by"):
        compute_stats([folder_a], StatsOptions(by="colour"))
    manifest = json.loads((folder_a / "manifest.json").read_text())
    manifest["shards"][0]["rows"] = 99
    (folder_a / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="manifest.json says 99"):  # PreparedDataset.open's check
        compute_stats([folder_a])


def _plain_python_stats(dataset: PreparedDataset) -> dict:
    """The headline figures recomputed row by row from the shards, without polars."""
    table = dataset.read(["caption", "sentences", "sentence_tokens", "num_tokens", "summary_mask"]).to_pylist()
    norm = lambda t: t.strip().rstrip(".")  # noqa: E731
    n = len(table)
    return {
        "records": n,
        "over_77": sum(r["num_tokens"] > 77 for r in table) / n,
        "max": max(r["num_tokens"] for r in table),
        "first_mean": sum(len(r["sentence_tokens"][0]) for r in table) / n,
        "opening": sum(r["summary_mask"][0] for r in table) / n,
        "closing": sum(len(r["summary_mask"]) > 1 and r["summary_mask"][-1] for r in table) / n,
        "agree": sum(norm(r["caption"].split(". ")[0]) == norm(r["sentences"][0]) for r in table) / n,
        "hist": {str(k): sum(len(r["sentences"]) == k for r in table) for k in {len(r["sentences"]) for r in table}},
    }


def test_on_real_prepare_output(tmp_path):
    """prepare() on a small JSON-lines table, then stats: figures agree with a row-by-row count,
    and the token counts are the real CLIP tokenizer's."""
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.text.tokenize import get_tokenizer

    captions = [
        "The image shows a red bus on a wet street. People wait at the stop. Rain falls.",
        "A small kitchen with white cabinets. A kettle sits on the stove.",
        "The photo shows a beach at sunset. " + "Waves roll in over the dark sand near the old pier. " * 8,
        "",  # rejected: empty caption
        "Two dogs play in a park. One is brown. The other is black and white. In short, dogs at play.",
        "Dr. Smith walks a dog along the river. It rains.",  # Long-CLIP's split stops at "Dr"
        "What a view! The sea is calm. Boats float by.",
    ]
    src = tmp_path / "captions.jsonl"
    src.write_text(
        "".join(json.dumps({"image": f"{i}.jpg", "caption": c, "key": str(i)}) + "\n" for i, c in enumerate(captions))
    )
    out = tmp_path / "prepared"
    manifest = prepare([src], out, PrepareOptions(format="table", quiet=True, split="val"))
    s = compute_stats([out], StatsOptions(by="split"))
    expect = _plain_python_stats(PreparedDataset.open(out))
    assert s["records"] == manifest["counts"]["written"] == expect["records"] == 6
    assert s["rejected"] == manifest["counts"]["rejected"] == 1 and sum(s["rejects_by_reason"].values()) == 1
    assert s["tokens_per_caption"]["over_77"] == pytest.approx(expect["over_77"], abs=1e-6)
    assert s["tokens_per_caption"]["max"] == expect["max"]
    tok = get_tokenizer()
    assert s["tokens_per_caption"]["max"] == len(tok.encode(captions[2])) + 2 > 77
    assert s["first_sentence_tokens"]["mean"] == pytest.approx(expect["first_mean"], abs=1e-4)
    assert s["opening_summary_rate"] == pytest.approx(expect["opening"], abs=1e-6)
    assert s["closing_summary_rate"] == pytest.approx(expect["closing"], abs=1e-6)
    assert s["sentences_per_caption"]["histogram"] == expect["hist"]
    assert s["longclip_split_agreement"] == pytest.approx(expect["agree"], abs=1e-6)
    assert expect["agree"] <= 5 / 6  # the "Dr." caption at least disagrees
    assert list(s["by"]["groups"]) == ["val"]
    assert {p["phrase"] for p in s["opening_phrases"]} >= {"the image shows", "the photo shows", "two dogs play"}


def test_cli_writes_self_contained_report(folder_a, folder_b, tmp_path):
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    report = tmp_path / "report"
    result = CliRunner().invoke(app, ["stats", str(folder_a), str(folder_b), "--out", str(report), "--by", "split"])
    assert result.exit_code == 0, result.output
    assert "set · train" in result.output and "empty caption 3, missing image 1" in result.output
    saved = json.loads((report / "stats.json").read_text())
    assert saved["records"] == 8 and saved["by"]["field"] == "split"
    assert saved["datasets"][0]["by"]["train"]["records"] == 2
    page = (report / "report.html").read_text()
    assert html_report.CSS in page  # the shared page builder
    images = re.findall(r'<img[^>]*src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 5
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    # opens offline: nothing is fetched from anywhere
    assert not re.search(r'(src|href)="(https?:)?//', page) and "@import" not in page
    assert "set · train" in page and "other · test" in page  # side by side, per split
    md = (report / "report.md").read_text()
    assert "| longer than 77 tokens (CLIP) | 50.0% |" in md
    assert all((report / link).is_file() for link in re.findall(r"\]\((plots/[^)]+\.png)\)", md))


def test_cli_errors_are_one_line(tmp_path):
    proc = run_cli("stats", str(tmp_path / "missing"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no such folder" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_incomplete_and_summary_none_are_flagged(folder_a, tmp_path):
    from caption_debias.stats.report import notes, write_report

    manifest = json.loads((folder_a / "manifest.json").read_text())
    manifest["complete"] = False
    (folder_a / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="complete: false"):  # an incomplete folder is refused (test_faults)
        compute_stats([folder_a])
    manifest["complete"] = True
    manifest["summary"] = {"mode": "none"}
    (folder_a / "manifest.json").write_text(json.dumps(manifest))
    s = compute_stats([folder_a])
    assert s["datasets"][0]["prepared_with"] == {"segmenter": None, "summary": "none", "complete": True}
    s["datasets"][0]["prepared_with"]["complete"] = False  # the note, should stats ever read such a folder
    found = notes(s)
    assert len(found) == 2 and "cut off" in found[0] and "--summary none" in found[1]
    files = write_report(s, tmp_path / "r")
    assert "cut off" in files["html"].read_text() and "cut off" in files["markdown"].read_text()


def test_opening_phrase_edge_cases(tmp_path):
    rows = [
        (["«Hello», world! Again"], [5], [True], "table", None),
        (["It's an eye-level shot of a dog."], [9], [True], "table", None),
        (["..."], [1], [False], "table", None),  # no word: no phrase, still a record
        ([], [], [], "table", None),  # no sentence at all: no first sentence figures
    ]
    folder = write_prepared(tmp_path / "edge", rows, {})
    s = compute_stats([folder], StatsOptions(phrase_words=1))
    assert s["records"] == 4
    assert [(p["phrase"], p["count"]) for p in s["opening_phrases"]] == [("hello", 1), ("it's", 1)]
    assert s["first_sentence_tokens"]["records"] == 3 and s["first_sentence_tokens"]["mean"] == 5.0
    assert s["sentences_per_caption"]["histogram"] == {"0": 1, "1": 3}
    s = compute_stats([folder], StatsOptions(phrase_words=4))
    assert {p["phrase"] for p in s["opening_phrases"]} == {"hello world again", "it's an eye-level shot"}


def test_folder_with_no_records_and_broken_shard(tmp_path, folder_a):
    from caption_debias.stats.report import notes, write_report

    empty = write_prepared(tmp_path / "empty", [], {"empty caption": 2})
    s = compute_stats([empty], StatsOptions(by="split"))
    assert s["records"] == 0 and s["tokens_per_caption"]["median"] is None and s["opening_summary_rate"] is None
    assert s["rejected"] == 2 and notes(s) == ["empty: no records (see the rejects)"]
    assert "no records" in write_report(s, tmp_path / "r")["html"].read_text()
    shard = sorted(folder_a.glob("*.parquet"))[0]
    shard.write_bytes(shard.read_bytes()[:500])  # cut off: no Parquet footer
    with pytest.raises(UserError, match="is unreadable"):  # PreparedDataset.open reads every footer
        compute_stats([folder_a])
