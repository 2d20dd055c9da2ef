"""Numbers that are not numbers in a scored folder's columns (issue 32, section 2).

A folder is scored by the real `score` (tiny open_clip model), then chosen rows' clip_score,
sentence_grounding or image_embedding are overwritten in the Parquet with what score never
writes: +-inf, 1e30, NaN, a list of another length, an all-zero or NaN vector. Each such row
goes as `invalid_signal` (with the column and the problem) and never decides another row's
fate: every other row is curated as if the bad row were not there.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pytest

from caption_debias.curate import dedup, signals
from caption_debias.curate.options import MODEL_REASONS, REASONS, CurateOptions
from caption_debias.curate.run import curate
from caption_debias.schema import removed_schema

pytest.importorskip("open_clip")

from score_fixtures import edited, read_rows, tiny_scored

N = 40
COPIES = {30: 3, 33: 11, 36: 20, 39: 3}  # row -> the earlier row whose picture it repeats (cosine 1)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return tiny_scored(tmp_path_factory.mktemp("invalid"), N, COPIES)


def removed(out: Path) -> dict[str, dict]:
    lines = [json.loads(x) for x in (out / "removed.jsonl").read_text("utf-8").splitlines()]
    for line in lines:
        jsonschema.validate(line, removed_schema())
    return {r["key"]: r for r in lines}


def run(folder: Path, out: Path, **kw) -> dict:
    """curate with the folder's images checked; the planted copies are kept as images (their rows
    differ in caption), so only the model signals decide."""
    manifest = curate([folder], out, CurateOptions(quiet=True, keep_duplicate_images=True, **kw))
    c = manifest["counts"]
    assert c["read"] == c["written"] + c["removed"] == N
    return manifest


def kept(out: Path) -> list[str]:
    return read_rows(out, ["key"])["key"]


def assert_invalid(lines: dict[str, dict], keys: list[str], column: str, problem: str) -> None:
    for k in keys:
        assert lines[k]["reason"] == "invalid_signal", (k, lines.get(k))
        assert lines[k]["detail"]["column"] == column and problem in lines[k]["detail"]["problem"], lines[k]


def test_invalid_signal_has_its_place_in_the_funnel_and_the_schema():
    assert REASONS.index("truncated_caption") < REASONS.index("invalid_signal") < REASONS.index("low_alignment")
    assert "invalid_signal" in MODEL_REASONS
    assert removed_schema()["properties"]["reason"]["enum"] == list(REASONS)


# -- clip_score -------------------------------------------------------------------------------

CLIP_BAD = {2: float("inf"), 7: 1e30, 12: float("nan"), 17: float("-inf")}


def test_a_clip_score_that_is_not_a_cosine_is_invalid_and_never_ranked(world, tmp_path):
    folder = edited(world["scored"], tmp_path / "bad", {"clip_score": CLIP_BAD})
    scores = read_rows(world["scored"], ["clip_score"])["clip_score"]
    keys = world["keys"]
    for p in (25.0, 50.0):
        out = tmp_path / f"top{p}"
        m = run(folder, out, keep_top_alignment=p)
        lines = removed(out)
        assert_invalid(lines, [keys[i] for i in CLIP_BAD], "clip_score", "is not a cosine")
        # the top P% of the other rows, as if the bad rows were not in the input at all
        others = [i for i in range(N) if i not in CLIP_BAD]
        ranked = sorted(others, key=lambda i: (-scores[i], i))
        assert kept(out) == sorted(keys[i] for i in ranked[: math.ceil(p * len(others) / 100)])
        assert m["counts"]["removed_by_reason"]["invalid_signal"] == len(CLIP_BAD)
        assert {r["detail"]["kept_by_rank"] for r in lines.values() if r["reason"] == "low_alignment"} == {
            math.ceil(p * len(others) / 100)
        }
    out = tmp_path / "min"
    run(folder, out, min_clip_score=min(scores) - 1)  # every real score passes
    assert kept(out) == sorted(keys[i] for i in range(N) if i not in CLIP_BAD)
    assert_invalid(removed(out), [keys[i] for i in CLIP_BAD], "clip_score", "is not a cosine")


def test_a_folder_without_score_flags_keeps_rows_with_bad_scores(world, tmp_path):
    """Only the columns a run reads are checked: without --min-clip-score the bad clip_score rows stay."""
    folder = edited(world["scored"], tmp_path / "bad", {"clip_score": CLIP_BAD})
    run(folder, tmp_path / "plain")
    assert len(kept(tmp_path / "plain")) == N


# -- sentence_grounding ------------------------------------------------------------------------


def test_a_grounding_of_another_length_or_with_nan_is_invalid_whatever_its_position(world, tmp_path):
    base = read_rows(world["scored"], ["sentence_grounding", "summary_mask"])
    g, mask = base["sentence_grounding"], base["summary_mask"]
    detail = [i for i in range(N) if sum(not s for s in mask[i]) >= 2][:6]
    a, b, c, d, e, f = detail
    changes = {
        a: [*g[a][:-1]],  # one value short: zipped and cut before
        b: [*g[b], 5.0],  # one value too many
        c: [float("nan")] + [9.0] * (len(g[c]) - 1),  # NaN first, well-grounded after
        d: [9.0] * (len(g[d]) - 1) + [float("nan")],  # the same, NaN last: opposite result before
        e: [1e30] * len(g[e]),
        f: [float("inf")] + [-1.0] * (len(g[f]) - 1),
    }
    folder = edited(world["scored"], tmp_path / "bad", {"sentence_grounding": changes})
    out = tmp_path / "g"
    run(folder, out, drop_ungrounded=0.5)
    lines = removed(out)
    keys = world["keys"]
    assert_invalid(lines, [keys[a]], "sentence_grounding", f"{len(g[a]) - 1} values for {len(g[a])} sentences")
    assert_invalid(lines, [keys[b]], "sentence_grounding", f"{len(g[b]) + 1} values for {len(g[b])} sentences")
    assert_invalid(lines, [keys[c]], "sentence_grounding", "NaN at sentence 1")
    assert_invalid(lines, [keys[d]], "sentence_grounding", f"NaN at sentence {len(g[d])}")
    assert_invalid(lines, [keys[e]], "sentence_grounding", "1e+30 at sentence 1")
    assert_invalid(lines, [keys[f]], "sentence_grounding", "inf at sentence 1")
    # every other row is decided as in the untouched folder
    clean = tmp_path / "clean"
    run(world["scored"], clean, drop_ungrounded=0.5)
    bad = {keys[i] for i in changes}
    assert {k: r["reason"] for k, r in removed(clean).items() if k not in bad} == {
        k: r["reason"] for k, r in lines.items() if k not in bad
    }
    assert sorted(set(kept(clean)) - bad) == kept(out)


# -- image_embedding ---------------------------------------------------------------------------


def semantic(lines: dict[str, dict]) -> dict[str, str]:
    return {k: r["detail"]["match"] for k, r in lines.items() if r["reason"] == "semantic_duplicate"}


@pytest.mark.parametrize("centre", [True, False])
def test_zero_nan_and_odd_length_embeddings_are_invalid_and_leave_semantic_dedup_whole(world, tmp_path, centre):
    emb = read_rows(world["scored"], ["image_embedding"])["image_embedding"]
    dim = len(emb[0])
    zero, nan, odd = [5, 6, 7], [8, 9, 10], [14]
    changes = {i: [0.0] * dim for i in zero}
    changes.update({i: [float("nan")] * dim for i in nan[:1]})
    changes.update({i: [*emb[i][:-1], float("nan")] for i in nan[1:]})
    changes.update({i: [*emb[i], 0.0] for i in odd})  # one value too many, still unit length
    folder = edited(world["scored"], tmp_path / "bad", {"image_embedding": changes})
    options = {"semantic_duplicate_threshold": 0.999, "semantic_duplicate_center": centre}
    out, clean = tmp_path / "s", tmp_path / "clean"
    run(folder, out, **options)
    run(world["scored"], clean, **options)
    keys = world["keys"]
    lines = removed(out)
    assert_invalid(lines, [keys[i] for i in zero], "image_embedding", "length 0, not 1")
    assert_invalid(lines, [keys[i] for i in nan], "image_embedding", "NaN at value")
    assert_invalid(lines, [keys[i] for i in odd], "image_embedding", f"{dim + 1} values, the input's others {dim}")
    want = {keys[c]: keys[o] for c, o in COPIES.items()}
    assert semantic(removed(clean)) == want  # the planted copies, cosine 1
    assert semantic(lines) == want  # the same with the bad rows present: none switched dedup off
    assert all(r["detail"]["similarity"] >= 0.999 for r in lines.values() if r["reason"] == "semantic_duplicate")


# -- the batched checks against their one-row rules ------------------------------------------


def _random_lists(rng: random.Random, rows: int, width: int, specials: list[float]) -> list:
    out = []
    for _ in range(rows):
        if rng.random() < 0.1:
            out.append(None)
            continue
        k = width if width else rng.randrange(0, 6)
        v = [rng.uniform(-1, 1) for _ in range(k)]
        if width and k:
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            v = [x / norm for x in v]
        if v and rng.random() < 0.3:
            v[rng.randrange(len(v))] = rng.choice(specials)
        out.append(v)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_score_problems_batched_equals_the_one_row_rules(seed):
    rng = random.Random(seed)
    n = 400
    specials = [float("nan"), float("inf"), -float("inf"), 1e30, None, 2.5, -1.5, 3e6, 0.0]
    clip = [
        None if rng.random() < 0.1 else rng.choice([rng.uniform(-1, 1), *specials[:4], 1.005, -1.02]) for _ in range(n)
    ]
    grounding = _random_lists(rng, n, 0, specials)
    sentences = [len(x) if x is not None and rng.random() < 0.8 else rng.randrange(0, 6) for x in grounding]
    emb = _random_lists(rng, n, 8, specials)
    for i in rng.sample(range(n), 20):
        emb[i] = [0.0] * rng.choice([0, 8]) if rng.random() < 0.5 else [1.5 / math.sqrt(8)] * 8
    table = pa.table(
        {
            "clip_score": pa.array(clip, pa.float32()),
            "sentence_tokens": pa.array([[[1]] * k for k in sentences], pa.list_(pa.list_(pa.int32()))),
            "sentence_grounding": pa.array(grounding, pa.list_(pa.float32())),
            "image_embedding": pa.array(emb, pa.list_(pa.float16())),
        }
    )
    for part in (table, table.slice(37, 250)):
        got = signals.score_problems(part, part.num_rows)
        rows = part.to_pylist()
        assert got["clip_score"] == [signals.clip_score_problem(r["clip_score"]) for r in rows]
        assert got["sentence_grounding"] == [
            signals.grounding_problem(r["sentence_grounding"], len(r["sentence_tokens"])) for r in rows
        ]
        assert got["image_embedding"] == [signals.embedding_problem(r["image_embedding"]) for r in rows]
        assert (
            sum(p is not None for p in got["image_embedding"]) > 20
            and sum(p is None for p in got["image_embedding"]) > 20
        )
        assert sum(p is not None for p in got["sentence_grounding"]) > 20


def test_low_alignment_ranks_only_the_counted_rows_as_the_specification_says():
    rng = np.random.default_rng(4)
    clip = rng.uniform(-0.2, 0.6, 300).astype(np.float32)
    clip[rng.choice(300, 20, replace=False)] = np.nan  # no score: ranked last
    clip[[5, 9, 40]] = clip[4]  # ties: input order
    counted = rng.random(300) > 0.1
    for p in (10.0, 33.3, 100.0):
        low, facts = dedup.low_alignment(clip, None, p, counted)
        rows = [i for i in range(300) if counted[i]]
        ranked = sorted(rows, key=lambda i: (math.isnan(clip[i]), -float(clip[i]) if not math.isnan(clip[i]) else 0, i))
        keep = set(ranked[: math.ceil(p * len(rows) / 100 - 1e-9)])
        assert [i for i in range(300) if not low[i]] == sorted(keep) and facts["kept_by_rank"] == len(keep)
    # everything counted: the rule as it was
    a, fa = dedup.low_alignment(clip, 0.1, 25.0)
    b, fb = dedup.low_alignment(clip, 0.1, 25.0, np.ones(300, bool))
    assert np.array_equal(a, b) and fa == fb
