"""Peak memory of `prepare` as the input grows, against loading the whole input first.

Writes ShareGPT4V-layout JSON arrays of N records (real long captions from the calibration
data, repeated with fresh ids and a little noise so no two are equal), then, each in a fresh
child process so peaks do not mix, measures the child's peak RSS for:
  stream:   caption_debias.prepare.run.prepare([file], out, PrepareOptions(shard_rows=R, workers=1))
  baseline: json.load(file) of the whole array, then the same text steps and one Parquet file
            (what a non-streaming implementation does)
and prints a table of peaks, stream/baseline ratios, and each method's growth from the
smallest to the largest input.

    .venv/bin/python benchmarks/bench_prepare_memory.py --sizes 4000 16000 64000
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import tempfile
import time
from pathlib import Path

from _common import add_data_option, long_captions, peak_rss_mib


def write_sharegpt(path: Path, n: int, captions: list[str]) -> None:
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as fh:  # streamed out, so the writer stays small too
        fh.write("[")
        for i in range(n):
            caption = captions[i % len(captions)] + f" Frame {rng.randrange(10**6)}."
            el = {
                "id": f"b{i}",
                "image": f"sam/images/sa_{i}.jpg",
                "conversations": [
                    {"from": "human", "value": "<image>\nDescribe this image."},
                    {"from": "gpt", "value": caption},
                ],
            }
            fh.write(("," if i else "") + json.dumps(el, ensure_ascii=False))
        fh.write("]")


def run_stream(path: str, out: str, shard_rows: int, q) -> None:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    t = time.perf_counter()
    manifest = prepare([path], out, PrepareOptions(shard_rows=shard_rows, workers=1, quiet=True, overwrite=True))
    q.put((time.perf_counter() - t, manifest["counts"]["written"], peak_rss_mib()))


def run_baseline(path: str, out: str, shard_rows: int, q) -> None:
    import pyarrow.parquet as pq

    from caption_debias.prepare.steps import process_records
    from caption_debias.records import Record

    t = time.perf_counter()
    with open(path, encoding="utf-8") as fh:
        elements = json.load(fh)
    records = [
        (f"sharegpt4v/{e['id']}", Record("sharegpt4v", path, i, e["id"], e["image"], e["conversations"][1]["value"]))
        for i, e in enumerate(elements)
    ]
    table, _ = process_records(records, "fast", "detect")
    pq.write_table(table, Path(out) / "all.parquet", compression="zstd")
    q.put((time.perf_counter() - t, len(table), peak_rss_mib()))


def measure(fn, path: Path, out: Path, shard_rows: int) -> tuple[float, int, float]:
    ctx = mp.get_context("spawn")  # fresh interpreter: its peak is this run's alone
    q = ctx.Queue()
    out.mkdir(parents=True, exist_ok=True)
    p = ctx.Process(target=fn, args=(str(path), str(out), shard_rows, q))
    p.start()
    elapsed, rows, peak_mib = q.get()
    p.join()
    return elapsed, rows, peak_mib


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4000, 16000, 64000])
    ap.add_argument("--shard-rows", type=int, default=2000)
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    captions = long_captions(args.data)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-prepare-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for n in args.sizes:
        path = work / f"sharegpt4v_{n}.json"
        write_sharegpt(path, n, captions)
        mib = path.stat().st_size / 2**20
        s_time, s_rows, s_peak = measure(run_stream, path, work / f"stream_{n}", args.shard_rows)
        b_time, b_rows, b_peak = measure(run_baseline, path, work / f"base_{n}", args.shard_rows)
        assert s_rows == b_rows == n, (s_rows, b_rows, n)
        results.append((n, mib, s_peak, b_peak, s_time, b_time))
        print(
            f"n={n:>7} input {mib:7.1f} MiB | stream peak {s_peak:7.1f} MiB {n / s_time:6.0f} rec/s | "
            f"baseline peak {b_peak:7.1f} MiB {n / b_time:6.0f} rec/s | stream/baseline {s_peak / b_peak:.2f}",
            flush=True,
        )
    first, last = results[0], results[-1]
    print(
        f"growth {first[0]} -> {last[0]} records ({last[0] / first[0]:.0f}x input): "
        f"stream peak x{last[2] / first[2]:.2f}, baseline peak x{last[3] / first[3]:.2f}"
    )


if __name__ == "__main__":
    main()
