"""curate end to end on a small world with every fault planted: reasons, counts, kept keys, the
output contract, determinism over --workers, resume after SIGKILL, errors, and training on it."""

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
from curate_fixtures import make_world

from caption_debias.curate.options import MODEL_REASONS, REASONS, USER_REASONS, CurateOptions
from caption_debias.curate.run import curate
from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.schema import manifest_schema, removed_schema, shard_arrow_schema


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("world"))


def _opts(world, **kw) -> CurateOptions:
    base = dict(image_root=str(world["images"]), decontaminate=[f"urban1k={world['eval']}"], quiet=True)
    return CurateOptions(**{**base, **kw})


def _removed(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "removed.jsonl").read_text("utf-8").splitlines()]


@pytest.fixture(scope="module")
def curated(world, tmp_path_factory):
    out = tmp_path_factory.mktemp("curated") / "out"
    return out, curate([world["prepared"]], out, _opts(world))


def test_every_planted_fault_removed_with_its_reason_and_nothing_else(world, curated):
    out, manifest = curated
    got = {r["key"]: r["reason"] for r in _removed(out)}
    assert got == world["expected"]
    assert set(world["expected"].values()) == set(REASONS) - set(MODEL_REASONS) - set(
        USER_REASONS
    )  # model reasons: test_curate_scores.py; user: test_curate_keys.py
    kept = PreparedDataset.open(out).read(["key"]).column("key").to_pylist()
    assert kept == world["kept"]  # input order kept
    c = manifest["counts"]
    assert c["read"] == len(world["kept"]) + len(world["expected"]) == c["written"] + c["removed"]
    assert c["written"] == len(kept) and c["removed"] == len(got)
    assert list(c["removed_by_reason"]) == list(REASONS)
    for reason in REASONS:
        assert c["removed_by_reason"][reason] == sum(1 for v in world["expected"].values() if v == reason)
    funnel = manifest["curation"]["funnel"]
    assert funnel[0] == {"step": "read", "rows": c["read"]} and funnel[-1] == {"step": "written", "rows": c["written"]}


def test_details_name_the_match_and_the_similarity(curated):
    out, _ = curated
    by_key = {r["key"]: r for r in _removed(out)}
    assert by_key["table/byte_copy"]["detail"] == {"match": "table/c2", "by": "image sha256", "similarity": 1.0}
    resized = by_key["table/resized_copy"]["detail"]
    assert resized["match"] == "table/c3" and resized["by"] == "image phash" and resized["hamming"] <= 4
    assert by_key["table/same_caption"]["detail"]["match"] == "table/c4"
    near = by_key["table/near_caption"]["detail"]
    assert near["match"] == "table/c5" and near["by"] == "caption minhash" and 0.8 <= near["similarity"] < 1
    assert by_key["table/dropped_sentence"]["detail"]["match"] == "table/c6"
    assert by_key["table/eval_image"]["detail"]["match"].endswith("Urban1k/image/1.jpg")
    assert by_key["table/eval_caption"]["detail"]["match"] == "urban1k:caption 1"
    assert "truncated" in by_key["table/truncated_file"]["detail"]["error"]
    assert by_key["table/tiny"]["detail"] == {"width": 20, "height": 40}
    loop = by_key["table/phrase_loop"]["detail"]  # " with a red kite" three times, then " with": 13 tokens
    assert loop["caption_tail_loop"] == 13 and loop["caption_repetition"] <= 0.35
    assert by_key["table/repetitive"]["detail"]["caption_repeated_sentences"] == 4
    line = by_key["table/missing"]
    assert line["image"] == "sam/gone.jpg" and len(line["caption"]) <= 200 and line["input"]


