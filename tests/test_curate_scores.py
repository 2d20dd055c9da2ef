"""curate on a scored folder: low_alignment, ungrounded_caption (+ the sentence_keep mask), semantic_duplicate.

The scores are written by hand into a prepared folder (tests/score_fixtures.py), so these
tests need no model; each batched rule is compared with its one-row specification.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pytest
from curate_fixtures import caption
from pictures import not_a_picture, scene, write
from score_fixtures import read_rows, unit_rows, with_scores

from caption_debias.curate import semdedup, writer
from caption_debias.curate.options import CurateOptions
from caption_debias.curate.run import curate
from caption_debias.errors import UserError
from caption_debias.schema import removed_schema

N = 48
DIM = 16
THRESHOLD = 0.3  # --drop-ungrounded in these tests
COPIES = {30: 3, 41: 10, 47: 3}  # row -> the earlier row whose image it re-draws (embedding + noise)
UNGROUNDED = 12  # every non-summary sentence of this row is below THRESHOLD


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path_factory.mktemp("scored")
    rng = random.Random(3)
    rows = [
        {"key": f"r{i:02d}", "image": f"img/{i}.jpg", "caption": caption(rng, rng.randrange(3, 7))} for i in range(N)
    ]
    (root / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([root / "t.jsonl"], root / "prepared", PrepareOptions(format="table", quiet=True, shard_rows=16))
    base = read_rows(root / "prepared", ["key", "summary_mask"])
    nrng = np.random.default_rng(0)
    clip = nrng.uniform(0.0, 0.6, N).round(3).astype(np.float32)
    clip[[5, 9, 20]] = clip[4]  # ties: broken by input order
    grounding = []
    for i, mask in enumerate(base["summary_mask"]):
        g = nrng.uniform(-0.2, 1.0, len(mask)).astype(np.float32)
        detail = [j for j, s in enumerate(mask) if not s]
        if detail:  # one well-grounded detail sentence in every other row
            g[detail[int(nrng.integers(len(detail)))]] = 0.9
        if i == UNGROUNDED:
            g = np.where(mask, 0.9, 0.1).astype(np.float32)
        grounding.append(g.tolist())
    emb = unit_rows(nrng, N, DIM)
    for copy, of in COPIES.items():
        e = emb[of] + 0.05 * nrng.standard_normal(DIM).astype(np.float32)
        emb[copy] = e / np.linalg.norm(e)
    columns = {
        "clip_score": clip.tolist(),
        "sentence_scores": [[float(c)] * len(m) for c, m in zip(clip, base["summary_mask"])],
        "sentence_grounding": grounding,
        "image_embedding": [e.astype(np.float16).tolist() for e in emb],
        "caption_embedding": [e.astype(np.float16).tolist() for e in emb],
    }
    folder = with_scores(root / "prepared", root / "scored", columns)
    no_emb = with_scores(
        root / "prepared", root / "scored_no_emb", {k: v for k, v in columns.items() if "embedding" not in k}
    )
    return {
        "folder": folder,
        "no_emb": no_emb,
        "prepared": root / "prepared",
        "keys": base["key"],
        "summary": base["summary_mask"],
        "clip": clip,
        "grounding": grounding,
        "emb": emb,
    }


def _removed(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "removed.jsonl").read_text("utf-8").splitlines()]


def _run(folder, out, **kw):
    return curate([folder], out, CurateOptions(quiet=True, **kw))


def test_min_clip_score_and_keep_top_percent(scored, tmp_path):
    m = _run(scored["folder"], tmp_path / "a", min_clip_score=0.25)
    removed = _removed(tmp_path / "a")
    want = {k for k, c in zip(scored["keys"], scored["clip"]) if c < 0.25}
    assert {r["key"] for r in removed} == want and {r["reason"] for r in removed} == {"low_alignment"}
    for r in removed:
        jsonschema.validate(r, removed_schema())
        assert r["detail"]["clip_score"] < 0.25 and r["detail"]["min_clip_score"] == 0.25
    assert m["counts"]["removed_by_reason"]["low_alignment"] == len(want)
    # the top P%: ceil(P% of every input row), ranked by score, ties by input order (the specification)
    for p in (25.0, 50.0, 12.5):
        out = tmp_path / f"top{p}"
        _run(scored["folder"], out, keep_top_alignment=p)
        ranked = sorted(range(N), key=lambda i: (-float(scored["clip"][i]), i))
        keep = {scored["keys"][i] for i in ranked[: math.ceil(p * N / 100)]}
        kept = set(read_rows(out, ["key"])["key"])
        assert kept == keep
        cuts = {r["detail"]["cutoff"] for r in _removed(out)}
        assert len(cuts) == 1 and all(r["detail"]["clip_score"] <= min(cuts) for r in _removed(out))
    tied = [scored["keys"][i] for i in (4, 5, 9, 20)]  # one score: the earlier rows win
    ranked = sorted(range(N), key=lambda i: (-float(scored["clip"][i]), i))
    assert [scored["keys"][i] for i in ranked if scored["keys"][i] in tied] == tied


def test_drop_ungrounded_marks_sentences_and_removes_captions_left_with_none(scored, tmp_path):
    out = tmp_path / "g"
    m = _run(scored["folder"], out, drop_ungrounded=THRESHOLD)
    removed = _removed(out)
    assert [(r["key"], r["reason"]) for r in removed] == [(scored["keys"][UNGROUNDED], "ungrounded_caption")]
    assert removed[0]["detail"] == {"detail_grounding_max": pytest.approx(0.1), "threshold": THRESHOLD}
    assert m["curation"]["thresholds"]["drop_ungrounded"] == THRESHOLD
    got = read_rows(out, ["key", "sentences", "sentence_keep", "summary_mask", "sentence_grounding"])
    dropped = 0
    for i in range(len(got["key"])):
        want = writer.sentence_keep_row(got["sentence_grounding"][i], got["summary_mask"][i], THRESHOLD)
        assert got["sentence_keep"][i] == want
        assert any(k and not s for k, s in zip(want, got["summary_mask"][i]))  # a kept detail sentence remains
        dropped += want.count(False)
    assert dropped > 10  # the text itself is untouched: every sentence is still there
    assert (
        got["sentences"]
        == read_rows(scored["prepared"], ["key", "sentences"])["sentences"][:UNGROUNDED]
        + read_rows(scored["prepared"], ["sentences"])["sentences"][UNGROUNDED + 1 :]
    )


def test_drop_ungrounded_counts_what_it_masked_in_the_manifest_and_the_summary(scored, tmp_path, capsys):
    """The manifest's curation.sentence_keep and the summary say how many sentences and rows were masked."""
    from caption_debias.schema import manifest_schema

    out = tmp_path / "g"
    m = curate([scored["folder"]], out, CurateOptions(drop_ungrounded=THRESHOLD, log_interval=3600))
    got = read_rows(out, ["sentence_keep"])["sentence_keep"]
    want = {
        "threshold": THRESHOLD,
        "rows": len(got),
        "rows_masked": sum(1 for k in got if not all(k)),
        "sentences": sum(len(k) for k in got),
        "sentences_masked": sum(k.count(False) for k in got),
        "rows_removed": 1,
    }
    assert m["curation"]["sentence_keep"] == want and want["sentences_masked"] > 10
    jsonschema.validate(m, manifest_schema())
    err = capsys.readouterr().err
    assert (
        f"sentences masked (--drop-ungrounded {THRESHOLD:g}): {want['sentences_masked']} of {want['sentences']} in "
        f"{want['rows_masked']} of {want['rows']} rows"
    ) in " ".join(err.split())
    assert "1 rows removed as ungrounded_caption" in " ".join(err.split())
    # curated again without the flag: the input's mask is carried, and counted as such
    again = _run(out, tmp_path / "again")
    assert again["curation"]["sentence_keep"] == {**want, "threshold": None, "rows_removed": 0}
    assert "sentence_keep" not in _run(scored["prepared"], tmp_path / "plain")["curation"]  # no mask: no entry


