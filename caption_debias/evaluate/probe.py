"""The paper's bias probes for one or more models on one data set.

- filler curve: N copies of "This is a photo." before the first two sentences, N = 0..5;
- sentence order: first2 / swap2 / first;
- keep / move / remove on full captions;
- mean attention from the pooled (EOT) query to each token position, averaged over heads,
  layers and the captions whose EOT lies at or past that position.
Attention is read from open_clip's own nn.MultiheadAttention text layers by asking them for
their weights during the normal forward pass (need_weights=True), so the weights are
exactly those the layer used.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from caption_debias.errors import UserError
from caption_debias.evaluate.benchmarks import RetrievalData
from caption_debias.evaluate.retrieval import as_data, model_device, run_retrieval
from caption_debias.evaluate.variants import make_variant
from caption_debias.progress import add_work, advance, end, phase

if TYPE_CHECKING:
    import torch

FILLER_COUNTS = tuple(range(6))
ORDER_VARIANTS = ("first2", "swap2", "first")
POSITION_VARIANTS = ("keep", "move", "remove")
ATTENTION = "attention by position"  # the last phase of a model's rows in the progress line


def _text_blocks(model) -> list:
    transformer = getattr(model, "transformer", None)
    if transformer is None and hasattr(model, "text"):  # CustomTextCLIP keeps the tower in .text
        transformer = getattr(model.text, "transformer", None)
    blocks = list(getattr(transformer, "resblocks", []) or [])
    if not blocks:
        raise UserError(
            "attention probe: the model has no open_clip text transformer (HF text towers are not supported)"
        )
    return blocks


@contextmanager
def capture_text_attention(model):
    """Within the block, every text encoding appends one [B, L, L] head-averaged weight
    tensor per layer to the yielded list (layer order)."""
    import torch.nn as nn

    attns = [getattr(b, "attn", None) for b in _text_blocks(model)]
    if not all(isinstance(a, nn.MultiheadAttention) for a in attns):
        raise UserError(
            "attention probe: text blocks do not use nn.MultiheadAttention (custom attention is not supported)"
        )
    captured: list = []

    def ask_for_weights(_module, args, kwargs):
        kwargs["need_weights"] = True
        kwargs["average_attn_weights"] = True  # mean over heads
        return args, kwargs

    def keep_weights(_module, _args, _kwargs, output):
        captured.append(output[1].detach())

    handles = []
    try:
        for attn in attns:
            handles.append(attn.register_forward_pre_hook(ask_for_weights, with_kwargs=True))
            handles.append(attn.register_forward_hook(keep_weights, with_kwargs=True))
        yield captured
    finally:
        for h in handles:
            h.remove()


def pooled_positions(model, tokens) -> "torch.Tensor":
    """Index of the token the text tower pools for each row (open_clip's text_global_pool rules)."""
    import torch

    pool = getattr(model, "text_pool_type", "argmax")
    if pool == "argmax":
        return tokens.argmax(dim=-1)
    if pool == "eos":
        return (tokens == model.text_eos_id).int().argmax(dim=-1)
    if pool == "last":
        return torch.full((tokens.shape[0],), tokens.shape[1] - 1, dtype=torch.long, device=tokens.device)
    if pool == "first":
        return torch.zeros(tokens.shape[0], dtype=torch.long, device=tokens.device)
    raise UserError(f"attention probe: text pooling {pool!r} has no single pooled query")


def attention_by_position(loaded, texts: Sequence[str], batch_size: int = 64) -> dict[str, list]:
    """{'mean': [...], 'count': [...]} over positions 0..context-1; mean is None where no caption reaches."""
    import torch

    device = model_device(loaded)
    n_pos = loaded.context_length
    sums = torch.zeros(n_pos, dtype=torch.float64)
    counts = torch.zeros(n_pos, dtype=torch.long)
    loaded.model.eval()
    with torch.inference_mode(), capture_text_attention(loaded.model) as captured:
        for s in range(0, len(texts), batch_size):
            tokens = loaded.tokenizer(list(texts[s : s + batch_size])).to(device)
            captured.clear()
            loaded.model.encode_text(tokens)
            weights = torch.stack(captured).mean(dim=0)  # [B, L, L], mean over layers
            pooled = pooled_positions(loaded.model, tokens)
            rows = weights[torch.arange(len(tokens), device=device), pooled].double().cpu()  # [B, L]
            reach = torch.arange(n_pos).view(1, -1) <= pooled.cpu().view(-1, 1)
            sums += (rows * reach).sum(dim=0)
            counts += reach.sum(dim=0)
            advance(len(tokens))
    mean = [float(sums[p] / counts[p]) if counts[p] else None for p in range(n_pos)]
    return {"mean": mean, "count": counts.tolist()}


def probe_model(loaded, data: RetrievalData, batch_size: int = 64) -> dict[str, Any]:
    """All probes for one model; images are encoded once and reused for every variant."""
    variants = list(POSITION_VARIANTS) + list(ORDER_VARIANTS) + [f"filler:{n}" for n in FILLER_COUNTS]
    # the data set's rows move through the encodings, then the attention pass (one span)
    run = run_retrieval(loaded, data, variants, batch_size, later_phases=[ATTENTION])
    table = run.table
    keep_texts = [make_variant(s, "keep") for s in data.captions]
    phase(ATTENTION)
    add_work(len(keep_texts))
    attention = attention_by_position(loaded, keep_texts, max(batch_size, 64))
    end()
    return {
        "context_length": loaded.context_length,
        "retrieval": table,
        "too_short": run.short,
        "filler_curve": {
            "n": list(FILLER_COUNTS),
            "t2i_r1": [table[f"filler:{n}"]["t2i"]["r1"] for n in FILLER_COUNTS],
            "i2t_r1": [table[f"filler:{n}"]["i2t"]["r1"] for n in FILLER_COUNTS],
        },
        "order": {v: table[v] for v in ORDER_VARIANTS},
        "position": {v: table[v] for v in POSITION_VARIANTS},
        "attention": attention,
    }


def probe(
    models: dict[str, Any],
    data,
    report_dir: str | Path | None,
    batch_size: int = 64,
    image_root: str | Path | None = None,
) -> dict[str, Any]:
    """Run every probe for each {label: LoadedModel}; write JSON + PNG + HTML to report_dir
    (when given). Returns {"data": {...}, "models": {label: {...}}, "files": {...}}."""
    if not models:
        raise UserError("probe needs at least one model")
    data = as_data(data, image_root)
    result: dict[str, Any] = {
        "data": {
            "name": data.name,
            "definition": data.definition,
            "images": data.n_images,
            "captions": len(data.captions),
            **data.info,
        },
        "models": {label: probe_model(m, data, batch_size) for label, m in models.items()},
    }
    if report_dir is not None:
        from caption_debias.evaluate.report import write_probe_report

        result["files"] = write_probe_report(result, Path(report_dir))
    return result
