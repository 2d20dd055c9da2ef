"""Recall@K on hand-built similarity matrices with known answers and ties; caption variants."""

import pytest
import torch

from caption_debias.errors import UserError
from caption_debias.evaluate.metrics import retrieval_recall
from caption_debias.evaluate.variants import FILLER, make_variant, parse_variants, short_counts


def test_known_ranks_with_a_two_caption_image():
    # texts x images; texts 0 and 1 belong to image 0, text 2 to image 1, text 3 to image 2.
    sim = torch.tensor(
        [
            [0.9, 0.1, 0.2],  # t0 -> i0 rank 0
            [0.1, 0.5, 0.3],  # t1 -> i0 rank 2
            [0.8, 0.7, 0.1],  # t2 -> i1 rank 1
            [0.0, 0.1, 0.6],  # t3 -> i2 rank 0
        ]
    )
    r = retrieval_recall(sim, [0, 0, 1, 2], ks=(1, 2, 3))
    assert r["t2i"] == {"r1": 50.0, "r2": 75.0, "r3": 100.0}
    # i0: best own caption t0 (0.9), no other caption above -> rank 0.
    # i1: own t2 = 0.7, t1 = 0.5 and t3 = 0.1 below -> rank 0.
    # i2: own t3 = 0.6, t1 = 0.3 and t0 = 0.2 below -> rank 0.
    assert r["i2t"] == {"r1": 100.0, "r2": 100.0, "r3": 100.0}


def test_image_to_text_hit_when_any_caption_is_in_top_k():
    # One image with captions t0 (weak) and t1 (strong); t2 belongs to image 1 and beats t0.
    sim = torch.tensor([[0.1, 0.0], [0.8, 0.2], [0.5, 0.9]])
    r = retrieval_recall(sim, [0, 0, 1], ks=(1,))
    assert r["i2t"]["r1"] == 100.0  # t1 beats t2 for image 0; t2 is best for image 1
    sim[1, 0] = 0.4  # now t2 (0.5) beats both own captions of image 0
    assert retrieval_recall(sim, [0, 0, 1], ks=(1,))["i2t"]["r1"] == 50.0


def test_ties_count_against_the_query():
    sim = torch.ones(3, 3)  # a constant model: every candidate tied
    r = retrieval_recall(sim, [0, 1, 2], ks=(1, 2, 3))
    assert r["t2i"] == {"r1": 0.0, "r2": 0.0, "r3": 100.0}
    assert r["i2t"] == {"r1": 0.0, "r2": 0.0, "r3": 100.0}
    sim = torch.tensor([[0.5, 0.5, 0.1], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    r = retrieval_recall(sim, [0, 1, 2], ks=(1, 2))
    assert r["t2i"] == {"r1": pytest.approx(200 / 3), "r2": 100.0}  # t0 tied with i1 -> rank 1


def test_matches_argsort_reference_and_is_independent_of_chunking():
    g = torch.Generator().manual_seed(3)
    n_images, text_image = 17, torch.cat([torch.arange(15).repeat_interleave(3), torch.tensor([15, 16])])
    sim = torch.rand(len(text_image), n_images, generator=g)
    order = sim.argsort(dim=1, descending=True)
    t2i_rank = (order == text_image.view(-1, 1)).float().argmax(dim=1)
    order_i = sim.t().argsort(dim=1, descending=True)
    i2t_rank = torch.stack([torch.nonzero(text_image[order_i[i]] == i).min() for i in range(n_images)])
    expected = {
        k: {f"r{K}": 100.0 * float((ranks < K).float().mean()) for K in (1, 5, 10)}
        for k, ranks in (("t2i", t2i_rank), ("i2t", i2t_rank))
    }
    for chunk in (4, 4096):
        got = retrieval_recall(sim, text_image, chunk=chunk)
        for k in expected:
            assert got[k] == pytest.approx(expected[k])


def test_image_without_caption_and_bad_index_raise():
    with pytest.raises(ValueError, match="at least one caption"):
        retrieval_recall(torch.rand(2, 3), [0, 1])
    with pytest.raises(ValueError, match="out of range"):
        retrieval_recall(torch.rand(2, 2), [0, 2])


S = ["A cat on a mat.", "The mat is red.", "A lamp stands behind.", "The wall is blue.", "It is night."]


@pytest.mark.parametrize(
    "variant, expected",
    [
        ("keep", S),
        ("remove", S[1:]),
        ("move", [S[1], S[2], S[3], S[0], S[4]]),
        ("swap2", [S[1], S[0]]),
        ("first2", S[:2]),
        ("first", S[:1]),
        ("filler:0", S[:2]),
        ("filler:3", [FILLER] * 3 + S[:2]),
    ],
)
def test_variants_join_sentences_with_single_spaces(variant, expected):
    assert make_variant(S, variant) == " ".join(expected)


def test_short_captions_degrade_and_are_counted():
    assert make_variant(S[:2], "move") == f"{S[1]} {S[0]}"  # fewer than 4: s1 goes last
    assert make_variant(S[:1], "remove") == ""
    assert short_counts([S, S[:1]], ["keep", "remove", "first"]) == {"keep": 0, "remove": 1, "first": 0}


def test_parse_variants_rejects_unknown_names():
    assert parse_variants("keep, remove,keep,filler:2") == ["keep", "remove", "filler:2"]
    for bad in ("kep", "filler:x", "filler:", ""):
        with pytest.raises(UserError):
            parse_variants(bad)


def test_paired_bootstrap_interval():
    from caption_debias.evaluate.metrics import paired_bootstrap

    same = paired_bootstrap([1, 0, 1, 0], [1, 0, 1, 0])
    assert same["gap"] == same["lo"] == same["hi"] == 0.0
    rng = torch.Generator().manual_seed(0)
    a = (torch.rand(800, generator=rng) < 0.2).tolist()
    b = [1 if (x or i % 10 == 0) else 0 for i, x in enumerate(a)]  # b answers a's hits and 1 in 10 more
    gap = paired_bootstrap(a, b, resamples=1000, seed=3)
    assert gap["gap"] == pytest.approx(100.0 * (sum(b) - sum(a)) / 800)
    assert 0.0 < gap["lo"] < gap["gap"] < gap["hi"]
    # Paired: b never misses where a hits, so no resample can show b behind.
    assert gap["lo"] > 0 and gap == paired_bootstrap(a, b, resamples=1000, seed=3)
    with pytest.raises(ValueError):
        paired_bootstrap([], [])


def test_chunked_ranks_equal_whole_matrix_ranks():
    from caption_debias.evaluate.metrics import text_to_image_ranks, text_to_image_ranks_chunked

    sim = torch.randn(50, 20).round(decimals=1)  # ties included
    ti = torch.randint(0, 20, (50,))
    assert torch.equal(text_to_image_ranks_chunked(sim, ti, chunk=7), text_to_image_ranks(sim, ti))
