"""GPU throughput: 50 AMP steps of ViT-B-16 at batch 256 per recipe, and a plain open_clip step.

Prepared for a GPU machine (not run in the session that wrote it: none was lent). Under
5 minutes on one modern GPU. Synthetic 224 px images (synth world, PNG files) go through
the real loop (`train()`, DataLoader workers with decoded images cached, augment, PCA
loss, GradScaler, default --trim-padding); the plain open_clip step uses in-memory tensors:
one text batch at 77 (`short` compares with it), one at 248 (`clip`), two at 248
(`debias`, `longclip`). Writes $OUT/gpu_throughput.json
(or ./gpu_throughput.json) with images/s per recipe.

    python benchmarks/bench_train_gpu.py [--steps 50 --batch 256 --model ViT-B-16 --workers 8]
    python benchmarks/bench_train_gpu.py --smoke     # CPU check of the script: tiny model, 3 steps
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (this checkout on sys.path when it is not installed)


def plain_step_rate(model_name: str, batch: int, steps: int, device: str, amp: bool, texts: int, context: int) -> float:
    import open_clip
    import torch

    from caption_debias.model.load import load_model
    from caption_debias.model.stretch import stretch_positional_embedding

    model = load_model(model_name).model
    if context != model.context_length:
        stretch_positional_embedding(model, context, freeze_head=False)
    model = model.to(device).train()
    size = model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    image = torch.randn(batch, 3, size, size, device=device)
    text = torch.randint(1, 49000, (texts * batch, context), device=device)
    text[:, 0], text[:, context // 2] = 49406, 49407
    loss_fn = open_clip.ClipLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    ctx = (lambda: torch.autocast("cuda", dtype=torch.float16)) if amp else __import__("contextlib").nullcontext
    warm = min(5, steps - 1)
    for step in range(steps):
        if step == warm:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
        with ctx():
            img_f, txt_f, scale = model(image, text)
            loss = sum(loss_fn(img_f, txt_f[i * batch : (i + 1) * batch], scale) for i in range(texts))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return batch * (steps - warm) / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B-16")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--smoke", action="store_true", help="CPU check: tiny model, batch 8, 3 steps, fp32")
    args = ap.parse_args()
    import torch

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.synth.world import write_world
    from caption_debias.train.config import RECIPES, TrainConfig
    from caption_debias.train.loop import train

    if args.smoke:
        args.model, args.batch, args.steps, args.workers = "tiny", 8, 3, 0
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    image_size = 64 if args.smoke else 224
    result = {
        "model": args.model,
        "batch": args.batch,
        "steps": args.steps,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "precision": "amp" if cuda else "fp32",
        "torch": torch.__version__,
        "images_per_s": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        write_world(tmp / "world", n=max(2 * args.batch, 64), seed=0, image_size=image_size)
        prepare(
            [tmp / "world" / "sharegpt4v.json"],
            tmp / "prepared",
            PrepareOptions(format="sharegpt4v", image_root=str(tmp / "world"), quiet=True, workers=4),
        )
        result["data_setup_s"] = round(time.perf_counter() - t, 1)
        for recipe in RECIPES:
            run = train(
                TrainConfig(
                    data=str(tmp / "prepared"),
                    image_root=str(tmp / "world"),
                    out=str(tmp / recipe),
                    model=args.model,
                    recipe=recipe,
                    batch_size=args.batch,
                    max_steps=args.steps,
                    log_every=10 if args.steps >= 20 else 1,
                    checkpoint_every=10**9,
                    precision="amp" if cuda else "fp32",
                    workers=args.workers,
                    tensorboard=False,
                    quiet=True,
                    warmup_steps=0,
                    cache_images=True,
                )
            )
            lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            rates = [d["images_per_s"] for d in lines[1:]] or [lines[-1]["images_per_s"]]  # first window: warm-up
            result["images_per_s"][recipe] = round(sorted(rates)[len(rates) // 2], 1)
            print(recipe, result["images_per_s"][recipe], flush=True)
        for name, texts, ctx in (
            ("plain_open_clip_77", 1, 77),
            ("plain_open_clip_248", 1, 248),
            ("plain_open_clip_248x2", 2, 248),
        ):
            rate = plain_step_rate(args.model, args.batch, args.steps, device, cuda, texts, ctx)
            result["images_per_s"][name] = round(rate, 1)
            print(name, result["images_per_s"][name], flush=True)
    out = Path(os.environ.get("OUT", ".")) / "gpu_throughput.json"
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
