"""The measures of evaluate/planted.py against small cases worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from caption_debias.evaluate import planted


def test_auroc_counts_pairs_and_half_ties():
    assert planted.auroc([3, 4], [1, 2]) == 1.0
    assert planted.auroc([1], [2]) == 0.0
    assert planted.auroc([2, 0], [1]) == 0.5
    assert planted.auroc([1], [1]) == 0.5
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1, 1, 40), rng.normal(0, 1, 50)
    pairs = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert planted.auroc(pos, neg) == pytest.approx(pairs)
    with pytest.raises(ValueError):
        planted.auroc([], [1])


def test_semantic_duplicates_keep_the_first_and_compare_with_kept_rows_only():
    e = np.array([[1, 0], [0.999, 0.045], [0, 1], [0.7, 0.714], [0.045, 0.999]], np.float32)
    assert planted.semantic_duplicates(e, 0.99) == [None, 0, None, None, 2]
    # row 1 is removed, so nothing is matched to it; 3 is at cosine ~0.7 with 0 and 2
    assert planted.semantic_duplicates(e, 0.7) == [None, 0, None, 0, 2]


def test_keep_top_breaks_ties_by_input_order():
    assert planted.keep_top([0.5, 0.9, 0.5, 0.1], 50) == [False, False, True, True]


def test_random_pair_threshold_never_pairs_a_row_with_itself():
    n = 50
    eye = np.eye(n, dtype=np.float32)
    # each caption equals its own image: a self pair would score 1, every other pair 0
    assert planted.random_pair_threshold(eye, eye, seed=3, quantile=1.0) == 0.0


def test_removal_figures():
    key = {
        "hallucinated": [{"key": "h"}],
        "mismatched": [{"key": "m1"}, {"key": "m2"}],
        "redrawn": [{"key": "r", "copy_of_key": "c1"}],
    }
    keys = ["c1", "c2", "h", "m1", "m2", "r"]
    figures = planted._removal_figures(keys, [False, True, True, True, False, False], key, "mismatched")
    assert figures["recall"] == 0.5 and figures["clean_removed"] == 1 and figures["clean_rows"] == 2
    assert figures["hallucinated_removed"] == 1 and figures["removed"] == 3
