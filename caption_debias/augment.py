"""Text inputs of each recipe, built from stored per-sentence token ids (no tokenizing here).

Layout: [SOT] + ids + [EOT], zero padded to the context; a caption longer than the
context is truncated with the last kept token set to EOT (open_clip's rule).
DeBias short text (the DeBias-CLIP paper's augmentation): drop the summary, sub-sample m ~ U{1..k-1} of the
remaining sentences in random order, move q ~ U{0..trailing pads} pads to just after SOT.
A curated row's `sentence_keep` mask (curate --drop-ungrounded) is applied before any recipe
(`kept_sentences`): a dropped sentence is in no text, neither the long caption nor a sampled one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

SOT, EOT, PAD = 49406, 49407, 0


@dataclass(frozen=True)
class DebiasOptions:
    drop_summary: str = "first"  # "first" (the paper's rule) or "detected" (summary_mask)
    no_drop_summary: bool = False
    no_subsample: bool = False
    no_pad: bool = False


def kept_sentences(items: Sequence, keep: Sequence[bool] | None) -> list:
    """The items (sentences, token ids, summary flags) of the sentences `keep` keeps; all when it is None.

    Specification of the mask for every reader: training (long and short texts), pack and
    export-captions. The long text leaves a dropped sentence out as well: the mask marks what the
    image does not show, and a model trained on the whole caption would learn it all the same.
    """
    if keep is None:
        return list(items)
    if len(keep) != len(items):
        from caption_debias.errors import UserError

        raise UserError(f"sentence_keep has {len(keep)} flags for {len(items)} sentences")
    return [x for x, k in zip(items, keep) if k]


def kept_caption(caption: str, sentences: Sequence[str], keep: Sequence[bool] | None) -> str:
    """The caption text with no dropped sentence: verbatim (paragraph breaks and all) when every
    sentence is kept, else the kept sentences joined by a space. What pack writes as KEY.txt and
    export-captions as the full caption."""
    if keep is None or all(keep):
        return caption
    return " ".join(kept_sentences(sentences, keep))


def layout(ids: np.ndarray, context: int, sot: int = SOT, eot: int = EOT, lead_pads: int = 0) -> np.ndarray:
    """[SOT] + PAD*lead_pads + ids + [EOT] + PAD..., length `context`; truncated with EOT last."""
    out = np.full(context, PAD, dtype=np.int64)
    out[0] = sot
    body = ids[: max(context - 2 - lead_pads, 0)]
    start = 1 + lead_pads
    out[start : start + len(body)] = body
    out[start + len(body)] = eot
    return out


def long_text(sentences: Sequence[np.ndarray], context: int, sot: int = SOT, eot: int = EOT) -> np.ndarray:
    ids = np.concatenate(sentences) if len(sentences) else np.zeros(0, np.int64)
    return layout(ids, context, sot, eot)


def first_sentence_text(sentences: Sequence[np.ndarray], context: int, sot: int = SOT, eot: int = EOT) -> np.ndarray:
    """Long-CLIP's short caption: the first sentence."""
    return layout(sentences[0] if len(sentences) else np.zeros(0, np.int64), context, sot, eot)


def one_sentence_text(
    sentences: Sequence[np.ndarray], rng: np.random.Generator, context: int, sot: int = SOT, eot: int = EOT
) -> np.ndarray:
    """`short` recipe: the first sentence with probability 0.5, otherwise a uniformly chosen other one."""
    k = len(sentences)
    pick = 0 if k == 1 or rng.random() < 0.5 else int(rng.integers(1, k))
    return layout(sentences[pick], context, sot, eot)


def debias_text(
    sentences: Sequence[np.ndarray],
    summary_mask: Sequence[bool] | np.ndarray,
    rng: np.random.Generator,
    context: int,
    opts: DebiasOptions,
    sot: int = SOT,
    eot: int = EOT,
) -> tuple[np.ndarray, bool]:
    """The augmented caption and whether it fell back to the full caption (nothing left after the drop)."""
    k = len(sentences)
    if opts.no_drop_summary:
        rest = list(range(k))
    elif opts.drop_summary == "first":
        rest = list(range(1, k))
    else:
        rest = [i for i in range(k) if not summary_mask[i]]
    if not rest:  # single sentence (or every sentence flagged): the paper is silent; use the full caption
        return long_text(sentences, context, sot, eot), True
    if not opts.no_subsample:
        m = int(rng.integers(1, len(rest) + 1))
        rest = [rest[i] for i in rng.permutation(len(rest))[:m]]
    ids = np.concatenate([sentences[i] for i in rest])
    pads = max(context - 2 - len(ids), 0)  # trailing pads after [SOT, text, EOT]
    q = 0 if opts.no_pad else int(rng.integers(0, pads + 1))
    return layout(ids, context, sot, eot, lead_pads=q), False
