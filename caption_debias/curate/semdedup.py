"""semantic_duplicate: image embeddings at cosine >= t with an earlier kept row (SemDeDup).

`reference_semantic_duplicates` is the rule as a loop over every row (optionally only
within given clusters). `semantic_duplicates` computes the same answer as the reference
given the same clusters, at a cost that stays sub-quadratic: rows are clustered by a seeded
spherical k-means (about SEMDEDUP_CLUSTER_SIZE rows a cluster, fitted on a sample, then every
row assigned to its nearest centroid), and each cluster's pairs are one matrix product; only
the rows with a candidate above t go through the sequential "earlier kept row" loop.
A pair split across two clusters is missed, as in SemDeDup (NeMo Curator); the share missed
is measured in benchmarks/bench_curate_semdedup.py (docs/benchmarks.md).

The k-means is written here (a dozen lines of numpy): scikit-learn's is Euclidean, not
cosine, and its result depends on its OpenMP thread count; this one is a function of the seed.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from caption_debias.curate.options import (
    SEMDEDUP_CLUSTER_SIZE,
    SEMDEDUP_ITERATIONS,
    SEMDEDUP_SEED,
    SEMDEDUP_TRAIN_ROWS,
)

ASSIGN_CHUNK = 32_768  # rows per matrix product when assigning (bounds the distance block's memory)


def reference_semantic_duplicates(
    emb: np.ndarray, orders: np.ndarray, threshold: float, clusters: np.ndarray | None = None
) -> dict[int, tuple[int, float]]:
    """Specification: rows in input order, each compared with every kept row before it (in its
    own cluster when `clusters` is given). Returns order -> (matched order, cosine) of the removed
    rows; the match is the most similar kept row (the earliest on a tie)."""
    x = emb.astype(np.float32)
    kept: list[int] = []  # positions into x
    removed: dict[int, tuple[int, float]] = {}
    for i in np.argsort(orders, kind="stable").tolist():
        mine = [j for j in kept if clusters is None or clusters[j] == clusters[i]]
        cos = x[mine] @ x[i] if mine else np.zeros(0, np.float32)
        hits = np.flatnonzero(cos >= threshold)
        if len(hits) == 0:
            kept.append(i)
        else:
            j = int(hits[np.argmax(cos[hits])])  # the most similar; the earliest of equals
            removed[int(orders[i])] = (int(orders[mine[j]]), float(cos[j]))
    return removed


def _normalise(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norm, 1e-12)


def assign(emb: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Nearest centroid (highest cosine) of every row, in chunks."""
    labels = np.empty(len(emb), np.int32)
    c = centroids.T.astype(np.float32)
    for a in range(0, len(emb), ASSIGN_CHUNK):
        labels[a : a + ASSIGN_CHUNK] = np.argmax(emb[a : a + ASSIGN_CHUNK].astype(np.float32) @ c, axis=1)
    return labels


def fit_centroids(emb: np.ndarray, k: int, seed: int = SEMDEDUP_SEED) -> np.ndarray:
    """Spherical k-means (Lloyd) on a seeded sample of SEMDEDUP_TRAIN_ROWS rows; unit centroids."""
    rng = np.random.default_rng(seed)
    n = len(emb)
    sample = np.sort(rng.choice(n, min(n, SEMDEDUP_TRAIN_ROWS), replace=False))
    x = emb[sample].astype(np.float32)
    centroids = x[np.sort(rng.choice(len(x), k, replace=False))].copy()
    for _ in range(SEMDEDUP_ITERATIONS):
        labels = assign(x, centroids)
        by_label = np.argsort(labels, kind="stable")
        counts = np.bincount(labels, minlength=k)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        nonempty = counts > 0
        sums = np.add.reduceat(x[by_label], starts[nonempty], axis=0)
        centroids[nonempty] = _normalise(sums)  # an empty cluster keeps its centroid
    return centroids


def clusters_of(emb: np.ndarray, cluster_size: int = SEMDEDUP_CLUSTER_SIZE, seed: int = SEMDEDUP_SEED) -> np.ndarray:
    """The cluster of every row: about `cluster_size` rows a cluster (one cluster for a small input)."""
    k = max(1, round(len(emb) / cluster_size))
    if k == 1:
        return np.zeros(len(emb), np.int32)
    return assign(emb, fit_centroids(emb, k, seed))


def semantic_duplicates(
    emb: np.ndarray,
    orders: np.ndarray,
    threshold: float,
    clusters: np.ndarray | None = None,
    on_cluster: Callable[[int], None] | None = None,
) -> dict[int, tuple[int, float]]:
    """`reference_semantic_duplicates` with `clusters` (default: `clusters_of(emb)`), batched per cluster."""
    if len(emb) == 0:
        return {}
    if clusters is None:
        clusters = clusters_of(emb)
    removed: dict[int, tuple[int, float]] = {}
    by_cluster = np.lexsort((orders, clusters))  # cluster, then input order
    bounds = np.flatnonzero(np.diff(clusters[by_cluster])) + 1
    for members in np.split(by_cluster, bounds):
        if on_cluster is not None:
            on_cluster(len(members))
        if len(members) < 2:
            continue
        e = emb[members].astype(np.float32)
        sim = e @ e.T
        cand = np.tril(sim >= threshold, k=-1)  # j before i (members are in input order)
        rows = np.flatnonzero(cand.any(axis=1))
        if len(rows) == 0:
            continue
        kept = np.ones(len(members), bool)
        for i in rows.tolist():
            js = np.flatnonzero(cand[i] & kept)
            if len(js) == 0:
                continue
            j = int(js[np.argmax(sim[i, js])])  # argmax: the first of equal maxima, the earliest
            kept[i] = False
            removed[int(orders[members[i]])] = (int(orders[members[j]]), float(sim[i, j]))
    return removed
