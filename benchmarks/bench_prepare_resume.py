"""Cost of resuming: a rerun of a finished `prepare` against the first, full run.

A rerun re-reads the input (keys and chunk boundaries come from that one ordered pass) and
fingerprints each chunk, but reuses every shard whose sidecar matches. Both runs in this
process, same input (a ShareGPT4V-layout array of real long captions, as in
bench_prepare_memory.py):

    .venv/bin/python benchmarks/bench_prepare_resume.py --data /work/shared/data --records 16000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_prepare_memory import load_captions, write_sharegpt  # noqa: E402


def main() -> None:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--records", type=int, default=16000)
    ap.add_argument("--shard-rows", type=int, default=2000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-prepare-resume-"))
    src = work / "sharegpt4v.json"
    write_sharegpt(src, args.records, load_captions(args.data))
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
