"""Image-text retrieval with a LoadedModel: encode once, score every caption variant.

Images are encoded once per model and reused across variants; features are L2-normalised
and compared by cosine similarity, on the model's own device (GPU when the model is there).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.evaluate.benchmarks import RetrievalData, load_prepared
from caption_debias.evaluate.metrics import image_to_text_ranks, retrieval_recall, text_to_image_ranks_chunked
from caption_debias.evaluate.variants import DEFAULT_VARIANTS, make_variant, parse_variants, short_counts
from caption_debias.image_files import ImageProblem, decode_rgb, read_regular
from caption_debias.progress import add_work, advance, begin, end, phase

IMAGES = "encoding images"

if TYPE_CHECKING:
    import torch


def as_data(data: Any, image_root: str | Path | None = None) -> RetrievalData:
    """RetrievalData as is; a prepared folder (with image_root, or the one its manifest records);
    or a (prepared folder, image root) pair."""
    if isinstance(data, RetrievalData):
        return data
    if isinstance(data, (tuple, list)) and len(data) == 2:
        data, image_root = data
    if isinstance(data, (str, Path)):
        return load_prepared(storage.as_path(data), image_root)
    raise TypeError(f"cannot evaluate on {type(data).__name__}: give RetrievalData or a prepared folder")


def model_device(loaded) -> "torch.device":
    import torch

    try:
        return next(loaded.model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


class _ImageFiles:
    """Map-style dataset: path -> preprocessed tensor (a class so DataLoader workers can pickle it);
    with `source` (image_source.lookup.ImageLookup) the paths are references read through it."""

    def __init__(self, paths: Sequence[Path], preprocess: Callable, source=None):
        self.paths, self.preprocess, self.source = list(paths), preprocess, source

    def __len__(self) -> int:
        return len(self.paths)

    def _bytes(self, i: int) -> bytes:
        return read_regular(self.paths[i]) if self.source is None else self.source.read(str(self.paths[i]))

    def __getitem__(self, i: int):
        # Bounded, never blocking, and decoded to the same RGB as train's (image_files).
        try:
            return self.preprocess(decode_rgb(self._bytes(i), str(self.paths[i])))
        except ImageProblem as exc:
            raise UserError(f"{self.paths[i]}: unreadable image ({exc.detail})") from None


def encode_images(loaded, paths: Sequence[Path], batch_size: int = 64, workers: int | None = None, source=None):
    """[N, D] normalised image features on the model's device."""
    import torch
    import torch.nn.functional as F

    device = model_device(loaded)
    if workers is None:  # worker start-up costs more than it saves on small sets
        workers = 0 if len(paths) < 512 else min(8, os.cpu_count() or 1)
    loader = torch.utils.data.DataLoader(
        _ImageFiles(paths, loaded.preprocess, source),
        batch_size=batch_size,
        num_workers=workers,
        pin_memory=device.type == "cuda",
    )
    feats = []
    loaded.model.eval()
    with torch.inference_mode():
        try:
            for batch in loader:
                feats.append(
                    F.normalize(loaded.model.encode_image(batch.to(device, non_blocking=True)).float(), dim=-1)
                )
                advance(len(batch))
        except UserError as exc:
            # A worker's error arrives wrapped with its traceback: keep the one line the user needs.
            last = str(exc).strip().splitlines()[-1]
            raise UserError(last.split("UserError: ", 1)[-1]) from None
    return torch.cat(feats)


def encode_texts(loaded, texts: Sequence[str], batch_size: int = 256):
    """[N, D] normalised text features; the model's tokenizer truncates (last kept token = EOT)."""
    import torch
    import torch.nn.functional as F

    from caption_debias.model.trim import can_trim, encode_text_trimmed, used_length

    device = model_device(loaded)
    feats = []
    loaded.model.eval()
    trim = can_trim(loaded.model)  # causal mask + EOT pooling: the all-pad tail changes nothing
    with torch.inference_mode():
        for s in range(0, len(texts), batch_size):
            tokens = loaded.tokenizer(list(texts[s : s + batch_size])).to(device)
            if trim:
                out = encode_text_trimmed(loaded.model, tokens[:, : used_length(tokens)])
            else:
                out = loaded.model.encode_text(tokens)
            feats.append(F.normalize(out.float(), dim=-1))
            advance(len(tokens))
    return torch.cat(feats)


