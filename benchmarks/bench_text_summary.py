"""Summary detection quality on real captions, held out by k-fold cross-validation.

For each fold, the model is fitted on the other folds (by image key) and scored on this
one; every figure is over held-out captions only. Also reports the shipped model's
closing-summary and middle-sentence flag rates in natural order, and scoring speed.

    .venv/bin/python benchmarks/bench_text_summary.py [--folds 5]

--speed [--base REV] instead times what prepare runs (summary_scores_flat and
summary_mask_batch over all sentences of the real captions, split by the `fast` segmenter),
for this tree and for caption_debias.text.summary as of git revision REV (imported beside
it), interleaved, best of --repeats, in CPU time (time.process_time); checks that both give
the same float64 scores and masks, and reports each one's peak memory on one numpy pass
(tracemalloc + Arrow's memory pool):

    .venv/bin/python benchmarks/bench_text_summary.py --speed [--base main] [--repeats 9]
"""

from __future__ import annotations

import argparse
import random
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from _common import add_data_option, import_at, long_captions  # also puts the checkout on sys.path (experiments/)

from caption_debias.text import summary
from experiments.summary_train import fit, fold_of, load_calibration, split_captions

OVERALL = re.compile(r"^(overall|the overall)\b", re.I)


def top1_is_opening(scores: list[float]) -> bool:
    """Strict: the opening sentence alone has the highest score (ties count as misses)."""
    best = max(scores)
    return scores[0] == best and scores.count(best) == 1


