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
Prints captions/s, the ratio, recall of the planted near-duplicates and the share of
distinct captions removed, for both.

    .venv/bin/python benchmarks/bench_curate_dedup.py --out /tmp/bd --synthetic 20000
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


def datasketch_loop(captions: list[str]) -> tuple[set[int], float]:
    from datasketch import MinHash, MinHashLSH

    t = time.perf_counter()
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
    return dups, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    add_data_option(ap)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--synthetic", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
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
    for kind, _, text in plant(rng, sources):
        if kind.startswith("near:"):
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

    base_dups, t_base = datasketch_loop(captions)
    t = time.perf_counter()
    curate([args.out / "prepared"], args.out / "curated", CurateOptions(quiet=True, overwrite=True))
    t_run = time.perf_counter() - t
    dedup_reasons = {"duplicate_caption", "near_duplicate_caption"}
    lines = [json.loads(x) for x in open(args.out / "curated" / "removed.jsonl")]
    removed = {int(r["key"].split("/r")[1]) for r in lines if r["reason"] in dedup_reasons}
    print("curate removed by reason:", dict(sorted(Counter(r["reason"] for r in lines).items())))
    # the dedup alone: caption signals of every shard, then the decisions
    from caption_debias.dataset import PreparedDataset

    ds = PreparedDataset.open(args.out / "prepared")
    t = time.perf_counter()
    for path in ds.shard_paths:
        signals.dedup_signals(pq.read_table(path, columns=signals.INPUT_COLUMNS))
    files = sorted((args.out / "curated" / signals.SIGNALS_DIR).glob("part-*.parquet"))
    dedup.decide(dedup.SignalTable(files, n), CurateOptions())
    t_dedup = time.perf_counter() - t

    planted = [i for i, k in enumerate(kinds) if k != "distinct"]
    distinct = [i for i, k in enumerate(kinds) if k == "distinct"]

    def report(name: str, dups: set[int], seconds: float) -> None:
        rec = sum(i in dups for i in planted) / len(planted)
        fp = sum(i in dups for i in distinct) / len(distinct)
        print(
            f"{name:44s} {n / seconds:9.0f} captions/s  ({t_base / seconds:5.1f}x)  recall {rec:.3f}  distinct removed {fp:.3%}"
        )

    report("datasketch MinHash + MinHashLSH loop", base_dups, t_base)
    report("curate, whole run (text only, 1 worker)", removed, t_run)
    report("curate caption dedup alone", removed, t_dedup)


if __name__ == "__main__":
    main()
