"""Contrastive loss, PCA matching and the learning-rate schedule against direct formulas."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from caption_debias.train.loop import lr_at
from caption_debias.train.loss import contrastive_loss, primary_components


def test_contrastive_loss_matches_formula():
    g = torch.Generator().manual_seed(0)
    img = F.normalize(torch.randn(6, 8, generator=g), dim=-1)
    txt = F.normalize(torch.randn(6, 8, generator=g), dim=-1)
    scale = torch.tensor(10.0)
    logits = scale * img @ txt.T
    eps, n = 0.1, 6

    def ce(lg):  # label smoothing written out: (1 - eps) * NLL + eps * mean over classes
        logp = lg.log_softmax(-1)
        return (-(1 - eps) * logp.diag() - eps * logp.mean(-1)).mean()

    want = 0.5 * (ce(logits) + ce(logits.T))
    torch.testing.assert_close(contrastive_loss(img, txt, scale, eps), want)
    assert contrastive_loss(img, img, scale, 0.0) < contrastive_loss(img, txt, scale, 0.0)
    assert n == img.shape[0]


def test_primary_components_reconstruct_top_subspace():
    g = torch.Generator().manual_seed(1)
    x = F.normalize(torch.randn(40, 16, generator=g), dim=-1)
    out = primary_components(x, 4)
    mean = x.mean(0, keepdim=True)
    # rank-4 approximation of the centred data plus the mean (Eckart-Young via the covariance eigenvectors)
    evals, evecs = torch.linalg.eigh((x - mean).T @ (x - mean))
    top = evecs[:, -4:]
    torch.testing.assert_close(out, (x - mean) @ top @ top.T + mean, atol=1e-5, rtol=1e-4)
    assert torch.linalg.matrix_rank(out - mean) == 4
    assert not torch.allclose(out.norm(dim=-1), torch.ones(40))  # not renormalised
    torch.testing.assert_close(primary_components(x, 16), x)  # every component kept: unchanged


def test_lr_warmup_then_cosine_to_zero():
    assert lr_at(0, 1.0, 10, 110) == 0.1
    assert lr_at(9, 1.0, 10, 110) == 1.0
    assert math.isclose(lr_at(60, 1.0, 10, 110), 0.5, abs_tol=1e-12)
    assert lr_at(110, 1.0, 10, 110) == 0.0
    assert lr_at(5, 1.0, 0, 10) < 1.0
