"""prepare end to end: the output contract, bad input, resume, --workers determinism, SIGKILL and rerun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pyarrow.parquet as pq
import pytest
from cli_process import run_cli
from input_fixtures import CAPTIONS, write_sharegpt

from caption_debias.dataset import PreparedDataset
from caption_debias.errors import IncompleteInput, UserError
from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.run import prepare
from caption_debias.prepare.writer import sha256_file
from caption_debias.schema import manifest_schema, reject_schema, shard_arrow_schema
from caption_debias.text.tokenize import get_tokenizer


def write_table(path: Path) -> None:
    rows = [
        {"image": f"img/{i}.jpg", "caption": c, **({"key": f"k{i}"} if i != 2 else {})} for i, c in enumerate(CAPTIONS)
    ]
    rows.append({"image": "/abs.jpg", "caption": "Absolute."})
    rows.append({"image": "a.jpg", "caption": 42})
    rows.append({"image": "dup.jpg", "caption": "Same key again.", "key": "k0"})
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + "{broken\n", encoding="utf-8")


def opts(**kw) -> PrepareOptions:
    return PrepareOptions(quiet=True, **kw)


def test_output_contract(tmp_path):
    src = tmp_path / "t.jsonl"
    write_table(src)
    out = tmp_path / "out"
    manifest = prepare([src], out, opts(format="table", shard_rows=2))

    jsonschema.validate(manifest, manifest_schema())
    assert json.loads((out / "manifest.json").read_text()) == manifest
    c = manifest["counts"]
    assert (c["read"], c["written"], c["rejected"], c["duplicate_keys"]) == (8, 5, 3, 1)
    entry = manifest["inputs"][0]
    assert (entry["path"], entry["format"], entry["read"], entry["written"], entry["rejected"]) == (
        str(src),
        "table",
        8,
        5,
        3,
    )
    assert manifest["complete"] is True
    assert manifest["options"]["shard_rows"] == 2 and manifest["options"]["segmenter"] == "fast"
    for part in ("tokenizer", "segmenter", "summary"):
        assert manifest[part]
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    for r in rejects:
        jsonschema.validate(r, reject_schema())
    assert sorted(r["reason"].split(":")[0] for r in rejects) == [
        "absolute image path",
        "broken JSON line",
        "non-string caption",
    ]
    assert sum(manifest["counts"]["rejects_by_reason"].values()) == c["rejected"] == len(rejects)

    # shards: 3 of at most 2 rows, listed with exact sha256, zstd, the schema's columns and types
    assert [s["rows"] for s in manifest["shards"]] == [2, 2, 1]
    for s in manifest["shards"]:
        path = out / s["path"]
        assert sha256_file(path) == s["sha256"]
        meta = pq.ParquetFile(path).metadata
        assert meta.row_group(0).column(0).compression == "ZSTD"
        assert pq.read_schema(path).remove_metadata().equals(shard_arrow_schema().remove_metadata())
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]

    rows = PreparedDataset.open(out).read().to_pylist()
    assert [r["key"] for r in rows] == ["table/k0", "table/k1", "table/t:3", "table/k3", "table/k0#2"]
    assert rows[0]["caption"] == CAPTIONS[0]
    tok = get_tokenizer()
    for row in rows:
        assert row["source"] == "table" and row["split"] is None
        assert row["sentences"] and all(s == s.strip() and s for s in row["sentences"])
        assert [row["caption"][sp["start"] : sp["end"]].strip() for sp in row["sentence_spans"]] == row["sentences"]
        assert row["sentence_tokens"] == [tok.encode(s) for s in row["sentences"]]
        assert row["num_tokens"] == len(tok.encode(row["caption"])) + 2
        assert len(row["summary_mask"]) == len(row["summary_scores"]) == len(row["sentences"])
        assert all(0.0 <= x <= 1.0 for x in row["summary_scores"])
        assert json.loads(row["meta"])["input"] == str(src)
    assert rows[0]["sentences"][0] == "The image shows a harbour at dusk."
    assert rows[0]["summary_mask"][0] is True


def test_sentence_tokens_match_open_clip(tmp_path):
    from open_clip.tokenizer import SimpleTokenizer

    src = tmp_path / "t.jsonl"
    write_table(src)
    prepare([src], tmp_path / "out", opts())
    reference = SimpleTokenizer()
    for row in PreparedDataset.open(tmp_path / "out").read(["sentences", "sentence_tokens"]).to_pylist():
        assert row["sentence_tokens"] == [reference.encode(s) for s in row["sentences"]]


def test_same_rows_and_shards_whatever_workers(tmp_path):
    src = tmp_path / "s.json"
    write_sharegpt(src, 120, bad_every=9)
    one = prepare([src], tmp_path / "w1", opts(shard_rows=16, workers=1))
    two = prepare([src], tmp_path / "w2", opts(shard_rows=16, workers=2))
    assert one["shards"] == two["shards"]  # same paths, rows and sha256: identical bytes
    assert one["counts"] == two["counts"] and one["counts"]["rejected"] == 28 and one["counts"]["duplicate_keys"] == 1
    assert (tmp_path / "w1/rejects.jsonl").read_bytes() == (tmp_path / "w2/rejects.jsonl").read_bytes()


def test_resume_reuses_shards_refuses_other_options_and_overwrite_restarts(tmp_path):
    src = tmp_path / "s.json"
    write_sharegpt(src, 40)
    out = tmp_path / "out"
    first = prepare([src], out, opts(shard_rows=10))
    stamps = {p: p.stat().st_mtime_ns for p in (out / "shards").iterdir()}
    again = prepare([src], out, opts(shard_rows=10, workers=2))  # workers may change on resume
    assert again["shards"] == first["shards"]
    assert {p: p.stat().st_mtime_ns for p in (out / "shards").iterdir()} == stamps  # nothing redone
    with pytest.raises(UserError, match="different options.*shard_rows"):
        prepare([src], out, opts(shard_rows=7))
    redone = prepare([src], out, opts(shard_rows=7, overwrite=True))
    assert [s["rows"] for s in redone["shards"]] == [7] * 5 + [5]
    assert sorted(p.name for p in (out / "shards").iterdir()) == [f"part-{i:05d}.parquet" for i in range(6)]


def test_output_folder_with_other_files_is_refused(tmp_path):
    src = tmp_path / "s.json"
    write_sharegpt(src, 3)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty"):
        prepare([src], tmp_path / "busy", opts())
    # a run killed before writing its state leaves only its own folders: a rerun starts afresh
    (tmp_path / "early" / ".prepare").mkdir(parents=True)
    (tmp_path / "early" / "shards").mkdir()
    assert prepare([src], tmp_path / "early", opts())["counts"]["written"] == 3


def test_cut_off_input_keeps_records_then_raises(tmp_path):
    src = tmp_path / "s.json"
    write_sharegpt(src, 20)
    data = src.read_bytes()
    src.write_bytes(data[: len(data) * 2 // 3])
    other = tmp_path / "t.jsonl"
    write_table(other)
    out = tmp_path / "out"
    with pytest.raises(IncompleteInput, match="cut off"):
        prepare([src, other], out, opts(shard_rows=5))
    manifest = json.loads((out / "manifest.json").read_text())
    jsonschema.validate(manifest, manifest_schema())
    assert manifest["complete"] is False
    cut, table = manifest["inputs"]
    assert cut["complete"] is False and table["complete"] is True and table["written"] == 5 and table["rejected"] == 3
    assert 10 <= cut["written"] < 20 and cut["rejected"] == 1 and cut["read"] == cut["written"] + 1
    last = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines() if str(src) in line][-1]
    assert last["reason"].startswith("truncated input") and isinstance(last["location"], int)


cli = run_cli


def test_cli_errors_are_one_line(tmp_path):
    src = tmp_path / "s.json"
    write_sharegpt(src, 6)
    missing = cli("prepare", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o1"))
    assert missing.returncode != 0 and "nope.json" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    bad_format = cli("prepare", str(src), "--out", str(tmp_path / "o2"), "--format", "xml")
    assert bad_format.returncode != 0 and "xml" in bad_format.stderr and "Traceback" not in bad_format.stderr
    ok = cli("prepare", str(src), "--out", str(tmp_path / "o0"))
    assert ok.returncode == 0 and ok.stdout == ""
    assert (
        "records read 6, written 6, rejected 0" in ok.stderr and "\x1b[" not in ok.stderr
    )  # summary, no bar in a pipe
    src.write_bytes(src.read_bytes()[:-40])
    cut = cli("prepare", str(src), "--out", str(tmp_path / "o3"), "--quiet")
    assert cut.returncode == 3 and len(cut.stderr.strip().splitlines()) == 1 and "cut off" in cut.stderr
    assert json.loads((tmp_path / "o3/manifest.json").read_text())["complete"] is False


def test_sigkill_then_rerun_gives_identical_rows_without_redoing_shards(tmp_path):
    src = tmp_path / "s.json"
    write_sharegpt(src, 1500, bad_every=50)
    args = ["prepare", str(src), "--out", str(tmp_path / "killed"), "--shard-rows", "20", "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "caption_debias.cli.main", *args], stderr=subprocess.PIPE)
    state = tmp_path / "killed" / ".prepare"
    deadline = time.monotonic() + 90
    while len(list(state.glob("part-*.json"))) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (tmp_path / "killed" / "manifest.json").exists()
    # Finished = shard plus sidecar: a shard renamed just before the kill, without its sidecar, is redone by design.
    finished = {p.stem for p in state.glob("part-*.json")}
    done = {
        p.name: p.stat().st_mtime_ns
        for p in (tmp_path / "killed" / "shards").glob("part-*.parquet")
        if p.stem in finished
    }
    assert done

    rerun = cli(*args)
    assert rerun.returncode == 0, rerun.stderr
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "killed" / "shards").glob("part-*.parquet")}
    assert all(after[name] == stamp for name, stamp in done.items())  # finished shards were not redone
    assert not [p for p in (tmp_path / "killed").rglob("*") if ".tmp-" in p.name]

    clean = prepare([src], tmp_path / "clean", opts(shard_rows=20))
    killed = json.loads((tmp_path / "killed" / "manifest.json").read_text())
    assert killed["shards"] == clean["shards"] and killed["counts"] == clean["counts"]
    assert PreparedDataset.open(tmp_path / "killed").read().equals(PreparedDataset.open(tmp_path / "clean").read())
    assert (tmp_path / "killed/rejects.jsonl").read_bytes() == (tmp_path / "clean/rejects.jsonl").read_bytes()


def test_every_folder_format_in_one_run_auto_detected(tmp_path):
    from input_fixtures import write_dci

    write_dci(tmp_path / "dci" / "densely_captioned_images")
    urban = tmp_path / "Urban1k"
    (urban / "image").mkdir(parents=True)
    (urban / "caption").mkdir()
    (urban / "image" / "1.jpg").write_bytes(b"jpg")
    (urban / "caption" / "1.txt").write_text("A busy street. Red cars.\n")
    docci = tmp_path / "docci" / "docci_descriptions.jsonlines"
    docci.parent.mkdir()
    docci.write_text(
        json.dumps(
            {
                "example_id": "test_00001",
                "split": "test",
                "image_file": "test_00001.jpg",
                "description": "A lamp on a desk.",
            }
        )
        + "\n"
    )
    coco = tmp_path / "captions_val2017.json"
    coco.write_text(
        json.dumps(
            {
                "images": [{"id": 1, "file_name": "1.jpg"}],
                "annotations": [{"id": 5, "image_id": 1, "caption": "A cat."}],
            }
        )
    )
    inputs = [tmp_path / "dci", urban, docci.parent, coco]
    manifest = prepare(inputs, tmp_path / "out", opts())
    assert [(i["format"], i["written"], i["rejected"]) for i in manifest["inputs"]] == [
        ("dci", 2, 1),
        ("urban1k", 1, 0),
        ("docci", 1, 0),
        ("coco", 1, 0),
    ]
    rows = PreparedDataset.open(tmp_path / "out").read(["key", "split", "image"]).to_pylist()
    assert [(r["key"], r["split"], r["image"]) for r in rows] == [
        ("dci/1-data", "train", "photos/sa_1.jpg"),
        ("dci/2-data", "test", "photos/sa_2.jpg"),
        ("urban1k/1", None, "image/1.jpg"),
        ("docci/test_00001", "test", "images/test_00001.jpg"),
        ("coco/5", "val2017", "1.jpg"),
    ]


def test_disk_error_mid_input_is_a_fatal_reject_not_a_traceback(tmp_path, monkeypatch):
    from caption_debias import readers
    from caption_debias.records import Record

    def failing_reader(path, name, options):
        yield Record("table", name, 1, "a", "a.jpg", "A first caption.")
        raise OSError(5, "Input/output error")

    monkeypatch.setitem(readers.READERS, "table", failing_reader)
    src = tmp_path / "t.jsonl"
    src.write_text("{}\n")
    with pytest.raises(IncompleteInput):
        prepare([src], tmp_path / "out", opts(format="table"))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (manifest["counts"]["written"], manifest["counts"]["rejected"], manifest["complete"]) == (1, 1, False)
    reject = json.loads((tmp_path / "out" / "rejects.jsonl").read_text())
    assert reject["reason"].startswith("truncated input: read error (OSError")


def test_mostly_rejects_input_is_chunked_too(tmp_path):
    src = tmp_path / "t.jsonl"
    lines = [json.dumps({"image": "a.jpg", "caption": ""}) for _ in range(25)]
    lines += [json.dumps({"image": f"{i}.jpg", "caption": f"Caption {i}."}) for i in range(3)]
    src.write_text("\n".join(lines) + "\n")
    manifest = prepare([src], tmp_path / "out", opts(shard_rows=10))
    assert len(list((tmp_path / "out" / ".prepare").glob("part-*.json"))) == 3  # 10 + 10 + (5 rejects, 3 rows)
    assert [s["rows"] for s in manifest["shards"]] == [3] and manifest["counts"]["rejected"] == 25
