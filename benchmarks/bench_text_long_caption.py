"""Prepare's text steps on one very long caption: time grows linearly with its length.

Builds captions of ~100 KB, ~400 KB and ~1.6 MB: "real" ones from the real long captions
(ImageInWords, joined by a space, so no line break helps the segmenter), and an adversarial
one of abbreviations among lower-case words with no capital and no sentence end (what pysbd's abbreviation
replacer is slowest on). Times prepare's text steps (split, tokenize, score, to_table:
`process_records`) on each, CPU time, best of --repeats, and prints the time per KB and its
ratio to the 100 KB caption's (1.0 is linear; quadratic would be 4 and 16).

    .venv/bin/python benchmarks/bench_text_long_caption.py
    .venv/bin/python benchmarks/bench_text_long_caption.py --segmenter pysbd --sizes 100,400
"""

from __future__ import annotations

import argparse
import random
import time

from _common import add_data_option, long_captions

from caption_debias.prepare.steps import process_records
from caption_debias.records import Record
from caption_debias.text.segment import get_segmenter

ABBREVIATIONS = "Dr. e.g. U.S. p.m. fig. vs. Mt. etc. no. a.m. i.e. St. Jr. approx. Inc. Ltd. Co. Prof. Gen.".split()
WORDS = "the a red boat near small harbour with and of old lamp on it".split()


def real_caption(captions: list[str], kb: int) -> str:
    out, size, i = [], 0, 0
    while size < kb * 1000:
        c = " ".join(captions[i % len(captions)].split())
        out.append(c)
        size += len(c.encode()) + 1
        i += 1
    return " ".join(out)[: kb * 1000]


def adversarial_caption(kb: int) -> str:
    """Abbreviations among lower-case words and numbers, no capital, no sentence end (every stretch differs)."""
    rng = random.Random(kb)
    out, size = [], 0
    while size < kb * 1000:
        word = rng.choice(ABBREVIATIONS).lower() if rng.random() < 0.8 else rng.choice(WORDS)
        word = f"{word} {rng.randrange(1000)}" if rng.random() < 0.2 else word
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[: kb * 1000]


def time_caption(caption: str, segmenter: str, repeats: int) -> tuple[float, int]:
    best, rows = float("inf"), 0
    for r in range(repeats):
        get_segmenter.cache_clear()  # a fresh segmenter: no stretch answered before (the tokenizer keeps its words)
        record = Record("bench", "bench", r, None, "a.jpg", caption)
        t0 = time.process_time()
        table, rejects = process_records([(f"k{r}", record)], segmenter, "detect")
        best = min(best, time.process_time() - t0)
        rows = table.num_rows
        assert not rejects, rejects
    return best, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_option(parser)
    parser.add_argument("--sizes", default="100,400,1600", help="caption sizes in KB (default %(default)s)")
    parser.add_argument("--segmenter", default="fast")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    captions = long_captions(args.data)
    process_records([("warm", Record("bench", "bench", 0, None, "a.jpg", captions[0]))], args.segmenter, "detect")
    print(f"segmenter {args.segmenter}, CPU s, best of {args.repeats}")
    print(f"{'caption':<12} {'KB':>6} {'s':>8} {'ms/KB':>8} {'ratio':>6} sentences")
    for kind, build in (("real", lambda kb: real_caption(captions, kb)), ("adversarial", adversarial_caption)):
        base = None
        for kb in sizes:
            caption = build(kb)
            seconds, _ = time_caption(caption, args.segmenter, args.repeats)
            n = len(get_segmenter(args.segmenter).spans(caption))
            per_kb = seconds * 1000 / kb
            base = base or per_kb
            print(f"{kind:<12} {kb:>6} {seconds:>8.2f} {per_kb:>8.2f} {per_kb / base:>6.2f} {n}")


if __name__ == "__main__":
    main()
