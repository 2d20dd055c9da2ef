"""GPU throughput: ViT-B-16 DeBias steps against plain open_clip steps on the same data, per precision.

Prepared for a GPU machine; see docs/benchmarks.md for whether it has run on one. One
synthetic world (224 px scenes with long captions) is prepared and packed (`caption-debias
pack`) once; then, for each --precisions entry (`amp`: fp16 autocast + GradScaler,
`amp_bf16`: bf16 autocast, open_clip_train's names):

- `debias`: `train()` end to end on the packed folder (DataLoader workers, augment, PCA
  loss, default --trim-padding); `debias_full`: the same at the full 248 columns
  (--no-trim-padding), the same model compute as the plain step;
- `plain`: a hand loop of plain open_clip steps (forward at 248 on the long and augmented
  texts, open_clip.ClipLoss on each, AdamW, DDP over ranks) fed by the same loader and
  batches, so only the step differs. Target: debias_full within 5% of plain;
- `open_clip_train_77`: open_clip_train's own webdataset pipeline on the same tars and a
  plain step at the model's own 77 positions (what an open_clip_train fine-tune runs);
- --recipes adds `train()` runs of other recipes (longclip, clip, short).

Rates are images per second over all processes, after --warmup steps. Under torchrun every
process is one GPU (NCCL; gloo on CPU) and --batch is per process. Writes
$OUT/gpu_throughput.json (or benchmarks/results/gpu_throughput.json).

    python benchmarks/bench_train_gpu.py [--batch 256 --steps 60 --warmup 10 --workers 8 --precisions amp,amp_bf16]
    torchrun --nproc_per_node 8 benchmarks/bench_train_gpu.py --batch 256
    python benchmarks/bench_train_gpu.py --smoke                        # CPU: tiny model, fp32 and bf16
    torchrun --nproc_per_node 2 benchmarks/bench_train_gpu.py --smoke   # CPU, gloo: the DDP paths
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import _common  # noqa: F401  (this checkout on sys.path when it is not installed)


def _dist():
    """(rank, world, local rank), starting the process group under torchrun (NCCL on GPUs, gloo on CPU)."""
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if world > 1 else 0
    return rank, world, int(os.environ.get("LOCAL_RANK", "0"))


def _barrier(world: int) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


def make_data(work: Path, n: int, image_size: int, tars: int, rank: int, world: int) -> Path:
    """Rank 0 writes the world, prepares and packs it; the others wait. Returns the packed folder."""
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.synth.world import write_world

    if rank == 0:
        shutil.rmtree(work, ignore_errors=True)
        write_world(work / "world", n=n, seed=0, image_size=image_size, world="layouts")
        prepare(
            [work / "world" / "sharegpt4v.json"],
            work / "prepared",
            PrepareOptions(format="sharegpt4v", image_root=str(work / "world"), quiet=True, workers=4),
        )
        per_tar = max(1, n // tars)
        pack(
            work / "prepared",
            work / "packed",
            PackOptions(image_root=str(work / "world"), image_size=image_size, samples_per_shard=per_tar, quiet=True),
        )
    _barrier(world)
    return work / "packed"


def train_precision(name: str) -> str:
    """open_clip_train's precision name -> the one TrainConfig takes (amp_bf16 was `bf16` before it took the new names)."""
    from caption_debias.train.config import PRECISIONS

    if name in PRECISIONS:
        return name
    return {"amp_bf16": "bf16", "fp32": "fp32"}.get(name, name)


def train_batch(per_process: int, world: int) -> int:
    """--batch-size for TrainConfig: per process where its help says so, else global (the paper's convention)."""
    from caption_debias.train.config import TrainConfig

    help_text = TrainConfig.__dataclass_fields__["batch_size"].metadata.get("help", "")
    return per_process if "per process" in help_text.lower() else per_process * world


