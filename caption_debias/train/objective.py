"""Each recipe's objective: which texts of a batch it encodes and how their losses combine.

open_clip_train keeps the loss apart from `train_one_epoch`; here the loop (train/loop.py)
encodes the texts an objective names, in that order, and hands it the float features.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from caption_debias.train.config import RECIPES, TrainConfig
from caption_debias.train.loss import contrastive_loss, primary_components


@dataclass(frozen=True)
class Losses:
    """One step's losses: `total` is what is minimised; `short` is None for one-text recipes."""

    total: torch.Tensor
    long: torch.Tensor
    short: torch.Tensor | None = None


@dataclass(frozen=True)
class OneText:
    """`clip` (the long caption) and `short` (one sentence, no label smoothing): one InfoNCE term."""

    label_smoothing: float
    texts = ("long",)

    def __call__(self, image: torch.Tensor, texts: list[torch.Tensor], scale: torch.Tensor) -> Losses:
        loss = contrastive_loss(image, texts[0], scale, self.label_smoothing)
        return Losses(total=loss, long=loss)


@dataclass(frozen=True)
class LongAndShort:
    """`longclip` and `debias`: the long caption against the image features, the short text
    against their primary components (Long-CLIP's fine-grained / coarse-grained pair)."""

    label_smoothing: float
    pca_dim: int
    texts = ("long", "short")

    def __call__(self, image: torch.Tensor, texts: list[torch.Tensor], scale: torch.Tensor) -> Losses:
        long = contrastive_loss(image, texts[0], scale, self.label_smoothing)
        short = contrastive_loss(primary_components(image, self.pca_dim), texts[1], scale, self.label_smoothing)
        return Losses(total=self.combine(long, short), long=long, short=short)

    def combine(self, long: torch.Tensor, short: torch.Tensor) -> torch.Tensor:
        return long + short  # Long-CLIP sums the two terms


@dataclass(frozen=True)
class Debias(LongAndShort):
    """DeBias-CLIP: the short text is the augmented caption, weighted by lambda_s."""

    lambda_short: float = 0.1

    def combine(self, long: torch.Tensor, short: torch.Tensor) -> torch.Tensor:
        return self.lambda_short * short + (1 - self.lambda_short) * long


def objective_for(cfg: TrainConfig) -> OneText | LongAndShort:
    """The objective of `cfg.recipe`, with the config's weights."""
    if cfg.recipe == "debias":
        return Debias(cfg.label_smoothing, cfg.pca_dim, cfg.lambda_short)
    if cfg.recipe == "longclip":
        return LongAndShort(cfg.label_smoothing, cfg.pca_dim)
    if cfg.recipe == "clip":
        return OneText(cfg.label_smoothing)
    if cfg.recipe == "short":
        return OneText(0.0)  # stage-1 pretraining on one sentence: plain InfoNCE
    raise ValueError(f"no objective for recipe {cfg.recipe!r} (recipes: {', '.join(RECIPES)})")
