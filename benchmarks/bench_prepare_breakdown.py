"""Where a whole `prepare` run's CPU goes, step by step, in one fresh interpreter.

Runs the same command as bench_prepare_rate.py (`prepare([table], out,
PrepareOptions(format="table", workers=1))` on the same JSON-lines table) with thin CPU
counters (time.process_time) around its steps:

  imports     importing caption_debias.prepare.run and its options (numpy, pyarrow, ...)
  read        the ordered stream: reading lines, JSON, records, checks, keys (fingerprints apart)
  fingerprint each chunk's sha256 over its records' JSON (resume)
  split       segmenter, sentence lists, token plans, meta JSON (steps.split); the
              segmenter's share and pysbd's own share of it are shown under it
  tokenize    token ids of the batched sentences (steps.tokenize)
  score       summary scores and flags (steps.score)
  to_table    Arrow columns (steps.to_table)
  write       Parquet shard and its sha256 (write_shard)
  rest        prepare() CPU not in the steps above: segmenter, tokenizer and ftfy set-up on
              first use, sidecars, manifest

Interpreter start before the first import is the process CPU less all of the above. Then
the fast segmenter's counts: captions sent to pysbd whole, stretches asked, distinct texts
pysbd split (its answers cache). --bytecode as in bench_prepare_rate.py; other code with
PYTHONPATH (e.g. a `git archive` of another revision).

    .venv/bin/python benchmarks/bench_prepare_breakdown.py --rows 20000 --mix shuffled --bytecode cached
    PYTHONPATH=/tmp/base .venv/bin/python benchmarks/bench_prepare_breakdown.py ...   # code from `git archive REV`
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import add_data_option, long_captions
from bench_prepare_rate import child_env, table_captions, write_table

CHILD = """
import json, resource, sys, time
T = time.process_time
acc = {}
def wrap(owner, name, label):
    f = getattr(owner, name)
    def timed(*a, **k):
        t = T()
        try:
            return f(*a, **k)
        finally:
            acc[label] = acc.get(label, 0.0) + T() - t
    setattr(owner, name, timed)
t = T()
from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare import run, steps, stream
acc["imports"] = T() - t
for name in ("split", "tokenize", "score", "to_table"):
    wrap(steps, name, name)
wrap(run, "write_shard", "write")
wrap(stream.Chunk, "fingerprint", "fingerprint")
from caption_debias.text.segment import fast, pysbd_segmenter
wrap(fast.FastSegmenter, "spans", "  segmenter (in split)")
wrap(pysbd_segmenter.PysbdSegmenter, "spans", "  pysbd (in segmenter)")
chunks = run.chunks
def timed_chunks(*a, **k):
    it = chunks(*a, **k)
    while True:
        t = T()
        try:
            c = next(it)
        except StopIteration:
            acc["read"] = acc.get("read", 0.0) + T() - t
            return
        acc["read"] = acc.get("read", 0.0) + T() - t
        yield c
run.chunks = timed_chunks
t = T()
run.prepare([sys.argv[1]], sys.argv[2], PrepareOptions(format="table", workers=1, quiet=True, overwrite=True))
acc["prepare() total"] = T() - t
acc["read"] -= acc.get("fingerprint", 0.0)  # fingerprints are taken while the stream is read
own = resource.getrusage(resource.RUSAGE_SELF)
acc["process total"] = own.ru_utime + own.ru_stime
from caption_debias.text.segment import get_segmenter
seg = get_segmenter("fast")
counts = {"captions sent to pysbd whole": seg.delegated, "stretches asked of pysbd": seg.pysbd_stretches,
          "distinct texts pysbd split": len(seg._pysbd._cache)}
print(json.dumps([acc, counts]))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--mix", choices=("repeat", "shuffled"), default="shuffled")
    ap.add_argument("--bytecode", choices=("as-is", "cached"), default="as-is")
    args = ap.parse_args()
    rows_text = table_captions(long_captions(args.data), args.rows, args.mix)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        table = write_table(tmp / "captions.jsonl", rows_text)
        env = child_env(None, args.bytecode, tmp)
        env.pop("code")
        child = {k: v for k, v in os.environ.items() if k not in env}
        child.update({k: v for k, v in env.items() if v is not None})
        runs = 2 if args.bytecode == "cached" else 1  # the first fills the bytecode folder
        for _ in range(runs):
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(table), str(tmp / "out")],
                env=child,
                cwd=tmp,
                capture_output=True,
                text=True,
                check=True,
            )
    acc, counts = json.loads(done.stdout.strip().splitlines()[-1])
    steps = ["imports", "read", "fingerprint", "split", "tokenize", "score", "to_table", "write"]
    acc["rest"] = acc["prepare() total"] - sum(acc.get(k, 0.0) for k in steps[1:])
    acc["interpreter start"] = acc["process total"] - acc["imports"] - acc["prepare() total"]
    print(f"{args.rows} rows (--mix {args.mix}), bytecode {args.bytecode}, load average {os.getloadavg()[0]:.1f}")
    print(f"{'step':24s} {'CPU s':>7s} {'us/caption':>11s}")
    order = ["interpreter start", *steps[:4], "  segmenter (in split)", "  pysbd (in segmenter)", *steps[4:], "rest"]
    for k in [*order, "process total"]:
        v = acc.get(k, 0.0)
        print(f"{k:24s} {v:7.3f} {v / args.rows * 1e6:11.1f}")
    print(", ".join(f"{k}: {v:,}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
