"""The ablation table of docs/ablation.md: each curation filter judged by the model it trains, on a planted world.

    .venv/bin/python experiments/ablate_planted.py --work DIR [--n 320] [--test 200] [--steps 40] [--seeds 0 1 2]

synth --plant --plant-curate-faults (the train world: every fault kind, the curate ones at a raw
dump's rates) and a clean test world -> prepare -> `score
--keep-embeddings` of the train world with the shipped `demo-start` -> a plan with one arm per filter
(the thresholds the issue tried) -> `cd.ablate`: each arm fine-tuned from demo-start with the same
recipe and step budget, seeds as given, evaluated on the test world (keep / remove / move / first).
Prints the terminal table; DIR/out holds ablation.json and report.html. Everything is seeded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# curate's rules (duplicates, loops, cut-offs, broken, tiny and missing images) at their defaults, then
# one model-score filter on top of them at a time, at the thresholds the issue tried
ARMS = {
    "baseline": {},
    "rules": {},
    "rules+clip0.3": {"min_clip_score": 0.3},
    "rules+ungrounded0": {"drop_ungrounded": 0.0},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--n", type=int, default=320)
    parser.add_argument("--test", type=int, default=120)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", default="out", help="the ablation's folder under --work")
    args = parser.parse_args()

    import caption_debias as cd
    from caption_debias.ablate.report import terminal_table
    from caption_debias.synth.plant import PlantSpec
    from caption_debias.synth.world import write_world

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for split, n, plant in (("train", args.n, PlantSpec.dump()), ("test", args.test, None)):
        world = work / f"world-{split}"
        if not (world / "sharegpt4v.json").is_file():
            write_world(world, n, 0, split=split, plant=plant, overwrite=True)
        if not (work / f"prep-{split}" / "manifest.json").is_file():
            cd.prepare(
                world / "sharegpt4v.json",
                work / f"prep-{split}",
                format="sharegpt4v",
                split=split,
                image_root=str(world),
            )
    if not (work / "scored" / "manifest.json").is_file():
        cd.score(
            work / "prep-train",
            work / "scored",
            model="demo-start",
            keep_embeddings=True,
            image_root=str(work / "world-train"),
        )
    setup_s = time.perf_counter() - t0
    plan = {
        "base": str(work / "scored"),
        "image_root": str(work / "world-train"),
        "planted": str(work / "world-train"),
        "arms": ARMS,
        "train": {
            "model": "demo-start",
            "recipe": "debias",
            "steps": args.steps,
            "batch_size": args.batch,
            "lr": args.lr,
            "seeds": args.seeds,
            "precision": "fp32",
            "cache_images": True,
            "workers": 0,
        },
        "eval": {
            "data": [str(work / "prep-test")],
            "variants": ["keep", "remove", "move", "first"],
            "alphas": [1.0, 0.5],
        },
    }
    (work / "plan.json").write_text(json.dumps(plan, indent=1), "utf-8")
    result = cd.ablate(work / "plan.json", work / args.out, workers=args.workers, quiet=False, log_interval=20)
    print(terminal_table(result.data))
    print(f"setup {setup_s:.0f} s; ablate {result.data['timings']['total_s']:.0f} s")


if __name__ == "__main__":
    main()
