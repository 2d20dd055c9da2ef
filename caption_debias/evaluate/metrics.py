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
    beaten_or_tied = (sim >= right).sum(dim=1) - 1  # minus the right image itself
    return beaten_or_tied


def image_to_text_ranks(sim: torch.Tensor, text_image: torch.Tensor, n_images: int) -> torch.Tensor:
    """Rank of each image's best-scoring caption among all captions of other images."""
    sim_t = sim.t()  # [I, T]
    own = text_image.view(1, -1) == torch.arange(n_images, device=sim.device).view(-1, 1)  # [I, T]
    if not bool(own.any(dim=1).all()):
        raise ValueError("every image needs at least one caption")
    best_own = sim_t.masked_fill(~own, float("-inf")).max(dim=1, keepdim=True).values
    return ((sim_t >= best_own) & ~own).sum(dim=1)


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
    Works in row chunks so a COCO-sized matrix (25k x 5k) stays within memory.
    """
    if sim.dim() != 2:
        raise ValueError("sim must be a [texts, images] matrix")
    n_texts, n_images = sim.shape
    ti = torch.as_tensor(text_image, dtype=torch.long, device=sim.device)
    if ti.numel() != n_texts:
        raise ValueError(f"text_image has {ti.numel()} entries for {n_texts} texts")
    if n_texts and (int(ti.min()) < 0 or int(ti.max()) >= n_images):
        raise ValueError("text_image index out of range")

    t2i = torch.cat([text_to_image_ranks(sim[s : s + chunk], ti[s : s + chunk]) for s in range(0, n_texts, chunk)])

    # Image side in column chunks; texts of other chunks get an out-of-range local index.
    i2t_parts = [
        image_to_text_ranks(sim[:, s : s + chunk], ti - s, min(chunk, n_images - s)) for s in range(0, n_images, chunk)
    ]
    i2t = torch.cat(i2t_parts)
    return {"t2i": recall_from_ranks(t2i, ks), "i2t": recall_from_ranks(i2t, ks)}
