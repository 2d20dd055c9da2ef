"""The training loop, top to bottom: model -> data -> optimizer -> (resume) -> steps -> checkpoints.

Recipes: `debias` (long + augmented caption), `longclip` (long + first sentence, PCA
matching), `clip` (long caption only, uniform position interpolation) and `short`
(stage-1 pretraining on one sentence at the model's own context).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.model.load import RUN_CONFIG, RUN_MODEL_CONFIG, latest_checkpoint, load_model
from caption_debias.model.stretch import is_split, split_frozen_head, stretch_positional_embedding
from caption_debias.model.trim import TrimmedCLIP, can_trim, used_length
from caption_debias.train import checkpoint
from caption_debias.train.augment import DebiasOptions
from caption_debias.train.config import TrainConfig
from caption_debias.train.data import BatchPlan, FolderImages, TrainSamples, collate, load_rows
from caption_debias.train.loss import contrastive_loss, primary_components

METRICS = "metrics.jsonl"
LN100 = math.log(100.0)
# Options that may change between a run and its --resume; any other change is refused.
RESUME_FREE = {
    "resume",
    "quiet",
    "workers",
    "max_steps",
    "epochs",
    "checkpoint_every",
    "log_every",
    "device",
    "strict",
    "keep_checkpoints",
    "tensorboard",
    "cache_images",
    "image_root",
}


def _say(msg: str, rank: int = 0, quiet: bool = False) -> None:
    if rank == 0 and not quiet:
        print(f"caption-debias: {msg}", file=sys.stderr, flush=True)


def lr_at(step: int, base: float, warmup: int, total: int) -> float:
    """Linear warm-up over `warmup` steps, then cosine to 0 at `total`."""
    if warmup and step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _init_distributed() -> tuple[int, int, int, bool]:
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK; gloo on CPU, nccl on GPUs."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1, 0, False
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)), False
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)), True


def _device(cfg: TrainConfig, local_rank: int) -> torch.device:
    if cfg.device == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {cfg.device}: no CUDA device on this machine")
    return torch.device(cfg.device)


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """open_clip's rule: no weight decay on gains, biases, norms and the logit scale."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skip = p.ndim < 2 or "bn" in name or "ln" in name or "bias" in name or "logit_scale" in name
        (no_decay if skip else decay).append(p)
    return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]


def _precision(cfg: TrainConfig, device: torch.device, rank: int):
    """(autocast context factory, GradScaler or None)."""
    if cfg.precision == "amp":
        if device.type == "cuda":
            scaler = torch.amp.GradScaler("cuda")
            return (lambda: torch.autocast("cuda", dtype=torch.float16)), scaler
        _say(
            "--precision amp needs CUDA; training in fp32 on CPU (use --precision bf16 for CPU autocast)",
            rank,
            cfg.quiet,
        )
        return nullcontext, None
    if cfg.precision == "bf16":
        return (lambda: torch.autocast(device.type, dtype=torch.bfloat16)), None
    return nullcontext, None


def _prepare_model(cfg: TrainConfig, rank: int):
    """Load, stretch per recipe (never twice), freeze the head, reset the logit scale."""
    torch.manual_seed(cfg.seed)  # random-init models (tiny) start identical on every rank and resume
    loaded = load_model(cfg.model, cfg.pretrained)
    model = loaded.model
    stretched = False
    if cfg.recipe in ("debias", "longclip"):
        stretched = stretch_positional_embedding(model, cfg.context_length, cfg.keep_positions, "knowledge")
        if not is_split(model):
            split_frozen_head(model, cfg.keep_positions)
        with torch.no_grad():
            model.logit_scale.fill_(LN100)
    elif cfg.recipe == "clip":
        stretched = stretch_positional_embedding(model, cfg.context_length, mode="uniform")
    loaded.set_context(model.context_length)
    if stretched:
        _say(f"stretched text positions to {model.context_length} ({cfg.recipe})", rank, cfg.quiet)
    return loaded, stretched


class _RankBatches:
    """batch_sampler for DataLoader: this rank's (epoch, row) lists from `start` to `total` steps."""

    def __init__(self, plan: BatchPlan, start: int, total: int, rank: int, world: int):
        self.plan, self.start, self.total, self.rank, self.world = plan, start, total, rank, world

    def __iter__(self):
        return self.plan.batches(self.start, self.total, self.rank, self.world)

    def __len__(self) -> int:
        return max(0, self.total - self.start)


def _all_sum(values: list[float], device: torch.device, world: int) -> list[float]:
    if world == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def _check_resume_config(run: Path, cfg: TrainConfig) -> None:
    path = run / RUN_CONFIG
    if not path.is_file():
        return
    old = json.loads(path.read_text("utf-8")).get("config", {})
    changed = [k for k, v in cfg.to_dict().items() if k not in RESUME_FREE and k in old and old[k] != v]
    if changed:
        raise UserError(
            f"--resume with changed options ({', '.join(changed)}); use the run's own settings or a new --out"
        )


