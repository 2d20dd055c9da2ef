"""The clip_benchmark recall rule equals CLIP_benchmark's own recall_at_k, ties included."""

import pytest
import torch
from clip_benchmark.metrics.zeroshot_retrieval import batchify, recall_at_k

from caption_debias.evaluate.metrics import retrieval_recall, topk_hits

KS = (1, 5, 10)


def _theirs(sim: torch.Tensor, text_image: torch.Tensor, batch_size: int):
    """CLIP_benchmark's evaluate() from the score matrix on: per-query hits for each K."""
    positive_pairs = torch.zeros_like(sim, dtype=bool)
    positive_pairs[torch.arange(len(sim)), text_image] = True
    t2i = {k: batchify(recall_at_k, sim, positive_pairs, batch_size, "cpu", k=k) > 0 for k in KS}
    i2t = {k: batchify(recall_at_k, sim.T, positive_pairs.T, batch_size, "cpu", k=k) > 0 for k in KS}
    return t2i, i2t


def _matrix(kind: str, seed: int):
    """texts x images similarities, COCO-like (5-7 captions per image) or Flickr-like (5 each)."""
    g = torch.Generator().manual_seed(seed)
    n_images = 40
    per_image = torch.full((n_images,), 5)
    if kind == "coco":
        per_image[::7] = 6
        per_image[::13] = 7
    text_image = torch.repeat_interleave(torch.arange(n_images), per_image)
    text_image = text_image[torch.randperm(len(text_image), generator=g)]  # captions not grouped by image
    if kind == "ties":  # few distinct values: most rows hold many exact ties
        sim = torch.randint(0, 4, (len(text_image), n_images), generator=g).float() / 4
    else:
        sim = torch.rand(len(text_image), n_images, generator=g)
        sim[: len(sim) // 3] = torch.round(sim[: len(sim) // 3] * 8) / 8  # a third of the texts tie a lot
    return sim, text_image


@pytest.mark.parametrize("kind", ["coco", "flickr", "ties"])
@pytest.mark.parametrize("batch_size", [7, 64])
def test_hits_equal_clip_benchmarks_recall_at_k(kind, batch_size):
    sim, text_image = _matrix(kind, seed=len(kind) + batch_size)
    t2i, i2t = _theirs(sim, text_image, batch_size)
    for chunk in (5, 4096):  # our chunking does not change which items torch.topk picks
        ours_t2i, ours_i2t = topk_hits(sim, text_image, KS, chunk=chunk)
        for k in KS:
            assert torch.equal(ours_t2i[k], t2i[k]), (kind, k, "t2i")
            assert torch.equal(ours_i2t[k], i2t[k]), (kind, k, "i2t")
    got = retrieval_recall(sim, text_image, rule="clip_benchmark")
    for k in KS:  # their figure is a fraction; ours is percent
        assert got["t2i"][f"r{k}"] == pytest.approx(100 * t2i[k].float().mean().item())
        assert got["i2t"][f"r{k}"] == pytest.approx(100 * i2t[k].float().mean().item())


def test_the_rules_differ_only_on_ties():
    sim, text_image = _matrix("ties", seed=1)
    pessimistic = retrieval_recall(sim, text_image)
    benchmark = retrieval_recall(sim, text_image, rule="clip_benchmark")
    assert benchmark["t2i"]["r1"] > pessimistic["t2i"]["r1"]  # topk gives some tied queries the hit
    g = torch.Generator().manual_seed(2)
    sim = torch.rand(60, 12, generator=g)  # continuous scores: no ties, one answer
    text_image = torch.arange(60) % 12
    assert retrieval_recall(sim, text_image, rule="clip_benchmark") == retrieval_recall(sim, text_image)


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="unknown recall rule"):
        retrieval_recall(torch.rand(2, 2), [0, 1], rule="argsort")