def test_sentence_keep_batched_equals_specification():
    rng = random.Random(5)
    g, s = [], []
    for _ in range(300):
        k = rng.randrange(0, 6)
        s.append([rng.random() < 0.3 for _ in range(k)])
        g.append(
            None if rng.random() < 0.1 else [None if rng.random() < 0.05 else rng.uniform(-1, 1) for _ in range(k)]
        )
    table = pa.table(
        {"sentence_grounding": pa.array(g, pa.list_(pa.float32())), "summary_mask": pa.array(s, pa.list_(pa.bool_()))}
    )
    for sl in (table, table.slice(17, 200)):
        got = writer.sentence_keep(sl, 0.2).to_pylist()
        gs, ss = sl.column("sentence_grounding").to_pylist(), sl.column("summary_mask").to_pylist()
        assert got == [writer.sentence_keep_row(a, b, np.float32(0.2)) for a, b in zip(gs, ss)]


def test_semantic_duplicates_removed_with_their_match(scored, tmp_path):
    out = tmp_path / "s"
    m = _run(scored["folder"], out, semantic_duplicate_threshold=0.95)
    removed = {r["key"]: r for r in _removed(out)}
    keys = scored["keys"]
    assert set(removed) == {keys[c] for c in COPIES}
    for copy, of in COPIES.items():
        r = removed[keys[copy]]
        assert r["reason"] == "semantic_duplicate" and r["detail"]["match"] == keys[of]
        assert r["detail"]["by"] == "image embedding, centred" and 0.95 <= r["detail"]["similarity"] <= 1.0
        jsonschema.validate(r, removed_schema())
    counts = dict(zip(*read_rows(out, ["key", "duplicate_count"]).values()))
    assert counts[keys[3]] == 2 and counts[keys[10]] == 1
    assert m["curation"]["thresholds"]["semantic_duplicate"]["cosine_min"] == 0.95
    assert m["curation"]["thresholds"]["semantic_duplicate"]["centred"] is True
    raw = tmp_path / "raw"
    m = _run(scored["folder"], raw, semantic_duplicate_threshold=0.95, semantic_duplicate_center=False)
    assert {r["detail"]["by"] for r in _removed(raw)} == {"image embedding"}
    assert m["curation"]["thresholds"]["semantic_duplicate"]["centred"] is False


