"""export-captions and urls over a prepared folder."""

from __future__ import annotations

import json
import shlex

import pyarrow.parquet as pq
import pytest
from cli_process import run_cli
from folder_factory import write_folder

from caption_debias.errors import UserError
from caption_debias.export.captions import export_captions
from caption_debias.export.urls import write_url_list
from caption_debias.text.tokenize import get_tokenizer

ROWS = [
    # key, image, sentences, summary mask (the first row also has a flagged closing sentence)
    (
        "t/a",
        "imgs/a.jpg",
        ["The image shows a red bus.", "It is parked\tby a tree.", "A man waits.", "Overall, a calm street."],
        [True, False, False, True],
    ),
    ("t/b", "http://host/b.jpg", ["A photo of a cat.", "The cat is black.", "It sleeps."], [True, False, False]),
    ("t/c", "file:///data/c.jpg", ["Only one sentence here."], [True]),
]


def write_prepared(folder, rows=ROWS):
    """A prepared folder written with the shard schema directly (the text columns from the real tokenizer)."""
    tok = get_tokenizer()
    table_rows = []
    for key, image, sentences, mask in rows:
        caption = "\n".join(sentences)
        spans, at = [], 0
        for s in sentences:
            start = caption.index(s, at)
            spans.append({"start": start, "end": start + len(s)})
            at = start + len(s)
        table_rows.append(
            {
                "key": key,
                "source": "table",
                "split": None,
                "image": image,
                "caption": caption,
                "sentences": sentences,
                "sentence_spans": spans,
                "sentence_tokens": tok.encode_batch(sentences),
                "num_tokens": len(tok.encode(caption)) + 2,
                "summary_mask": mask,
                "summary_scores": [1.0 if m else 0.0 for m in mask],
                "meta": "{}",
            }
        )
    return write_folder(folder, table_rows)


@pytest.fixture
def prepared(tmp_path):
    return write_prepared(tmp_path / "prep")


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def test_strip_modes(prepared, tmp_path):
    res = export_captions(prepared, tmp_path / "s.jsonl", strip="summary")
    rows = read_jsonl(tmp_path / "s.jsonl")
    assert [r["caption"] for r in rows] == [
        "It is parked\tby a tree. A man waits.",
        "The cat is black. It sleeps.",
        "Only one sentence here.",
    ]
    assert res["fallback_full_caption"] == 1 and res["images"] == res["rows"] == 3
    export_captions(prepared, tmp_path / "o.jsonl", strip="opening")
    assert (
        read_jsonl(tmp_path / "o.jsonl")[0]["caption"]
        == "It is parked\tby a tree. A man waits. Overall, a calm street."
    )
    export_captions(prepared, tmp_path / "n.jsonl", strip="none")
    assert read_jsonl(tmp_path / "n.jsonl")[0]["caption"] == "\n".join(ROWS[0][2])


def test_open_clip_csv_reads_back_with_pandas_as_open_clip_does(prepared, tmp_path):
    import pandas as pd

    out = tmp_path / "train.csv"
    export_captions(prepared, out, strip="none", image_root="/data/root")
    df = pd.read_csv(out, sep="\t")  # open_clip's CsvDataset
    assert list(df.columns) == ["filepath", "title"]
    assert df["filepath"].tolist() == ["/data/root/imgs/a.jpg", "http://host/b.jpg", "file:///data/c.jpg"]
    assert df["title"][0] == "\n".join(ROWS[0][2])  # tab and newlines survive quoting


def test_debias_augment_copies_are_subsets_deterministic_per_key(prepared, tmp_path):
    res = export_captions(prepared, tmp_path / "a.parquet", augment="debias", copies=5, seed=3, strip="opening")
    table = pq.read_table(tmp_path / "a.parquet").to_pylist()
    assert res["rows"] == len(table) == 15 and res["fallback_full_caption"] == 5  # one-sentence row, 5 copies
    pool = set(ROWS[0][2][1:])
    variants = [r["caption"] for r in table if r["key"] == "t/a"]
    assert [r["copy"] for r in table if r["key"] == "t/a"] == [0, 1, 2, 3, 4]
    for text in variants:
        picked = [s for s in ROWS[0][2] if s in text]
        assert picked and set(picked) <= pool  # the opening sentence never appears
        assert len(text) == len(" ".join(picked))
    assert len(set(variants)) > 1  # sub-sampling varies across copies
    # Same seed -> same variants even when the row order changes; another seed differs somewhere.
    other = write_prepared(tmp_path / "rev", list(reversed(ROWS)))
    export_captions(other, tmp_path / "b.parquet", augment="debias", copies=5, seed=3, strip="opening")
    again = {(r["key"], r["copy"]): r["caption"] for r in pq.read_table(tmp_path / "b.parquet").to_pylist()}
    assert all(again[(r["key"], r["copy"])] == r["caption"] for r in table)
    export_captions(prepared, tmp_path / "c.parquet", augment="debias", copies=5, seed=4, strip="opening")
    assert [r["caption"] for r in pq.read_table(tmp_path / "c.parquet").to_pylist()] != [r["caption"] for r in table]


