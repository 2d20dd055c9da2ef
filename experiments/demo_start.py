"""Make the demo's shared start: `demo-small` trained on short, mostly summary-like captions at
context 77, as CLIP is, then shipped as package data (caption_debias/assets/demo-start/).

Seeded, on one torch thread (a rerun was not compared bit for bit). A separate `objects`
world (split `start`, its own seed: a random stream no demo world uses) is prepared like any
dump, and the `short` recipe trains on one sentence per caption: the summary half the time,
otherwise one other sentence. The run's last checkpoint is exported as an open_clip
`local-dir:` folder with fp16 weights, which `load_model` reads like any checkpoint; the
folder's `open_clip_config.json` records how it was made. The model card is in docs/demo.md.

    .venv/bin/python experiments/demo_start.py --work /tmp/demo-start            # writes the asset
    .venv/bin/python experiments/demo_start.py --work /tmp/t --steps 30 --no-ship  # a timing try
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ASSET = Path(__file__).resolve().parents[1] / "caption_debias" / "assets" / "demo-start"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="scratch folder: world, prepared shards, run")
    p.add_argument("--scenes", type=int, default=8000)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-ship", action="store_true", help="train only; leave the shipped asset as it is")
    a = p.parse_args()

    import torch

    torch.set_num_threads(a.threads)
    from caption_debias.demo.run import CPU_RUN, budget, train_config
    from caption_debias.model.export import export
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.synth.world import write_world
    from caption_debias.train.loop import train

    started = time.perf_counter()
    world, prepared, run = a.work / "world", a.work / "prepared", a.work / "run"
    write_world(world, a.scenes, a.seed, split="start", world="objects", overwrite=True)
    opts = PrepareOptions(format="sharegpt4v", image_root=str(world), overwrite=True, quiet=True)
    prepare([world / "sharegpt4v.json"], prepared, opts)
    cfg = train_config(
        recipe="short",
        model="demo-small",
        data=str(prepared),
        image_root=str(world),
        out=str(run),
        context_length=77,
        batch_size=a.batch_size,
        seed=a.seed,
        **CPU_RUN,
        **budget(a.steps, a.lr),
    )
    train(cfg.validate())
    seconds = round(time.perf_counter() - started, 1)
    print(f"trained {a.steps} steps in {seconds} s", flush=True)
    if a.no_ship:
        return
    export(str(run), a.work / "export", overwrite=True)
    ship(a.work / "export", ASSET, {**vars(a), "work": None, "seconds": seconds})


def ship(export_dir: Path, asset: Path, made_with: dict) -> None:
    """fp16 weights and a config saying how they were made (no machine paths)."""
    import torch
    from safetensors.torch import load_file, save_file

    state = load_file(str(export_dir / "open_clip_model.safetensors"))
    state = {k: (v.to(torch.float16) if v.is_floating_point() else v) for k, v in state.items()}
    asset.mkdir(parents=True, exist_ok=True)
    save_file(state, str(asset / "open_clip_model.safetensors"))
    config = json.loads((export_dir / "open_clip_config.json").read_text("utf-8"))
    config["caption_debias"] = {
        "made_by": "experiments/demo_start.py",
        "recipe": "short",
        "world": "objects",
        "split": "start",
        "context_length": 77,
        **{k: v for k, v in made_with.items() if k not in ("work", "no_ship", "threads")},
    }
    (asset / "open_clip_config.json").write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    print(f"shipped {asset}", flush=True)


if __name__ == "__main__":
    main()
