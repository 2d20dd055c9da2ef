"""Text path of a training step: our stored-id augment + collate vs re-tokenizing every caption every step.

Both sides build the DeBias inputs for the same batches: the long caption at 248 tokens
and the augmented caption (summary dropped, sentences sub-sampled, pads moved).
Baseline (what a loader without stored ids does, like Long-CLIP's): split each caption
into sentences, sample, join and run open_clip's tokenizer on both texts every step.
Ours: caption_debias.train.data.TrainSamples text building from the stored ids + stack.

    .venv/bin/python benchmarks/bench_train_text_path.py [--batch 256 --steps 20]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import add_data_option, long_caption_sets


def prepared_from_iiw(data: Path, tmp: Path) -> Path:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    captions = long_caption_sets(data)["iiw_cm3600.jsonl:IIW-P5B"]
    rows = [{"key": f"cm{i}", "image": f"img{i}.jpg", "caption": c} for i, c in enumerate(captions)]
    table = tmp / "captions.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([table], tmp / "prepared", PrepareOptions(format="table", quiet=True))
    return tmp / "prepared"


def baseline_step(captions: list[str], tokenizer, rng: np.random.Generator, context: int):
    """Re-tokenize: split on '. ' (Long-CLIP's rule), drop s1, sub-sample, tokenize both, move pads."""
    import torch

    shorts = []
    for cap in captions:
        sents = [s for s in cap.split(". ") if s.strip()]
        rest = sents[1:] or sents
        m = int(rng.integers(1, len(rest) + 1))
        shorts.append(". ".join(rest[i] for i in rng.permutation(len(rest))[:m]))
    long_ids = tokenizer(captions, context_length=context)
    short_ids = tokenizer(shorts, context_length=context)
    for row in short_ids:  # move q ~ U{0..pads} pads to just after SOT
        n = int((row != 0).sum())
        q = int(rng.integers(0, context - n + 1))
        if q:
            row[1 + q : n + q] = row[1:n].clone()
            row[1 : 1 + q] = 0
    return torch.stack([long_ids, short_ids])


def ours_step(samples, batch):
    from caption_debias.train.data import collate

    return collate([samples.text_only(item) for item in batch])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()

    import open_clip

    from caption_debias.augment import DebiasOptions
    from caption_debias.train.data import BatchPlan, TrainSamples, load_rows

    with tempfile.TemporaryDirectory() as tmp:
        prepared = prepared_from_iiw(args.data, Path(tmp))
        tokenizer = open_clip.get_tokenizer("ViT-B-16", context_length=248)
        rows = load_rows(prepared, tokenizer)
        from caption_debias.dataset import PreparedDataset

        captions = PreparedDataset.open(prepared).read(["caption"])["caption"].to_pylist()
    samples = TrainSamples(rows, None, None, "debias", 248, 0, DebiasOptions())
    plan = BatchPlan(len(rows), min(args.batch, len(rows)), 0)
    batches = list(plan.batches(0, args.steps))
    rng = np.random.default_rng(0)

    t = time.perf_counter()
    for b in batches:
        baseline_step([captions[r] for _, r in b], tokenizer, rng, 248)
    base = (time.perf_counter() - t) / len(batches)
    t = time.perf_counter()
    for b in batches:
        ours_step(samples, b)
    ours = (time.perf_counter() - t) / len(batches)
    n = len(batches[0])
    print(f"captions: {len(rows)} (IIW-P5B, CM3600), batch {n}, {len(batches)} steps")
    print(f"baseline re-tokenize: {base * 1e3:.1f} ms/step ({n / base:.0f} captions/s)")
    print(f"stored ids (ours):    {ours * 1e3:.1f} ms/step ({n / ours:.0f} captions/s)")
    print(f"speed-up: {base / ours:.1f}x")


if __name__ == "__main__":
    main()
