"""Time and peak memory of `caption-debias stats` on a large generated prepared folder.

Builds a pool of really prepared rows (prepare() on the ImageInWords captions of
the calibration data when present, else on generated captions), samples N rows from it into
Parquet shards written like prepare's (zstd, 8,192-row groups; no dictionary pages, so
repeated pool rows cost what unique rows would), then runs in fresh subprocesses:

  lazy   : compute_stats() as the command runs it (polars lazy scan, streaming engine)
  eager  : baseline, the same measures on the needed columns read whole into memory
           (PreparedDataset.read -> polars DataFrame -> same expressions, in-memory engine)
  report : write_report() (five matplotlib figures, JSON, Markdown, HTML) on the result

and prints wall time and peak RSS of each, with lazy/eager ratios.

    .venv/bin/python benchmarks/bench_stats.py --rows 1250000 --work /tmp/stats-bench [--reuse]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import LONG_CAPTION_FILES, add_data_option, long_captions

HERE = Path(__file__).resolve().parent  # for the child's `import _common`

SHARD_ROWS = 50_000
COLUMNS = ["source", "split", "caption", "sentence_spans", "num_tokens", "sentence_tokens", "summary_mask"]

CHILD = r"""
import json, resource, sys, time
from _common import peak_rss_mib
mode, folder, report = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
from caption_debias.stats.compute import compute_stats, StatsOptions
if mode == "lazy":
    stats = compute_stats([folder], StatsOptions(by="source"))
    records = stats["records"]
    json.dump(stats, open(report, "w"))  # the report run's input
elif mode == "eager":
    import polars as pl
    from caption_debias.dataset import PreparedDataset
    from caption_debias.stats.compute import _row_measures, value_count_queries
    frame = pl.from_arrow(PreparedDataset.open(folder).read(COLUMNS))
    queries = value_count_queries(_row_measures(frame.lazy(), "bench", 3), ["dataset", "source"])
    out = pl.collect_all(list(queries.values()), engine="in-memory")
    records = int(out[0]["len"].sum())
elif mode == "imports":
    import polars, pyarrow.parquet
    records = 0
else:
    from caption_debias.stats.report import write_report
    stats = json.load(open(folder))
    write_report(stats, report)
    records = stats["records"]
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"mode": mode, "seconds": time.perf_counter() - t0, "cpu_seconds": usage.ru_utime + usage.ru_stime,
                  "peak_mib": peak_rss_mib(), "records": records}))
"""


def pool_captions(limit: int, data: Path) -> list[str]:
    """Real long captions when the calibration data is around; generated ones otherwise."""
    if all((data / name).is_file() for name, _ in LONG_CAPTION_FILES):
        return long_captions(data)[:limit]
    rng = random.Random(0)
    things = ["a red bus", "two dogs", "an old bridge", "a bowl of fruit", "a crowded market", "a lighthouse"]
    details = [
        "The sky is pale blue.",
        "Shadows fall to the left.",
        "A man in a grey coat walks past.",
        "The water is calm and dark.",
        "Leaves cover the ground.",
        "A sign reads OPEN in red letters.",
    ]
    return [
        f"The image shows {rng.choice(things)} in the afternoon light. "
        + " ".join(rng.choice(details) for _ in range(rng.randint(1, 12)))
        for _ in range(limit)
    ]


def build_pool(work: Path, size: int, data: Path):
    from caption_debias.dataset import PreparedDataset
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    src = work / "pool.jsonl"
    with src.open("w", encoding="utf-8") as fh:
        for i, caption in enumerate(pool_captions(size, data)):
            fh.write(json.dumps({"image": f"{i}.jpg", "caption": caption, "key": str(i)}) + "\n")
    prepare([src], work / "pool", PrepareOptions(format="table", quiet=True, overwrite=True))
    return PreparedDataset.open(work / "pool").read()


def build_big(work: Path, rows: int, data: Path) -> Path:
    import numpy as np
    import pyarrow as pa
    from folder_factory import write_manifest, write_shards

    pool = build_pool(work, 5_000, data)
    out = work / "big"
    shutil.rmtree(out, ignore_errors=True)
    (out / "shards").mkdir(parents=True)
    rng = np.random.default_rng(0)
    sources = np.array(["sharegpt4v", "coco", "docci"])

    def tables():
        for lo in range(0, rows, SHARD_ROWS):
            count = min(SHARD_ROWS, rows - lo)
            table = pool.take(rng.integers(0, len(pool), count))
            table = table.set_column(0, "key", pa.array([f"bench/{i}" for i in range(lo, lo + count)]))
            yield table.set_column(1, "source", pa.array(sources[rng.integers(0, 3, count)]))

    shards = write_shards(out, tables(), "shards/{:05d}.parquet", row_group_size=8192, use_dictionary=False)
    return write_manifest(out, shards, {}, "benchmark")


def run_child(mode: str, folder: Path, report: Path) -> dict:
    code = f"COLUMNS = {COLUMNS!r}\n" + CHILD
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-c", code, mode, str(folder), str(report)], capture_output=True, text=True, env=env
    )
    if proc.returncode:
        sys.exit(f"{mode} run failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(parser)
    parser.add_argument("--rows", type=int, default=1_250_000, help="rows in the generated prepared folder")
    parser.add_argument("--work", type=Path, default=Path("/tmp/stats-bench"), help="scratch folder")
    parser.add_argument("--reuse", action="store_true", help="reuse WORK/big when it has --rows rows")
    parser.add_argument("--skip-eager", action="store_true", help="do not run the in-memory baseline")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    big = args.work / "big"
    manifest = big / "manifest.json"
    if not (
        args.reuse
        and manifest.is_file()
        and sum(s["rows"] for s in json.loads(manifest.read_text())["shards"]) == args.rows
    ):
        big = build_big(args.work, args.rows, args.data)
    size = sum(p.stat().st_size for p in (big / "shards").iterdir())
    print(f"generated {args.rows:,} rows, {size / 2**20:,.0f} MiB of shards in {time.perf_counter() - t0:.0f} s")

    stats_path = args.work / "stats-input.json"
    results = {"lazy": run_child("lazy", big, stats_path)}
    if not args.skip_eager:
        results["eager"] = run_child("eager", big, stats_path)
    results["report"] = run_child("report", stats_path, args.work / "report")
    # an interpreter that only imports what the lazy run imports: the floor of its memory
    results["imports"] = run_child("imports", big, stats_path)

    print("| run | rows | wall s | CPU s | peak RSS MiB |")
    print("|---|---|---|---|---|")
    for mode, r in results.items():
        print(f"| {mode} | {r['records']:,} | {r['seconds']:.1f} | {r['cpu_seconds']:.1f} | {r['peak_mib']:,.0f} |")
    if "eager" in results:
        lazy, eager = results["lazy"], results["eager"]
        print(
            f"lazy/eager: wall {lazy['seconds'] / eager['seconds']:.2f}x, CPU {lazy['cpu_seconds'] / eager['cpu_seconds']:.2f}x, "
            f"peak memory {lazy['peak_mib'] / eager['peak_mib']:.2f}x"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
