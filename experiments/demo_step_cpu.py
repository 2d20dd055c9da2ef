"""CPU seconds of one fine-tune step of each demo arm: text batches cut once at the batch's latest
EOT (the earlier path) against cut per length bucket (model/trim.py, today's), interleaved batch by
batch in one process on one thread, on a demo folder's own train world and start.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/demo_step_cpu.py --demo DEMO_OUT [--batches 5]

Prints, per arm, the mean CPU ms of forward + loss + backward a step (the optimizer step is the
same in both and left out) and both paths' losses on the same batches.
"""

from __future__ import annotations

import argparse
import itertools
import resource
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", required=True, help="a finished or running demo's --out (prepared/train, world/train)")
    ap.add_argument("--batches", type=int, default=5)
    args = ap.parse_args()
    import torch

    from caption_debias.demo.config import shipped_start
    from caption_debias.model.trim import encode_text_bucketed, encode_text_trimmed, used_length
    from caption_debias.train.config import TrainConfig
    from caption_debias.train.objective import objective_for
    from caption_debias.train.run_setup import data_loader, set_up

    torch.set_num_threads(1)
    demo = Path(args.demo)
    work = Path(tempfile.mkdtemp())
    for recipe in ("longclip", "debias"):
        cfg = TrainConfig(
            data=str(demo / "prepared" / "train"),
            image_root=str(demo / "world" / "train"),
            out=str(work / recipe),
            model=f"local-dir:{shipped_start()}",
            recipe=recipe,
            batch_size=64,
            max_steps=args.batches + 1,
            lr=1e-3,
            warmup_steps=1,
            cache_images=True,
            precision="fp32",
            report_to="",
            quiet=True,
        ).validate()
        setup = set_up(cfg, 0, 1, 0)
        model, objective = setup.model, objective_for(cfg)
        batches = list(itertools.islice(iter(data_loader(setup, cfg, 0, 1)), args.batches + 1))
        paths = {
            "one batch": lambda t, m=model: encode_text_trimmed(m, t[:, : used_length(t)], normalize=True),
            "buckets": lambda t, m=model: encode_text_bucketed(m, t),
        }
        cpu = {name: 0.0 for name in paths}
        losses: dict[str, list[float]] = {name: [] for name in paths}
        for i, batch in enumerate(batches):
            for name, text_path in paths.items():
                c0 = _cpu()
                image = model.encode_image(batch["image"], normalize=True)
                texts = [text_path(batch[k]) for k in objective.texts]
                loss = objective(image, texts, model.logit_scale.exp()).total
                loss.backward()
                model.zero_grad(set_to_none=True)
                if i:  # the first batch warms up both paths
                    cpu[name] += _cpu() - c0
                    losses[name].append(round(float(loss.detach()), 5))
        ms = {name: round(1000 * v / args.batches) for name, v in cpu.items()}
        print(f"{recipe}: CPU ms a step {ms}; buckets / one batch {cpu['buckets'] / cpu['one batch']:.2f}")
        print(f"{recipe}: losses {losses}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