def test_output_contract_schema_lineage_and_text_columns_unchanged(world, curated):
    out, manifest = curated
    jsonschema.validate(manifest, manifest_schema())
    for line in _removed(out):
        jsonschema.validate(line, removed_schema())
    for s in manifest["shards"]:
        assert pq.read_schema(out / s["path"]).remove_metadata().equals(shard_arrow_schema().remove_metadata())
    src = json.loads((world["prepared"] / "manifest.json").read_text())
    import hashlib

    lineage = manifest["inputs"][0]
    assert lineage["manifest_sha256"] == hashlib.sha256((world["prepared"] / "manifest.json").read_bytes()).hexdigest()
    assert lineage["read"] == src["counts"]["written"] and lineage["kind"] == "prepared"
    assert manifest["tokenizer"] == src["tokenizer"] and manifest["options"]["image_root"] == str(world["images"])
    th = manifest["curation"]["thresholds"]
    assert th["near_duplicate_jaccard"] == 0.8 and th["min_image_side"] == 32 and th["phash_hamming_max"] == 4
    cov = manifest["curation"]["image_coverage"]
    assert cov["sam/"]["missing"] == 1 and cov["sam/"]["examples"]["missing"] == ["sam/gone.jpg"]
    assert cov["coco/"]["unreadable"] == 1 and cov["coco/"]["examples"]["unreadable"] == ["coco/notimage.jpg"]
    # kept rows keep their text columns byte for byte; the new columns are filled
    text_cols = ["key", "source", "split", "image", "caption", "sentences", "sentence_spans", "sentence_tokens", "meta"]
    before = PreparedDataset.open(world["prepared"]).read(text_cols)
    after = PreparedDataset.open(out).read()
    keep = [before.column("key").to_pylist().index(k) for k in after.column("key").to_pylist()]
    assert after.select(text_cols).equals(before.take(keep))
    row = after.slice(0, 1).to_pylist()[0]
    assert row["image_width"] == 96 and row["image_height"] == 80 and len(row["image_sha256"]) == 64
    assert len(row["image_phash"]) == 16 and row["caption_truncated"] is False and row["image_bytes"] is None
    counts = dict(zip(after.column("key").to_pylist(), after.column("duplicate_count").to_pylist()))
    assert counts["table/c2"] == 1 and counts["table/c5"] == 1 and counts["table/c0"] == 0


def test_stats_export_and_eval_read_a_curated_folder(curated, tmp_path):
    from caption_debias.evaluate.benchmarks import load_benchmark
    from caption_debias.export.captions import export_captions
    from caption_debias.stats.compute import compute_stats

    out, manifest = curated
    stats = compute_stats([out])
    assert stats["records"] == manifest["counts"]["written"]
    export_captions(out, tmp_path / "captions.jsonl")
    assert len((tmp_path / "captions.jsonl").read_text().splitlines()) == manifest["counts"]["written"]
    data = load_benchmark(None, out)  # eval --data CURATED: the image root comes from the manifest
    assert len(data.captions) == manifest["counts"]["written"] and all(p.is_file() for p in data.images)


def test_same_bytes_for_any_workers_and_a_curated_input_curates_again(world, curated, tmp_path):
    out1, m1 = curated
    out2 = tmp_path / "w2"
    m2 = curate([world["prepared"]], out2, _opts(world, workers=2))
    assert m1["shards"] == m2["shards"] and m1["counts"] == m2["counts"]
    assert (out1 / "removed.jsonl").read_bytes() == (out2 / "removed.jsonl").read_bytes()
    again = curate([out1], tmp_path / "again", _opts(world))
    assert again["counts"]["removed"] == 0 and again["counts"]["written"] == m1["counts"]["written"]
    assert again["inputs"][0]["kind"] == "curated"


def test_two_inputs_earlier_folder_wins(world, tmp_path):
    import shutil

    second = tmp_path / "second"
    shutil.copytree(world["prepared"], second)
    m = curate([world["prepared"], second], tmp_path / "two", _opts(world, decontaminate=[]))
    lines = _removed(tmp_path / "two")
    from_second = [r for r in lines if r["input"] == str(second)]
    # every row of the second copy duplicates a row of the first (or was already removed for a row-local reason)
    assert len(from_second) == m["inputs"][1]["read"] and m["inputs"][1]["written"] == 0
    assert {r["reason"] for r in from_second} <= set(REASONS)
    dup = next(r for r in from_second if r["key"] == "table/c1")
    assert dup["reason"] == "duplicate_image" and dup["detail"]["match"] == "table/c1"


