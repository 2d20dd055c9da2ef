"""Eval/probe speed: images encoded once per model vs once per caption variant (the naive way),
and the cost of reading attention weights (need_weights) against a plain text pass.

Usage: .venv/bin/python benchmarks/bench_eval.py [--images 256] [--model tiny] [--repeats 3]
Prints one JSON line; figures go in docs/benchmarks.md (## eval).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (the tests' fixture modules importable)
import torch
from eval_fixtures import make_images

from caption_debias.evaluate.benchmarks import RetrievalData
from caption_debias.evaluate.metrics import retrieval_recall
from caption_debias.evaluate.probe import FILLER_COUNTS, ORDER_VARIANTS, POSITION_VARIANTS, attention_by_position
from caption_debias.evaluate.retrieval import encode_images, encode_texts, run_retrieval
from caption_debias.evaluate.variants import make_variant
from caption_debias.model.load import load_model


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)  # shared 2-core machine: one thread keeps the ratio stable
    with tempfile.TemporaryDirectory() as tmp:
        rows = make_images(Path(tmp), args.images, size=224 if args.model != "tiny" else 64)
        data = RetrievalData("bench", [Path(tmp) / r for r, _ in rows], [s for _, s in rows], list(range(len(rows))))
        loaded = load_model(args.model)
        variants = list(POSITION_VARIANTS) + list(ORDER_VARIANTS) + [f"filler:{n}" for n in FILLER_COUNTS]

        def naive():  # what a per-variant evaluate() call would do: images again every time
            for v in variants:
                img = encode_images(loaded, data.images, 64, 0)
                txt = encode_texts(loaded, [make_variant(s, v) for s in data.captions])
                retrieval_recall(txt @ img.t(), data.text_image)

        def once():
            data.image_features.clear()
            run_retrieval(loaded, data, variants, 64, workers=0)

        texts = [make_variant(s, "keep") for s in data.captions]
        t_naive, t_once = best(naive, args.repeats), best(once, args.repeats)
        t_plain = best(lambda: encode_texts(loaded, texts), args.repeats)
        t_attn = best(lambda: attention_by_position(loaded, texts), args.repeats)
    print(
        json.dumps(
            {
                "model": args.model,
                "images": args.images,
                "variants": len(variants),
                "per_variant_images_s": round(t_naive, 3),
                "images_once_s": round(t_once, 3),
                "speedup": round(t_naive / t_once, 2),
                "text_pass_s": round(t_plain, 3),
                "attention_pass_s": round(t_attn, 3),
                "attention_overhead": round(t_attn / t_plain, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
