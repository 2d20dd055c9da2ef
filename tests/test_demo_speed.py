"""The demo's faster fine-tune steps: text batches encoded in length buckets (model/trim.py),
the same features and loss as one batch, for fewer token columns."""

from __future__ import annotations

import torch

from caption_debias.model.load import load_model
from caption_debias.model.stretch import stretch_positional_embedding
from caption_debias.train.config import TrainConfig
from caption_debias.train.objective import objective_for


def _debias_like_texts(rows: int, seed: int) -> torch.Tensor:
    """DeBias short texts: SOT, pads moved after it, a few sentences' ids, EOT anywhere up to 247."""
    g = torch.Generator().manual_seed(seed)
    text = torch.zeros(rows, 248, dtype=torch.long)
    text[:, 0] = 49406
    for i in range(rows):
        n = int(torch.randint(8, 40, (1,), generator=g))
        end = int(torch.randint(n + 1, 248, (1,), generator=g))
        text[i, end - n + 1 : end] = torch.randint(300, 40000, (n - 1,), generator=g)
        text[i, end] = 49407
    return text


def _stretched_tiny():
    torch.manual_seed(0)  # the same random weights on every load
    model = load_model("tiny").model
    stretch_positional_embedding(model, 248)
    return model


def test_bucketed_text_features_and_loss_match_one_batch():
    from caption_debias.model.trim import TrimmedCLIP

    model = _stretched_tiny()
    images = torch.randn(16, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    long, short = _debias_like_texts(16, 2), _debias_like_texts(16, 3)
    objective = objective_for(TrainConfig(recipe="debias"))
    with torch.no_grad():
        img_f, (long_f, short_f), scale = TrimmedCLIP(model)(images, long, short)
        whole = model(images, torch.cat([long, short]))
        torch.testing.assert_close(long_f, whole[1][:16], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(short_f, whole[1][16:], atol=1e-5, rtol=1e-5)
        ours = objective(img_f, [long_f, short_f], scale)
        plain = objective(whole[0], list(whole[1].split(16)), whole[2])
    torch.testing.assert_close(ours.total, plain.total, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.short, plain.short, atol=1e-5, rtol=1e-5)


def test_bucketed_gradients_match_one_batch():
    from caption_debias.model.trim import TrimmedCLIP

    texts = _debias_like_texts(12, 4)
    grads = []
    for bucketed in (True, False):
        model = _stretched_tiny()
        if bucketed:
            features = TrimmedCLIP(model)(torch.zeros(1, 3, 64, 64), texts)[1][0]
        else:
            features = model.encode_text(texts, normalize=True)
        (features * torch.arange(features.shape[1])).sum().backward()
        grads.append(model.transformer.resblocks[0].mlp.c_fc.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-4)


def test_text_batches_are_cut_per_bucket():
    """Rows whose EOTs spread are encoded in chunks sorted by length, each cut at its own end:
    fewer token columns than the whole batch cut at its latest EOT."""
    from caption_debias.model.trim import TrimmedCLIP

    model = _stretched_tiny()
    texts = _debias_like_texts(32, 5)
    seen: list[tuple[int, int]] = []
    hook = model.transformer.register_forward_pre_hook(lambda _m, args: seen.append(tuple(args[0].shape[:2])))
    try:
        with torch.no_grad():
            TrimmedCLIP(model)(torch.zeros(1, 3, 64, 64), texts)
    finally:
        hook.remove()
    latest = int(texts.argmax(-1).max()) + 1
    lengths = [n for _, n in seen]
    assert len(seen) > 1 and lengths == sorted(lengths) and lengths[-1] == latest
    assert sum(rows * n for rows, n in seen) < 0.8 * 32 * latest