def test_bad_options_are_one_line_errors(prepared, tmp_path):
    with pytest.raises(UserError, match="--copies needs --augment debias"):
        export_captions(prepared, tmp_path / "x.jsonl", copies=3)
    with pytest.raises(UserError, match="cannot tell the format"):
        export_captions(prepared, tmp_path / "x.txt")
    with pytest.raises(UserError, match="not a prepared folder"):
        export_captions(tmp_path, tmp_path / "x.jsonl")
    export_captions(prepared, tmp_path / "x.jsonl")
    with pytest.raises(UserError, match="already exists"):
        export_captions(prepared, tmp_path / "x.jsonl")


def test_url_list_and_command(prepared, tmp_path):
    res = write_url_list(prepared, tmp_path / "list.parquet", images=tmp_path / "imgs")
    table = pq.read_table(tmp_path / "list.parquet")
    assert table.column_names == ["caption_key", "url", "caption"]
    assert table.column("caption_key").to_pylist() == ["t/b", "t/c"]
    assert res["rows"] == 2 and res["skipped_not_url"] == 1  # the file-path row is counted, not dropped silently
    argv = shlex.split(res["command"])
    assert argv[0] == "img2dataset" and argv[argv.index("--url_list") + 1] == str(tmp_path / "list.parquet")
    assert json.loads(argv[argv.index("--save_additional_columns") + 1]) == ["caption_key"]


def test_cli_export_captions_and_urls(prepared, tmp_path):
    done = run_cli("export-captions", str(prepared), "--out", str(tmp_path / "e.tsv"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["format"] == "open_clip-csv"
    done = run_cli("urls", str(prepared), "--out", str(tmp_path / "u.parquet"))
    assert done.returncode == 0 and "img2dataset --url_list" in done.stdout
    bad = run_cli("export-captions", str(prepared), "--out", str(tmp_path / "e2.tsv"), "--strip", "middle")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "unknown --strip" in bad.stderr


def test_url_list_with_stripped_captions_for_webdataset_trainers(prepared, tmp_path):
    res = write_url_list(prepared, tmp_path / "s.parquet", strip="summary")
    captions = pq.read_table(tmp_path / "s.parquet").column("caption").to_pylist()
    assert captions == ["The cat is black. It sleeps.", "Only one sentence here."]  # what KEY.txt will hold
    assert res["fallback_full_caption"] == 1
    with pytest.raises(UserError, match="unknown --strip"):
        write_url_list(prepared, tmp_path / "t.parquet", strip="middle")


def test_on_a_folder_written_by_prepare(tmp_path):
    """The same export over real prepare() output (--summary first: s1 is the flagged summary)."""
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    table = tmp_path / "t.jsonl"
    table.write_text(
        json.dumps(
            {"key": "a", "image": "a.jpg", "caption": "A red bus on a street. It is parked.\n\nA man waits nearby."}
        )
        + "\n"
    )
    prepare([table], tmp_path / "p", PrepareOptions(format="table", summary="first", quiet=True))
    export_captions(tmp_path / "p", tmp_path / "s.jsonl", strip="summary")
    export_captions(tmp_path / "p", tmp_path / "o.jsonl", strip="opening")
    assert read_jsonl(tmp_path / "s.jsonl") == read_jsonl(tmp_path / "o.jsonl")
    assert read_jsonl(tmp_path / "s.jsonl")[0] == {
        "key": "table/a",
        "image": "a.jpg",
        "caption": "It is parked. A man waits nearby.",
        "copy": 0,
    }


def test_the_options_objects_write_what_the_keyword_calls_write(prepared, tmp_path):
    from caption_debias.export.captions import run_export_captions
    from caption_debias.export.options import ExportCaptionsOptions, UrlsOptions
    from caption_debias.export.urls import run_urls

    kw = dict(strip="opening", augment="debias", copies=2, seed=3, image_root="/imgs")
    export_captions(prepared, tmp_path / "a.jsonl", **kw)
    run_export_captions(prepared, tmp_path / "b.jsonl", ExportCaptionsOptions(**kw, quiet=True))
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    res = run_urls(
        prepared, tmp_path / "u.parquet", UrlsOptions(image_size=128, threads=4, strip="summary", quiet=True)
    )
    argv = shlex.split(res["command"])
    assert argv[argv.index("--image_size") + 1] == "128" and argv[argv.index("--thread_count") + 1] == "4"
    assert res["strip"] == "summary"
    for bad, error in [
        (ExportCaptionsOptions(format="xml"), "unknown --format 'xml'"),
        (ExportCaptionsOptions(copies=2), "--copies needs --augment debias"),
        (UrlsOptions(strip="middle"), "unknown --strip 'middle'"),
    ]:
        with pytest.raises(UserError, match=error):
            bad.validate()
