"""prepare on a URL set: the driver's reading rate vs the text steps, local pool vs Ray Data engine.

Builds a Recap-DataComp-style Parquet (url, re_caption, org_caption, key) of --rows rows from the
real long captions of the calibration data (ImageInWords), then times, each on the same input:
  stream      the driver alone: reader + key assignment + chunking (what --engine ray keeps local)
  local-1     prepare --engine local --workers 1            (baseline)
  local-N     prepare --engine local --workers N
  ray-N       prepare --engine ray on a local Ray runtime with N CPUs (started by the run itself)
and checks that all prepare runs wrote byte-identical shards. Prints one JSON line per run.

  .venv/bin/python benchmarks/bench_prepare_scale.py --rows 20000 --workers 2 --work /tmp/scale-bench
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import time
from pathlib import Path

from _common import add_data_option, long_captions


def make_input(path: Path, rows: int, data: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pool = long_captions(data)
    caps = list(itertools.islice(itertools.cycle(pool), rows))
    pq.write_table(
        pa.table(
            {
                "url": [f"https://example.org/img/{i}.jpg" for i in range(rows)],
                "re_caption": caps,
                "org_caption": [c.split(".")[0] for c in caps],
                "key": [f"{i:09d}" for i in range(rows)],
            }
        ),
        path,
    )


def time_stream(path: Path, shard_rows: int) -> dict:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.stream import InputCounts, chunks

    opts = PrepareOptions(format="recap-datacomp", shard_rows=shard_rows)
    totals = {str(path): InputCounts(str(path), "recap-datacomp")}
    t = time.perf_counter()
    n = 0
    for chunk in chunks([(str(path), path, "recap-datacomp")], opts, totals):
        chunk.fingerprint()  # the driver hashes each chunk for resume, as prepare does
        n += len(chunk.records)
    return {"run": "stream", "records": n, "seconds": time.perf_counter() - t}


def time_prepare(path: Path, out: Path, name: str, shard_rows: int, **kw) -> dict:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    m = prepare([path], out, PrepareOptions(format="recap-datacomp", shard_rows=shard_rows, quiet=True, **kw))
    return {
        "run": name,
        "records": m["counts"]["written"],
        "seconds": time.perf_counter() - t,
        "shards": [s["sha256"] for s in m["shards"]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--shard-rows", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/scale-bench"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    src = args.work / "recap.parquet"
    make_input(src, args.rows, args.data)

    from caption_debias.text.segment import get_segmenter
    from caption_debias.text.tokenize import get_tokenizer

    get_segmenter("fast"), get_tokenizer()  # load once, outside every timing
    n = args.workers
    results = [time_stream(src, args.shard_rows)]
    results.append(time_prepare(src, args.work / "local-1", "local-1", args.shard_rows))
    results.append(time_prepare(src, args.work / f"local-{n}", f"local-{n}", args.shard_rows, workers=n))
    results.append(time_prepare(src, args.work / f"ray-{n}", f"ray-{n}", args.shard_rows, workers=n, engine="ray"))
    base = results[1]
    identical = all(r["shards"] == base["shards"] for r in results[1:])
    for r in results:
        r["records_per_s"] = round(r["records"] / r["seconds"], 1)
        r["speed_vs_local_1"] = round(base["seconds"] / r["seconds"], 2)
        r["seconds"] = round(r["seconds"], 2)
        r.pop("shards", None)
        print(json.dumps(r))
    print(
        json.dumps(
            {
                "identical_shards": identical,
                "workers_one_driver_can_feed": round(results[0]["records_per_s"] / base["records_per_s"], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