def test_a_scored_folder_is_curated_again_with_other_thresholds(scored, tmp_path):
    first = tmp_path / "first"
    _run(scored["folder"], first, min_clip_score=0.1, drop_ungrounded=0.0)
    kept = read_rows(first, ["key", "clip_score", "image_embedding", "sentence_keep"])
    assert all(c is not None and c >= 0.1 for c in kept["clip_score"])  # the scores travel with the rows
    assert all(e is not None and len(e) == DIM for e in kept["image_embedding"])
    second = tmp_path / "second"
    _run(first, second, min_clip_score=0.3, drop_ungrounded=THRESHOLD, semantic_duplicate_threshold=0.95)
    want = {k for k, c in zip(scored["keys"], scored["clip"]) if 0.1 <= c < 0.3}
    got = {r["key"]: r["reason"] for r in _removed(second)}
    assert {k for k, r in got.items() if r == "low_alignment"} == want
    # the mask is recomputed from the grounding at the new threshold, not carried over
    again = read_rows(second, ["sentence_grounding", "summary_mask", "sentence_keep"])
    for g, s, k in zip(again["sentence_grounding"], again["summary_mask"], again["sentence_keep"]):
        assert k == writer.sentence_keep_row(g, s, THRESHOLD)
    # without the flag a curated folder's mask is kept as it was
    third = tmp_path / "third"
    _run(first, third)
    assert read_rows(third, ["sentence_keep"])["sentence_keep"] == kept["sentence_keep"]


def test_flags_that_need_scores_fail_in_one_line(scored, tmp_path):
    with pytest.raises(UserError) as e:
        _run(scored["prepared"], tmp_path / "x", min_clip_score=0.2)
    assert "--min-clip-score needs clip_score" in str(e.value) and "has no model scores" in str(e.value)
    assert "\n" not in str(e.value) and not (tmp_path / "x" / "manifest.json").exists()
    with pytest.raises(UserError) as e:
        _run(scored["no_emb"], tmp_path / "y", semantic_duplicate_threshold=0.9)
    assert "scored without --keep-embeddings" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UserError, match="keep-top-alignment"):
        _run(scored["folder"], tmp_path / "z", keep_top_alignment=0.0)


def test_cli_flags_reach_the_options(scored, tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    out = tmp_path / "cli"
    r = CliRunner().invoke(
        app,
        [
            "curate",
            str(scored["folder"]),
            "--out",
            str(out),
            "-q",
            "--keep-top-alignment",
            "50",
            "--drop-ungrounded",
            "0.3",
        ],
    )
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text("utf-8"))
    assert m["options"]["keep_top_alignment"] == 50 and m["options"]["drop_ungrounded"] == 0.3
    assert m["counts"]["removed_by_reason"]["low_alignment"] == N // 2


# ---------------------------------------------------------------- SemDeDup


