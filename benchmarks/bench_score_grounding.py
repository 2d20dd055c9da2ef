"""What score's fixed-order grounding costs: `signals.shard_signals` as it is (each dot product
summed over D in one order, numpy's einsum loop) against the same step with a BLAS matrix
product for the similarities (the baseline: faster, but its bits for a row depend on the rows
multiplied with it), on one shard's shapes: --rows rows of --sentences sentences on average,
--reference reference images, embeddings of width --dim (random unit vectors; the time does not
depend on the values), the blocks on --threads threads. Each path is timed --repeats times,
interleaved, the fastest kept.

    .venv/bin/python benchmarks/bench_score_grounding.py --rows 20000 --dim 512
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import nullcontext
from unittest import mock

import numpy as np

from caption_debias.score import signals


def _unit(rng: np.random.Generator, *shape: int) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _blas_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b.T


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--sentences", type=int, default=7)
    ap.add_argument("--reference", type=int, default=128)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="threads of the grounding step (score: torch's)"
    )
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 2 * args.sentences, size=args.rows)
    images, captions = _unit(rng, args.rows, args.dim), _unit(rng, args.rows, args.dim)
    sentences, reference = _unit(rng, int(counts.sum()), args.dim), _unit(rng, args.reference, args.dim)
    sentence_row = np.repeat(np.arange(args.rows), counts)
    excluded = [np.array([i % args.reference], np.int64) if i % 2 else np.zeros(0, np.int64) for i in range(args.rows)]
    call = (images, captions, sentences, sentence_row, reference, excluded)
    best = {"fixed order": float("inf"), "BLAS": float("inf")}
    for _ in range(args.repeats):
        for name in best:
            with mock.patch.object(signals, "dots", _blas_dots) if name == "BLAS" else nullcontext():
                t0 = time.perf_counter()
                signals.shard_signals(*call, threads=args.threads)
                best[name] = min(best[name], time.perf_counter() - t0)
    print(
        f"{args.rows} rows, {len(sentences)} sentences, {args.reference} reference images, width {args.dim}, "
        f"{args.threads} threads; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    for name, s in best.items():
        print(f"  {name:>11}: {s:6.2f} s  ({1000 * s / args.rows:.3f} ms per row)")
    print(f"  fixed order / BLAS: {best['fixed order'] / best['BLAS']:.1f}x the time of the signals step")


if __name__ == "__main__":
    main()
