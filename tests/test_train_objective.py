"""Each recipe's objective: the texts it asks for and how its losses combine, against direct formulas."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from caption_debias.train.config import RECIPES, TrainConfig
from caption_debias.train.loss import contrastive_loss, primary_components
from caption_debias.train.objective import objective_for


def _features(n: int = 12, dim: int = 16):
    g = torch.Generator().manual_seed(0)
    image, long, short = (F.normalize(torch.randn(n, dim, generator=g), dim=-1) for _ in range(3))
    return image, long, short, torch.tensor(20.0)


def test_every_recipe_has_an_objective_naming_its_texts():
    texts = {r: objective_for(TrainConfig(recipe=r)).texts for r in RECIPES}
    assert texts == {
        "debias": ("long", "short"),
        "longclip": ("long", "short"),
        "clip": ("long",),
        "short": ("long",),
    }
    with pytest.raises(ValueError, match="no objective"):
        objective_for(TrainConfig(recipe="nope"))


def test_debias_weights_the_augmented_caption_by_lambda_short():
    image, long, short, scale = _features()
    cfg = TrainConfig(recipe="debias", lambda_short=0.3, pca_dim=4, label_smoothing=0.1)
    got = objective_for(cfg)(image, [long, short], scale)
    want_long = contrastive_loss(image, long, scale, 0.1)
    want_short = contrastive_loss(primary_components(image, 4), short, scale, 0.1)
    assert torch.equal(got.long, want_long) and torch.equal(got.short, want_short)
    assert torch.equal(got.total, 0.3 * want_short + 0.7 * want_long)


def test_longclip_sums_long_and_pca_matched_short():
    image, long, short, scale = _features()
    got = objective_for(TrainConfig(recipe="longclip", pca_dim=4))(image, [long, short], scale)
    want_short = contrastive_loss(primary_components(image, 4), short, scale, 0.1)
    assert not torch.equal(want_short, contrastive_loss(image, short, scale, 0.1))  # PCA changes the term
    assert torch.equal(got.short, want_short)
    assert torch.equal(got.total, contrastive_loss(image, long, scale, 0.1) + want_short)


def test_clip_smooths_labels_and_short_does_not():
    image, long, _, scale = _features()
    clip = objective_for(TrainConfig(recipe="clip", label_smoothing=0.2))(image, [long], scale)
    short = objective_for(TrainConfig(recipe="short", label_smoothing=0.2))(image, [long], scale)
    assert clip.short is None and short.short is None
    assert torch.equal(clip.total, contrastive_loss(image, long, scale, 0.2)) and clip.total is clip.long
    assert torch.equal(short.total, contrastive_loss(image, long, scale, 0.0))
    assert not torch.equal(clip.total, short.total)
