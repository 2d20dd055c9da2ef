"""What checking a shard against its manifest costs: digests of a realistic shard beside reading it.

Prepares one full shard (the default --shard-rows) of the real long captions (cycled), then
times, best of --repeats (wall, file in the page cache), hashing its bytes with sha256
(hashlib), xxh3-128 and blake2b, and reading it as stats and curate do (every column,
pyarrow.parquet.read_table). Ratios are to the read.

    .venv/bin/python benchmarks/bench_shard_digest.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
from _common import add_data_option, long_captions

from caption_debias.prepare.options import DEFAULT_SHARD_ROWS, PrepareOptions
from caption_debias.prepare.run import prepare


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def hash_file(path: Path, make) -> str:
    h = make()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_option(parser)
    parser.add_argument("--rows", type=int, default=DEFAULT_SHARD_ROWS)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import xxhash

    captions = long_captions(args.data)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "t.jsonl"
        with open(src, "w", encoding="utf-8") as fh:
            for i in range(args.rows):
                fh.write(
                    json.dumps({"key": str(i), "image": f"{i}.jpg", "caption": captions[i % len(captions)]}) + "\n"
                )
        prepare([src], Path(tmp) / "out", PrepareOptions(format="table", quiet=True, shard_rows=args.rows))
        shard = Path(tmp) / "out" / "shards" / "part-00000.parquet"
        mb = shard.stat().st_size / 1e6
        read = best(lambda: pq.read_table(shard), args.repeats)
        print(f"shard: {args.rows:,} rows, {mb:.1f} MB; read_table {read * 1000:.1f} ms")
        for name, make in (("sha256", hashlib.sha256), ("xxh3_128", xxhash.xxh3_128), ("blake2b", hashlib.blake2b)):
            s = best(lambda make=make: hash_file(shard, make), args.repeats)
            print(f"{name:<9} {s * 1000:7.1f} ms  {mb / s:7.0f} MB/s  {s / read:5.2f} x the read")


if __name__ == "__main__":
    main()
