"""Cost of resuming: a rerun of a finished `prepare` against the first, full run.

A rerun re-reads the input (keys and chunk boundaries come from that one ordered pass) and
fingerprints each chunk, but reuses every shard whose sidecar matches. Both runs in this
process, same input (a ShareGPT4V-layout array of real long captions, as in
bench_prepare_memory.py):

    .venv/bin/python benchmarks/bench_prepare_resume.py --records 16000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import add_data_option, long_captions
from bench_prepare_memory import write_sharegpt


def main() -> None:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--records", type=int, default=16000)
    ap.add_argument("--shard-rows", type=int, default=2000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-prepare-resume-"))
    src = work / "sharegpt4v.json"
    write_sharegpt(src, args.records, long_captions(args.data))
    options = PrepareOptions(shard_rows=args.shard_rows, quiet=True)
    t = time.perf_counter()
    first = prepare([src], work / "out", options)
    full = time.perf_counter() - t
    t = time.perf_counter()
    again = prepare([src], work / "out", options)
    rerun = time.perf_counter() - t
    assert again["shards"] == first["shards"]
    print(
        f"{args.records} records, {len(first['shards'])} shards: full run {full:.1f} s, "
        f"rerun of the finished folder {rerun:.1f} s, rerun/full {rerun / full:.3f}"
    )


if __name__ == "__main__":
    main()
