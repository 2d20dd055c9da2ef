"""CPU per caption of prepare's text steps (`prepare.steps.process_records`) in two checkouts,
run side by side: the finest before/after check of the text path on a shared machine.

One long-lived worker process per checkout holds the captions; both get the same slices of
--rows captions (--rounds slices, table captions as in bench_prepare_rate.py) in alternating
order, and time process_records on each with time.process_time. Reading, writing and
start-up are left out. Prints each checkout's minimum and median, and the median and
quartiles of the per-slice ratio (the first slice, cold caches, is left out of the ratio).

    .venv/bin/python benchmarks/bench_prepare_steps.py --against main --mix shuffled
    .venv/bin/python benchmarks/bench_prepare_steps.py --repos /path/to/old/checkout . --mix repeat
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, add_data_option, code_at, long_captions
from bench_prepare_rate import table_captions

WORKER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from caption_debias.prepare.steps import process_records
from caption_debias.records import Record
caps = json.load(open(sys.argv[2], encoding="utf-8"))
print("ready", flush=True)
for line in sys.stdin:
    a, b = map(int, line.split())
    recs = [(f"k{i}", Record(source="table", input="t.jsonl", location=i, source_id=str(i), image=f"{i}.jpg",
                             caption=caps[i], meta={})) for i in range(a, b)]
    t = time.process_time()
    table, rejects = process_records(recs, "fast", "detect")
    print(json.dumps({"seconds": time.process_time() - t, "rows": len(table) + len(rejects)}), flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--against", metavar="REV", help="compare this checkout with git revision REV")
    ap.add_argument("--repos", nargs=2, metavar=("BEFORE", "AFTER"), help="or compare two checkouts")
    ap.add_argument("--rows", type=int, default=60000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--mix", choices=("repeat", "shuffled"), default="shuffled")
    args = ap.parse_args()
    if not args.against and not args.repos:
        ap.error("give --against REV or --repos BEFORE AFTER")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        repos = args.repos or [str(code_at(args.against, tmp / "rev")), str(ROOT)]
        names = [args.against or repos[0], "this checkout" if not args.repos else repos[1]]
        captions = tmp / "captions.json"
        captions.write_text(json.dumps(table_captions(long_captions(args.data), args.rows, args.mix)), "utf-8")
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, repo, str(captions)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for repo in repos
        ]
        for w in workers:
            assert w.stdout.readline().strip() == "ready"
        size = args.rows // args.rounds
        per_caption: list[list[float]] = [[], []]
        for r in range(args.rounds):
            for i in (0, 1) if r % 2 else (1, 0):
                workers[i].stdin.write(f"{r * size} {(r + 1) * size}\n")
                workers[i].stdin.flush()
                per_caption[i].append(json.loads(workers[i].stdout.readline())["seconds"] / size * 1e6)
        for w in workers:
            w.stdin.close()
            w.wait()

    print(f"{args.rounds} slices of {size} captions (--mix {args.mix}), process_records CPU us per caption:")
    for name, times in zip(names, per_caption):
        s = sorted(times)
        print(f"  {name[-40:]:40s} min {s[0]:7.1f}  median {s[len(s) // 2]:7.1f}")
    ratios = sorted(b / a for a, b in zip(per_caption[0][1:], per_caption[1][1:]))
    n = len(ratios)
    print(
        f"  after / before per slice: median {ratios[n // 2]:.3f}, quartiles {ratios[n // 4]:.3f}-{ratios[3 * n // 4]:.3f}"
    )


if __name__ == "__main__":
    main()
