"""Skip the all-padding tail of a text batch: same features, less compute.

With CLIP's causal text mask and EOT (argmax/eos) pooling, positions after a caption's EOT
never reach its pooled feature, so a batch can be cut after its latest EOT. open_clip's
`encode_text` adds the full positional table, so the cut needs its own few-line forward
(written out here, checked against `encode_text` in tests/test_model.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def can_trim(model: nn.Module) -> bool:
    return (
        hasattr(model, "positional_embedding")
        and getattr(model, "attn_mask", None) is not None
        and getattr(model, "text_pool_type", None) in ("argmax", "eos")
    )


def used_length(text: torch.Tensor) -> int:
    """Columns up to and including the latest EOT (highest id) of the batch."""
    return int(text.argmax(dim=-1).max()) + 1 if text.numel() else text.shape[-1]


def encode_text_trimmed(model: nn.Module, text: torch.Tensor, normalize: bool = False) -> torch.Tensor:
    """open_clip CLIP.encode_text on text[:, :L] with the positional table and mask cut to L."""
    from open_clip.transformer import text_global_pool

    n = text.shape[1]
    cast_dtype = model.transformer.get_cast_dtype()
    x = model.token_embedding(text).to(cast_dtype)
    x = x + model.positional_embedding[:n].to(cast_dtype)
    x = model.transformer(x, attn_mask=model.attn_mask[:n, :n])
    x = model.ln_final(x)
    x = text_global_pool(x, text, model.text_pool_type, eos_token_id=getattr(model, "text_eos_id", None))
    if model.text_projection is not None:
        x = model.text_projection(x) if isinstance(model.text_projection, nn.Linear) else x @ model.text_projection
    return F.normalize(x, dim=-1) if normalize else x


def encode_text_bucketed(model: nn.Module, text: torch.Tensor, buckets: int = 4) -> torch.Tensor:
    """Normalised features of a text batch, rows sorted by EOT position and encoded in `buckets`
    chunks, each cut after its own latest EOT: the rows' features as one trimmed batch gives them
    (float sums in another order), for less compute when lengths spread (DeBias's pad-moved texts)."""
    if text.shape[0] < 2:
        return encode_text_trimmed(model, text[:, : used_length(text)], normalize=True)
    ends = text.argmax(dim=-1)
    order = torch.argsort(ends, stable=True)
    parts = [
        encode_text_trimmed(model, text[idx, : int(ends[idx].max()) + 1], normalize=True)
        for idx in order.chunk(buckets)
    ]
    return torch.cat(parts)[torch.argsort(order)]


class TrimmedCLIP(nn.Module):
    """forward(image, *texts) -> (image features, [features per text batch], logit scale), normalised.

    Each text batch is encoded on its own in length buckets, each cut at its own latest EOT
    (DeBias's pad-moved texts end anywhere up to the context; long captions spread too).
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, image: torch.Tensor, *texts: torch.Tensor):
        image_features = self.model.encode_image(image, normalize=True)
        text_features = [encode_text_bucketed(self.model, t) for t in texts]
        return image_features, text_features, self.model.logit_scale.exp()