def _trim_metrics(path: Path, upto: int) -> None:
    """Drop lines logged after the checkpoint we resume from (they will be logged again)."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text("utf-8").splitlines() if line.strip() and json.loads(line)["step"] <= upto]
    path.write_text("".join(line + "\n" for line in keep), "utf-8")


def train(cfg: TrainConfig) -> Path:
    cfg.validate()
    rank, world, local_rank, own_pg = _init_distributed()
    try:
        return _train(cfg, rank, world, local_rank)
    finally:
        if own_pg:
            dist.destroy_process_group()


def _train(cfg: TrainConfig, rank: int, world: int, local_rank: int) -> Path:
    run = Path(cfg.out)
    device = _device(cfg, local_rank)
    if cfg.batch_size % world:
        raise UserError(f"--batch-size {cfg.batch_size} must divide evenly over {world} processes")
    if cfg.image_root is None:
        raise UserError("--image-root is required (the folder the shards' `image` paths are relative to)")
    images = FolderImages(cfg.image_root)
    PreparedDataset.open(cfg.data)  # a bad DATA folder fails before the (slow) model load
    if not cfg.resume and latest_checkpoint(run) is not None:
        raise UserError(f"{run} already has checkpoints; pass --resume to continue it or choose a new --out")
    if cfg.resume:
        _check_resume_config(run, cfg)

    loaded, stretched = _prepare_model(cfg, rank)
    model = loaded.model.to(device).train()
    rows = load_rows(cfg.data, loaded.tokenizer, cfg.split, cfg.group_key)
    if rows.retokenized:
        _say("the model's tokenizer differs from the shards': captions were re-tokenized once at load", rank, cfg.quiet)
    plan = BatchPlan(len(rows), cfg.batch_size, cfg.seed, rows.groups, cfg.group_size)
    total = cfg.max_steps if cfg.max_steps is not None else (cfg.epochs or 1) * plan.steps_per_epoch
    tok = loaded.tokenizer
    # The eval transform, as Long-CLIP trains: deterministic pixels keep resume exact and allow caching.
    samples = TrainSamples(
        rows,
        images,
        loaded.preprocess,
        cfg.recipe,
        loaded.context_length,
        cfg.seed,
        DebiasOptions(cfg.drop_summary, cfg.no_drop_summary, cfg.no_subsample, cfg.no_pad),
        cfg.cache_images,
        tok.sot_token_id,
        tok.eot_token_id,
    )

    optimizer = torch.optim.AdamW(
        _param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps
    )
    autocast, scaler = _precision(cfg, device, rank)
    counters = {"skipped": 0, "fallback": 0}
    start = 0
    state = checkpoint.load_latest(run) if cfg.resume else None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if scaler is not None and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        checkpoint.set_rng_state(state["rng"])
        start = int(state["step"])
        if rank == 0:
            counters = {k: int(v) for k, v in state["counters"].items()}
        _say(f"resuming {run} from step {start}", rank, cfg.quiet)
    elif cfg.resume:
        _say(f"--resume: no checkpoint in {run} yet, starting from step 0", rank, cfg.quiet)

    if rank == 0:
        run.mkdir(parents=True, exist_ok=True)
        resolved = {
            "world_size": world,
            "train_rows": len(rows),
            "steps_per_epoch": plan.steps_per_epoch,
            "total_steps": total,
            "context_length": loaded.context_length,
            "stretched": stretched,
            "retokenized": rows.retokenized,
            "model_info": loaded.info,
            "device": str(device),
        }
        (run / RUN_CONFIG).write_text(
            json.dumps({"config": cfg.to_dict(), "resolved": resolved}, indent=2, default=str), "utf-8"
        )
        (run / RUN_MODEL_CONFIG).write_text(json.dumps(loaded.open_clip_config(), indent=2), "utf-8")
        _trim_metrics(run / METRICS, start)

    def save(step: int) -> None:
        totals = _all_sum([counters["skipped"], counters["fallback"]], device, world)
        if rank == 0:
            payload = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict() if scaler is not None else {},
                "rng": checkpoint.rng_state(),
                "counters": {"skipped": int(totals[0]), "fallback": int(totals[1])},
            }
            checkpoint.save(run, step, payload, cfg.keep_checkpoints)
        if world > 1:
            dist.barrier()

    if start >= total:
        if latest_checkpoint(run) is None or total == 0:
            save(total)  # --max-steps 0: the starting (stretched, untrained) model
        return run

    trim = cfg.trim_padding and can_trim(model)
    net = TrimmedCLIP(model) if trim else model  # trimmed: each text batch encoded on its own
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False
        )
    from torch.utils.data import DataLoader

    loader = DataLoader(
        samples,
        batch_sampler=_RankBatches(plan, start, total, rank, world),
        num_workers=cfg.workers,
        collate_fn=collate,
        pin_memory=device.type == "cuda",
    )
    writer = None
    if rank == 0 and cfg.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run / "tensorboard"))
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    progress = Progress(
        TextColumn("train"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
        disable=cfg.quiet or rank != 0 or not console.is_terminal,
    )
    two_texts = cfg.recipe in ("debias", "longclip")
    smoothing = 0.0 if cfg.recipe == "short" else cfg.label_smoothing
    params = [p for p in model.parameters() if p.requires_grad]
    seen, t0 = 0, time.perf_counter()
    metrics_fh = (run / METRICS).open("a", encoding="utf-8") if rank == 0 else None
    try:
        with progress:
            task = progress.add_task("train", total=total, completed=start, info="")
            for step, batch in zip(range(start, total), loader):
                for err in batch["errors"]:
                    if cfg.strict:
                        raise UserError(f"unreadable {err} (--strict)")
                    print(f"caption-debias: skipped unreadable {err}", file=sys.stderr, flush=True)
                counters["skipped"] += len(batch["errors"])
                counters["fallback"] += batch["fallback"]
                if "image" not in batch:
                    raise UserError(f"step {step}: every image of the batch is unreadable; check --image-root")
                lr = lr_at(step, cfg.lr, cfg.warmup_steps, total)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                image = batch["image"].to(device, non_blocking=True)
                texts = [batch["long"], batch["short"]] if two_texts else [batch["long"]]
                with autocast():
                    if trim:  # lengths from the CPU tensors: no device sync
                        img_f, txt_fs, scale = net(
                            image, *(t[:, : used_length(t)].to(device, non_blocking=True) for t in texts)
                        )
                    else:
                        img_f, txt_f, scale = net(image, torch.cat(texts).to(device, non_blocking=True))[:3]
                        txt_fs = txt_f.split(image.shape[0])
                img_f, scale = img_f.float(), scale.float()
                txt_fs = [t.float() for t in txt_fs]
                n = image.shape[0]
                loss_long = contrastive_loss(img_f, txt_fs[0], scale, smoothing)
                loss_short = None
                if two_texts:
                    loss_short = contrastive_loss(primary_components(img_f, cfg.pca_dim), txt_fs[1], scale, smoothing)
                    if cfg.recipe == "debias":
                        loss = cfg.lambda_short * loss_short + (1 - cfg.lambda_short) * loss_long
                    else:  # Long-CLIP sums the two terms
                        loss = loss_long + loss_short
                else:
                    loss = loss_long
                optimizer.zero_grad(set_to_none=True)
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.unscale_(optimizer)
                else:
                    loss.backward()
                if cfg.grad_clip:
                    torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                if scaler is not None:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                with torch.no_grad():
                    model.logit_scale.clamp_(0, LN100)  # open_clip's bound: scale <= 100
                seen += n
                done = step + 1
                progress.update(task, completed=done)
                if done % cfg.log_every == 0 or done == total:  # .item() syncs a GPU: only on log steps
                    if not torch.isfinite(loss):
                        raise UserError(f"step {done}: loss is {loss.item()}; lower --lr or use --precision fp32")
                    progress.update(task, info=f"loss {loss.item():.4f}")
                    parts = [
                        loss.item(),
                        loss_long.item(),
                        loss_short.item() if loss_short is not None else 0.0,
                        float(seen),
                        float(counters["skipped"]),
                        float(counters["fallback"]),
                    ]
                    parts = _all_sum(parts, device, world)
                    elapsed = time.perf_counter() - t0
                    line = {
                        "step": done,
                        "epoch": step // plan.steps_per_epoch,
                        "loss": parts[0] / world,
                        "loss_long": parts[1] / world,
                        "loss_short": parts[2] / world if loss_short is not None else None,
                        "lr": lr,
                        "logit_scale": float(scale.item()),
                        "images_per_s": parts[3] / elapsed if elapsed > 0 else None,
                        "skipped_images": int(parts[4]),
                        "fallback_single_sentence": int(parts[5]),
                    }
                    seen, t0 = 0, time.perf_counter()
                    if metrics_fh is not None:
                        metrics_fh.write(json.dumps(line) + "\n")
                        metrics_fh.flush()
                    if writer is not None:
                        for key, value in line.items():
                            if key not in ("step", "epoch") and value is not None:
                                writer.add_scalar(f"train/{key}", value, done)
                if done % cfg.checkpoint_every == 0 or done == total:
                    save(done)
    finally:
        if metrics_fh is not None:
            metrics_fh.close()
        if writer is not None:
            writer.close()
    return run