def run_train(packed: Path, out: Path, args, recipe: str, precision: str, world: int, trim: bool = True) -> float:
    """Images/s over all processes of `train()` (median of metrics.jsonl windows after the warm-up)."""
    from caption_debias.train.config import TrainConfig
    from caption_debias.train.loop import train

    window = max(1, args.warmup)
    run = train(
        TrainConfig(
            data=str(packed),
            out=str(out),
            model=args.model,
            recipe=recipe,
            batch_size=train_batch(args.batch, world),
            max_steps=args.steps,
            log_every=window,
            checkpoint_every=10**9,
            keep_checkpoints=1,
            precision=train_precision(precision),
            workers=args.workers,
            report_to="",
            quiet=True,
            warmup_steps=0,
            lr=1e-6,
            trim_padding=trim,
        )
    )
    _barrier(world)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rates = [d["images_per_s"] for d in lines[1:]] or [lines[-1]["images_per_s"]]  # window 1 holds the warm-up
    return statistics.median(rates)


def _autocast(precision: str, device):
    import contextlib

    import torch

    if precision == "amp" and device.type == "cuda":
        return lambda: torch.autocast("cuda", dtype=torch.float16)
    if precision in ("amp_bf16", "bf16"):
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext


def plain_steps(batches, model, texts_of, precision: str, args, rank: int, world: int, device) -> float:
    """open_clip's own step (forward, ClipLoss per text batch, AdamW, GradScaler for amp) over `batches`; images/s."""
    import open_clip
    import torch

    model = model.to(device).train()
    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    loss_fn = open_clip.ClipLoss(gather_with_grad=True, cache_labels=True, rank=rank, world_size=world)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    scaler = torch.amp.GradScaler("cuda") if precision == "amp" and device.type == "cuda" else None
    autocast = _autocast(precision, device)
    seen, t0 = 0, None
    for step, (image, texts) in enumerate(batches):
        if step == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0, seen = time.perf_counter(), 0
        image = image.to(device, non_blocking=True)
        texts = [t.to(device, non_blocking=True) for t in texts_of(texts)]
        with autocast():
            img_f, txt_f, scale = net(image, torch.cat(texts))[:3]
            parts = txt_f.split(image.shape[0])
            loss = sum(loss_fn(img_f, t, scale) for t in parts) / len(parts)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        seen += image.shape[0]
        if step + 1 >= args.steps:
            break
    if device.type == "cuda":
        torch.cuda.synchronize()
    return seen * world / (time.perf_counter() - t0)


def _device(local_rank: int):
    import torch

    return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")


def run_plain(packed: Path, args, precision: str, rank: int, world: int, local_rank: int) -> float:
    """Plain open_clip steps on the batches `train()` reads: the same loader, rows and texts."""
    import torch
    from torch.utils.data import DataLoader

    from caption_debias.augment import DebiasOptions
    from caption_debias.model.load import load_model
    from caption_debias.model.stretch import stretch_positional_embedding
    from caption_debias.train.data import BatchPlan, TrainSamples, collate
    from caption_debias.train.packed_source import load_packed

    torch.manual_seed(0)
    loaded = load_model(args.model)
    stretch_positional_embedding(loaded.model, 248, 20, "knowledge", freeze_head=False)
    loaded.set_context(248)
    rows, images = load_packed(str(packed), loaded.tokenizer)
    samples = TrainSamples(rows, images, loaded.preprocess, "debias", 248, 0, DebiasOptions())
    plan = BatchPlan(len(rows), args.batch * world, 0)
    device = _device(local_rank)
    loader = DataLoader(
        samples,
        batch_sampler=list(plan.batches(0, args.steps, rank, world)),
        num_workers=args.workers,
        collate_fn=collate,
        pin_memory=device.type == "cuda",
    )
    batches = ((b["image"], (b["long"], b["short"])) for b in loader)
    return plain_steps(batches, loaded.model, list, precision, args, rank, world, device)


