"""Recall@K for image-text retrieval from a text-by-image similarity matrix.

Images may have several captions: a text-to-image query has exactly one right image; an
image-to-text query is a hit when ANY of its captions ranks within the top K.

Ties are counted against the query (pessimistic, the default rule): the rank of the right
answer is the number of wrong candidates scoring >= it. So a constant similarity scores 0
instead of depending on how a sort happens to break ties, and results never depend on item
order. The `clip_benchmark` rule instead takes each query's torch.topk(K) as CLIP_benchmark's
`recall_at_k` does (ties broken by torch.topk), for figures comparable with tables it made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # torch is imported where a function needs it: RULES is read before any torch import
    import torch

KS: tuple[int, ...] = (1, 5, 10)
RULES = ("pessimistic", "clip_benchmark")


def text_to_image_ranks(sim: torch.Tensor, text_image: torch.Tensor) -> torch.Tensor:
    """Rank (0 = best) of each text's own image among all images; ties count against it."""
    right = sim.gather(1, text_image.view(-1, 1))  # [T, 1]
    return (sim >= right).sum(dim=1) - 1  # minus the right image itself


def text_to_image_ranks_chunked(sim: torch.Tensor, text_image: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """text_to_image_ranks over row chunks: only a chunk of booleans beyond the matrix itself."""
    import torch

    ti = torch.as_tensor(text_image, dtype=torch.long, device=sim.device)
    parts = [text_to_image_ranks(sim[s : s + chunk], ti[s : s + chunk]) for s in range(0, sim.shape[0], chunk)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)


def image_to_text_ranks(sim: torch.Tensor, text_image: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Rank (0 = best) of each image's best own caption among all captions, ties against it:
    per-image hits of `retrieval_recall`'s pessimistic image-to-text rule."""
    import torch

    n_images = sim.shape[1]
    ti = torch.as_tensor(text_image, dtype=torch.long, device=sim.device)
    own = own_scores(sim, ti)
    best_own = torch.full((n_images,), float("-inf"), dtype=sim.dtype, device=sim.device)
    best_own = best_own.scatter_reduce(0, ti, own, reduce="amax")
    at_or_above = torch.zeros(n_images, dtype=torch.long, device=sim.device)
    for s in range(0, sim.shape[0], chunk):
        at_or_above += (sim[s : s + chunk] >= best_own.view(1, -1)).sum(dim=0)
    own_at_or_above = torch.zeros(n_images, dtype=torch.long, device=sim.device)
    own_at_or_above.scatter_add_(0, ti, (own >= best_own[ti]).long())
    return at_or_above - own_at_or_above


def paired_bootstrap(
    a_hits: Sequence[float], b_hits: Sequence[float], resamples: int = 2000, seed: int = 0, level: float = 0.95
) -> dict[str, float]:
    """b - a in percent points over the same queries, with a paired percentile-bootstrap interval:
    queries are resampled with replacement and both models keep their own answer to each."""
    import numpy as np

    diff = np.asarray(b_hits, dtype=np.float64) - np.asarray(a_hits, dtype=np.float64)
    if diff.ndim != 1 or diff.size == 0:
        raise ValueError("paired_bootstrap needs two equal, non-empty lists of per-query hits")
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for s in range(0, resamples, 256):  # blocks of resamples keep the index matrix small
        idx = rng.integers(0, diff.size, size=(min(256, resamples - s), diff.size))
        means[s : s + len(idx)] = diff[idx].mean(axis=1)
    tail = (1.0 - level) / 2
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return {"gap": 100.0 * float(diff.mean()), "lo": 100.0 * float(lo), "hi": 100.0 * float(hi), "level": level}


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
    rule: str = "pessimistic",
) -> dict[str, dict[str, float]]:
    """{'t2i': {'r1','r5','r10'}, 'i2t': {...}} in percent.

    sim: [n_texts, n_images] similarity; text_image[t] is the index of text t's image.
    One pass over row chunks, no transposed copies, so a COCO-sized matrix (25k x 5k) needs
    only a chunk of booleans beyond the matrix itself. rule: one of RULES (module docstring).
    """
    import torch

    if rule not in RULES:
        raise ValueError(f"unknown recall rule {rule!r} (choose from {', '.join(RULES)})")
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
    if rule == "clip_benchmark":
        t2i, i2t = topk_hits(sim, ti, ks, chunk)
        return {"t2i": _percent(t2i), "i2t": _percent(i2t)}

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


def topk_hits(
    sim: torch.Tensor, text_image: torch.Tensor, ks: Sequence[int] = KS, chunk: int = 4096
) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
    """Per-query hits under CLIP_benchmark's rule: ({K: t2i hits [T]}, {K: i2t hits [I]}).

    As its `recall_at_k`: a separate torch.topk(K) per K over each query's row (images: rows of
    the transposed view, as it slices `scores.T`); a hit when a right item is among the K.
    Among tied scores torch.topk decides, so with ties the result can depend on item order and
    device, which is why this is not the default. K larger than the candidates counts all.
    """
    import torch

    n_texts, n_images = sim.shape
    t2i: dict[int, list[torch.Tensor]] = {k: [] for k in ks}
    i2t: dict[int, list[torch.Tensor]] = {k: [] for k in ks}
    for s in range(0, n_texts, chunk):
        rows, own = sim[s : s + chunk], text_image[s : s + chunk].view(-1, 1)
        for k in ks:
            t2i[k].append((torch.topk(rows, min(k, n_images), dim=1).indices == own).any(dim=1))
    by_image = sim.t()
    for s in range(0, n_images, chunk):
        rows = by_image[s : s + chunk]
        images = torch.arange(s, s + rows.shape[0], device=sim.device).view(-1, 1)
        for k in ks:
            top = torch.topk(rows, min(k, n_texts), dim=1).indices
            i2t[k].append((text_image[top] == images).any(dim=1))
    return {k: torch.cat(v) for k, v in t2i.items()}, {k: torch.cat(v) for k, v in i2t.items()}


def _percent(hits: dict[int, torch.Tensor]) -> dict[str, float]:
    if any(h.numel() == 0 for h in hits.values()):
        raise ValueError("no queries")
    return {f"r{k}": 100.0 * float(h.sum()) / h.numel() for k, h in hits.items()}
