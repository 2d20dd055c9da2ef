"""The model signals of a row, from normalised embeddings: clip_score, sentence_scores, sentence_grounding.

`row_signals` is the one-row specification; `shard_signals` computes the same for a whole
shard with a few array operations (tests/test_score.py checks they agree). Every sum has one
fixed order that depends on the row alone (`dots`, and numpy's sums along a row), so a row's
signals are the same bits whichever rows share its shard, task or worker, and at any thread
count: the local and Ray engines give identical scores.

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


def dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[M, K] float32 dot products of the rows of a [M, D] with the rows of b [K, D], each in one fixed order.

    numpy's einsum loop sums each product over D the same way for any M, K or thread count; a
    BLAS matrix product (`a @ b.T`) does not: its bits for a row depend on how many rows are
    multiplied with it (and on its threads), which would make a row's grounding depend on its
    shard's other rows.
    """
    return np.einsum("md,kd->mk", a, b, dtype=np.float32, optimize=False)


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
        sims = dots(s[None, :], others)[0]
        g = (np.float32(own) - sims.mean(dtype=np.float32)) / (sims.std(dtype=np.float32) + np.float32(GROUNDING_EPS))
        grounding.append(float(np.float32(g)))
    return clip, scores, grounding


BLOCK = 4096  # sentences per block of the grounding step: [BLOCK, K] similarities at a time, spread over threads


def shard_signals(
    images: np.ndarray,
    captions: np.ndarray,
    sentences: np.ndarray,
    sentence_row: np.ndarray,
    reference: np.ndarray,
    excluded: Sequence[np.ndarray],
    threads: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Batched: images, captions [N, D]; sentences [M, D] with their row in sentence_row [M];
    excluded[i]: the reference indices that are row i's own picture. `threads`: the grounding's
    sentence blocks run on this many threads (every value is computed alone: same bits for any).

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
    grounding = np.full(len(sentences), np.nan, np.float32)
    if not len(sentences) or not k:
        return clip, scores, grounding, has

    def block(start: int) -> None:
        part = slice(start, start + BLOCK)
        rows = sentence_row[part]
        sims = dots(sentences[part], reference)  # [B, K]
        mask = keep[rows].astype(np.float32)
        m = np.maximum(count[rows], 1).astype(np.float32)
        mean = (sims * mask).sum(axis=1, dtype=np.float32) / m
        var = (((sims - mean[:, None]) ** 2) * mask).sum(axis=1, dtype=np.float32) / m
        g = (scores[part] - mean) / (np.sqrt(var) + np.float32(GROUNDING_EPS))
        grounding[part] = np.where(has[rows], g, np.nan)

    starts = range(0, len(sentences), BLOCK)
    if threads > 1 and len(starts) > 1:  # numpy releases the GIL in these loops
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(threads, len(starts))) as pool:
            list(pool.map(block, starts))
    else:
        for start in starts:
            block(start)
    return clip, scores, grounding, has
