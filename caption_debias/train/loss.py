"""Symmetric InfoNCE with label smoothing, primary-component matching, cross-rank gathering.

Hand-written rather than open_clip's ClipLoss because that one has no label smoothing and
needs equal batch sizes on every rank (skipped images make them differ here).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


def world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_with_grad(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """All ranks' rows (gradients flow back to their owners) and the offset of this rank's rows."""
    rank, size = world()
    if size == 1:
        return x, 0
    from torch.distributed.nn.functional import all_gather

    n = torch.tensor([x.shape[0]], device=x.device)
    sizes = [torch.zeros_like(n) for _ in range(size)]
    dist.all_gather(sizes, n)
    sizes_i = [int(s) for s in sizes]
    padded = F.pad(x, (0, 0, 0, max(sizes_i) - x.shape[0]))  # all_gather needs equal shapes
    parts = all_gather(padded)
    return torch.cat([p[:s] for p, s in zip(parts, sizes_i)]), sum(sizes_i[:rank])


def contrastive_loss(
    image: torch.Tensor, text: torch.Tensor, logit_scale: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Symmetric InfoNCE of this rank's rows against every rank's rows (open_clip's local-loss form)."""
    all_image, offset = gather_with_grad(image)
    all_text, _ = gather_with_grad(text)
    labels = torch.arange(image.shape[0], device=image.device) + offset
    logits_i2t = logit_scale * image @ all_text.T
    logits_t2i = logit_scale * text @ all_image.T
    return 0.5 * (
        F.cross_entropy(logits_i2t.float(), labels, label_smoothing=label_smoothing)
        + F.cross_entropy(logits_t2i.float(), labels, label_smoothing=label_smoothing)
    )


def primary_components(features: torch.Tensor, dim: int) -> torch.Tensor:
    """Long-CLIP's PCA step: centre, SVD, keep the top `dim` components, reconstruct, add the mean back.

    Not renormalised. When `dim` covers every component the features come back unchanged.
    """
    x = features.float()
    mean = x.mean(dim=0, keepdim=True)
    centred = x - mean
    if dim >= min(centred.shape):
        return features
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    top = vh[:dim]
    return (centred @ top.T @ top + mean).to(features.dtype)
