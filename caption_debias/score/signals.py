"""The model signals of a row, from normalised embeddings: clip_score, sentence_scores, sentence_grounding.

`row_signals` is the one-row specification; `shard_signals` computes the same for a whole
shard with a few matrix products (tests/test_score.py checks they agree).

Grounding rule (docs/curation.md): for a sentence t of a row with image v, and the reference
images R (a fixed, seeded sample of the input's images, less any with the row's own image
path), g = (t.v - mean(t.R)) / (std(t.R) + eps): how many standard deviations the sentence's
similarity to its own image lies above its similarity to other images. Dividing by the
sentence's own spread over other images makes sentences of any length, wording or
position comparable: a generic sentence that matches every image scores near 0, one that
names what only this picture shows scores high, one that names what it lacks scores low.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from caption_debias.score.options import GROUNDING_EPS

MIN_OTHERS = 2  # fewer other images than this: no spread to measure against, grounding is null


def row_signals(
    image: np.ndarray,
    caption: np.ndarray,
    sentences: np.ndarray,
    reference: np.ndarray,
    excluded: np.ndarray,
) -> tuple[float, list[float], list[float] | None]:
    """Specification: (clip_score, sentence_scores, sentence_grounding) of one row.

    image [D], caption [D], sentences [S, D], reference [K, D] (all normalised, float32),
    excluded [K] bool: reference images that are this row's own picture.
    """
    clip = float(np.float32((image * caption).sum(dtype=np.float32)))
    scores = [float(np.float32((s * image).sum(dtype=np.float32))) for s in sentences]
    others = reference[~excluded]
    if len(others) < MIN_OTHERS:
        return clip, scores, None
    grounding = []
    for s, own in zip(sentences, scores):
        sims = (others * s).sum(axis=1, dtype=np.float32)
        g = (np.float32(own) - sims.mean(dtype=np.float32)) / (sims.std(dtype=np.float32) + np.float32(GROUNDING_EPS))
        grounding.append(float(np.float32(g)))
    return clip, scores, grounding


def shard_signals(
    images: np.ndarray,
    captions: np.ndarray,
    sentences: np.ndarray,
    sentence_row: np.ndarray,
    reference: np.ndarray,
    excluded: Sequence[np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Batched: images, captions [N, D]; sentences [M, D] with their row in sentence_row [M];
    excluded[i]: the reference indices that are row i's own picture.

    Returns clip_score [N], sentence_scores [M], sentence_grounding [M] (NaN where the row has
    too few other images) and whether each row has a grounding [N].
    """
    n = len(images)
    clip = (images * captions).sum(axis=1, dtype=np.float32)
    scores = (sentences * images[sentence_row]).sum(axis=1, dtype=np.float32)
    k = len(reference)
    keep = np.ones((n, k), bool)
    for i, ex in enumerate(excluded):
        if len(ex):
            keep[i, ex] = False
    count = keep.sum(axis=1)
    has = count >= MIN_OTHERS
    if not len(sentences) or not k:
        return clip, scores, np.full(len(sentences), np.nan, np.float32), has
    sims = sentences @ reference.T  # [M, K]
    mask = keep[sentence_row].astype(np.float32)
    m = np.maximum(count[sentence_row], 1).astype(np.float32)
    mean = (sims * mask).sum(axis=1, dtype=np.float32) / m
    var = (((sims - mean[:, None]) ** 2) * mask).sum(axis=1, dtype=np.float32) / m
    grounding = (scores - mean) / (np.sqrt(var) + np.float32(GROUNDING_EPS))
    grounding = np.where(has[sentence_row], grounding, np.nan).astype(np.float32)
    return clip, scores, grounding, has