def test_keep_duplicate_images_and_no_image_root(world, tmp_path):
    m = curate([world["prepared"]], tmp_path / "k", _opts(world, keep_duplicate_images=True))
    got = {r["key"]: r["reason"] for r in _removed(tmp_path / "k")}
    assert "table/byte_copy" not in got and "table/resized_copy" not in got
    assert got["table/same_caption"] == "duplicate_caption" and m["counts"]["removed_by_reason"]["duplicate_image"] == 0
    m = curate([world["prepared"]], tmp_path / "t", CurateOptions(quiet=True))
    got = {r["key"]: r["reason"] for r in _removed(tmp_path / "t")}
    assert not {"image_missing", "image_unreadable", "image_too_small", "eval_overlap"} & set(got.values())
    assert got["table/near_caption"] == "near_duplicate_caption" and got["table/repetitive"] == "repetitive_caption"
    assert m["curation"]["image_coverage"] is None
    row = PreparedDataset.open(tmp_path / "t").read().slice(0, 1).to_pylist()[0]
    assert row["image_width"] is None and row["image_sha256"] is None and 0 <= row["caption_repetition"] < 0.35


def test_embed_images_stores_the_file_bytes(world, tmp_path):
    curate([world["prepared"]], tmp_path / "e", _opts(world, embed_images=True))
    t = PreparedDataset.open(tmp_path / "e").read(["image", "image_bytes"]).to_pylist()
    assert all(r["image_bytes"] == (world["images"] / r["image"]).read_bytes() for r in t)


def test_resume_reuses_and_refuses_other_options(world, curated, tmp_path):
    out = tmp_path / "r"
    first = curate([world["prepared"]], out, _opts(world))
    stamps = {p: p.stat().st_mtime_ns for p in (out / "shards").glob("*.parquet")}
    again = curate([world["prepared"]], out, _opts(world, workers=2))
    assert again["shards"] == first["shards"]
    assert {p: p.stat().st_mtime_ns for p in (out / "shards").glob("*.parquet")} == stamps
    with pytest.raises(UserError, match="near_duplicate_threshold"):
        curate([world["prepared"]], out, _opts(world, near_duplicate_threshold=0.9))
    m = curate([world["prepared"]], out, _opts(world, near_duplicate_threshold=0.9, overwrite=True))
    assert m["curation"]["thresholds"]["near_duplicate_jaccard"] == 0.9
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty"):
        curate([world["prepared"]], tmp_path / "busy", _opts(world))


cli = run_cli


def test_cli_summary_and_one_line_errors(world, tmp_path):
    ok = cli("curate", str(world["prepared"]), "--out", str(tmp_path / "c"), "--image-root", str(world["images"]))
    assert ok.returncode == 0, ok.stderr
    assert "near_duplicate_caption" in ok.stderr and "sam/gone.jpg" in ok.stderr and "written" in ok.stderr
    for args, needle in [
        (["curate", str(tmp_path / "nope"), "--out", str(tmp_path / "o")], "no such folder"),
        (["curate", str(world["prepared"]), "--out", str(tmp_path / "o"), "--decontaminate", "urban1k"], "NAME=PATH"),
        (["curate", str(world["prepared"]), "--out", str(tmp_path / "o"), "--decontaminate", "nope=/x"], "nope"),
        (
            ["curate", str(world["prepared"]), "--out", str(tmp_path / "o"), "--near-duplicate-threshold", "1.5"],
            "threshold",
        ),
        (["curate", str(world["prepared"]), "--out", str(world["prepared"])], "also --out"),
    ]:
        res = cli(*args)
        assert res.returncode != 0 and needle in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_sigkill_then_rerun_gives_identical_output(world, curated, tmp_path):
    import shutil

    # a bigger input so the kill lands mid-run: the world's folder three times
    copies = []
    for i in range(3):
        copies.append(tmp_path / f"in{i}")
        shutil.copytree(world["prepared"], copies[-1])
    args = ["curate", *map(str, copies), "--out", str(tmp_path / "killed"), "--image-root", str(world["images"]), "-q"]
    proc = subprocess.Popen([sys.executable, "-m", "caption_debias.cli.main", *args], stderr=subprocess.PIPE)
    sig_dir = tmp_path / "killed" / ".curate" / "signals"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(sig_dir.glob("part-*.json"))) < 2:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (tmp_path / "killed" / "manifest.json").exists()
    # a signals file counts as finished only with its sidecar (a kill between the two redoes it by design)
    done = {p.name: p.stat().st_mtime_ns for p in sig_dir.glob("part-*.parquet") if p.with_suffix(".json").exists()}
    assert cli(*args).returncode == 0
    reused = {p.name: p.stat().st_mtime_ns for p in sig_dir.glob("part-*.parquet") if p.name in done}
    assert reused == done  # finished signal files were not redone
    assert not [p for p in (tmp_path / "killed").rglob("*") if ".tmp-" in p.name]
    clean = curate(copies, tmp_path / "clean", CurateOptions(image_root=str(world["images"]), quiet=True))
    killed = json.loads((tmp_path / "killed" / "manifest.json").read_text())
    assert killed["shards"] == clean["shards"] and killed["counts"] == clean["counts"]
    assert (tmp_path / "killed/removed.jsonl").read_bytes() == (tmp_path / "clean/removed.jsonl").read_bytes()


