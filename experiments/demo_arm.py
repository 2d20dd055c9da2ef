"""One demo fine-tune arm from an existing demo run's start, with other settings; prints t2i R@1.

What docs/demo.md's v1 tuning tables were measured with: the demo's start (its stage-1 run
under `--preset v1`, the shipped demo-start otherwise) and worlds stay fixed, one arm is
retrained with another lr / batching / lambda_s, and evaluated on the demo's test world
(keep / remove / move). One torch thread, so two arms can run side by side.

    .venv/bin/python experiments/demo_arm.py --demo demo-out --arm debias --lr 2e-3 --random-batches --out /tmp/arm
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--demo", type=Path, required=True, help="a `caption-debias demo --out` folder")
    p.add_argument(
        "--arm", choices=("longclip", "debias", "start"), required=True, help="start: evaluate the start only"
    )
    p.add_argument("--out", type=Path, required=True, help="run folder for the fine-tune")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--lambda-s", type=float, default=0.1)
    p.add_argument(
        "--random-batches",
        action="store_true",
        help="fine-tune on random batches instead of whole hard-negative groups",
    )
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    import torch

    torch.set_num_threads(1)
    from caption_debias.demo.run import CPU_RUN, budget, train_config
    from caption_debias.evaluate.retrieval import as_data, evaluate
    from caption_debias.model.load import load_model
    from caption_debias.train.loop import train

    started = time.perf_counter()
    run = json.loads((a.demo / "results.json").read_text("utf-8"))["start"]
    if a.arm != "start":
        cfg = train_config(
            recipe=a.arm,
            model=str(run),
            out=str(a.out),
            context_length=248,
            lambda_short=a.lambda_s,
            data=str(a.demo / "prepared" / "train"),
            image_root=str(a.demo / "world" / "train"),
            batch_size=64,
            seed=a.seed,
            group_key=None if a.random_batches else "group",
            group_size=4,
            **CPU_RUN,
            **budget(a.steps, a.lr),
        )
        run = Path(train(cfg.validate()))
    scores = evaluate(
        load_model(str(run)),  # the start's spec, or the new run folder
        as_data(a.demo / "prepared" / "test", a.demo / "world" / "test"),
        variants=("keep", "remove", "move"),
        batch_size=256,
    )
    print(
        json.dumps(
            {
                "arm": a.arm,
                "lr": a.lr,
                "steps": a.steps,
                "lambda_s": a.lambda_s,
                "random_batches": a.random_batches,
                **{v: scores[v]["t2i"]["r1"] for v in ("keep", "remove", "move")},
                "wall_s": round(time.perf_counter() - started),
            }
        )
    )


if __name__ == "__main__":
    main()
