"""How well a scored folder's model signals find the faults `synth --plant` put in its world.

Reads a scored folder (clip_score, sentence_grounding, image/caption embeddings) and the
world's planted.json, and measures:

- hallucinated sentences: AUROC of -sentence_grounding, the swapped sentences against every
  clean detail sentence (a non-summary sentence of a row that is not mismatched, other than
  the swapped one);
- mismatched captions: which rows a clip_score threshold removes (the threshold rule is the
  caller's; `random_pair_threshold` is one that needs no labels);
- re-drawn scenes: which rows SemDeDup's rule (image cosine >= T with an earlier kept row)
  removes, by a row-by-row greedy pass (exact; the worlds here are thousands of rows).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from caption_debias.errors import UserError


def read_key(world: str | Path) -> dict[str, Any]:
    from caption_debias.dataset import folder_file

    path = folder_file(world, "planted.json")
    if not path.is_file():
        raise UserError(f"{path}: no planted key (write the world with `synth --plant`)")
    return json.loads(path.read_text("utf-8"))


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """P(a positive scores above a negative), ties counted one half (the Mann-Whitney U statistic,
    from average ranks; written here because sklearn is not a dependency)."""
    from scipy.stats import rankdata

    pos, neg = np.asarray(positives, float), np.asarray(negatives, float)
    if not len(pos) or not len(neg):
        raise ValueError("AUROC needs at least one positive and one negative")
    ranks = rankdata(np.concatenate([pos, neg]))
    u = ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2
    return float(u / (len(pos) * len(neg)))


def read_scored(folder: str | Path, columns: Sequence[str]) -> dict[str, list]:
    from caption_debias.dataset import PreparedDataset

    table = PreparedDataset.open(folder).read(["key", *columns])
    return {name: table.column(name).to_pylist() for name in ["key", *columns]}


def hallucination(scored: dict[str, list], key: dict[str, Any]) -> dict[str, Any]:
    """AUROC of low grounding for the swapped sentences against clean detail sentences."""
    swapped = {e["key"]: e["sentence"] for e in key["hallucinated"]}
    mismatched = {e["key"] for e in key["mismatched"]}
    # a leak of only the picture or only the caption pairs text with a picture it does not describe
    mismatched |= {e["key"] for e in key.get("eval_leak", []) if e["copied"] != "both"}
    pos, neg, missing = [], [], 0
    for row_key, mask, grounding in zip(scored["key"], scored["summary_mask"], scored["sentence_grounding"]):
        if row_key in mismatched:
            continue
        if grounding is None:
            missing += row_key in swapped
            continue
        for i, (is_summary, g) in enumerate(zip(mask, grounding)):
            if g is None or g != g:
                continue
            if swapped.get(row_key) == i:
                pos.append(-g)
            elif not is_summary:
                neg.append(-g)
    found = len(pos)
    return {
        "auroc": round(auroc(pos, neg), 4),
        "hallucinated": found,
        "clean_detail": len(neg),
        "hallucinated_without_grounding": len(swapped) - found,
    }


def random_pair_threshold(images: np.ndarray, captions: np.ndarray, seed: int = 0, quantile: float = 0.99) -> float:
    """A clip_score threshold from the folder alone: the `quantile` of captions scored against a
    seeded random other image (a derangement of the rows). A row below it fits its own image
    no better than a caption fits a random picture."""
    n = len(images)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    shift = (perm + 1 + rng.integers(0, n - 1, size=1)[0]) % n  # i -> another row, never itself
    other = np.empty(n, int)
    other[perm] = perm[shift]
    scores = (captions * images[other]).sum(axis=1)
    return float(np.quantile(scores, quantile))


def alignment(scored: dict[str, list], key: dict[str, Any], threshold: float) -> dict[str, Any]:
    """Rows with clip_score below `threshold`: recall of mismatched rows, share of clean rows."""
    return _removal_figures(
        scored["key"], [s is not None and s < threshold for s in scored["clip_score"]], key, "mismatched"
    )


def keep_top(scores: Sequence[float], percent: float) -> list[bool]:
    """DataComp's rule: remove rows outside the top `percent`% by score (ties by input order)."""
    n = len(scores)
    keep = int(np.floor(n * percent / 100.0))
    order = sorted(range(n), key=lambda i: (-scores[i], i))
    removed = [True] * n
    for i in order[:keep]:
        removed[i] = False
    return removed


def semantic_duplicates(embeddings: np.ndarray, threshold: float) -> list[int | None]:
    """For each row, the earlier kept row whose image embedding is at cosine >= threshold (the
    first such), or None: the exact greedy pass SemDeDup's clustering approximates."""
    e = np.asarray(embeddings, np.float32)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    sims = e @ e.T
    kept: list[int] = []
    matched: list[int | None] = []
    for i in range(len(e)):
        hit: np.ndarray | list[int] = np.flatnonzero(sims[i, kept] >= threshold) if kept else []
        if len(hit):
            matched.append(kept[int(hit[0])])
        else:
            matched.append(None)
            kept.append(i)
    return matched


def duplicates(
    scored: dict[str, list],
    key: dict[str, Any],
    groups: Sequence[str],
    threshold: float,
    embeddings: np.ndarray | None = None,
) -> dict:
    """Rows SemDeDup removes at `threshold`: recall of re-drawn copies (matched to their own
    source), and the rows removed that are no copy, among them members of a hard-negative group.
    `embeddings`: the rows' image embeddings as compared (e.g. centred as curate compares them;
    default: the scored folder's, raw)."""
    if embeddings is None:
        embeddings = np.asarray(scored["image_embedding"], np.float32)
    matched = semantic_duplicates(embeddings, threshold)
    figures = _removal_figures(scored["key"], [m is not None for m in matched], key, "redrawn")
    sources = {e["key"]: e["copy_of_key"] for e in key["redrawn"]}
    keys = scored["key"]
    figures["matched_to_own_source"] = sum(
        1 for k, m in zip(keys, matched) if k in sources and m is not None and keys[m] == sources[k]
    )
    planted_copies = set(sources)
    figures["group_members_removed"] = sum(
        1 for i, m in enumerate(matched) if m is not None and keys[i] not in planted_copies and groups[i] == groups[m]
    )
    return figures


def _removal_figures(keys: Sequence[str], removed: Sequence[bool], key: dict[str, Any], kind: str) -> dict:
    planted = {
        k: {e["key"] for e in key[name]} for k, name in (("h", "hallucinated"), ("m", "mismatched"), ("r", "redrawn"))
    }
    target = {e["key"] for e in key[kind]}
    any_planted = set().union(*planted.values())
    clean = [r for k, r in zip(keys, removed) if k not in any_planted]
    hit = sum(r for k, r in zip(keys, removed) if k in target)
    return {
        "recall": round(hit / len(target), 4) if target else None,
        "found": hit,
        "planted": len(target),
        "clean_removed": sum(clean),
        "clean_rows": len(clean),
        "clean_removed_share": round(sum(clean) / len(clean), 4) if clean else None,
        "removed": int(sum(removed)),
        "hallucinated_removed": sum(r for k, r in zip(keys, removed) if k in planted["h"]),
    }
