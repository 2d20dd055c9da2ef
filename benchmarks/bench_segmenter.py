"""Segmenter accuracy and speed: Golden Rules, agreement with pysbd on real long captions.

Prints, for each segmenter: the English Golden Rules score (benchmarks/data), the share
of real long captions (ImageInWords IIW / IIW-P5B, and COCO: five captions of an image
joined) whose sentence list equals pysbd's, the same on captions with hard spots
inserted at random ("Dr. Smith", "U.S.", "3.5 m", '"Stop." The', "...", ...), how many
captions the fast path sent whole to pysbd, and CPU time per caption.

    .venv/bin/python benchmarks/bench_segmenter.py --data /work/shared/data
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from caption_debias.text.segment import FastSegmenter, get_segmenter  # noqa: E402

HERE = Path(__file__).resolve().parent
INSERTS = [
    "Dr. Smith waves.", "e.g. a dog", "the U.S. flag", "at 5 p.m. today", "a 3.5 m pole", "the time 08:45.",
    '"Stop." The sign', 'reads "Go!" in red', "it is big... really", "and so on. then", "Mt. Fuji",
    "No. 5 is here", "the man. I see", "a (red. Blue) box", "Fig. 3 shows", "etc. The", "vs. the",
    "the 'Big. Top' tent", "the St. Louis arch", "approx. 3 m", "Inc. The", "A. B. Smith", "the co. The",
]


def load(data: Path) -> dict[str, list[str]]:
    sets: dict[str, list[str]] = defaultdict(list)
    for name, fields in (("iiw400.jsonl", ("IIW", "IIW-P5B")), ("iiw_cm3600.jsonl", ("IIW-P5B",))):
        for line in (data / name).open(encoding="utf-8"):
            row = json.loads(line)
            for f in fields:
                if row.get(f):
                    sets[f"{name}:{f}"].append(row[f])
    coco = json.loads((data / "coco_captions_val2017.json").read_text(encoding="utf-8"))
    by_image: dict[int, list[str]] = defaultdict(list)
    for a in coco["annotations"]:
        by_image[a["image_id"]].append(a["caption"])
    sets["coco:5 joined"] = [" ".join(v) for v in by_image.values()]
    return sets


def perturbed(captions: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.choice(captions).split(" ")
        for _ in range(rng.randint(1, 3)):
            words.insert(rng.randrange(len(words)), rng.choice(INSERTS))
        out.append(" ".join(words))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"), help="calibration data folder")
    ap.add_argument("--perturbed", type=int, default=3000, help="captions with inserted hard spots")
    ap.add_argument("--spacy", action="store_true", help="also score the spacy segmenter")
    args = ap.parse_args()

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
