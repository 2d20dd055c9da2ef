"""Segmenter accuracy and speed: Golden Rules, agreement with pysbd on real long captions.

Prints, for each segmenter: the English Golden Rules score (benchmarks/data), the share
of real long captions (ImageInWords IIW / IIW-P5B, and COCO: five captions of an image
joined) whose sentence list equals pysbd's, the same on captions with hard spots
inserted at random ("Dr. Smith", "U.S.", "3.5 m", '"Stop." The', "...", ...), how many
captions the fast path sent whole to pysbd, and CPU time per caption.

    .venv/bin/python benchmarks/bench_text_segment.py
    .venv/bin/python benchmarks/bench_text_segment.py --compare main   # CPU before/after, same run

--compare REV imports the segmenter as of git revision REV beside this tree's and times its `fast` segmenter against the working tree's on the real long captions
(best of --repeats, CPU time), with the time spent inside pysbd and the hand-off counts, and
checks that both give the same spans on every set.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from _common import add_data_option, coco_joined, import_at, long_caption_sets

from caption_debias.text.segment import FastSegmenter, get_segmenter

HERE = Path(__file__).resolve().parent
INSERTS = [
    "Dr. Smith waves.",
    "e.g. a dog",
    "the U.S. flag",
    "at 5 p.m. today",
    "a 3.5 m pole",
    "the time 08:45.",
    '"Stop." The sign',
    'reads "Go!" in red',
    "it is big... really",
    "and so on. then",
    "Mt. Fuji",
    "No. 5 is here",
    "the man. I see",
    "a (red. Blue) box",
    "Fig. 3 shows",
    "etc. The",
    "vs. the",
    "the 'Big. Top' tent",
    "the St. Louis arch",
    "approx. 3 m",
    "Inc. The",
    "A. B. Smith",
    "the co. The",
]


def load(data: Path) -> dict[str, list[str]]:
    return {**long_caption_sets(data), "coco:5 joined": coco_joined(data)}


def perturbed(captions: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.choice(captions).split(" ")
        for _ in range(rng.randint(1, 3)):
            words.insert(rng.randrange(len(words)), rng.choice(INSERTS))
        out.append(" ".join(words))
    return out


def timed_run(seg, caps: list[str], repeats: int) -> tuple[float, float, int, int]:
    """Best-of-`repeats` CPU seconds for all captions, the pysbd seconds of that repeat,
    and the whole / stretch hand-offs of one pass."""
    inner = seg._pysbd
    spans = type(inner).spans
    spent = [0.0]

    def counted(text):
        t0 = time.process_time()
        out = spans(inner, text)
        spent[0] += time.process_time() - t0
        return out

    best = (float("inf"), 0.0)
    for _ in range(repeats):
        seg.delegated = seg.pysbd_stretches = 0
        spent[0] = 0.0
        getattr(inner, "_cache", {}).clear()  # pysbd's answers are cached by text: each repeat starts cold
        inner.spans = counted
        t0 = time.process_time()
        for c in caps:
            seg.spans(c)
        total = time.process_time() - t0
        del inner.spans
        best = min(best, (total, spent[0]))
    return best[0], best[1], seg.delegated, seg.pysbd_stretches


def compare(rev: str, sets: dict[str, list[str]], long_caps: list[str], repeats: int) -> None:
    old = import_at(rev, "caption_debias.text.segment", Path(tempfile.mkdtemp()))
    segs = {f"{rev}": old.FastSegmenter(), "working tree": FastSegmenter()}
    for seg in segs.values():  # warm caches and regex compilation
        for c in long_caps:
            seg.spans(c)
    print(
        f"CPU per real long caption ({len(long_caps)} IIW/IIW-P5B captions, best of {repeats}; "
        "pysbd = time inside pysbd calls):"
    )
    for label, seg in segs.items():
        total, in_pysbd, whole, stretches = timed_run(seg, long_caps, repeats)
        n = len(long_caps)
        plain = ""
        if hasattr(seg, "_plain"):  # captions the plain path settles (no loop per mark)
            plain = f" plain={sum(seg._plain.split(c).verdict == 'settled' for c in long_caps)}"
        print(
            f"  {label:14s} {1e6 * total / n:6.1f} us  (scan {1e6 * (total - in_pysbd) / n:5.1f} us, "
            f"pysbd {1e6 * in_pysbd / n:5.1f} us)  whole={whole} stretches={stretches}{plain}"
        )
    print("same spans, old vs new fast segmenter:")
    a, b = segs.values()
    for label, caps in sets.items():
        same = sum(a.spans(c) == b.spans(c) for c in caps)
        print(f"  {label:28s} {same}/{len(caps)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--perturbed", type=int, default=3000, help="captions with inserted hard spots")
    ap.add_argument("--spacy", action="store_true", help="also score the spacy segmenter")
    ap.add_argument(
        "--compare", metavar="REV", help="time the fast segmenter of git revision REV against the working tree"
    )
    ap.add_argument("--repeats", type=int, default=7, help="repeats for --compare (best is kept)")
    args = ap.parse_args()
    if args.compare:
        sets = load(args.data)
        long_caps = [c for k, v in sets.items() if k.startswith("iiw") for c in v]
        sets["iiw + hard spots inserted"] = perturbed(long_caps, args.perturbed, seed=1)
        compare(args.compare, sets, long_caps, args.repeats)
        return

    golden = json.loads((HERE / "data" / "golden_rules_en.json").read_text(encoding="utf-8"))["cases"]
    names = ["fast", "pysbd"] + (["spacy"] if args.spacy else [])
    print(f"English Golden Rules ({len(golden)} cases):")
    for name in names:
        seg = get_segmenter(name)
        ok = sum([c["text"][s:e] for s, e in seg.spans(c["text"])] == c["expected"] for c in golden)
        print(f"  {name:6s} {ok}/{len(golden)}")

    sets = load(args.data)
    long_caps = [c for k, v in sets.items() if k.startswith("iiw") for c in v]
    sets["iiw + hard spots inserted"] = perturbed(long_caps, args.perturbed, seed=1)
    ref = get_segmenter("pysbd")
    print("same sentence lists as pysbd; fast path: captions sent whole to pysbd, stretches sent; CPU us/caption:")
    for label, caps in sets.items():
        fast = FastSegmenter()  # fresh counters per set
        t0 = time.process_time()
        got = [fast.spans(c) for c in caps]
        t_fast = time.process_time() - t0
        t0 = time.process_time()
        want = [ref.spans(c) for c in caps]
        t_ref = time.process_time() - t0
        same = sum(a == b for a, b in zip(got, want))
        print(
            f"  {label:28s} {100 * same / len(caps):6.2f}% ({same}/{len(caps)})  whole={fast.delegated} "
            f"stretches={fast.pysbd_stretches}  fast {1e6 * t_fast / len(caps):6.0f} us  pysbd {1e6 * t_ref / len(caps):6.0f} us  "
            f"({t_ref / t_fast:.0f}x)"
        )


if __name__ == "__main__":
    main()