def test_folder_lock_held_for_the_run(world, tmp_path):
    from caption_debias.locking import FolderLocked, folder_lock

    with folder_lock(tmp_path / "locked", "test"):
        with pytest.raises(FolderLocked):
            curate([world["prepared"]], tmp_path / "locked", _opts(world))


@pytest.mark.slow
def test_a_curated_folder_trains(world, curated, tmp_path):
    pytest.importorskip("torch")
    out, _ = curated
    res = cli(
        "train", str(out), "--image-root", str(world["images"]), "--model", "tiny", "--max-steps", "2",
        "--batch-size", "4", "--precision", "fp32", "--no-tensorboard", "--out", str(tmp_path / "run"), "--quiet",
        timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert metrics and all(m.get("skipped_images", 0) == 0 for m in metrics)


def test_stats_report_of_a_curated_folder_has_funnel_coverage_and_sizes(world, curated, tmp_path):
    from caption_debias.stats.compute import compute_stats
    from caption_debias.stats.report import write_report

    out, manifest = curated
    stats = compute_stats([out, world["prepared"]])
    cur = stats["datasets"][0]["curation"]
    assert "curation" not in stats["datasets"][1]  # a prepared folder has none
    assert cur["removed_by_reason"] == manifest["counts"]["removed_by_reason"]
    assert cur["funnel"] == manifest["curation"]["funnel"] and cur["image_coverage"]["sam/"]["missing"] == 1
    sizes = cur["image_sizes"]
    assert sizes["images"] == manifest["counts"]["written"] and sizes["shorter_side"]["median"] == 80
    assert sizes["shorter_side_histogram"]["64-127"] == sizes["images"]
    files = write_report(stats, tmp_path / "report")
    html = files["html"].read_text("utf-8")
    assert "Removal funnel" in html and "Image coverage per image folder" in html and "Shorter image side" in html
    assert "sam/gone.jpg" in html and html.count("data:image/png;base64") == 5 + 3
    saved = json.loads(files["stats"].read_text("utf-8"))
    assert saved["datasets"][0]["curation"]["image_sizes"] == sizes
    md = files["markdown"].read_text("utf-8")
    assert "## Curation" in md and "plots/curation_funnel.png" in md


def test_sharegpt4v_1k_images_are_looked_up_under_the_image_root(world, tmp_path):
    # Long-CLIP's held-out set: the first records of the very file people train on
    records = [
        {"id": f"v{i}", "image": f"sam/c{i}.jpg", "conversations": [{"from": "gpt", "value": f"Held out {i}."}]}
        for i in (0, 2)
    ]
    (tmp_path / "share.json").write_text(json.dumps(records), "utf-8")
    m = curate(
        [world["prepared"]], tmp_path / "d", _opts(world, decontaminate=[f"sharegpt4v-1k={tmp_path / 'share.json'}"])
    )
    lines = {r["key"]: r for r in _removed(tmp_path / "d") if r["reason"] == "eval_overlap"}
    # byte_copy is a copy of c2's file, so it shows the eval image too
    assert set(lines) == {"table/c0", "table/c2", "table/byte_copy"}
    assert lines["table/c0"]["detail"]["by"] == "image sha256"
    assert lines["table/c0"]["detail"]["match"] == f"sharegpt4v-1k:{world['images'] / 'sam/c0.jpg'}"
    assert m["curation"]["decontaminate"][0]["images_compared"] == 2


def test_an_input_without_rows_gives_an_empty_curated_folder(tmp_path):
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    (tmp_path / "t.jsonl").write_text('{"key": "a", "image": "x.jpg", "caption": ""}\n', "utf-8")
    prepare([tmp_path / "t.jsonl"], tmp_path / "p", PrepareOptions(format="table", quiet=True))
    m = curate([tmp_path / "p"], tmp_path / "c", CurateOptions(quiet=True))
    assert m["counts"]["read"] == m["counts"]["written"] == m["counts"]["removed"] == 0 and m["shards"] == []
    assert (tmp_path / "c" / "removed.jsonl").read_text() == ""


def test_curate_needs_no_optional_package(world, tmp_path):
    from install_support import OPTIONAL, cli_imports

    args = ["curate", str(world["prepared"]), "--out", str(tmp_path / "c"), "--image-root", str(world["images"])]
    got, err = cli_imports([*args, "--decontaminate", f"urban1k={world['eval']}", "-q"], OPTIONAL)
    assert got == {"code": 0, "imported": [], "integrations": []}, err


@pytest.mark.parametrize("threshold", [0.6, 0.8])
def test_near_duplicates_at_the_threshold_are_found_whatever_the_threshold(tmp_path, threshold):
    # copies whose 3-gram Jaccard with their original lies just above the threshold: the LSH bands
    # follow the threshold (a fixed 20 x 8 made a pair at 0.6-0.7 a candidate only 25-70% of the time)
    import random

    import numpy as np
    from curate_fixtures import caption

    from caption_debias.curate import minhash
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.text.tokenize import get_tokenizer

    tok = get_tokenizer()
    rng = random.Random(11)
    rows, copies = [], []
    extra = "zebra violin anchor meadow lantern copper walnut saffron glacier orchid".split()
    while len(copies) < 40:
        original = caption(rng, 8)
        words = original.split(" ")
        for _ in range(100):  # change words until the exact Jaccard is just above the threshold
            changed = list(words)
            for j in rng.sample(range(1, len(words) - 1), rng.randrange(1, 16)):
                changed[j] = rng.choice(extra)
            copy = " ".join(changed)
            a, b = tok.encode(original), tok.encode(copy)
            if threshold + 0.02 <= minhash.jaccard(minhash.shingles(a), minhash.shingles(b)) < threshold + 0.08:
                break
        else:
            continue
        # the definition is the estimate: keep pairs whose estimate is at or above the threshold too
        off = np.array([0, len(a), len(a) + len(b)])
        sigs = minhash.signatures(*minhash.shingle_hashes(np.array(a + b, np.int32), off))
        if minhash.estimate(sigs[0], sigs[1]) < threshold:
            continue
        i = len(rows)
        rows += [{"key": f"o{i}", "image": f"x/o{i}.jpg", "caption": original}]
        rows += [{"key": f"d{i}", "image": f"x/d{i}.jpg", "caption": copy}]
        copies.append(f"table/d{i}")
    table = tmp_path / "t.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([table], tmp_path / "p", PrepareOptions(format="table", quiet=True))
    m = curate([tmp_path / "p"], tmp_path / "c", CurateOptions(quiet=True, near_duplicate_threshold=threshold))
    got = {r["key"]: r["reason"] for r in _removed(tmp_path / "c")}
    assert sorted(got) == sorted(copies) and set(got.values()) == {"near_duplicate_caption"}
    lsh = m["curation"]["thresholds"]["minhash"]
    b, r = lsh["bands"], lsh["rows_per_band"]
    assert 1 - (1 - threshold**r) ** b >= 0.99 and b * r <= lsh["num_perm"]