@dataclass
class RetrievalRun:
    table: dict[str, dict[str, dict[str, float]]]  # {variant: {t2i|i2t: {r1,r5,r10}}}
    short: dict[str, int]  # captions too short for each variant (they degrade, see variants.py)
    n_images: int
    n_texts: int
    image_features: Any  # reuse across calls on the same model and data
    # {variant: rank of each text's own image, 0 = first, ties against it}: per-query hits for
    # paired comparisons of two models on the same queries (metrics.paired_bootstrap)
    t2i_ranks: dict[str, Any] = field(default_factory=dict)
    # {variant: rank of each image's best own caption, ties against it}: image-to-text's per-query hits
    i2t_ranks: dict[str, Any] = field(default_factory=dict)


def run_retrieval(
    loaded,
    data: RetrievalData,
    variants: Sequence[str] = DEFAULT_VARIANTS,
    batch_size: int = 64,
    image_features=None,
    workers: int | None = None,
    recall_rule: str = "pessimistic",
    want_i2t_ranks: bool = False,
    later_phases: Sequence[str] = (),
) -> RetrievalRun:
    """Every variant's recall table and per-query text-to-image ranks (`want_i2t_ranks`: the
    per-image image-to-text ranks too, one more pass over each similarity matrix).
    `later_phases`: the caller's own work on the same rows (probe's attention), named after the
    encodings in the progress span; the caller works through them and ends the span."""
    import torch

    variants = parse_variants(variants)
    if image_features is None:
        image_features = data.image_features.get(loaded.model)
    all_texts = {variant: [make_variant(sents, variant) for sents in data.captions] for variant in variants}
    # Identical texts (e.g. shared summaries under `first`) are encoded once, so they get
    # bit-identical features and tie exactly, whatever batch they would have landed in.
    all_unique = {variant: list(dict.fromkeys(texts)) for variant, texts in all_texts.items()}
    texts_of = {variant: f"encoding texts ({variant})" for variant in variants}
    # the data set's rows move in the command's line through these phases, each an equal share
    begin(
        len(data.captions),
        ([IMAGES] if image_features is None else []) + list(texts_of.values()) + list(later_phases),
    )
    if image_features is None:  # cached per model: weights are not expected to change during evaluation
        phase(IMAGES)
        add_work(data.n_images)
        data.check_images()
        image_features = encode_images(loaded, data.images, batch_size, workers, data.source)
        data.image_features[loaded.model] = image_features
    text_image = torch.as_tensor(data.text_image, device=image_features.device)
    table, ranks, i2t_ranks = {}, {}, {}
    for variant in variants:
        texts, unique = all_texts[variant], all_unique[variant]
        where = {t: i for i, t in enumerate(unique)}
        phase(texts_of[variant])
        add_work(len(unique))
        unique_features = encode_texts(loaded, unique, max(batch_size, 64))
        text_features = unique_features[torch.as_tensor([where[t] for t in texts], device=unique_features.device)]
        sim = text_features @ image_features.t()
        table[variant] = retrieval_recall(sim, text_image, rule=recall_rule)
        ranks[variant] = text_to_image_ranks_chunked(sim, text_image).cpu()
        if want_i2t_ranks:
            i2t_ranks[variant] = image_to_text_ranks(sim, text_image).cpu()
    if not later_phases:
        end()
    return RetrievalRun(
        table,
        short_counts(data.captions, variants),
        data.n_images,
        len(data.captions),
        image_features,
        ranks,
        i2t_ranks,
    )


def evaluate(
    model,
    data,
    variants: Sequence[str] = ("keep",),
    batch_size: int = 64,
    image_root: str | Path | None = None,
    recall_rule: str = "pessimistic",
) -> dict:
    """{VARIANT: {"t2i": {"r1","r5","r10"}, "i2t": {...}}} in percent for one model on one data set.

    data: RetrievalData (see benchmarks.load_benchmark), a prepared folder, or (folder, image root).
    recall_rule: "pessimistic" (ties count against the query) or "clip_benchmark" (metrics.RULES).
    """
    return run_retrieval(model, as_data(data, image_root), variants, batch_size, recall_rule=recall_rule).table