def speed(data: Path, base: str, repeats: int) -> None:
    import tracemalloc

    import pyarrow as pa

    from caption_debias.text.segment import get_segmenter

    seg = get_segmenter("fast")
    rows = [[c[s:e].strip() for s, e in seg.spans(c)] for c in long_captions(data)]  # as prepare's steps do
    sentences, counts = [x for r in rows for x in r], [len(r) for r in rows]
    mods = {
        f"base {base}": import_at(base, "caption_debias.text.summary", Path(tempfile.mkdtemp())),
        "this tree": summary,
    }

    def run(mod) -> tuple[list, list]:
        scores = mod.summary_scores_flat(sentences, counts)
        return scores.tolist(), mod.summary_mask_batch(sentences, counts, scores, "detect").tolist()

    results = {name: run(mod) for name, mod in mods.items()}  # also warms each one's vocabulary
    (a, ma), (b, mb) = results.values()
    print(f"{len(rows)} real captions, {sum(map(len, rows)) / len(rows):.2f} sentences each (fast segmenter)")
    print(f"same float64 scores: {a == b}; same masks: {ma == mb}")
    best = dict.fromkeys(mods, float("inf"))
    for _ in range(repeats):
        for name, mod in mods.items():
            c = time.process_time()
            run(mod)
            best[name] = min(best[name], time.process_time() - c)
    for name, t in best.items():
        print(f"  {name:12s} {1e6 * t / len(rows):6.1f} us CPU per caption (scores + mask), best of {repeats}")
    print(f"  speed-up: {best[f'base {base}'] / best['this tree']:.2f}x")
    chunk = (rows * (1 + summary._BATCH // len(rows)))[: summary._BATCH]  # one full numpy pass
    pool = pa.default_memory_pool()
    for name, mod in mods.items():
        mod.summary_scores_batch(chunk)
        tracemalloc.start()
        mod.summary_scores_batch(chunk)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(
            f"  {name:12s} peak on one pass of {len(chunk)} captions: {peak / 2**20:.1f} MiB Python/numpy, "
            f"Arrow pool high-water (whole process so far) {(pool.max_memory() or 0) / 2**20:.1f} MiB"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--folds", type=int, default=5, help="cross-validation folds (by image key)")
    ap.add_argument("--l2", type=float, default=1.0, help="L2 penalty passed to the fit")
    ap.add_argument("--min-df", type=int, default=5, help="word features kept when seen in this many captions")
    ap.add_argument("--synth", type=int, default=400, help="synthetic shape-world captions scored out of domain")
    ap.add_argument("--speed", action="store_true", help="only time scoring + mask against --base, per caption")
    ap.add_argument("--base", default="main", help="git revision whose summary module --speed compares against")
    ap.add_argument("--repeats", type=int, default=9, help="--speed: timing repeats (best is kept)")
    args = ap.parse_args()
    if args.speed:
        speed(args.data, args.base, args.repeats)
        return

    rows = split_captions(load_calibration(args.data))
    hits = defaultdict(lambda: [0, 0])
    shuffled_same = 0
    rng = random.Random(0)
    for k in range(args.folds):
        train = [r for r in rows if fold_of(r["key"], args.folds) != k]
        test = [r for r in rows if fold_of(r["key"], args.folds) == k]
        w = fit(train, l2=args.l2, min_df=args.min_df)["weights"]
        for r in test:
            z = summary.raw_scores(r["sentences"], w)
            ok = top1_is_opening(z)
            hits[r["source"]][0] += ok
            hits[r["source"]][1] += 1
            hits["style:" + r["style"]][0] += ok
            hits["style:" + r["style"]][1] += 1
            # position-free check: scores of a shuffled caption, mapped back, are the same
            order = list(range(len(r["sentences"])))
            rng.shuffle(order)
            zs = summary.raw_scores([r["sentences"][i] for i in order], w)
            back = [0.0] * len(order)
            for pos, i in enumerate(order):
                back[i] = zs[pos]
            shuffled_same += all(abs(a - b) < 1e-9 for a, b in zip(back, z))
    print(f"captions with >= 2 sentences: {len(rows)}; {args.folds}-fold CV by image key")
    print("held-out top-1 = original opening sentence (sentences shuffled; scores are position-free):")
    for name, (h, n) in sorted(hits.items()):
        print(f"  {name:32s} {100 * h / n:5.1f}%  ({h}/{n})")
    print(f"  shuffle-invariant scores: {shuffled_same}/{len(rows)}")

    # Out of domain: the project's synthetic shape-world captions (templated, never trained on).
    from caption_debias.synth.world import caption_sentences, sample_world

    wrng = random.Random(0)
    synth = [caption_sentences(sc, wrng) for sc in sample_world(args.synth, seed=1, world="layouts")]
    synth = [s for s in synth if len(s) >= 2]
    ok = sum(top1_is_opening(summary.summary_scores(s)) for s in synth)
    print(
        f"shipped model on synthetic shape-world captions (out of domain): {100 * ok / max(1, len(synth)):.1f}% ({ok}/{len(synth)})"
    )
    s_close = s_close_n = s_mid = s_mid_n = 0
    for s in synth:
        mask = summary.summary_mask(s, summary.summary_scores(s), "detect")
        if OVERALL.match(s[-1].strip()):
            s_close_n += 1
            s_close += mask[-1]
        s_mid += sum(mask[1:-1])
        s_mid_n += len(mask[1:-1])
    print(f"  their closing 'Overall, ...' flagged: {s_close}/{s_close_n}; middle sentences flagged: {s_mid}/{s_mid_n}")

    # Shipped model, natural order: flags on opening, closing 'Overall' and middle sentences.
    t0 = time.perf_counter()
    opening = closing = closing_n = middle = middle_n = 0
    n_sent = 0
    for r in rows:
        s = r["sentences"]
        mask = summary.summary_mask(s, summary.summary_scores(s), "detect")
        n_sent += len(s)
        opening += mask[0]
        if OVERALL.match(s[-1].strip()):
            closing_n += 1
            closing += mask[-1]
        mids = mask[1:-1] if not OVERALL.match(s[-1].strip()) else mask[1:-1]
        middle += sum(mids)
        middle_n += len(mids)
    dt = time.perf_counter() - t0
    print("shipped model, natural order (trained on all of this data: in-sample):")
    print(f"  opening sentence flagged: {100 * opening / len(rows):.1f}%")
    print(f"  closing 'Overall, ...' / 'The overall ...' flagged: {closing}/{closing_n}")
    print(f"  middle sentences flagged: {middle}/{middle_n} = {100 * middle / max(1, middle_n):.2f}%")
    print(f"  scoring + mask speed: {len(rows) / dt:.0f} captions/s ({n_sent / dt:.0f} sentences/s)")


if __name__ == "__main__":
    main()
