"""semantic_duplicate: image embeddings at cosine >= t with an earlier kept row (SemDeDup).

`reference_semantic_duplicates` is the rule as a loop over every row (optionally only over
the pairs that given clusters compare). `semantic_duplicates` computes the same answer as
the reference given the same clusters, at a cost that stays sub-quadratic: rows are
clustered by a seeded spherical k-means (`cluster_count`: about SEMDEDUP_CLUSTER_SIZE rows a
cluster up to 1M rows, sqrt(rows) clusters beyond; fitted on a sample), every row gets its nearest centroid (its home) and its second nearest; two rows
are compared when one's home is the other's home or second cluster (SemDeDup compares homes
only; the second probe finds most of the pairs that straddle a cluster border, for about
three times the pairs). Each cluster's pairs are two matrix products; only the rows with a
candidate above t go through the sequential "earlier kept row" loop. The pairs still split
are measured in benchmarks/bench_curate_semdedup.py (docs/benchmarks.md).

Embeddings are compared centred (`centred`): less their mean over the rows compared, unit
length again. A fine-tuned model's image embeddings can crowd into a narrow cone (every pair
at cosine 0.99+: the cone effect of Liang et al. 2022, "Mind the Gap"), where no raw cosine
threshold separates a re-drawn copy from another picture; the mean is that cone's axis, and
without it cosines spread out again (docs/curation.md). `--no-semantic-duplicate-center` gives
the raw cosine SemDeDup published.

The k-means is written here (a dozen lines of numpy): scikit-learn's is Euclidean, not
cosine, and its result depends on its OpenMP thread count; this one is a function of the seed.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from caption_debias.curate.options import (
    SEMDEDUP_CLUSTER_SIZE,
    SEMDEDUP_ITERATIONS,
    SEMDEDUP_PROBES,
    SEMDEDUP_SEED,
    SEMDEDUP_TRAIN_ROWS,
)

PROBES = SEMDEDUP_PROBES
ASSIGN_CHUNK = 32_768  # rows per matrix product when assigning (bounds the distance block's memory)


def compared(clusters: np.ndarray, i: int, j: int) -> bool:
    """Do the clusters compare rows i and j? (clusters: (rows, 2), home then second nearest.)"""
    return clusters[i, 0] == clusters[j, 0] or clusters[i, 0] == clusters[j, 1] or clusters[i, 1] == clusters[j, 0]


def reference_semantic_duplicates(
    emb: np.ndarray, orders: np.ndarray, threshold: float, clusters: np.ndarray | None = None
) -> dict[int, tuple[int, float]]:
    """Specification: rows in input order, each compared with every kept row before it (only
    the rows `compared` with it when `clusters` is given). Returns order -> (matched order,
    cosine) of the removed rows; the match is the most similar kept row (the earliest on a tie)."""
    x = emb.astype(np.float32)
    kept: list[int] = []  # positions into x
    removed: dict[int, tuple[int, float]] = {}
    for i in np.argsort(orders, kind="stable").tolist():
        mine = [j for j in kept if clusters is None or compared(clusters, i, j)]
        cos = x[mine] @ x[i] if mine else np.zeros(0, np.float32)
        hits = np.flatnonzero(cos >= threshold)
        if len(hits) == 0:
            kept.append(i)
        else:
            best = hits[cos[hits] == cos[hits].max()]
            j = int(min(best, key=lambda h: orders[mine[h]]))  # the most similar; the earliest of equals
            removed[int(orders[i])] = (int(orders[mine[j]]), float(cos[j]))
    return removed


def _normalise(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norm, 1e-12)


def centred(emb: np.ndarray, chunk: int = ASSIGN_CHUNK, out: np.ndarray | None = None) -> np.ndarray:
    """Rows less the mean row, unit length again, in the input's dtype, chunk by chunk into `out`
    (`out=emb`: in place, so memory stays one chunk over the input). The mean is summed in float64
    in row order, so it does not depend on chunking."""
    if len(emb) == 0:
        return emb
    mean = np.zeros(emb.shape[1], np.float64)
    for a in range(0, len(emb), chunk):
        mean += emb[a : a + chunk].astype(np.float64).sum(axis=0)
    mean = (mean / len(emb)).astype(np.float32)
    out = np.empty_like(emb) if out is None else out
    for a in range(0, len(emb), chunk):
        out[a : a + chunk] = _normalise(emb[a : a + chunk].astype(np.float32) - mean)
    return out


def assign(emb: np.ndarray, centroids: np.ndarray, probes: int = 1) -> np.ndarray:
    """The `probes` nearest centroids (highest cosine, nearest first) of every row, in chunks: (rows, probes)."""
    labels = np.empty((len(emb), probes), np.int32)
    c = centroids.T.astype(np.float32)
    for a in range(0, len(emb), ASSIGN_CHUNK):
        sim = emb[a : a + ASSIGN_CHUNK].astype(np.float32) @ c
        if probes == 1:
            labels[a : a + ASSIGN_CHUNK, 0] = np.argmax(sim, axis=1)
            continue
        top = np.argpartition(-sim, probes - 1, axis=1)[:, :probes]
        order = np.argsort(-np.take_along_axis(sim, top, axis=1), axis=1, kind="stable")
        labels[a : a + ASSIGN_CHUNK] = np.take_along_axis(top, order, axis=1)
    return labels


def fit_centroids(emb: np.ndarray, k: int, seed: int = SEMDEDUP_SEED) -> np.ndarray:
    """Spherical k-means (Lloyd) on a seeded sample of SEMDEDUP_TRAIN_ROWS rows; unit centroids."""
    rng = np.random.default_rng(seed)
    n = len(emb)
    sample = np.sort(rng.choice(n, min(n, SEMDEDUP_TRAIN_ROWS), replace=False))
    x = emb[sample].astype(np.float32)
    centroids = x[np.sort(rng.choice(len(x), k, replace=False))].copy()
    for _ in range(SEMDEDUP_ITERATIONS):
        labels = assign(x, centroids)[:, 0]
        by_label = np.argsort(labels, kind="stable")
        counts = np.bincount(labels, minlength=k)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        nonempty = counts > 0
        sums = np.add.reduceat(x[by_label], starts[nonempty], axis=0)
        centroids[nonempty] = _normalise(sums)  # an empty cluster keeps its centroid
    return centroids


def cluster_count(rows: int) -> int:
    """k = rows / SEMDEDUP_CLUSTER_SIZE up to 1M rows, sqrt(rows) beyond: assigning costs rows x k and
    the pairs rows x rows / k, so both stay at most rows^1.5 (sub-quadratic) whatever the size."""
    return max(1, round(min(rows / SEMDEDUP_CLUSTER_SIZE, math.sqrt(rows))))


def clusters_of(emb: np.ndarray, cluster_size: int | None = None, seed: int = SEMDEDUP_SEED) -> np.ndarray:
    """Home and second-nearest cluster of every row, (rows, 2): `cluster_count` homes, or about
    `cluster_size` rows a home when given (one cluster for a small input: every pair is compared)."""
    k = cluster_count(len(emb)) if cluster_size is None else max(1, round(len(emb) / cluster_size))
    if k < PROBES:
        return np.zeros((len(emb), PROBES), np.int32)
    return assign(emb, fit_centroids(emb, k, seed), PROBES)


def _groups(labels: np.ndarray, orders: np.ndarray) -> dict[int, np.ndarray]:
    """cluster -> positions of its rows in input order."""
    by = np.lexsort((orders, labels))
    bounds = np.flatnonzero(np.diff(labels[by])) + 1
    return {int(labels[g[0]]): g for g in np.split(by, bounds) if len(g)}


def candidate_pairs(
    emb: np.ndarray, orders: np.ndarray, threshold: float, clusters: np.ndarray, on_cluster=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every compared pair at cosine >= threshold as (later, earlier, cosine), positions into emb."""
    homes = _groups(clusters[:, 0], orders)
    seconds = _groups(clusters[:, 1], orders)
    later, earlier, cosine = [], [], []
    for c, members in homes.items():
        if on_cluster is not None:
            on_cluster(len(members))
        e = emb[members].astype(np.float32)
        if len(members) > 1:
            sim = e @ e.T
            i, j = np.nonzero(np.tril(sim >= threshold, k=-1))  # members are in input order: j before i
            later.append(members[i])
            earlier.append(members[j])
            cosine.append(sim[i, j])
        visitors = seconds.get(c)
        if visitors is not None:
            visitors = visitors[clusters[visitors, 0] != c]  # a row whose two probes coincide is home already
        if visitors is not None and len(visitors):
            sim = emb[visitors].astype(np.float32) @ e.T  # rows whose second cluster is this home
            v, m = np.nonzero(sim >= threshold)
            a, b = visitors[v], members[m]
            first = orders[a] < orders[b]
            later.append(np.where(first, b, a))
            earlier.append(np.where(first, a, b))
            cosine.append(sim[v, m])
    if not later:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    return np.concatenate(later), np.concatenate(earlier), np.concatenate(cosine).astype(np.float32)


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
    later, earlier, cosine = candidate_pairs(emb, orders, threshold, clusters, on_cluster)
    if len(later) == 0:
        return {}
    # one entry per pair (a pair may be found from both rows' clusters), by the later row's order
    key = np.lexsort((orders[earlier], later))
    later, earlier, cosine = later[key], earlier[key], cosine[key]
    fresh = np.ones(len(later), bool)
    fresh[1:] = (later[1:] != later[:-1]) | (earlier[1:] != earlier[:-1])
    later, earlier, cosine = later[fresh], earlier[fresh], cosine[fresh]
    removed_at: set[int] = set()
    removed: dict[int, tuple[int, float]] = {}
    starts = np.flatnonzero(np.r_[True, later[1:] != later[:-1]])
    ends = np.r_[starts[1:], len(later)]
    for s in np.argsort(orders[later[starts]], kind="stable").tolist():  # the later rows in input order
        a, b = starts[s], ends[s]
        alive = [k for k in range(a, b) if int(earlier[k]) not in removed_at]
        if not alive:
            continue
        best = max(alive, key=lambda k: (cosine[k], -orders[earlier[k]]))  # the most similar; earliest of equals
        i = int(later[a])
        removed_at.add(i)
        removed[int(orders[i])] = (int(orders[earlier[best]]), float(cosine[best]))
    return removed
