"""caption-debias score: the signals equal open_clip's own encodes, the folder contract, identity over
--workers and engines, resume after SIGKILL, bad images, long captions, embeddings, CLI errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("open_clip")


from pictures import noise, write
from score_fixtures import ROWS, SHARD_ROWS, score_opts

from caption_debias.dataset import PreparedDataset
from caption_debias.score.run import score_folder


@pytest.fixture(scope="module")
def scored(score_world, tmp_path_factory):
    out = tmp_path_factory.mktemp("scored") / "out"
    manifest = score_folder([score_world["prepared"]], out, score_opts(score_world))
    return out, manifest


def _open_clip_embeddings(score_world):
    """Image and text embeddings by plain open_clip: PIL open, its preprocess, its tokenizer."""
    import open_clip
    import torch
    import torch.nn.functional as F
    from PIL import Image

    from caption_debias.model.load import register_shipped_configs

    register_shipped_configs()
    model, _, preprocess = open_clip.create_model_and_transforms("tiny", pretrained=str(score_world["weights"]))
    tokenizer = open_clip.get_tokenizer("tiny")
    model.eval()
    with torch.no_grad():
        images = torch.stack(
            [preprocess(Image.open(score_world["images"] / i).convert("RGB")) for i, _ in score_world["rows"]]
        )
        img = F.normalize(model.encode_image(images), dim=-1).numpy()
        caps = F.normalize(model.encode_text(tokenizer([" ".join(s) for _, s in score_world["rows"]])), dim=-1).numpy()
        sents = [F.normalize(model.encode_text(tokenizer(s)), dim=-1).numpy() for _, s in score_world["rows"]]
    return img, caps, sents


def test_scores_equal_open_clips_own_encodes(score_world, scored):
    from caption_debias.score.signals import row_signals

    out, manifest = scored
    table = PreparedDataset.open(out).read().to_pylist()
    assert len(table) == ROWS and manifest["counts"] == {
        "read": ROWS,
        "written": ROWS,
        "removed": 0,
        "removed_by_reason": {"image_missing": 0, "image_unreadable": 0},
    }
    img, caps, sents = _open_clip_embeddings(score_world)
    # the reference sample: the rows the run recorded (seeded), compared against by the one-row rule
    import pyarrow.parquet as pq

    ref = pq.read_table(out / ".score/reference.parquet").to_pydict()
    assert len(ref["order"]) == ROWS  # fewer rows than --reference-images: all of them
    reference = img[ref["order"]]
    for i, row in enumerate(table):
        assert row["clip_score"] == pytest.approx(float(caps[i] @ img[i]), abs=2e-5)
        assert len(row["sentence_scores"]) == len(row["sentences"]) == len(score_world["rows"][i][1])
        np.testing.assert_allclose(row["sentence_scores"], sents[i] @ img[i], atol=2e-5)
        excluded = np.array([im == row["image"] for im in ref["image"]])
        _, _, grounding = row_signals(img[i], caps[i], sents[i], reference, excluded)
        np.testing.assert_allclose(row["sentence_grounding"], grounding, rtol=1e-3, atol=1e-3)
        assert row["image_embedding"] is None and row["caption_embedding"] is None
        assert row["caption"] == " ".join(score_world["rows"][i][1])  # text columns copied untouched


@pytest.mark.parametrize("precision", ["bf16", "amp"])
def test_reduced_precision_scores_near_fp32(score_world, scored, tmp_path, precision):
    """--precision bf16 (weights and inputs) and amp (autocast) on CPU: the GPU modes' code path; the
    scores move by bf16 rounding only, and the manifest records the precision."""
    out, _ = scored
    manifest = score_folder(
        [score_world["prepared"]], tmp_path / precision, score_opts(score_world, precision=precision)
    )
    assert manifest["counts"]["written"] == ROWS and manifest["scoring"]["precision"] == precision
    want = PreparedDataset.open(out).read(["clip_score", "sentence_scores"]).to_pylist()
    got = PreparedDataset.open(tmp_path / precision).read(["clip_score", "sentence_scores"]).to_pylist()
    for a, b in zip(want, got):
        assert b["clip_score"] == pytest.approx(a["clip_score"], abs=0.03)
        np.testing.assert_allclose(b["sentence_scores"], a["sentence_scores"], atol=0.03)
    assert any(a["clip_score"] != b["clip_score"] for a, b in zip(want, got))  # it did run at another precision


def test_manifest_names_the_model_and_counts_long_captions(score_world, scored):
    import hashlib

    import jsonschema

    from caption_debias.schema import manifest_schema

    out, manifest = scored
    jsonschema.validate(manifest, manifest_schema())
    model = manifest["scoring"]["model"]
    assert (
        model["name"] == "tiny" and model["pretrained"] == str(score_world["weights"]) and model["context_length"] == 77
    )
    assert len(model["weights_sha256"]) == 64
    assert manifest["scoring"]["captions_over_context"] == 2  # the two captions with the long sentence
    assert manifest["scoring"]["sentences_over_context"] == 0
    assert manifest["scoring"]["reference"]["size"] == ROWS
    assert (
        manifest["inputs"][0]["manifest_sha256"]
        == hashlib.sha256((score_world["prepared"] / "manifest.json").read_bytes()).hexdigest()
    )
    assert (out / "removed.jsonl").read_text() == ""


def test_batched_signals_equal_the_one_row_rule():
    from caption_debias.score.signals import row_signals, shard_signals

    rng = np.random.default_rng(0)

    def unit(*shape):
        x = rng.normal(size=shape).astype(np.float32)
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    n, d, k = 7, 16, 9
    images, captions, reference = unit(n, d), unit(n, d), unit(k, d)
    counts = rng.integers(1, 5, size=n)
    sentences = unit(int(counts.sum()), d)
    sentence_row = np.repeat(np.arange(n), counts)
    excluded = [np.array([i], np.int64) if i < k else np.zeros(0, np.int64) for i in range(n)]
    excluded[2] = np.arange(k - 1)  # one other image left: no grounding
    clip, scores, grounding, has = shard_signals(images, captions, sentences, sentence_row, reference, excluded)
    for i in range(n):
        mask = np.zeros(k, bool)
        mask[excluded[i]] = True
        c, s, g = row_signals(images[i], captions[i], sentences[sentence_row == i], reference, mask)
        assert clip[i] == pytest.approx(c, abs=1e-6)
        np.testing.assert_allclose(scores[sentence_row == i], s, atol=1e-6)
        if g is None:
            assert not has[i] and np.isnan(grounding[sentence_row == i]).all()
        else:
            np.testing.assert_allclose(grounding[sentence_row == i], g, rtol=1e-4, atol=1e-4)
    assert not has[2] and has.sum() == n - 1


def test_a_rows_signals_do_not_depend_on_the_rows_scored_with_it(monkeypatch):
    """Bit for bit: a row's clip_score, sentence_scores and sentence_grounding are the same whether its
    shard holds it alone or among others (a BLAS product's bits for a row depend on how many rows are
    multiplied with it; task layouts, engines and worker counts must not change a score)."""
    from caption_debias.score import signals
    from caption_debias.score.signals import shard_signals

    rng = np.random.default_rng(3)

    def unit(*shape):
        x = rng.normal(size=shape).astype(np.float32)
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    n, d, k = 40, 512, 128  # a CLIP width and the default reference sample
    images, captions, reference = unit(n, d), unit(n, d), unit(k, d)
    counts = rng.integers(1, 8, size=n)
    sentences = unit(int(counts.sum()), d)
    sentence_row = np.repeat(np.arange(n), counts)
    excluded = [np.array([i], np.int64) if i % 3 == 0 else np.zeros(0, np.int64) for i in range(n)]
    whole = shard_signals(images, captions, sentences, sentence_row, reference, excluded)
    for rows in ([0], [5, 6], list(range(7, 20)), list(range(n - 3, n))):
        picked = np.isin(sentence_row, rows)
        local_row = np.searchsorted(rows, sentence_row[picked])
        part = shard_signals(
            images[rows], captions[rows], sentences[picked], local_row, reference, [excluded[i] for i in rows]
        )
        assert part[0].tobytes() == whole[0][rows].tobytes()  # clip_score
        assert part[1].tobytes() == whole[1][picked].tobytes()  # sentence_scores
        assert part[2].tobytes() == whole[2][picked].tobytes()  # sentence_grounding
        assert part[3].tolist() == whole[3][rows].tolist()
    monkeypatch.setattr(signals, "BLOCK", 7)  # many blocks on three threads: the same bits
    threaded = shard_signals(images, captions, sentences, sentence_row, reference, excluded, threads=3)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(threaded, whole))


def test_embeddings_kept(score_world, scored, tmp_path):
    out, manifest = scored
    kept = score_folder([score_world["prepared"]], tmp_path / "emb", score_opts(score_world, keep_embeddings=True))
    rows = PreparedDataset.open(tmp_path / "emb").read().to_pylist()
    plain = PreparedDataset.open(out).read().to_pylist()
    assert kept["scoring"]["embeddings"] is True
    for row, base in zip(rows, plain):
        img = np.array(row["image_embedding"], np.float32)
        cap = np.array(row["caption_embedding"], np.float32)
        assert len(img) == len(cap) == 64
        assert np.linalg.norm(img) == pytest.approx(1.0, abs=2e-3)
        assert float(img @ cap) == pytest.approx(row["clip_score"], abs=5e-3)
        assert row["clip_score"] == base["clip_score"]  # the same run, only more columns


def test_bad_images_cost_one_row_each(score_world, tmp_path):
    import shutil

    images = tmp_path / "images"
    shutil.copytree(score_world["images"] / "img", images / "img")
    (images / score_world["rows"][5][0]).write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    (images / score_world["rows"][17][0]).unlink()
    opts = score_opts(score_world)
    opts.image_root = str(images)
    manifest = score_folder([score_world["prepared"]], tmp_path / "out", opts)
    c = manifest["counts"]
    assert c["read"] == ROWS and c["written"] == ROWS - 2 and c["removed"] == 2
    assert c["removed_by_reason"] == {"image_missing": 1, "image_unreadable": 1}
    lines = [json.loads(x) for x in (tmp_path / "out/removed.jsonl").read_text().splitlines()]
    assert [(x["image"], x["reason"]) for x in lines] == [
        (score_world["rows"][5][0], "image_unreadable"),
        (score_world["rows"][17][0], "image_missing"),
    ]
    assert all(x["detail"]["error"] for x in lines)
    import jsonschema

    from caption_debias.schema import removed_schema

    for line in lines:
        jsonschema.validate(line, removed_schema())
    keys = PreparedDataset.open(tmp_path / "out").read(["key"]).column("key").to_pylist()
    assert len(keys) == ROWS - 2 and {x["key"] for x in lines}.isdisjoint(keys)


def _args(score_world, out: Path, *extra: str) -> list[str]:
    return [
        "score", str(score_world["prepared"]), "--out", str(out), "--model", "tiny", "--pretrained", str(score_world["weights"]),
        "--image-root", str(score_world["images"]), "--batch-size", "8", "-q", *extra,
    ]  # fmt: skip


@pytest.mark.slow
def test_output_is_byte_identical_for_any_worker_count(score_world, tmp_path):
    # a fresh process, as a user runs it: MKL's strict reproducibility mode is set before its first call
    code = (
        "import sys; from caption_debias.score.options import ScoreOptions; from caption_debias.score.run import score_folder\n"
        "for w in (1, 2):\n"
        "    score_folder([sys.argv[1]], f'{sys.argv[2]}/{w}', ScoreOptions(model='tiny', pretrained=sys.argv[3],"
        " image_root=sys.argv[4], batch_size=8, workers=w, quiet=True))\n"
    )
    args = [str(score_world["prepared"]), str(tmp_path), str(score_world["weights"]), str(score_world["images"])]
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    one, two = (json.loads((tmp_path / w / "manifest.json").read_text()) for w in ("1", "2"))
    assert len(one["shards"]) == ROWS // SHARD_ROWS
    assert two["shards"] == one["shards"]  # sha256 of every shard
    for s in one["shards"]:
        assert (tmp_path / "2" / s["path"]).read_bytes() == (tmp_path / "1" / s["path"]).read_bytes()
    assert (tmp_path / "2/.score/reference.parquet").read_bytes() == (
        tmp_path / "1/.score/reference.parquet"
    ).read_bytes()


def test_a_stretched_model_scores_at_its_own_context(score_world, tmp_path):
    """A local-dir: export of a 248-token model: the long captions fit, nothing is counted as cut."""
    import torch
    from safetensors.torch import save_file

    from caption_debias.model.load import load_model
    from caption_debias.model.stretch import merged_state_dict, stretch_positional_embedding

    loaded = load_model("tiny", str(score_world["weights"]))
    stretch_positional_embedding(loaded.model, 248, freeze_head=False)
    loaded.set_context(248)
    export = tmp_path / "stretched"
    export.mkdir()
    save_file(
        {k: v.contiguous() for k, v in merged_state_dict(loaded.model.state_dict()).items()},
        export / "open_clip_model.safetensors",
    )
    (export / "open_clip_config.json").write_text(json.dumps(loaded.open_clip_config()), "utf-8")
    opts = score_opts(score_world)
    opts.model, opts.pretrained = f"local-dir:{export}", None
    manifest = score_folder([score_world["prepared"]], tmp_path / "out", opts)
    assert manifest["scoring"]["model"]["context_length"] == 248
    assert manifest["scoring"]["captions_over_context"] == 0
    rows = PreparedDataset.open(tmp_path / "out").read(["clip_score"]).column("clip_score").to_pylist()
    assert len(rows) == ROWS and all(-1 <= v <= 1 for v in rows)
    del torch


@pytest.mark.slow
def test_sigkill_then_rerun_gives_identical_output(score_world, tmp_path):
    import shutil

    # a bigger input so the kill lands mid-run: the score_world's folder three times
    copies = []
    for i in range(3):
        copies.append(tmp_path / f"in{i}")
        shutil.copytree(score_world["prepared"], copies[-1])
    args = [
        "score", *map(str, copies), "--out", str(tmp_path / "killed"), "--model", "tiny",
        "--pretrained", str(score_world["weights"]), "--image-root", str(score_world["images"]), "--batch-size", "8", "-q",
    ]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "caption_debias.cli.main", *args], stderr=subprocess.PIPE)
    sides = tmp_path / "killed" / ".score" / "shards"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(list(sides.glob("part-*.json"))) < 1:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (tmp_path / "killed" / "manifest.json").exists()
    finished = {p.stem for p in sides.glob("part-*.json")}
    done = {
        p.name: p.stat().st_mtime_ns for p in (tmp_path / "killed/shards").glob("part-*.parquet") if p.stem in finished
    }
    assert 1 <= len(done) < 3 * ROWS // SHARD_ROWS
    res = _cli(*args)
    assert res.returncode == 0, res.stderr
    again = json.loads((tmp_path / "killed" / "manifest.json").read_text())
    reused = {n: p.stat().st_mtime_ns for n in done if (p := tmp_path / "killed/shards" / n).exists()}
    assert reused == done  # finished shards were not redone
    assert not [p for p in (tmp_path / "killed").rglob("*") if ".tmp-" in p.name]
    clean = score_folder(copies, tmp_path / "clean", score_opts(score_world))
    assert again["shards"] == clean["shards"] and again["counts"] == clean["counts"]
    assert again["scoring"]["reference"] == clean["scoring"]["reference"]


def test_resume_refuses_another_model(score_world, scored, tmp_path):
    from caption_debias.errors import UserError

    score_folder([score_world["prepared"]], tmp_path / "out", score_opts(score_world))
    other = score_opts(score_world)
    other.pretrained = None  # random init: other weights
    with pytest.raises(UserError, match="weights_sha256"):
        score_folder([score_world["prepared"]], tmp_path / "out", other)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "caption_debias.cli.main", *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_cli_errors_are_one_line(score_world, tmp_path):
    base = [
        "score",
        str(score_world["prepared"]),
        "--out",
        str(tmp_path / "o"),
        "--image-root",
        str(score_world["images"]),
    ]
    for extra, needle in [
        (["--model", "no-such-model"], "unknown model 'no-such-model'"),
        (["--model", "tiny", "--precision", "fp8"], "unknown --precision 'fp8'"),
        (["--model", "tiny", "--batch-size", "0"], "--batch-size must be at least 1"),
    ]:
        res = _cli(*base, *extra)
        assert res.returncode != 0 and needle in res.stderr, (extra, res.stderr)
        assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "--keep-embeddings" in _cli("score", "-h").stdout


def test_image_root_from_the_manifest_or_stored_bytes(score_world, scored, tmp_path):
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.errors import UserError

    out, _ = scored
    base = PreparedDataset.open(out).read(["key", "clip_score"]).to_pydict()
    opts = score_opts(score_world)
    opts.image_root = None  # the prepared manifest records the root
    score_folder([score_world["prepared"]], tmp_path / "root", opts)
    assert PreparedDataset.open(tmp_path / "root").read(["key", "clip_score"]).to_pydict() == base
    embedded = tmp_path / "embedded"
    curate(
        [score_world["prepared"]],
        embedded,
        CurateOptions(image_root=str(score_world["images"]), embed_images=True, quiet=True),
    )
    manifest = json.loads((embedded / "manifest.json").read_text())
    manifest["options"]["image_root"] = None  # as if moved elsewhere: only the stored bytes are left
    (embedded / "manifest.json").write_text(json.dumps(manifest))
    score_folder([embedded], tmp_path / "bytes", opts)
    got = PreparedDataset.open(tmp_path / "bytes").read(["key", "clip_score"]).to_pydict()
    clip = dict(zip(base["key"], base["clip_score"]))
    assert len(got["key"]) >= ROWS - 2  # curate may remove a near-duplicate of these simple scenes
    assert got["clip_score"] == pytest.approx([clip[k] for k in got["key"]], abs=1e-6)
    # moved with its images inside, its recorded root gone: the stored bytes, not a refusal
    manifest["options"]["image_root"] = str(tmp_path / "gone")
    if isinstance(manifest.get("images"), dict):
        manifest["images"]["root"] = str(tmp_path / "gone")
    (embedded / "manifest.json").write_text(json.dumps(manifest))
    score_folder([embedded], tmp_path / "bytes-gone-root", opts)
    moved = PreparedDataset.open(tmp_path / "bytes-gone-root").read(["key", "clip_score"]).to_pydict()
    assert moved == got
    plain = tmp_path / "plain"
    curate([score_world["prepared"]], plain, CurateOptions(quiet=True))
    manifest = json.loads((plain / "manifest.json").read_text())
    manifest["options"]["image_root"] = None
    (plain / "manifest.json").write_text(json.dumps(manifest))
    # none recorded in its own manifest: its input's, back through the lineage (image_source.roots)
    lineage = score_folder([plain], tmp_path / "lineage", opts)
    assert lineage["images"]["root"] == str(score_world["images"].resolve())
    manifest["inputs"] = []  # no lineage either
    (plain / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="give --image-root"):
        score_folder([plain], tmp_path / "none", opts)


def test_a_manifest_without_shard_digests_scores_the_same(score_world, scored, tmp_path):
    """A folder whose manifest lists no sha256s (older prepare): each shard's digest is its file's, as in curate."""
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(score_world["prepared"], bare)
    manifest = json.loads((bare / "manifest.json").read_text("utf-8"))
    for s in manifest["shards"]:
        del s["sha256"]
    (bare / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    got = score_folder([bare], tmp_path / "out", score_opts(score_world))
    assert got["counts"] == scored[1]["counts"]
    assert [s["sha256"] for s in got["shards"]] == [s["sha256"] for s in scored[1]["shards"]]


def test_draft_decoding_of_a_jpeg(tmp_path):
    """--no-draft-decode is PIL open + preprocess exactly; draft decoding gives the same tensor shape, close pixels."""
    import open_clip
    import torch
    from PIL import Image

    from caption_debias.score.encode import OK, decode_image

    _, _, preprocess = open_clip.create_model_and_transforms("ViT-B-32")  # 224 px input, random init
    write(noise((16, 12), 0).resize((800, 600), Image.BICUBIC), tmp_path / "a.jpg", quality=90)
    status, exact, _ = decode_image("a.jpg", None, tmp_path, preprocess)
    assert status == OK and torch.equal(exact, preprocess(Image.open(tmp_path / "a.jpg").convert("RGB")))
    status, draft, _ = decode_image("a.jpg", None, tmp_path, preprocess, draft_side=224)
    assert status == OK and draft.shape == exact.shape and not torch.equal(draft, exact)
    assert float((draft - exact).abs().mean()) < 0.05  # normalised units: a small resampling difference
