"""ablate's own time beyond its arms' work: one fresh `cd.ablate` run of a plan, timed whole, against
the sum of what its units report (each arm's curate, each arm x seed's train and eval).

    .venv/bin/python benchmarks/bench_ablate_overhead.py --plan PLAN --out DIR [--json PATH]

The overhead is everything else: reading and checking the plan, counting each arm's rows and
sentences, the completion records, the bootstrap intervals, ablation.json, the plots and
report.html. torch and open_clip are imported before the clock starts (any command pays that
once, whatever it runs); the run starts from an empty DIR (--overwrite). Target: under 5%.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import open_clip  # noqa: F401 (imported before the clock: a per-process cost, not ablate's)
    import torch  # noqa: F401

    import caption_debias as cd

    t0 = time.perf_counter()
    result = cd.ablate(args.plan, args.out, overwrite=True)
    wall = time.perf_counter() - t0
    timings = result.data["timings"]
    curate = sum(timings["curate_s"].values())
    train = sum(u["train_s"] for u in timings["units"].values())
    evaluate = sum(u["eval_s"] for u in timings["units"].values())
    overhead = wall - curate - train - evaluate
    figures = {
        "plan": str(args.plan),
        "units": len(timings["units"]),
        "wall_s": round(wall, 2),
        "curate_s": round(curate, 2),
        "train_s": round(train, 2),
        "eval_s": round(evaluate, 2),
        "overhead_s": round(overhead, 2),
        "overhead_share_of_arms": round(overhead / (curate + train + evaluate), 4),
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", "utf-8")


if __name__ == "__main__":
    main()