def _planted(seed: int, n: int, dim: int, copies: int):
    rng = np.random.default_rng(seed)
    emb = unit_rows(rng, n, dim)
    for i in rng.choice(np.arange(n // 2, n), copies, replace=False):
        noise = rng.uniform(0.1, 0.6) * rng.standard_normal(dim).astype(np.float32) / np.sqrt(dim)
        e = emb[rng.integers(0, n // 2)] + noise  # cosine about 0.85-0.99 with its original
        emb[i] = e / np.linalg.norm(e)
    return emb.astype(np.float16), rng.permutation(n).astype(np.int64) * 3  # orders: any increasing keys


@pytest.mark.parametrize("seed", [0, 1])
def test_semdedup_batched_equals_the_specification(seed):
    emb, orders = _planted(seed, 600, 24, 200)
    rng = np.random.default_rng(seed)
    clusters = rng.integers(0, 4, (len(emb), 2)).astype(np.int32)  # home, second nearest
    for t in (0.8, 0.95):
        want = semdedup.reference_semantic_duplicates(emb, orders, t, clusters)
        got = semdedup.semantic_duplicates(emb, orders, t, clusters)
        assert set(got) == set(want) and len(want) > 10
        for o in want:
            assert got[o][0] == want[o][0] and got[o][1] == pytest.approx(want[o][1], abs=1e-5)
    # one cluster: the exact all-pairs rule
    exact = semdedup.reference_semantic_duplicates(emb, orders, 0.9)
    assert semdedup.semantic_duplicates(emb, orders, 0.9, np.zeros((len(emb), 2), np.int32)).keys() == exact.keys()


def test_centred_cosine_finds_copies_inside_a_narrow_cone():
    """Embeddings crowded into a cone (every pair at raw cosine 0.98+, as a short fine-tune leaves them):
    raw cosine at 0.95 removes nearly everything; centred, exactly the planted copies."""
    rng = np.random.default_rng(7)
    n, dim = 300, 32
    axis = rng.standard_normal(dim)
    spread = rng.standard_normal((n, dim)) / np.sqrt(dim)
    emb = 12 * axis / np.linalg.norm(axis) + spread
    copies = {i: int(rng.integers(0, n // 2)) for i in range(n - 30, n)}
    for i, of in copies.items():
        emb[i] = emb[of] + 0.05 * rng.standard_normal(dim) / np.sqrt(dim)
    emb = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float16)
    orders = np.arange(n, dtype=np.int64)
    assert float((emb[:10].astype(np.float32) @ emb[10:20].astype(np.float32).T).min()) > 0.98
    raw = semdedup.semantic_duplicates(emb, orders, 0.95)
    assert len(raw) > n // 2
    centred = semdedup.centred(emb)
    assert centred.dtype == np.float16 and np.allclose(np.linalg.norm(centred.astype(np.float32), axis=1), 1, atol=1e-3)
    got = semdedup.semantic_duplicates(centred, orders, 0.95)
    assert {o: m for o, (m, _) in got.items()} == copies
    # the mean is summed in row order in float64: chunking does not change a bit
    assert np.array_equal(semdedup.centred(emb, chunk=7), centred)
    inplace = emb.copy()
    assert semdedup.centred(inplace, chunk=7, out=inplace) is inplace and np.array_equal(inplace, centred)


def test_semdedup_clusters_are_seeded_and_keep_planted_copies_together():
    emb, orders = _planted(2, 3000, 32, 200)
    a = semdedup.clusters_of(emb, cluster_size=250)
    assert np.array_equal(a, semdedup.clusters_of(emb, cluster_size=250)) and len(np.unique(a[:, 0])) > 8
    assert (a[:, 0] != a[:, 1]).all()
    exact = semdedup.reference_semantic_duplicates(emb, orders, 0.9)
    clustered = semdedup.semantic_duplicates(emb, orders, 0.9, a)
    # a pair split by two clusters and missed by the second probe is missed (random embeddings are
    # the worst case: no structure); home clusters alone find fewer
    found = len(set(clustered) & set(exact))
    homes_only = semdedup.semantic_duplicates(emb, orders, 0.9, np.repeat(a[:, :1], 2, axis=1))
    assert found >= 0.9 * len(exact) and len(exact) > 150 and found > len(set(homes_only) & set(exact))
    assert len(set(clustered) - set(exact)) <= 0.02 * len(exact)


# ---------------------------------------------------------------- --score-model


@pytest.mark.slow
def test_score_model_scores_then_curates_and_counts_reconcile(tmp_path):
    """curate --score-model tiny: scored by C1's score_folder into OUT/.curate/scored, then curated;
    a row scoring could not encode is counted as read and removed; the manifest names the model."""
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path / "img"
    root.mkdir()
    rng = random.Random(4)
    rows = []
    for i in range(8):
        write(scene(700 + i), root / f"{i}.png")
        rows.append({"key": f"k{i}", "image": f"{i}.png", "caption": caption(rng, 3)})
    rows.append({"key": "gone", "image": "gone.png", "caption": caption(rng, 3)})
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([tmp_path / "t.jsonl"], tmp_path / "p", PrepareOptions(format="table", quiet=True))
    out = tmp_path / "c"
    m = curate(
        [tmp_path / "p"],
        out,
        CurateOptions(
            image_root=str(root),
            quiet=True,
            score_model="tiny",
            keep_top_alignment=50.0,
            drop_ungrounded=-100.0,
            semantic_duplicate_threshold=0.9999,
        ),
    )
    c = m["counts"]
    assert c["read"] == 9 and c["read"] == c["written"] + c["removed"]
    assert c["removed_by_reason"]["image_missing"] == 1 and c["removed_by_reason"]["low_alignment"] == 4
    assert m["scored_from"] == [str(tmp_path / "p")] and m["scoring"]["model"]
    got = read_rows(out, ["clip_score", "image_embedding", "sentence_keep"])
    assert all(x is not None for x in got["clip_score"]) and all(e is not None for e in got["image_embedding"])
    assert all(all(k) for k in got["sentence_keep"])  # T far below any grounding: every sentence kept
    reasons = {r["key"]: r["reason"] for r in _removed(out)}
    assert reasons["table/gone"] == "image_missing"
    for line in _removed(out):
        jsonschema.validate(line, removed_schema())


@pytest.mark.slow
def test_score_model_progress_coverage_and_summary_count_the_rows_scoring_removed(tmp_path, capsys):
    """curate --score-model: a row whose image is missing and one that is unreadable are removed by the
    scoring; the write progress ends at rows read (not past 100%), the coverage table counts them as the
    funnel does, and the summary's rate is not rounded to 0."""
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path / "img"
    (root / "pics").mkdir(parents=True)
    rng = random.Random(6)
    rows = []
    for i in range(6):
        write(scene(800 + i), root / "pics" / f"{i}.png")
        rows.append({"key": f"k{i}", "image": f"pics/{i}.png", "caption": caption(rng, 3)})
    not_a_picture(root / "pics" / "junk.png", "not a picture")
    rows.append({"key": "junk", "image": "pics/junk.png", "caption": caption(rng, 3)})
    rows.append({"key": "gone", "image": "pics/gone.png", "caption": caption(rng, 3)})
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([tmp_path / "t.jsonl"], tmp_path / "p", PrepareOptions(format="table", quiet=True))
    capsys.readouterr()
    m = curate(
        [tmp_path / "p"],
        tmp_path / "c",
        CurateOptions(image_root=str(root), score_model="tiny", log_interval=3600),
    )
    err = " ".join(capsys.readouterr().err.split())
    assert m["counts"]["removed_by_reason"]["image_missing"] == 1
    assert m["counts"]["removed_by_reason"]["image_unreadable"] == 1
    coverage = m["curation"]["image_coverage"]["pics/"]
    assert (coverage["present"], coverage["missing"], coverage["unreadable"]) == (6, 1, 1)
    assert coverage["examples"] == {"missing": ["pics/gone.png"], "unreadable": ["pics/junk.png"]}
    assert "caption-debias curate write: 8 / 8 rows (100.0%)" in err
    assert "/ 6 rows" not in err.split("curate write")[1]
    assert "pics/ 6 1 1" in err  # the summary's coverage table
    rate = re.search(r"shards 1, ([\d.]+) s, ([\d.]+) rows/s", err)
    assert rate and float(rate.group(2)) > 0  # a slow run's rate is not rounded to 0


def test_summary_rate_keeps_two_digits_below_ten():
    from caption_debias.runner import rate_text

    assert [rate_text(r) for r in (0.0, 0.333, 1.25, 9.4, 12.6, 12345.0)] == ["0", "0.33", "1.2", "9.4", "13", "12,345"]
