"""Peak memory of text-only `curate` as the input grows (250k -> 1.25M rows by default).

Builds prepared folders straight as shards (no prepare run, to keep the benchmark short):
each row is 4-9 sentences drawn at random from the real calibration captions (IIW, COCO),
with the sentences' CLIP token ids from the project's tokenizer, so captions are distinct and
the MinHash and quality steps see real text. Then, each in a fresh child process so peaks do
not mix, runs `curate(folder, out, CurateOptions(workers=1))` and reports the child's peak
RSS (ru_maxrss), the time, and the growth from the smallest to the largest input.

    .venv/bin/python benchmarks/bench_curate_memory.py --dir /tmp/bm --sizes 250000 1250000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import re
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_data_option  # noqa: E402

SHARD_ROWS = 20_000


def sentence_pool(data: Path) -> list[tuple[str, list[int]]]:
    from bench_curate_quality import real_captions

    from caption_debias.text.tokenize import get_tokenizer

    tok = get_tokenizer()
    seen, pool = set(), []
    for caps in real_captions(data).values():
        for c in caps:
            for s in re.split(r"(?<=[.!?])\s+", c.strip()):
                s = s.strip()
                if s and s[-1] not in ".!?":
                    s += "."  # COCO captions have no period; inside a longer caption they need one
                if s and s not in seen:
                    seen.add(s)
                    pool.append((s, tok.encode(s)))
    return pool


def build(folder: Path, n: int, pool: list[tuple[str, list[int]]], seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from caption_debias.prepare.writer import sha256_file, write_json
    from caption_debias.schema import SCHEMA_VERSION, shard_arrow_schema
    from caption_debias.text.tokenize import get_tokenizer

    if (folder / "manifest.json").is_file():
        return
    (folder / "shards").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    schema = shard_arrow_schema()
    shards = []
    for start in range(0, n, SHARD_ROWS):
        rows = []
        for i in range(start, min(n, start + SHARD_ROWS)):
            picks = [pool[rng.randrange(len(pool))] for _ in range(rng.randint(4, 9))]
            caption, spans = "", []
            for s, _ in picks:
                if caption:
                    caption += " "
                spans.append({"start": len(caption), "end": len(caption) + len(s)})
                caption += s
            rows.append(
                {
                    "key": f"bench/{i}",
                    "source": "table",
                    "image": f"images/{i}.jpg",
                    "caption": caption,
                    "sentences": [s for s, _ in picks],
                    "sentence_spans": spans,
                    "sentence_tokens": [t for _, t in picks],
                    "num_tokens": sum(len(t) for _, t in picks) + 2,
                    "summary_mask": [False] * len(picks),
                    "summary_scores": [0.0] * len(picks),
                    "meta": "{}",
                }
            )
        rel = f"shards/part-{start // SHARD_ROWS:05d}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / rel, compression="zstd")
        shards.append({"path": rel, "rows": len(rows), "sha256": sha256_file(folder / rel)})
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "complete": True,
        "counts": {"read": n, "written": n, "rejected": 0},
        "inputs": [],
        "shards": shards,
        "options": {},
        "tokenizer": get_tokenizer().describe(),
        "segmenter": {"name": "bench"},
        "summary": {},
    }
    write_json(manifest, folder / "manifest.json")


def run(folder: str, out: str, q) -> None:
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate

    t = time.perf_counter()
    m = curate([folder], out, CurateOptions(workers=1, quiet=True, overwrite=True))
    q.put((time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, m["counts"]))


def main() -> None:
    ap = argparse.ArgumentParser()
    add_data_option(ap)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/bench-curate-memory"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[250_000, 1_250_000])
    args = ap.parse_args()
    pool = sentence_pool(args.data)
    print(f"sentence pool: {len(pool)} distinct real sentences")
    ctx = mp.get_context("spawn")
    results = []
    for n in args.sizes:
        folder = args.dir / f"in-{n}"
        t = time.perf_counter()
        build(folder, n, pool)
        print(f"built {n:,} rows in {time.perf_counter() - t:.0f} s", flush=True)
        q = ctx.Queue()
        p = ctx.Process(target=run, args=(str(folder), str(args.dir / f"out-{n}"), q))
        p.start()
        seconds, peak_mb, counts = q.get()
        p.join()
        results.append((n, peak_mb, seconds))
        print(
            f"{n:>10,} rows: peak RSS {peak_mb:7.0f} MiB, {seconds:6.1f} s ({n / seconds:,.0f} rows/s), counts {json.dumps(counts)}",
            flush=True,
        )
    if len(results) > 1:
        print(f"growth {results[0][0]:,} -> {results[-1][0]:,} rows: {results[-1][1] / results[0][1]:.2f}x peak RSS")


if __name__ == "__main__":
    main()
