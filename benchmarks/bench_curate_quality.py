"""Quality of curate's caption reasons on real captions, with faults planted in copies of them.

Real captions (calibration data: IIW human, IIW-P5B model-written, COCO val2017) are the
clean set; planted from them:
  near-duplicates: 1-3 words changed, a sentence dropped, a sentence added (from another caption)
  repetition loops: a sentence of the caption repeated 2-5 more times, or a phrase loop
  cut-offs: the caption stopped at a random word inside its last 60% (not at a sentence end)
Everything is prepared by `prepare` and curated by `curate` (text only, default thresholds),
then per source: the share of clean captions removed for each reason (false positives) and
the recall of each planted fault. Last, how the tail-loop rule of repetitive_caption depends on
its two parameters (copies, longest period): the share of each kind of caption that ends in a
loop, computed with the specification (quality.tail_loop) on the prepared token ids.

    .venv/bin/python benchmarks/bench_curate_quality.py --out /tmp/bq
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_data_option  # noqa: E402


def real_captions(data: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"iiw-human": [], "iiw-p5b": [], "coco": []}
    for name in ("iiw400.jsonl", "iiw_cm3600.jsonl"):
        for line in open(data / name, encoding="utf-8"):
            row = json.loads(line)
            if isinstance(row.get("IIW"), str) and row["IIW"].strip():
                out["iiw-human"].append(row["IIW"])
            if isinstance(row.get("IIW-P5B"), str) and row["IIW-P5B"].strip():
                out["iiw-p5b"].append(row["IIW-P5B"])
    doc = json.loads((data / "coco_captions_val2017.json").read_text("utf-8"))
    out["coco"] = [a["caption"] for a in doc["annotations"]]
    return out


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def plant(rng: random.Random, sources: dict[str, list[str]]) -> list[tuple[str, str, str]]:
    """(kind, source caption id, text) for each planted fault; long captions only (IIW)."""
    # long captions, as the dumps curate is for have (ShareGPT4V averages about 9 sentences)
    long_caps = [c for k in ("iiw-human", "iiw-p5b") for c in sources[k] if len(sentences(c)) >= 6]
    words_pool = "purple golden tiny large wooden metal bright dark old new".split()
    planted = []
    for cap in rng.sample(long_caps, 300):
        words = cap.split(" ")
        changed = list(words)
        for j in rng.sample(range(len(words)), rng.randint(1, 3)):
            changed[j] = rng.choice(words_pool)
        planted.append(("near:words", cap, " ".join(changed)))
        sents = sentences(cap)
        drop = rng.randrange(1, len(sents))
        planted.append(("near:drop", cap, " ".join(sents[:drop] + sents[drop + 1 :])))
        other = sentences(rng.choice(long_caps))
        add = rng.randrange(1, len(sents))
        planted.append(("near:add", cap, " ".join(sents[:add] + [rng.choice(other)] + sents[add:])))
    for cap in rng.sample(long_caps, 300):
        sents = sentences(cap)
        s = rng.choice(sents)
        planted.append(("repeat:sentence", "", " ".join(sents + [s] * rng.randint(2, 5))))
        # a generator stuck in a loop repeats a phrase until its length limit: keep 50-70% of the
        # caption, then one of its phrases over and over up to the caption's original length
        words = cap.split(" ")
        keep = int(len(words) * rng.uniform(0.5, 0.7))
        start = rng.randrange(0, keep - 4)
        phrase = words[start : start + rng.randint(2, 5)]
        looped = words[:keep]
        while len(looped) < len(words):
            looped += phrase
        planted.append(("repeat:phrase", "", " ".join(looped[: len(words)])))
    for cap in rng.sample(long_caps, 300):
        words = cap.split(" ")
        for _ in range(20):
            cut = rng.randrange(int(len(words) * 0.4), len(words) - 1)
            text = " ".join(words[:cut])
            if not text.endswith((".", "!", "?", '."')):
                break
        planted.append(("cut", "", text))
    return planted


def main() -> None:
    ap = argparse.ArgumentParser()
    add_data_option(ap)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--near-duplicate-threshold", type=float, default=0.8)
    args = ap.parse_args()
    t = args.near_duplicate_threshold
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    rng = random.Random(args.seed)
    sources = real_captions(args.data)
    rows, kind_of = [], {}
    seen = set()
    for src, caps in sources.items():
        for i, c in enumerate(caps):
            norm = " ".join(c.lower().split())
            kind = f"clean:{src}" if norm not in seen else f"repeat-in-source:{src}"
            seen.add(norm)
            key = f"{src}-{i}"
            rows.append({"key": key, "image": f"{src}/{i}.jpg", "caption": c})
            kind_of[f"table/{key}"] = kind
    from caption_debias.curate import minhash
    from caption_debias.text.tokenize import get_tokenizer

    tok = get_tokenizer()
    true_jaccard, original_of = {}, {}
    key_of_text = {}
    for r in rows:
        key_of_text.setdefault(r["caption"], f"table/{r['key']}")
    for j, (kind, original, text) in enumerate(plant(rng, sources)):
        key = f"planted-{j}"
        rows.append({"key": key, "image": f"planted/{j}.jpg", "caption": text})
        kind_of[f"table/{key}"] = kind
        if kind.startswith("near:"):  # exact Jaccard of the token 3-gram sets curate compares
            true_jaccard[f"table/{key}"] = minhash.jaccard(
                minhash.shingles(tok.encode(original)), minhash.shingles(tok.encode(text))
            )
            original_of[f"table/{key}"] = key_of_text[original]
    args.out.mkdir(parents=True, exist_ok=True)
    table = args.out / "captions.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([table], args.out / "prepared", PrepareOptions(format="table", quiet=True, overwrite=True))
    options = CurateOptions(quiet=True, overwrite=True, near_duplicate_threshold=t)
    curate([args.out / "prepared"], args.out / "curated", options)
    removed = {}
    for line in open(args.out / "curated" / "removed.jsonl", encoding="utf-8"):
        r = json.loads(line)
        removed[r["key"]] = r["reason"]
    totals: Counter = Counter(kind_of.values())
    by_kind: dict[str, Counter] = defaultdict(Counter)
    for key, kind in kind_of.items():
        by_kind[kind][removed.get(key, "kept")] += 1
    print(f"{'rows':>26} {'n':>6}  removed by reason (share of n)")
    for kind in sorted(totals):
        n = totals[kind]
        parts = ", ".join(f"{r} {c} ({c / n:.2%})" for r, c in by_kind[kind].most_common() if r != "kept")
        print(f"{kind:>26} {n:>6}  {parts or '-'}")
    recall = {
        "near-duplicates": ("near:", {"near_duplicate_caption", "duplicate_caption"}),
        "repetition loops": ("repeat:", {"repetitive_caption"}),
        "cut-offs": ("cut", {"truncated_caption"}),
    }
    print()
    for name, (prefix, reasons) in recall.items():
        keys = [k for k, kind in kind_of.items() if kind.startswith(prefix)]
        hit = sum(removed.get(k) in reasons for k in keys)
        print(f"recall {name}: {hit}/{len(keys)} = {hit / len(keys):.3f}")
    near_duplicate_recall(args.out / "curated", t, true_jaccard, original_of, removed)
    clean = [k for k, kind in kind_of.items() if kind.startswith("clean:")]
    for reason in ("repetitive_caption", "truncated_caption", "near_duplicate_caption", "duplicate_caption"):
        n = sum(removed.get(k) == reason for k in clean)
        print(f"clean real captions removed as {reason}: {n}/{len(clean)} = {n / len(clean):.3%}")
    tail_loop_sweep(args.out / "prepared", kind_of)


def near_duplicate_recall(
    curated: Path, t: float, true_jaccard: dict[str, float], original_of: dict[str, str], removed: dict[str, str]
) -> None:
    """Recall of the planted near-duplicates against the definition: a row goes when its estimated
    Jaccard with an earlier *kept* row is >= t. Copies removed earlier in the funnel (a copy of a
    looping caption loops too) and copies whose original was removed never reach that test."""
    import numpy as np
    import polars as pl

    from caption_debias.curate import minhash
    from caption_debias.curate.signals import SIGNALS_DIR

    dup = {"near_duplicate_caption", "duplicate_caption"}
    sig = pl.read_parquet(sorted((curated / SIGNALS_DIR).glob("part-*.parquet")), columns=["key", "signature"])
    sig_of = dict(zip(sig["key"].to_list(), sig["signature"].to_list()))

    def estimate(a: str, b: str) -> float:
        return minhash.estimate(np.frombuffer(sig_of[a], np.uint32), np.frombuffer(sig_of[b], np.uint32))

    reaches = [k for k in true_jaccard if removed.get(k, "kept") in dup | {"kept"} and original_of[k] not in removed]
    below = sum(j < t for j in true_jaccard.values())
    print(
        f"planted near-duplicates whose exact token 3-gram Jaccard with the original is below {t}: {below} of {len(true_jaccard)}"
    )
    print(
        f"planted near-duplicates that reach the duplicate test (not removed earlier, original kept): "
        f"{len(reaches)} of {len(true_jaccard)}"
    )
    for name, pick in (
        (f"estimated Jaccard >= {t} (the definition)", lambda k: estimate(k, original_of[k]) >= t),
        (f"exact Jaccard >= {t}", lambda k: true_jaccard[k] >= t),
    ):
        keys = [k for k in reaches if pick(k)]
        hit = sum(removed.get(k) in dup for k in keys)
        print(f"recall near-duplicates, of those with {name}: {hit}/{len(keys)} = {hit / max(1, len(keys)):.4f}")
    low = [k for k in reaches if true_jaccard[k] < t]
    hit = sum(removed.get(k) in dup for k in low)
    print(f"  removed though their exact Jaccard is below {t} (estimates at or above it): {hit} of {len(low)}")


def tail_loop_sweep(prepared: Path, kind_of: dict[str, str]) -> None:
    """Share of each kind of caption ending in a loop, for other copies / longest-period settings."""
    import pyarrow.parquet as pq

    from caption_debias.curate import quality
    from caption_debias.curate.options import TAIL_LOOP_MAX_PERIOD, TAIL_LOOP_MIN_COPIES
    from caption_debias.dataset import PreparedDataset

    kinds = ["clean:coco", "clean:iiw-human", "clean:iiw-p5b", "repeat:phrase", "repeat:sentence", "cut"]
    rows = []
    for path in PreparedDataset.open(prepared).shard_paths:
        t = pq.read_table(path, columns=["key", "caption", "sentence_tokens"])
        for key, cap, sents in zip(*(t.column(c).to_pylist() for c in ("key", "caption", "sentence_tokens"))):
            if kind_of[key] in kinds:
                rows.append((kind_of[key], [x for s in sents for x in s], quality.ends_with_mark(cap)))
    n = Counter(k for k, _, _ in rows)
    print(
        f"\ncaptions ending in a loop (tail_loop > 0); default: {TAIL_LOOP_MIN_COPIES} copies, period <= {TAIL_LOOP_MAX_PERIOD}"
    )
    print(f"{'copies':>6} {'period':>6}  " + "  ".join(f"{k:>15}" for k in kinds))
    for copies in (2, 3, 4):
        for period in (8, 16, 32, 64):
            hit = Counter(k for k, toks, mark in rows if quality.tail_loop(toks, mark, period, copies) > 0)
            print(f"{copies:>6} {period:>6}  " + "  ".join(f"{hit[k] / n[k]:>15.2%}" for k in kinds))


if __name__ == "__main__":
    main()
