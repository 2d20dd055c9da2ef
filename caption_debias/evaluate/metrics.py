"""Recall@K for image-text retrieval from a text-by-image similarity matrix.

Images may have several captions: a text-to-image query has exactly one right image; an
image-to-text query is a hit when ANY of its captions ranks within the top K.

Ties are counted against the query (pessimistic): the rank of the right answer is the
number of wrong candidates scoring >= it. So a constant similarity scores 0 instead of
depending on how a sort happens to break ties, and results never depend on item order.
"""

from __future__ import annotations

from typing import Sequence

import torch

KS: tuple[int, ...] = (1, 5, 10)


def text_to_image_ranks(sim: torch.Tensor, text_image: torch.Tensor) -> torch.Tensor:
    """Rank (0 = best) of each text's own image among all images; ties count against it."""
    right = sim.gather(1, text_image.view(-1, 1))  # [T, 1]
    return (sim >= right).sum(dim=1) - 1  # minus the right image itself


def own_scores(sim: torch.Tensor, text_image: torch.Tensor) -> torch.Tensor:
    """sim[t, image of t] for every text t."""
    return sim.gather(1, text_image.view(-1, 1)).view(-1)


def recall_from_ranks(ranks: torch.Tensor, ks: Sequence[int] = KS) -> dict[str, float]:
    """Percent of queries whose rank is < K, for each K (keys 'r1', 'r5', ...)."""
    n = ranks.numel()
    if n == 0:
        raise ValueError("no queries")
    return {f"r{k}": 100.0 * float((ranks < k).sum()) / n for k in ks}


def retrieval_recall(
    sim: torch.Tensor,
    text_image: Sequence[int] | torch.Tensor,
    ks: Sequence[int] = KS,
    chunk: int = 4096,
) -> dict[str, dict[str, float]]:
    """{'t2i': {'r1','r5','r10'}, 'i2t': {...}} in percent.

    sim: [n_texts, n_images] similarity; text_image[t] is the index of text t's image.
    One pass over row chunks, no transposed copies, so a COCO-sized matrix (25k x 5k) needs
    only a chunk of booleans beyond the matrix itself.
    """
    if sim.dim() != 2:
        raise ValueError("sim must be a [texts, images] matrix")
    n_texts, n_images = sim.shape
    ti = torch.as_tensor(text_image, dtype=torch.long, device=sim.device)
    if ti.numel() != n_texts:
        raise ValueError(f"text_image has {ti.numel()} entries for {n_texts} texts")
    if n_texts and (int(ti.min()) < 0 or int(ti.max()) >= n_images):
        raise ValueError("text_image index out of range")
    if bool((torch.bincount(ti, minlength=n_images) == 0).any()):
        raise ValueError("every image needs at least one caption")

    # Image-to-text: an image's rank is how many other images' captions score >= its best own one.
    own = own_scores(sim, ti)
    best_own = torch.full((n_images,), float("-inf"), dtype=sim.dtype, device=sim.device)
    best_own = best_own.scatter_reduce(0, ti, own, reduce="amax")
    at_or_above = torch.zeros(n_images, dtype=torch.long, device=sim.device)
    t2i_parts = []
    for s in range(0, n_texts, chunk):
        rows = sim[s : s + chunk]
        t2i_parts.append(text_to_image_ranks(rows, ti[s : s + chunk]))
        at_or_above += (rows >= best_own.view(1, -1)).sum(dim=0)
    own_at_or_above = torch.zeros(n_images, dtype=torch.long, device=sim.device)
    own_at_or_above.scatter_add_(0, ti, (own >= best_own[ti]).long())  # the best one, plus own ties with it
    i2t = at_or_above - own_at_or_above
    return {"t2i": recall_from_ranks(torch.cat(t2i_parts), ks), "i2t": recall_from_ranks(i2t, ks)}