def run_open_clip_train(packed: Path, args, precision: str, rank: int, world: int, local_rank: int) -> float:
    """open_clip_train's webdataset pipeline on the tars, plain steps at the model's own 77 positions."""
    import torch
    from open_clip_train.data import get_wds_dataset

    from caption_debias.model.load import load_model

    torch.manual_seed(0)
    loaded = load_model(args.model)
    manifest = json.loads((packed / "manifest.json").read_text())
    ns = argparse.Namespace(
        train_data=str(packed / manifest["train_data"]),
        val_data=None,
        train_num_samples=None,
        dataset_resampled=False,
        train_data_upsampling_factors=None,
        seed=0,
        workers=args.workers,
        world_size=world,
        batch_size=args.batch,
    )

    def batches():
        epoch = 0
        while True:  # epochs until --steps
            info = get_wds_dataset(ns, loaded.preprocess, True, epoch=epoch, tokenizer=loaded.tokenizer)
            for image, text in info.dataloader:
                yield image, (text,)
            epoch += 1

    device = _device(local_rank)
    return plain_steps(batches(), loaded.model, list, precision, args, rank, world, device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B-16")
    ap.add_argument("--batch", type=int, default=256, help="per process")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10, help="steps not timed (also train()'s log window)")
    ap.add_argument("--workers", type=int, default=8, help="DataLoader workers per process")
    ap.add_argument("--precisions", default="amp,amp_bf16")
    ap.add_argument("--recipes", default="", help="extra train() recipes to time: longclip,clip,short")
    ap.add_argument("--work", type=Path, default=Path("/tmp/caption-debias-gpu-bench"))
    ap.add_argument("--smoke", action="store_true", help="CPU check: tiny model, batch 8, 4 steps, fp32 and bf16")
    args = ap.parse_args()
    import torch

    if args.smoke:
        args.model, args.batch, args.steps, args.warmup, args.workers = "tiny", 8, 4, 1, 0
        args.precisions = "fp32,amp_bf16"
    rank, world, local_rank = _dist()
    cuda = torch.cuda.is_available()
    image_size = 64 if args.smoke else 224
    n = max(4 * args.batch * world, 64)
    t = time.perf_counter()
    packed = make_data(args.work, n, image_size, tars=max(1, args.workers) * world * 2, rank=rank, world=world)
    result = {
        "model": args.model,
        "batch_per_process": args.batch,
        "processes": world,
        "backend": ("nccl" if cuda else "gloo") if world > 1 else None,
        "steps": args.steps,
        "warmup": args.warmup,
        "workers": args.workers,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "data_setup_s": round(time.perf_counter() - t, 1),
        "images_per_s": {},
    }
    for precision in args.precisions.split(","):
        rates = result["images_per_s"].setdefault(precision, {})
        runs = [
            ("debias", lambda p=precision: run_train(packed, args.work / f"debias-{p}", args, "debias", p, world)),
            (
                "debias_full",
                lambda p=precision: run_train(packed, args.work / f"full-{p}", args, "debias", p, world, trim=False),
            ),
            ("plain", lambda p=precision: run_plain(packed, args, p, rank, world, local_rank)),
            ("open_clip_train_77", lambda p=precision: run_open_clip_train(packed, args, p, rank, world, local_rank)),
        ]
        for recipe in filter(None, args.recipes.split(",")):
            runs.append(
                (recipe, lambda p=precision, r=recipe: run_train(packed, args.work / f"{r}-{p}", args, r, p, world))
            )
        for name, fn in runs:
            rates[name] = round(fn(), 1)
            if cuda:
                torch.cuda.empty_cache()
            if rank == 0:
                print(f"{precision} {name}: {rates[name]} images/s", flush=True)
        rates["debias_full_over_plain"] = round(rates["debias_full"] / rates["plain"], 3)  # target >= 0.95
        rates["debias_over_plain"] = round(rates["debias"] / rates["plain"], 3)
    if rank == 0:
        out = Path(os.environ.get("OUT") or Path(__file__).parent / "results") / "gpu_throughput.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
        print(json.dumps(result, indent=2))
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()
