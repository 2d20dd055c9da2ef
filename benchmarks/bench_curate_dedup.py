"""Caption near-duplicate removal: curate against a plain datasketch MinHash + MinHashLSH loop.

Captions: the distinct real ones from the calibration data (IIW human and model-written,
COCO val2017), --synthetic more made of 4-9 random real sentences (distinct too), then
planted near-duplicates of long IIW captions (1-3 words changed, a sentence dropped, a
sentence added; bench_curate_quality.plant), after their originals. The same captions go through
  baseline: for each caption, lower-cased word 3-gram shingles, datasketch.MinHash(128)
            .update_batch, MinHashLSH(threshold=0.8).query; a hit is a duplicate, else insert
  curate:   `curate` on the prepared folder, text only, --workers 1 (whole run: signals incl.
            quality signals, the global decisions, writing the curated shards); and the
            caption dedup alone (signals.dedup_signals + dedup.decide); removals count only when
            they are duplicate_caption or near_duplicate_caption
Each path runs --repeats times, interleaved (on a shared machine the load changes within minutes);
the fastest run of each counts. Prints captions/s and captions per CPU second (every thread of the
process), each with its ratio to the baseline, recall of the planted near-duplicates (all of them, and those that
reach curate's duplicate test with an exact Jaccard >= 0.8 to their kept original) and the share
of distinct captions removed, for both.

    .venv/bin/python benchmarks/bench_curate_dedup.py --out /tmp/bd --synthetic 20000 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_data_option  # noqa: E402
from bench_curate_quality import plant, real_captions  # noqa: E402


def datasketch_loop(captions: list[str]) -> set[int]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    dups = set()
    for i, cap in enumerate(captions):
        words = cap.lower().split()
        grams = {" ".join(words[j : j + 3]) for j in range(max(1, len(words) - 2))}
        m = MinHash(num_perm=128)
        m.update_batch([g.encode("utf-8") for g in grams])
        if lsh.query(m):
            dups.add(i)
        else:
            lsh.insert(str(i), m)
    return dups


def timed(fn):
    """(result, wall seconds, CPU seconds of this process, every thread)."""
    t, c = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - t, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser()
    add_data_option(ap)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--synthetic", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2, help="timed runs of each path, interleaved; the fastest counts")
    args = ap.parse_args()
    import pyarrow.parquet as pq

    from caption_debias.curate import dedup, signals
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    rng = random.Random(args.seed)
    sources = real_captions(args.data)
    captions, kinds, seen = [], [], set()
    for c in (c for caps in sources.values() for c in caps):
        norm = " ".join(c.lower().split())
        if norm not in seen:
            seen.add(norm)
            captions.append(c)
            kinds.append("distinct")
    # COCO captions have no final period: give each sentence one, or the combined captions would be
    # "truncated" (several sentences, the last unfinished) and removed for that, not as duplicates
    pool = sorted(
        {s if s[-1] in ".!?" else s + "." for c in captions for s in re.split(r"(?<=[.!?])\s+", c.strip()) if s}
    )
    for _ in range(args.synthetic):
        captions.append(" ".join(rng.choice(pool) for _ in range(rng.randint(4, 9))))
        kinds.append("distinct")
    index_of = {c: i for i, c in enumerate(captions)}
    original_of: dict[int, int] = {}
    for kind, original, text in plant(rng, sources):
        if kind.startswith("near:"):
            original_of[len(captions)] = index_of[original]
            captions.append(text)
            kinds.append(kind)
    # planted copies come after every original: a copy counts as found when it is removed
    args.out.mkdir(parents=True, exist_ok=True)
    table = args.out / "captions.jsonl"
    table.write_text(
        "".join(
            json.dumps({"key": f"r{i}", "image": f"x/{i}.jpg", "caption": c}) + "\n" for i, c in enumerate(captions)
        ),
        "utf-8",
    )
    prepare([table], args.out / "prepared", PrepareOptions(format="table", quiet=True, overwrite=True))
    n = len(captions)
    print(f"{n} captions ({kinds.count('distinct')} distinct, {n - kinds.count('distinct')} planted near-duplicates)")

    from caption_debias.dataset import PreparedDataset

    ds = PreparedDataset.open(args.out / "prepared")
    files = [signals.signals_path(args.out / "curated", i) for i in range(len(ds.shard_paths))]

    def dedup_alone() -> None:
        # the caption dedup alone: caption signals of every shard, then the decisions (on the signal
        # files the whole run wrote: the same values)
        for path in ds.shard_paths:
            signals.dedup_signals(pq.read_table(path, columns=signals.INPUT_COLUMNS), CurateOptions().lsh())
        dedup.decide(dedup.SignalTable(files, n), CurateOptions())

    # interleaved, the fastest of each: on a shared machine the load changes within minutes
    runs: dict[str, list[tuple[float, float]]] = {"base": [], "run": [], "dedup": []}
    for _ in range(args.repeats):
        base_dups, *times = timed(lambda: datasketch_loop(captions))
        runs["base"].append(times)
        _, *times = timed(
            lambda: curate([args.out / "prepared"], args.out / "curated", CurateOptions(quiet=True, overwrite=True))
        )
        runs["run"].append(times)
        _, *times = timed(dedup_alone)
        runs["dedup"].append(times)
    best = {k: (min(w for w, _ in v), min(c for _, c in v)) for k, v in runs.items()}
    dedup_reasons = {"duplicate_caption", "near_duplicate_caption"}
    lines = [json.loads(x) for x in open(args.out / "curated" / "removed.jsonl")]
    removed = {int(r["key"].split("/r")[1]) for r in lines if r["reason"] in dedup_reasons}
    print("curate removed by reason:", dict(sorted(Counter(r["reason"] for r in lines).items())))

    planted = [i for i, k in enumerate(kinds) if k != "distinct"]
    distinct = [i for i, k in enumerate(kinds) if k == "distinct"]
    # the copies a duplicate test can find: curate did not remove them (or their original) for a
    # reason earlier in its funnel (a copy of a looping caption loops too), and their exact token
    # 3-gram Jaccard with the original is at or above the threshold (the others are not near-duplicates
    # at 0.8 by the definition, whatever a method's estimate says)
    from caption_debias.curate import minhash
    from caption_debias.text.tokenize import get_tokenizer

    tok = get_tokenizer()
    earlier = {int(r["key"].split("/r")[1]) for r in lines if r["reason"] not in dedup_reasons}
    eligible = [
        i
        for i in planted
        if i not in earlier
        and original_of[i] not in earlier
        and minhash.jaccard(
            minhash.shingles(tok.encode(captions[i])), minhash.shingles(tok.encode(captions[original_of[i]]))
        )
        >= 0.8
    ]
    print(
        f"planted copies that reach the duplicate test with Jaccard >= 0.8 to their kept original: {len(eligible)} of {len(planted)}"
    )

    def report(name: str, dups: set[int], key: str) -> None:
        (wall, cpu), (base_wall, base_cpu) = best[key], best["base"]
        rec = sum(i in dups for i in planted) / len(planted)
        rec_eligible = sum(i in dups for i in eligible) / len(eligible)
        fp = sum(i in dups for i in distinct) / len(distinct)
        print(
            f"{name:40s} {n / wall:7.0f} captions/s ({base_wall / wall:4.1f}x)  {n / cpu:7.0f} per CPU s "
            f"({base_cpu / cpu:4.1f}x)  recall {rec:.3f} (Jaccard >= 0.8: {rec_eligible:.3f})  distinct removed {fp:.3%}"
        )

    report("datasketch MinHash + MinHashLSH loop", base_dups, "base")
    report("curate, whole run (text only, 1 worker)", removed, "run")
    report("curate caption dedup alone", removed, "dedup")


if __name__ == "__main__":
    main()
